// SPDX-License-Identifier: MIT
#pragma once

// PyTorch GradScaler's dynamic loss scaling (docs/scaling.md).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/scaling/scale.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace cpd {

// --- PyTorch GradScaler: dynamic loss scaling ------------------------------------

/// Dynamic loss scaling with the semantics of PyTorch's torch.amp.GradScaler: the statistic is
/// found_inf (any inf/NaN in the scaled gradients), combined by max; an overflow multiplies the
/// scale by backoff and skips the step, growth_interval clean steps in a row multiply it by growth.
class dynamic_loss_scaling : public tensor_statistics<dynamic_loss_scaling> {
 public:
  /// found_inf: 0 or 1, combined by max.
  using statistic_type = std::int32_t;
  static constexpr statistic_type identity = 0;

  struct options {
    float init_scale = 65536.0f;   ///< 2^16
    float growth_factor = 2.0f;
    float backoff_factor = 0.5f;
    int growth_interval = 2000;
    /// The scale never backs off below this (PyTorch's has no floor and reaches 0 after ~166
    /// overflows in a row, then stays there); 2^-126, the smallest normal float, by default.
    float min_scale = 0x1p-126f;
  };

  dynamic_loss_scaling() : dynamic_loss_scaling(options{}) {}
  /// Every option in its range, else std::invalid_argument naming it: factors finite, scales
  /// finite with finite float inverses, min_scale <= init_scale.
  explicit dynamic_loss_scaling(options o) : opt_(o), scale_(o.init_scale) {
    const detail::default_fp_env fp_env;
    detail::fp_fence(o);
    auto finite = [](float v) { return v - v == 0; };
    auto invertible = [](float v) { return v > 0.0f && (1.0f / v) - (1.0f / v) == 0; };
    if (!(o.growth_factor > 1.0f) || !finite(o.growth_factor))
      detail::fail_invalid("cpd::dynamic_loss_scaling: growth_factor must be finite and > 1");
    if (!(o.backoff_factor < 1.0f && o.backoff_factor > 0.0f))
      detail::fail_invalid("cpd::dynamic_loss_scaling: backoff_factor must be in (0, 1)");
    if (o.growth_interval < 1) detail::fail_invalid("cpd::dynamic_loss_scaling: growth_interval must be >= 1");
    if (!invertible(o.min_scale) || !finite(o.min_scale))
      detail::fail_invalid("cpd::dynamic_loss_scaling: min_scale must be finite and > 0, with 1 / min_scale finite");
    if (!(o.init_scale >= o.min_scale) || !finite(o.init_scale))
      detail::fail_invalid("cpd::dynamic_loss_scaling: init_scale must be finite and >= min_scale (" +
                           detail::number(o.min_scale) + ")");
  }

  [[nodiscard]] const options& opts() const noexcept { return opt_; }
  /// The current loss scale: multiply the loss (hence the gradients) by it.
  [[nodiscard]] float scale() const noexcept { return scale_; }
  /// GradScaler's inverse: 1 / scale computed in double, rounded to float (to nearest).
  [[nodiscard]] float inverse_scale() const noexcept {
    const detail::default_fp_env fp_env;
    float scale = scale_;
    detail::fp_fence(scale);  // (else the division may run before the scope sets the environment)
    float inverse = static_cast<float>(1.0 / static_cast<double>(scale));
    detail::fp_fence(inverse);
    return inverse;
  }
  /// Clean steps since the last growth or backoff (GradScaler's growth tracker).
  [[nodiscard]] int growth_tracker() const noexcept { return tracker_; }
  /// True when the last update found an inf/NaN (the optimizer step must be skipped).
  [[nodiscard]] bool skipped() const noexcept { return skipped_; }

  /// 1 when the scaled gradients hold an inf or a NaN, else 0.
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return detail::amax_bits(g, n) >= 0x7F800000u ? 1 : 0;
  }
  [[nodiscard]] static constexpr statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return a > b ? a : b;
  }

  /// Multiplies g by inverse_scale() in float and returns found_inf (GradScaler.unscale_).
  statistic_type unscale(float* g, std::size_t n) const noexcept {
    const detail::default_fp_env fp_env;
    const float inv = inverse_scale();
    for (std::size_t i = 0; i < n; ++i) g[i] *= inv;
    return statistic(g, n);
  }

  /// GradScaler.update with the combined found_inf.
  void update(statistic_type found_inf) noexcept {
    const detail::default_fp_env fp_env;
    float scale = scale_;
    detail::fp_fence(scale);  // (the arithmetic below stays in the scope)
    skipped_ = found_inf != 0;
    if (skipped_) {
      float backed = scale * opt_.backoff_factor;
      detail::fp_fence(backed);
      scale_ = backed > opt_.min_scale ? backed : opt_.min_scale;  // never 0: min_scale bounds it
      tracker_ = 0;
      return;
    }
    if (++tracker_ == opt_.growth_interval) {
      float grown = scale * opt_.growth_factor;
      detail::fp_fence(grown);
      if (grown - grown == 0) scale_ = grown;  // growth only while the scale stays finite
      tracker_ = 0;
    }
  }

  /// The protocol's select: updates with found_inf and returns the scale of the next step, marked
  /// nonfinite when found_inf (this step must be skipped, as skipped() says).
  [[nodiscard]] float_scale select(statistic_type found_inf) noexcept {
    update(found_inf);
    return float_scale{scale_, inverse_scale(), found_inf != 0};
  }

 private:
  options opt_;
  float scale_;
  int tracker_ = 0;
  bool skipped_ = false;
};

}  // namespace cpd
