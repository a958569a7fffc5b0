// SPDX-License-Identifier: MIT
#pragma once

// Integer quantization with a float scale (docs/formats.md, "Integers"): b-bit integers
// q in [qmin, qmax] standing for (q - zero_point) * scale, the fake quantization of
// torch.ao.quantization and of the int8/int4/int2 weight and activation schemes:
//
//   q = clamp(round(x * (1 / scale)) + zero_point, qmin, qmax),  value = (q - zero_point) * scale
//
// with 1 / scale and the product rounded to float first, as torch's fake_quantize kernels do,
// and round() in any of cpd's modes (nearest_even is torch's nearbyint; stochastic draws the
// key and counters of bulk_options, element i of the whole call drawing counter offset + i).
// The rounding to integers is the rounding core's (the grid of fixed point with 0 fraction
// bits, cpd/host/fixed_point.hpp); the clamp and the product follow.
//
// int_params_for chooses scale and zero point from a range as torch.ao's MinMaxObserver does
// (float32 arithmetic): symmetric (signed, zero point 0) scale = max(-min, max) / ((qmax -
// qmin) / 2); affine (unsigned) scale = (max - min) / (qmax - qmin) and zero point qmin -
// round(min / scale) clamped to [qmin, qmax]; the range always holds 0, the scale is at least
// float's epsilon. int_quantize does it per group of `group` consecutive values (the whole
// array, each channel of a row-major [channels][group] array, or blocks), from the group's
// finite values.
//
// NaN stays NaN; +-inf becomes the end of the range (saturated); a zero result is +0 (q -
// zero_point is an integer, as in torch). Statistics: zeros,
// underflow (nonzero inputs that became 0), nan_inputs, inf_inputs as every call; overflow
// counts finite inputs beyond [qmin, qmax], saturated those and the infinities.

#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/core/stats.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/host/execution.hpp>
#include <cpd/host/fixed_point.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace cpd {

/// b-bit integers: symmetric (signed, [-2^(b-1), 2^(b-1) - 1], zero point 0) or affine
/// (unsigned, [0, 2^b - 1], with a zero point).
struct int_format {
  int bits = 8;           ///< [2, 16]
  bool symmetric = true;  ///< signed with zero point 0; else unsigned with a zero point

  [[nodiscard]] int qmin() const noexcept { return symmetric ? -(1 << (bits - 1)) : 0; }
  [[nodiscard]] int qmax() const noexcept { return symmetric ? (1 << (bits - 1)) - 1 : (1 << bits) - 1; }
  /// "int8" or "uint4": the integers' name.
  [[nodiscard]] std::string name() const { return (symmetric ? "int" : "uint") + std::to_string(bits); }
};

/// A scale and zero point: q stands for (q - zero_point) * scale.
struct int_params {
  float scale = 1.0f;
  std::int32_t zero_point = 0;
};

namespace detail {

inline void check_int_format(const int_format& f, const char* who) {
  if (f.bits < 2 || f.bits > 16)
    fail_invalid(std::string(who) + ": bits must be in [2, 16], not " + std::to_string(f.bits));
}

inline void check_int_params(const int_format& f, const int_params& p, const char* who) {
  if (!(std::isfinite(p.scale) && p.scale > 0))
    fail_invalid(std::string(who) + ": scale must be finite and positive, not " +
                                std::to_string(p.scale));
  if (p.zero_point < f.qmin() || p.zero_point > f.qmax())
    fail_invalid(std::string(who) + ": zero_point " + std::to_string(p.zero_point) + " is outside [" +
                                std::to_string(f.qmin()) + ", " + std::to_string(f.qmax()) + "] of " + f.name());
}

}  // namespace detail

/// The scale and zero point torch.ao's MinMaxObserver chooses for values in [lo, hi], in
/// float32 arithmetic (see the header's comment); lo and hi must not be NaN.
inline int_params int_params_for(const int_format& f, float lo, float hi) {
  const detail::default_fp_env fp_env;  // (float arithmetic to nearest even, whatever the caller's)
  detail::check_int_format(f, "cpd::int_params_for");
  if (std::isnan(lo) || std::isnan(hi) || lo > hi)
    detail::fail_invalid("cpd::int_params_for: the range [lo, hi] must be ordered and not NaN");
  const float neg = std::min(lo, 0.0f), pos = std::max(hi, 0.0f);
  const float eps = std::numeric_limits<float>::epsilon();
  int_params p;
  if (f.symmetric) {
    const float m = std::max(-neg, pos);
    p.scale = std::max(m / (static_cast<float>(f.qmax() - f.qmin()) / 2.0f), eps);
    return p;
  }
  p.scale = std::max((pos - neg) / static_cast<float>(f.qmax() - f.qmin()), eps);
  const long z = static_cast<long>(f.qmin()) - std::lrint(neg / p.scale);
  p.zero_point = static_cast<std::int32_t>(std::clamp<long>(z, f.qmin(), f.qmax()));
  return p;
}

/// out[i] = (clamp(round(in[i] * (1 / p.scale)) + p.zero_point, qmin, qmax) - p.zero_point) *
/// p.scale in mode r, under a policy; in == out allowed. options: the random key, offset and
/// statistics (scale, scale_inverse and scale_exponent must be left at their defaults).
template <class Policy, class = std::enable_if_t<execution::is_execution_policy_v<Policy>>>
void int_fake_quantize(Policy&& policy, const int_format& f, const int_params& p, rounding r, const float* in,
                       float* out, std::size_t n, const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;  // the default floating-point environment, whatever the caller's
  const char* who = "cpd::int_fake_quantize";
  detail::check_int_format(f, who);
  detail::check_int_params(f, p, who);
  if (options.scale != 1.0f || options.scale_inverse != 0.0f || options.scale_exponent != 0)
    detail::fail_invalid(std::string(who) + ": the scale is int_params' (leave bulk_options' scales at their defaults)");
  detail::require_format_values(who, options, "integers round to their own grid");
  if (!detail::begin_call(who, in, out, n, options)) return;
  // round(x * (1 / scale)) on the integers: fixed point of float's width, 0 fraction bits; values
  // beyond 2^24 come back as +-its largest value, far outside every b-bit range.
  const format grid = fixed_point_grid<float>(fixed_point{24, 0, false}, 0, false);
  value_stats st;
  bulk_options o = options;
  o.scale = 1.0f / p.scale;
  o.scale_inverse = 1.0f;
  o.stats = options.stats ? &st : nullptr;
  quantize(policy, grid, r, overflow::saturate, in, out, n, o);
  st.overflow = st.saturated = 0;
  const float lo = static_cast<float>(f.qmin() - p.zero_point), hi = static_cast<float>(f.qmax() - p.zero_point);
  std::uint64_t clamped = 0;
  for (std::size_t i = 0; i < n; ++i) {  // (in may be out: only out is read)
    float k = out[i];
    if (k > hi || k < lo) {
      clamped += 1;
      k = k > hi ? hi : lo;
    }
    out[i] = (k + 0.0f) * p.scale;  // (q - zero_point) * scale, a float product (an integer 0 is +0); NaN stays
  }
  if (options.stats) {  // every infinite input is clamped (it rounds to the grid's largest)
    st.saturated = clamped;
    st.overflow = clamped - std::min(clamped, st.inf_inputs);
    *options.stats = st;
  }
}

/// int_fake_quantize with the scale and zero point of each group of `group` consecutive
/// values (the last may be shorter) chosen by int_params_for from the group's finite values
/// (a group without any: scale 1, zero point as for 0); params, when not null, receives them
/// (ceil(n / group) entries). Random counters are those of one call over the whole array.
template <class Policy, class = std::enable_if_t<execution::is_execution_policy_v<Policy>>>
void int_quantize(Policy&& policy, const int_format& f, rounding r, const float* in, float* out, std::size_t n,
                  std::size_t group, int_params* params = nullptr, const bulk_options& options = {}) {
  const detail::default_fp_env fp_env;
  const char* who = "cpd::int_quantize";
  detail::check_int_format(f, who);
  if (group == 0) detail::fail_invalid(std::string(who) + ": group must be at least 1");
  detail::require_format_values(who, options, "integers round to their own grid");
  if (!detail::begin_call(who, in, out, n, options)) return;
  value_stats total;
  for (std::size_t g = 0, b = 0; g < n; g += group, ++b) {
    const std::size_t m = std::min(group, n - g);
    float lo = 0.0f, hi = 0.0f;
    for (std::size_t i = g; i < g + m; ++i) {
      const float v = in[i];
      if (std::isfinite(v)) {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
    const int_params p = int_params_for(f, lo, hi);
    if (params) params[b] = p;
    value_stats st;
    bulk_options o = options;
    o.offset = options.offset + g;
    o.stats = options.stats ? &st : nullptr;
    int_fake_quantize(policy, f, p, r, in + g, out + g, m, o);
    total += st;
  }
  if (options.stats) *options.stats = total;
}

}  // namespace cpd
