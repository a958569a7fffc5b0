// SPDX-License-Identifier: MIT
#pragma once

// The rank-level steps of a block-scaled exchange (docs/scaling.md, "Block scales"), written
// once: cpd::simulate_block_scaled_allreduce runs them for W workers in one process, and
// cpd::mpi::block_scaled_plan on each rank, combining the statistics with MPI_Allreduce(MPI_MAX).
// For one tensor of n values and a rule S (cpd::mx_block_scaling<F> or
// cpd::nvfp4_block_scaling<F>):
//   1. NVFP4 only: each rank's finite amax, combined by max into A (MX: nothing);
//   2. each rank's block codes (from A: the tensor scale s), combined by max (one byte a block);
//   3. each rank scales its values by its block's factor before the low-precision sum;
//   4. every rank unscales the sum (and divides it by W for a mean).

#include <cpd/core/detail/checks.hpp>
#include <cpd/scaling/mx.hpp>
#include <cpd/scaling/nvfp4.hpp>
#include <cpd/scaling/scale.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace cpd::detail {

template <class S>
struct is_nvfp4_scaling : std::false_type {};
template <class F>
struct is_nvfp4_scaling<nvfp4_block_scaling<F>> : std::true_type {};

/// The shared scales of one tensor of n values in a block-scaled exchange with rule S, and what
/// a rank does with them (the steps above). The scaler must outlive it.
template <class S>
class block_scales {
 public:
  using code_type = typename S::statistic_type;
  /// NVFP4: a tensor statistic (the finite amax, one float) comes before the block codes.
  static constexpr bool two_level = is_nvfp4_scaling<S>::value;

  block_scales(const S& s, std::size_t n) : s_(&s), n_(n), codes_(s.blocks(n), S::identity) {}

  [[nodiscard]] std::size_t blocks() const noexcept { return codes_.size(); }
  [[nodiscard]] std::size_t block_size() const noexcept {
    if constexpr (two_level) return S::block_size();
    else return s_->opts().block_size;
  }

  /// Step 1: this rank's tensor statistic (NVFP4: its largest finite magnitude; MX: 0).
  [[nodiscard]] float local_amax(const float* g) const noexcept {
    if constexpr (two_level) return S::tensor_amax(g, n_);
    else return (void)g, 0.0f;
  }
  /// Step 2: with A, the max over the ranks of local_amax, this rank's block codes in
  /// mine[blocks()] (every rank passes the same A).
  void local_codes(const float* g, float amax, code_type* mine) {
    if constexpr (two_level) {
      tensor_scale_ = s_->tensor_scale(amax);
      s_->statistics(g, n_, tensor_scale_, mine);
    } else {
      (void)amax;
      s_->statistics(g, n_, mine);
    }
  }
  /// The combined codes, to combine in place: combine(mine) for each rank, or an allreduce by max.
  [[nodiscard]] code_type* codes() noexcept { return codes_.data(); }
  [[nodiscard]] const std::vector<code_type>& code_vector() const noexcept { return codes_; }
  void combine(const code_type* mine) noexcept { S::combine(codes_.data(), mine, codes_.size()); }
  /// After combining: whether some block held inf or NaN (on some rank).
  [[nodiscard]] bool nonfinite() const noexcept {
    for (code_type c : codes_)
      if (c == nan_code) return true;
    return false;
  }
  /// NVFP4's shared tensor scale s (MX: 0).
  [[nodiscard]] float tensor_scale() const noexcept { return tensor_scale_; }

  /// Step 3: y = this rank's g scaled by its block's factor (MX: g * 2^-e rounded to float, exact
  /// unless below 2^-126; NVFP4: g / (s * b) in float32).
  void scale(const float* g, float* y) const noexcept {
    each_block([&](std::size_t lo, std::size_t hi, code_type c) {
      if constexpr (two_level) {
        const float f = S::factor(c, tensor_scale_);
        for (std::size_t i = lo; i < hi; ++i) y[i] = g[i] / f;
      } else {
        const double f = S::select(c).factor();
        for (std::size_t i = lo; i < hi; ++i) y[i] = static_cast<float>(static_cast<double>(g[i]) * f);
      }
    });
  }
  /// Step 4: out = the sum times its block's factor (MX: rounded to float from double; NVFP4:
  /// in float32), divided by w in float (w = W for a mean, else 1). Returns the elements of out
  /// that are inf or NaN.
  std::uint64_t unscale(float* out, float w) const noexcept {
    std::uint64_t nonfinite = 0;
    each_block([&](std::size_t lo, std::size_t hi, code_type c) {
      if constexpr (two_level) {
        const float f = S::factor(c, tensor_scale_);
        for (std::size_t i = lo; i < hi; ++i) out[i] = out[i] * f / w;
      } else {
        const double f = S::select(c).inverse();
        for (std::size_t i = lo; i < hi; ++i) out[i] = static_cast<float>(static_cast<double>(out[i]) * f) / w;
      }
      for (std::size_t i = lo; i < hi; ++i) nonfinite += (out[i] - out[i] == 0) ? 0 : 1;
    });
    return nonfinite;
  }

 private:
  static constexpr code_type nan_code = two_level ? nvfp4_nan_scale : mx_nan_scale;
  template <class Fn>
  void each_block(Fn&& fn) const {
    const std::size_t k = block_size();
    for (std::size_t b = 0, lo = 0; lo < n_; ++b, lo += k) fn(lo, block_end(lo, k, n_), codes_[b]);
  }
  const S* s_;
  std::size_t n_;
  std::vector<code_type> codes_;
  float tensor_scale_ = 0.0f;
};

}  // namespace cpd::detail
