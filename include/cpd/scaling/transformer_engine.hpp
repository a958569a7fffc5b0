// SPDX-License-Identifier: MIT
#pragma once

// Transformer Engine's per-tensor current and delayed scaling (docs/scaling.md).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/names.hpp>
#include <cpd/scaling/scale.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace cpd {

// --- Transformer Engine: current scaling -------------------------------------------

namespace detail {

/// NaN-propagating max of two amax statistics (non-negative floats compared as bits).
inline float amax_combine(float a, float b) noexcept {
  const auto x = bit_cast<std::uint32_t>(a), y = bit_cast<std::uint32_t>(b);
  return bit_cast<float>(x > y ? x : y);
}

/// Transformer Engine's scale from an amax: max_f / max(amax, eps) / 2^margin in float,
/// 1 for amax 0, inf or NaN, float max for an infinite quotient, optional power-of-two truncation.
/// In the default floating-point environment, whatever the caller's.
inline float te_scale_from_amax(float amax, float max_f, float eps, int margin, bool pow2) noexcept {
  const default_fp_env fp_env;
  fp_fence(amax);  // (the arithmetic below stays in the scope)
  fp_fence(max_f);
  fp_fence(eps);
  if (amax < eps) amax = eps;
  float s = 1.0f;
  if (amax - amax == 0 && amax != 0.0f) {  // else inf, NaN or zero: 1
    s = max_f / amax;
    if (margin != 0) s = static_cast<float>(static_cast<double>(s) * pow2_scale{-margin}.factor());
    if (s - s != 0 && s == s) s = std::numeric_limits<float>::max();
    if (s != s) s = 1.0f;
    if (pow2) {
      std::uint32_t b = bit_cast<std::uint32_t>(s) & 0xFF800000u;
      if (b == 0) b = 0x00800000u;  // a subnormal scale truncates to the smallest normal power of two
      s = bit_cast<float>(b);
    }
  }
  fp_fence(s);
  return s;
}

}  // namespace detail

/// Per-tensor current scaling as Transformer Engine's Float8CurrentScaling:
/// scale = max(F) / max(amax, epsilon) / 2^margin, optionally truncated to a power of two.
template <class F>
class current_scaling : public tensor_statistics<current_scaling<F>> {
  static_assert(is_float_format_v<F>, "cpd::current_scaling: F must be a cpd::float_t");

 public:
  using format_type = F;
  /// The amax, a non-negative float (+NaN when any value is NaN); as int32 bits, combined by MPI_MAX.
  using statistic_type = float;
  static constexpr float identity = 0.0f;

  struct options {
    int margin = 0;            ///< extra binades of headroom: the scale is divided by 2^margin
    float epsilon = 0.0f;      ///< the amax is at least epsilon (Transformer Engine's amax_epsilon)
    bool power_of_two = false; ///< truncate the scale to a power of two (force_pow_2_scales)
  };

  current_scaling() = default;
  explicit current_scaling(options o) : opt_(o) {
    if (o.margin < -64 || o.margin > 64) detail::fail_invalid("cpd::current_scaling: margin must be in [-64, 64]");
    if (!(o.epsilon >= 0.0f) || o.epsilon - o.epsilon != 0)
      detail::fail_invalid("cpd::current_scaling: epsilon must be finite and >= 0");
  }

  [[nodiscard]] const options& opts() const noexcept { return opt_; }

  /// max|g| (+NaN when any element is NaN).
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return detail::bit_cast<float>(detail::amax_bits(g, n));
  }
  /// NaN-propagating max.
  [[nodiscard]] static statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return detail::amax_combine(a, b);
  }
  /// The scale for a combined amax (1 when amax is 0, inf or NaN; marked nonfinite for inf or NaN).
  [[nodiscard]] float_scale select(statistic_type amax) const noexcept {
    float_scale s = float_scale::of(detail::te_scale_from_amax(amax, static_cast<float>(F::spec.max_value),
                                                               opt_.epsilon, opt_.margin, opt_.power_of_two));
    s.nonfinite = detail::amax_nonfinite(amax);
    return s;
  }

 private:
  options opt_{};
};

// --- Transformer Engine: delayed scaling ----------------------------------------

/// How delayed scaling turns its amax history into one amax.
enum class amax_algorithm : unsigned char {
  max,         ///< the largest amax in the history window
  most_recent  ///< the amax of the last step
};

/// The name of an amax algorithm ("max", "most_recent": Transformer Engine's amax_compute_algo).
constexpr const char* to_string(amax_algorithm a) noexcept {
  return a == amax_algorithm::max ? "max" : a == amax_algorithm::most_recent ? "most_recent" : "?";
}

template <>
struct enum_names<amax_algorithm> {
  static constexpr const char* type = "cpd::amax_algorithm";
  static constexpr amax_algorithm values[] = {amax_algorithm::max, amax_algorithm::most_recent};
};

/// Delayed scaling as Transformer Engine's DelayedScaling recipe, for one tensor: the scale used at
/// a step comes from the amaxes of earlier steps, scale = max(F) / amax / 2^margin, kept unchanged
/// while that amax is 0, inf or NaN.
template <class F>
class delayed_scaling : public tensor_statistics<delayed_scaling<F>> {
  static_assert(is_float_format_v<F>, "cpd::delayed_scaling: F must be a cpd::float_t");

 public:
  using format_type = F;
  using statistic_type = float;
  static constexpr float identity = 0.0f;

  struct options {
    std::size_t history_length = 1024;             ///< amax_history_len
    amax_algorithm algorithm = amax_algorithm::max;  ///< amax_compute_algo
    int margin = 0;                                 ///< the scale is divided by 2^margin
  };

  delayed_scaling() : delayed_scaling(options{}) {}
  explicit delayed_scaling(options o) : opt_(o), history_(o.history_length, 0.0f) {
    if (o.history_length == 0) detail::fail_invalid("cpd::delayed_scaling: history_length must be >= 1");
    if (o.margin < -64 || o.margin > 64) detail::fail_invalid("cpd::delayed_scaling: margin must be in [-64, 64]");
    if (o.algorithm != amax_algorithm::max && o.algorithm != amax_algorithm::most_recent)
      detail::fail_invalid("cpd::delayed_scaling: algorithm " + std::to_string(static_cast<int>(o.algorithm)) +
                           " is not a cpd::amax_algorithm");
  }

  [[nodiscard]] const options& opts() const noexcept { return opt_; }

  /// The scale to use now (1 before the first update).
  [[nodiscard]] float_scale scale() const noexcept { return scale_; }

  /// max|g| (+NaN when any element is NaN).
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return detail::bit_cast<float>(detail::amax_bits(g, n));
  }
  /// NaN-propagating max.
  [[nodiscard]] static statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return detail::amax_combine(a, b);
  }

  /// The amax the history gives now (window max or most recent).
  [[nodiscard]] float history_amax() const noexcept {
    if (opt_.algorithm == amax_algorithm::most_recent) return history_[newest()];
    float m = 0.0f;
    for (float a : history_) m = detail::amax_combine(m, a);
    return m;
  }

  /// Records this step's combined amax and recomputes the scale from the history.
  void update(statistic_type amax) noexcept {
    const detail::default_fp_env fp_env;
    next_ = (next_ + 1) % history_.size();
    history_[newest()] = amax;
    const float a = history_amax();
    if (a > 0.0f && a - a == 0)  // finite and positive; else keep the scale
      scale_ = float_scale::of(detail::te_scale_from_amax(a, static_cast<float>(F::spec.max_value), 0.0f,
                                                          opt_.margin, false));
  }

  /// The protocol's select: returns the scale for this step (from earlier steps), marked nonfinite
  /// when this step's amax is inf or NaN, then records amax.
  [[nodiscard]] float_scale select(statistic_type amax) noexcept {
    float_scale s = scale_;
    s.nonfinite = detail::amax_nonfinite(amax);
    update(amax);
    return s;
  }

 private:
  [[nodiscard]] std::size_t newest() const noexcept { return next_ % history_.size(); }

  options opt_;
  std::vector<float> history_;
  std::size_t next_ = history_.size() - 1;
  float_scale scale_{};
};

}  // namespace cpd
