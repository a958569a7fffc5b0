// SPDX-License-Identifier: MIT
#pragma once

// A multi-layer perceptron (ReLU, softmax cross-entropy) on Eigen, with all
// parameters in one flat float array so that gradients can be exchanged and
// weights hashed as plain bytes.

#include "aligned.hpp"

#include <cpd/cpd.hpp>

// Eigen allocates its own matrices (activations, deltas) on 64-byte boundaries
// too, whatever vector width the build targets (aligned.hpp says why).
#ifndef EIGEN_MAX_ALIGN_BYTES
#define EIGEN_MAX_ALIGN_BYTES 64
#endif
#include <Eigen/Core>
static_assert(EIGEN_DEFAULT_ALIGN_BYTES == train::buffer_alignment,
              "cpd-train: include mlp.hpp before any other Eigen header (EIGEN_MAX_ALIGN_BYTES must be 64)");

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace train {

using matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using matrix_map = Eigen::Map<matrix>;
using const_matrix_map = Eigen::Map<const matrix>;
using vector_map = Eigen::Map<Eigen::RowVectorXf>;
using const_vector_map = Eigen::Map<const Eigen::RowVectorXf>;

/// One parameter tensor inside the flat array.
struct tensor_view {
  std::string name;
  std::size_t offset = 0, rows = 0, cols = 0;
  std::size_t size() const { return rows * cols; }
};

/// splitmix64: the deterministic generator of the training program (portable:
/// no std distribution, whose results differ between standard libraries).
struct splitmix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n), without modulo bias.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = ~std::uint64_t(0) - (~std::uint64_t(0) % n);
    for (;;) {
      const std::uint64_t r = next();
      if (r < limit) return r % n;
    }
  }
};

/// Eigen splits a product's inner dimension into blocks sized from the caches the CPU
/// reports, and that split decides the order of each dot product's sums: with the sizes
/// queried, the weights-hash depends on the CPU (docs/train.md#reproducibility). Fixed
/// sizes (those of a common x86-64 core) make the blocking, and so the bits, the same on
/// every machine. Returns true, for a once-only static.
inline bool pin_eigen_blocking() {
  Eigen::setCpuCacheSizes(48 * 1024, 1024 * 1024, 32 * 1024 * 1024);
  return true;
}

/// The network's shape and its parameters in one flat array, every tensor starting
/// on a buffer_alignment boundary (the gaps between tensors stay zero).
class mlp {
 public:
  explicit mlp(std::vector<std::size_t> widths) : widths_(std::move(widths)) {
    static const bool pinned = pin_eigen_blocking();  // once, before any product
    (void)pinned;
    constexpr std::size_t align = buffer_alignment / sizeof(float);
    std::size_t off = 0;
    auto add = [&](std::string name, std::size_t rows, std::size_t cols) {
      off = (off + align - 1) / align * align;
      tensors_.push_back({std::move(name), off, rows, cols});
      off += rows * cols;
    };
    for (std::size_t l = 0; l + 1 < widths_.size(); ++l) {
      add("W" + std::to_string(l + 1), widths_[l + 1], widths_[l]);
      add("b" + std::to_string(l + 1), 1, widths_[l + 1]);
    }
    size_ = off;
  }

  /// Floats in the flat array, gaps included.
  std::size_t size() const { return size_; }
  /// Parameters: the tensors' sizes summed.
  std::size_t parameters() const {
    std::size_t n = 0;
    for (const tensor_view& t : tensors_) n += t.size();
    return n;
  }
  std::size_t layers() const { return widths_.size() - 1; }
  const std::vector<tensor_view>& tensors() const { return tensors_; }
  const std::vector<std::size_t>& widths() const { return widths_; }

  /// He-uniform weights, zero biases.
  void init(aligned_vector<float>& params, std::uint64_t seed) const {
    params.assign(size_, 0.0f);
    splitmix64 rng{seed};
    for (std::size_t l = 0; l < layers(); ++l) {
      const tensor_view& w = tensors_[2 * l];
      const double bound = std::sqrt(6.0 / static_cast<double>(w.cols));
      for (std::size_t i = 0; i < w.size(); ++i)
        params[w.offset + i] = static_cast<float>((2.0 * rng.uniform() - 1.0) * bound);
    }
  }

  /// Rounds every activation (the layers' outputs, before and after ReLU, and the logits)
  /// and every gradient of an activation to f, nearest-even, overflowing to inf (or NaN):
  /// "f throughout" for the tensors of the forward and backward passes. The matrix products
  /// still accumulate in float, as tensor cores do; their results are rounded.
  void round_activations(std::optional<cpd::format> f) { act_ = f; }

  /// Forward and backward over a batch x (b rows of inputs) with labels y:
  /// writes the gradient of the mean loss into grad and returns the summed loss.
  double gradient(const float* params, const float* x, const std::uint8_t* y, std::size_t b, float* grad) const {
    const std::size_t L = layers();
    std::vector<matrix> acts(L + 1), pre(L);
    acts[0] = const_matrix_map(x, static_cast<Eigen::Index>(b), static_cast<Eigen::Index>(widths_[0]));
    for (std::size_t l = 0; l < L; ++l) {
      const_matrix_map W(params + tensors_[2 * l].offset, static_cast<Eigen::Index>(tensors_[2 * l].rows),
                         static_cast<Eigen::Index>(tensors_[2 * l].cols));
      const_vector_map bias(params + tensors_[2 * l + 1].offset, static_cast<Eigen::Index>(tensors_[2 * l + 1].cols));
      pre[l].noalias() = acts[l] * W.transpose();
      pre[l].rowwise() += bias;
      round(pre[l]);
      acts[l + 1] = l + 1 < L ? matrix(pre[l].cwiseMax(0.0f)) : pre[l];
    }
    // Softmax cross-entropy; delta = (p - onehot) / b.
    matrix delta = acts[L];
    double loss = 0;
    for (Eigen::Index i = 0; i < delta.rows(); ++i) {
      const float mx = delta.row(i).maxCoeff();
      delta.row(i).array() -= mx;
      delta.row(i) = delta.row(i).array().exp().matrix();
      const float sum = delta.row(i).sum();
      delta.row(i) /= sum;
      loss -= std::log(std::max(delta(i, y[i]), 1e-30f));
      delta(i, y[i]) -= 1.0f;
    }
    delta /= static_cast<float>(b);
    round(delta);
    for (std::size_t l = L; l-- > 0;) {
      matrix_map gW(grad + tensors_[2 * l].offset, static_cast<Eigen::Index>(tensors_[2 * l].rows),
                    static_cast<Eigen::Index>(tensors_[2 * l].cols));
      vector_map gb(grad + tensors_[2 * l + 1].offset, static_cast<Eigen::Index>(tensors_[2 * l + 1].cols));
      gW.noalias() = delta.transpose() * acts[l];
      gb = delta.colwise().sum();
      if (l > 0) {
        const_matrix_map W(params + tensors_[2 * l].offset, static_cast<Eigen::Index>(tensors_[2 * l].rows),
                           static_cast<Eigen::Index>(tensors_[2 * l].cols));
        matrix back = delta * W;
        delta = back.cwiseProduct(matrix((pre[l - 1].array() > 0.0f).cast<float>()));
        round(delta);
      }
    }
    return loss;
  }

  /// Number of correct predictions on n inputs.
  std::size_t correct(const float* params, const float* x, const std::uint8_t* y, std::size_t n) const {
    std::size_t ok = 0;
    const std::size_t chunk = 1000;
    for (std::size_t s = 0; s < n; s += chunk) {
      const std::size_t b = std::min(chunk, n - s);
      matrix a = const_matrix_map(x + s * widths_[0], static_cast<Eigen::Index>(b), static_cast<Eigen::Index>(widths_[0]));
      for (std::size_t l = 0; l < layers(); ++l) {
        const_matrix_map W(params + tensors_[2 * l].offset, static_cast<Eigen::Index>(tensors_[2 * l].rows),
                           static_cast<Eigen::Index>(tensors_[2 * l].cols));
        const_vector_map bias(params + tensors_[2 * l + 1].offset, static_cast<Eigen::Index>(tensors_[2 * l + 1].cols));
        matrix z = a * W.transpose();
        z.rowwise() += bias;
        round(z);
        a = l + 1 < layers() ? matrix(z.cwiseMax(0.0f)) : z;
      }
      for (std::size_t i = 0; i < b; ++i) {
        Eigen::Index arg = 0;
        a.row(static_cast<Eigen::Index>(i)).maxCoeff(&arg);
        ok += static_cast<std::size_t>(arg) == y[s + i];
      }
    }
    return ok;
  }

 private:
  void round(matrix& m) const {
    if (act_)
      cpd::quantize(*act_, cpd::rounding::nearest_even, cpd::overflow::infinity, m.data(), m.data(),
                    static_cast<std::size_t>(m.size()));
  }

  std::vector<std::size_t> widths_;
  std::vector<tensor_view> tensors_;
  std::size_t size_ = 0;
  std::optional<cpd::format> act_;
};

/// FNV-1a 64 over bytes: the weights-hash that makes runs comparable bit for bit.
inline std::uint64_t fnv1a64(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

}  // namespace train
