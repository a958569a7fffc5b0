// SPDX-License-Identifier: MIT
#pragma once

// The scaling rules of the gradient exchanges people run, beside APS (docs/scaling.md):
//
//   amax_sqrtw_scaling<F>  MS-AMP / FP8-LM: the per-tensor amax combined by max over the
//                          workers, scale = max(F) / (amax * sqrt(W)), so that W values of
//                          independent signs sum to about max(F)
//   predivide_scaling      PyTorch's fp16_compress_hook (and DDP's default): every worker
//                          divides its gradient by W before the exchange, nothing else
//
// ColossalAI's fp8 hook (max(F) / amax, not a power of two) is current_scaling<F> with
// its defaults (transformer_engine.hpp). Both follow the protocol of scale.hpp.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/float.hpp>
#include <cpd/scaling/scale.hpp>
#include <cpd/scaling/transformer_engine.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

namespace cpd {

/// MS-AMP's gradient scaling for W workers summing in F (FP8-LM, Peng et al. 2023): the
/// statistic is the tensor's amax (+NaN when any value is NaN), combined by max; the scale is
/// max(F) / (amax * sqrt(W)) / 2^margin in float (1 for amax 0, inf or NaN; marked nonfinite
/// for inf or NaN), optionally truncated to a power of two.
template <class F>
class amax_sqrtw_scaling : public tensor_statistics<amax_sqrtw_scaling<F>> {
  static_assert(is_float_format_v<F>, "cpd::amax_sqrtw_scaling: F must be a cpd::float_t");

 public:
  using format_type = F;
  using statistic_type = float;
  static constexpr float identity = 0.0f;

  struct options {
    int margin = 0;             ///< extra binades of headroom
    bool power_of_two = false;  ///< truncate the scale to a power of two
  };

  explicit amax_sqrtw_scaling(int world_size) : amax_sqrtw_scaling(world_size, options{}) {}
  amax_sqrtw_scaling(int world_size, options o) : w_(world_size), opt_(o) {
    if (world_size < 1) detail::fail_invalid("cpd::amax_sqrtw_scaling: world_size must be >= 1");
    if (o.margin < -64 || o.margin > 64) detail::fail_invalid("cpd::amax_sqrtw_scaling: margin must be in [-64, 64]");
    const detail::default_fp_env fp_env;
    // max(F) / sqrt(W), rounded once to float: the target of the largest scaled value.
    target_ = static_cast<float>(F::spec.max_value / std::sqrt(static_cast<double>(world_size)));
  }

  [[nodiscard]] int world_size() const noexcept { return w_; }
  [[nodiscard]] const options& opts() const noexcept { return opt_; }

  /// max|g| (+NaN when any element is NaN).
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return detail::bit_cast<float>(detail::amax_bits(g, n));
  }
  /// NaN-propagating max.
  [[nodiscard]] static statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return detail::amax_combine(a, b);
  }
  /// max(F) / sqrt(W) / amax / 2^margin (see the class).
  [[nodiscard]] float_scale select(statistic_type amax) const noexcept {
    float_scale s = float_scale::of(detail::te_scale_from_amax(amax, target_, 0.0f, opt_.margin, opt_.power_of_two));
    s.nonfinite = detail::amax_nonfinite(amax);
    return s;
  }

 private:
  int w_;
  options opt_;
  float target_ = 1.0f;
};

/// PyTorch's pre-division (fp16_compress_hook, DDP's gradient averaging before the sum): every
/// worker multiplies its gradient by 1/W (rounded to float) before it is rounded and summed,
/// and the sum is multiplied by W afterwards (the exchange's unscale; with a mean, the result is
/// the sum divided by W). The statistic only says whether the data holds inf or NaN.
class predivide_scaling : public tensor_statistics<predivide_scaling> {
 public:
  /// 1 when the data holds inf or NaN, else 0; combined by max.
  using statistic_type = std::int32_t;
  static constexpr statistic_type identity = 0;

  explicit predivide_scaling(int world_size) : w_(world_size) {
    if (world_size < 1) detail::fail_invalid("cpd::predivide_scaling: world_size must be >= 1");
    const detail::default_fp_env fp_env;
    scale_ = float_scale::of(static_cast<float>(1.0 / static_cast<double>(world_size)));
    scale_.inverse = static_cast<float>(world_size);  // (exact: W < 2^24 in practice, and the sum is x W)
  }

  [[nodiscard]] int world_size() const noexcept { return w_; }

  /// 1 when any of g[0..n) is inf or NaN, else 0.
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return detail::any_nonfinite(g, n) ? 1 : 0;
  }
  [[nodiscard]] static constexpr statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return a > b ? a : b;
  }
  /// 1/W (inverse W), marked nonfinite when st != 0.
  [[nodiscard]] float_scale select(statistic_type st) const noexcept {
    float_scale s = scale_;
    s.nonfinite = st != 0;
    return s;
  }

 private:
  int w_;
  float_scale scale_{};
};

}  // namespace cpd
