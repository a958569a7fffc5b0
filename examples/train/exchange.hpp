// SPDX-License-Identifier: MIT
#pragma once

// The gradient exchange of cpd-train and the low-precision weight store.

#include "cli.hpp"
#include "mlp.hpp"

#include <cpd/cpd.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

namespace train {

/// What the exchange did to the gradient values (summed over a run).
struct exchange_stats {
  std::uint64_t values = 0;      ///< values rounded to the gradient format
  std::uint64_t flushed = 0;     ///< non-zero values that became zero
  std::uint64_t overflowed = 0;  ///< finite values that became inf or NaN (or were clipped by saturation)
  double flushed_fraction() const { return values ? static_cast<double>(flushed) / static_cast<double>(values) : 0.0; }
  double overflowed_fraction() const {
    return values ? static_cast<double>(overflowed) / static_cast<double>(values) : 0.0;
  }
};

/// 32 random bits for element i of step `step` (a counter-based hash).
inline std::uint32_t hash_bits(std::uint64_t seed, std::uint64_t step, std::uint64_t i) {
  splitmix64 g{seed ^ (step * 0xD1B54A32D192ED03ull) ^ (i * 0x9E3779B97F4A7C15ull)};
  return static_cast<std::uint32_t>(g.next() >> 32);
}

/// Sums the W workers' gradients in the gradient format, tensor by tensor, with
/// optional APS, and writes their mean.
class exchanger {
 public:
  exchanger(std::optional<cpd::format> fmt, bool aps, bool kahan, int workers, std::uint64_t seed,
            std::vector<tensor_view> tensors, std::size_t n)
      : fmt_(fmt), aps_(aps), kahan_(kahan), workers_(workers), seed_(seed), tensors_(std::move(tensors)), n_(n) {}

  template <class Pool>
  void allreduce_mean(std::vector<std::vector<float>>& grads, float* mean, const Pool& pool) {
    const std::size_t W = grads.size();
    pool.parallel_for(tensors_.size(), [&](std::size_t ti) {
      const tensor_view& t = tensors_[ti];
      int shift = 0;
      if (fmt_ && aps_) {
        int stat = INT32_MIN;
        for (std::size_t w = 0; w < W; ++w) {
          float m = 0;
          for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) m = std::max(m, std::fabs(grads[w][i]));
          if (m > 0) {
            int e = 0;
            const double fr = std::frexp(static_cast<double>(m) * static_cast<double>(W), &e);
            stat = std::max(stat, fr == 0.5 ? e - 1 : e);
          }
        }
        shift = stat == INT32_MIN ? 0 : fmt_->spec().emax - stat;
      }
      const double up = std::ldexp(1.0, shift), down = std::ldexp(1.0, -shift);
      std::uint64_t flushed = 0, overflowed = 0;
      for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) {
        if (!fmt_) {
          float acc = grads[0][i];
          for (std::size_t w = 1; w < W; ++w) acc += grads[w][i];
          mean[i] = acc / static_cast<float>(W);
          continue;
        }
        double acc = 0, c = 0;
        for (std::size_t w = 0; w < W; ++w) {
          const double x = static_cast<double>(grads[w][i]) * up;
          const double q = cpd::quantize(*fmt_, cpd::rounding::nearest_even, cpd::overflow::infinity, x);
          flushed += x != 0 && q == 0;
          overflowed += std::isfinite(x) && !std::isfinite(q);
          if (w == 0) {
            acc = q;
          } else if (kahan_) {
            const double y = cpd::quantize(*fmt_, cpd::rounding::nearest_even, cpd::overflow::infinity, q - c);
            const double s = cpd::quantize(*fmt_, cpd::rounding::nearest_even, cpd::overflow::infinity, acc + y);
            const double z = cpd::quantize(*fmt_, cpd::rounding::nearest_even, cpd::overflow::infinity, s - acc);
            c = cpd::quantize(*fmt_, cpd::rounding::nearest_even, cpd::overflow::infinity, z - y);
            acc = s;
          } else {
            acc = cpd::quantize(*fmt_, cpd::rounding::nearest_even, cpd::overflow::infinity, acc + q);
          }
        }
        mean[i] = static_cast<float>(acc * down / static_cast<double>(W));
      }
      counts_[ti] = {flushed, overflowed};
    });
    for (auto& c : counts_) {
      stats_.flushed += c.first;
      stats_.overflowed += c.second;
    }
    if (fmt_) stats_.values += n_ * W;
  }

  const exchange_stats& stats() const { return stats_; }

 private:
  std::optional<cpd::format> fmt_;
  bool aps_, kahan_;
  int workers_;
  std::uint64_t seed_;
  std::vector<tensor_view> tensors_;
  std::size_t n_;
  exchange_stats stats_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> counts_ = std::vector<std::pair<std::uint64_t, std::uint64_t>>(tensors_.size());
};

/// The weights, kept in float or in a low-precision format with a chosen update rounding.
class weight_store {
 public:
  weight_store(std::optional<cpd::format> fmt, update_rounding mode, std::uint64_t seed, std::vector<float>& init)
      : fmt_(fmt), mode_(mode), seed_(seed), w_(init), c_(init.size(), 0.0f) {
    if (fmt_)
      for (float& x : w_) x = cpd::quantize(*fmt_, cpd::rounding::nearest_even, cpd::overflow::saturate, x);
  }
  const float* values() const { return w_.data(); }

  /// w += u, rounded to the format as chosen.
  void apply(const float* u, std::uint64_t step) {
    if (!fmt_) {
      for (std::size_t i = 0; i < w_.size(); ++i) w_[i] += u[i];
      return;
    }
    const auto& f = *fmt_;
    constexpr auto sat = cpd::overflow::saturate;
    for (std::size_t i = 0; i < w_.size(); ++i) {
      switch (mode_) {
        case update_rounding::nearest_even:
          w_[i] = cpd::quantize(f, cpd::rounding::nearest_even, sat, double(w_[i]) + double(u[i]));
          break;
        case update_rounding::stochastic:
          w_[i] = cpd::quantize(f, cpd::rounding::stochastic, sat, double(w_[i]) + double(u[i]),
                                hash_bits(seed_, step, i));
          break;
        case update_rounding::kahan: {
          const float y = cpd::quantize(f, cpd::rounding::nearest_even, sat, double(u[i]) - double(c_[i]));
          const float t = cpd::quantize(f, cpd::rounding::nearest_even, sat, double(w_[i]) + double(y));
          const float z = cpd::quantize(f, cpd::rounding::nearest_even, sat, double(t) - double(w_[i]));
          c_[i] = cpd::quantize(f, cpd::rounding::nearest_even, sat, double(z) - double(y));
          w_[i] = t;
          break;
        }
      }
    }
  }

 private:
  std::optional<cpd::format> fmt_;
  update_rounding mode_;
  std::uint64_t seed_;
  std::vector<float> w_, c_;
};

}  // namespace train
