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
#include <cpd/host/detail/parallel_for.hpp>
#include <cpd/host/fixed_point.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

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

/// int_params_for's arithmetic, in the caller's environment (int_params_for holds the default one).
inline int_params int_params_of(const int_format& f, float lo, float hi) noexcept {
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

/// The range [lo, hi] of in[0, n)'s finite values and 0 (int_quantize's groups).
inline std::pair<float, float> finite_range(const float* in, std::size_t n) noexcept {
  float lo = 0.0f, hi = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = in[i];
    const float u = v - v == 0.0f ? v : 0.0f;  // (inf and NaN count as 0, which the range holds)
    lo = u < lo ? u : lo;
    hi = u > hi ? u : hi;
  }
  return {lo, hi};
}

/// y rounded to an integer, ties to even, in float arithmetic (the default environment held by
/// the caller): (y + 1.5 * 2^23) - 1.5 * 2^23, exact for |y| < 2^23. A larger |y| comes back
/// within 2 of itself, far beyond every b-bit range (within 2^16), which the callers clamp to;
/// inf and NaN come back as they are.
[[nodiscard]] inline float round_to_integer(float y) noexcept {
  constexpr float magic = 12582912.0f;  // 1.5 * 2^23
  return (y + magic) - magic;
}

/// int_fake_quantize in nearest_even over in[0, n) (the default floating-point environment
/// held by the caller): y = x * (1 / scale) in float, k = round_to_integer(y), clamped to
/// [qmin - zero_point, qmax - zero_point], times scale: one branch-free pass over the values,
/// and, when `count`, a second pass for the counts. The values and counts of the generic path
/// (the rounding core on the integer grid, then the clamp); the counts are zero without `count`.
inline value_stats int_nearest_even(const int_format& f, const int_params& p, const float* in, float* out,
                                    std::size_t n, bool count) noexcept {
  const float inv = 1.0f / p.scale, scale = p.scale;
  const float lo = static_cast<float>(f.qmin() - p.zero_point), hi = static_cast<float>(f.qmax() - p.zero_point);
  value_stats st;
  if (count) {  // (before the values: in may be out)
    std::uint64_t zeros = 0, underflow = 0, clamped = 0, nans = 0, infs = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float x = in[i];
      const float k = round_to_integer(x * inv);
      zeros += x == 0.0f;
      underflow += x != 0.0f && k == 0.0f;
      clamped += k > hi || k < lo;
      nans += x != x;
      infs += x - x != 0.0f && x == x;
    }
    st.count = n;
    st.zeros = zeros;
    st.underflow = underflow;
    st.saturated = clamped;  // (every infinite input is clamped)
    st.overflow = clamped - infs;
    st.nan_inputs = nans;
    st.inf_inputs = infs;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const float k = round_to_integer(in[i] * inv);
    const float c = k > hi ? hi : k;                // (NaN stays NaN: the comparisons are false)
    out[i] = ((c < lo ? lo : c) + 0.0f) * scale;   // (an integer 0 is +0)
  }
  return st;
}

}  // namespace detail

/// The scale and zero point torch.ao's MinMaxObserver chooses for values in [lo, hi], in
/// float32 arithmetic (see the header's comment); lo and hi must not be NaN.
inline int_params int_params_for(const int_format& f, float lo, float hi) {
  const detail::default_fp_env fp_env;  // (float arithmetic to nearest even, whatever the caller's)
  detail::check_int_format(f, "cpd::int_params_for");
  if (std::isnan(lo) || std::isnan(hi) || lo > hi)
    detail::fail_invalid("cpd::int_params_for: the range [lo, hi] must be ordered and not NaN");
  return detail::int_params_of(f, lo, hi);
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
  if (r == rounding::nearest_even) {  // one fused pass (detail::int_nearest_even)
    const value_stats st = detail::parallel_for(policy, n, [&](std::size_t b, std::size_t e) {
      return detail::int_nearest_even(f, p, in + b, out + b, e - b, options.stats != nullptr);
    });
    if (options.stats) *options.stats = st;
    return;
  }
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
  if (r == rounding::nearest_even) {  // the groups in one parallel pass, each group's range then its values
    const std::size_t groups = (n + group - 1) / group;
    const value_stats st = detail::parallel_for(policy, groups, [&](std::size_t first, std::size_t last) {
      value_stats s;
      for (std::size_t b = first; b < last; ++b) {
        const std::size_t g = b * group, m = std::min(group, n - g);
        const auto [lo, hi] = detail::finite_range(in + g, m);
        const int_params p = detail::int_params_of(f, lo, hi);
        if (params) params[b] = p;
        s += detail::int_nearest_even(f, p, in + g, out + g, m, options.stats != nullptr);
      }
      return s;
    });
    if (options.stats) *options.stats = st;
    return;
  }
  value_stats total;
  for (std::size_t g = 0, b = 0; g < n; g += group, ++b) {
    const std::size_t m = std::min(group, n - g);
    const auto [lo, hi] = detail::finite_range(in + g, m);
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
