// SPDX-License-Identifier: MIT
#pragma once

// The gradient exchange of cpd-train and the low-precision weight store.

#include "cli.hpp"
#include "mlp.hpp"

#include <cpd/allreduce_sim.hpp>
#include <cpd/cpd.hpp>
#include <cpd/scaling.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
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

/// 32 random bits for element i of step `step`: cpd's counter-based generator.
inline std::uint32_t hash_bits(std::uint64_t seed, std::uint64_t step, std::uint64_t i) {
  return cpd::random_bits(seed, step, i);
}

/// The gradient formats cpd-train is compiled for (simulate_allreduce is a
/// template over the format); any other format is rejected with the list.
using train_formats =
    cpd::format_list<cpd::float_t<8, 23>, cpd::float8_e4m3fn, cpd::float8_e4m3, cpd::float8_e5m2,
                     cpd::float8_e4m3fnuz, cpd::float8_e5m2fnuz, cpd::float8_e3m4, cpd::float16, cpd::bfloat16,
                     cpd::float6_e3m2fn, cpd::float6_e2m3fn, cpd::float4_e2m1fn, cpd::float_t<3, 0, cpd::fn>,
                     cpd::float_t<4, 0, cpd::fn>, cpd::float_t<3, 2>, cpd::float_t<2, 1>>;

inline std::string train_format_names() {
  return "fp32, e4m3fn, e4m3, e5m2, e4m3fnuz, e5m2fnuz, e3m4, fp16, bf16, e3m2fn, e2m3fn, e2m1fn, e3m0, e4m0, e3m2, "
         "e2m1";
}

/// Sums the W workers' gradients tensor by tensor with cpd::simulate_allreduce in
/// ring order, every addition rounded to the gradient format (fp32: float sums),
/// with APS or without a scale, and writes their mean.
class exchanger {
 public:
  exchanger(std::optional<cpd::format> fmt, bool aps, bool kahan, int workers, std::uint64_t seed,
            std::vector<tensor_view> tensors, std::size_t n)
      : tensors_(std::move(tensors)), workers_(workers) {
    opt_.algorithm = cpd::allreduce_algorithm::ring;
    opt_.kahan = kahan;
    opt_.mean = true;
    opt_.diagnostics = true;
    (void)seed;  // nearest rounding needs no random bits
    (void)n;
    const cpd::format f = fmt ? *fmt : cpd::format::of<cpd::float_t<8, 23>>();
    const bool found = cpd::visit<train_formats>(f, [&](auto tag) {
      using F = decltype(tag);
      reduce_ = [aps, this](const float* const* g, float* out, std::size_t len) {
        if (aps)
          return summarize(cpd::simulate_allreduce<F>(g, out, len, workers_, cpd::aps<F>(workers_), opt_));
        return summarize(cpd::simulate_allreduce<F>(g, out, len, workers_, opt_));
      };
    });
    if (!found)
      throw usage_error("gradient format " + f.name() + " is not compiled into cpd-train; use one of " +
                        train_format_names() + " (or add it to train_formats in examples/train/exchange.hpp)");
  }

  /// mean = the W-way mean of grads, per tensor, through the low-precision ring.
  template <class Pool>
  void allreduce_mean(std::vector<std::vector<float>>& grads, float* mean, const Pool& pool) {
    opt_.threads = static_cast<unsigned>(pool.size());
    std::vector<const float*> ptrs(grads.size());
    for (const tensor_view& t : tensors_) {
      for (std::size_t w = 0; w < grads.size(); ++w) ptrs[w] = grads[w].data() + t.offset;
      reduce_(ptrs.data(), mean + t.offset, t.size());
    }
  }

  const exchange_stats& stats() const { return stats_; }

 private:
  template <class Result>
  void summarize(const Result& r) {
    stats_.values += r.scaled.count;
    stats_.flushed += r.scaled.flushed;
    stats_.overflowed += r.scaled.overflowed + r.nonfinite_out;
  }

  std::vector<tensor_view> tensors_;
  int workers_;
  cpd::allreduce_options opt_;
  std::function<void(const float* const*, float*, std::size_t)> reduce_;
  exchange_stats stats_;
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
