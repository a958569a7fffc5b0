// SPDX-License-Identifier: MIT
#pragma once

// What a format does to a tensor: how many values flush to zero, saturate or
// overflow when quantized, with or without a scale (docs/scaling.md), counted
// without writing anything, as the cpd::value_stats a bulk call would report.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/core/stats.hpp>
#include <cpd/scaling/scaling.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace cpd {

namespace detail {

/// What rounding to F does to every finite |v| of one sign, by region: (0, flush_below)
/// rounds to zero (underflow), [overflow_from, max double] overflows. Rounding (with an
/// unbounded exponent too) is monotone in |v| for every deterministic mode, so two
/// bisections over the bits of |v| (each step one call of the core) find the bounds
/// exactly, and within a region every value has the same fate: one call of the core on
/// one member says whether the region becomes NaN or +-max.
struct sign_regions {
  double flush_below;    ///< smallest |v| that does not round to zero
  double overflow_from;  ///< smallest finite |v| that overflows (+inf if none)
  bool zero_nan;         ///< +-0 becomes NaN
  bool normal_nan;       ///< |v| in [flush_below, overflow_from) becomes NaN (negative in fnu)
  bool overflow_nan, overflow_max;  ///< an overflowing |v| becomes NaN / +-max
  bool inf_nan, inf_max;            ///< +-inf becomes NaN / +-max
};

template <class F, rounding R, overflow O>
sign_regions regions_of(bool neg) noexcept {
  constexpr rounding Rd = R == rounding::stochastic ? rounding::nearest_even : R;
  constexpr spec s = F::spec;
  constexpr std::uint64_t inf = source<double>::inf_bits, sign = std::uint64_t(1) << 63;
  auto round = [&](std::uint64_t mag) { return round_bits<Rd, O, double>(s, neg ? (mag | sign) : mag); };
  auto is_nan = [&](std::uint64_t mag) {
    const double q = bit_cast<double>(round(mag).value);
    return !(q == q);
  };
  auto is_max = [&](std::uint64_t mag) { return (round(mag).code & s.mag_mask) == s.max_code && !is_nan(mag); };
  // The smallest magnitude in [lo, hi) whose rounding satisfies pred (hi when none).
  auto first = [&](std::uint64_t lo, std::uint64_t hi, auto pred) {
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (pred(mid)) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  const std::uint64_t fb = first(1, inf, [&](std::uint64_t m) {
    const double q = bit_cast<double>(round(m).value);
    return q != 0;
  });
  const std::uint64_t ov = first(fb, inf, [&](std::uint64_t m) { return round(m).overflow != 0; });
  sign_regions r{};
  r.flush_below = bit_cast<double>(fb);
  r.overflow_from = bit_cast<double>(ov);  // inf_bits when nothing finite overflows
  r.zero_nan = is_nan(0);
  r.normal_nan = fb < ov && is_nan(fb);
  r.overflow_nan = ov < inf && is_nan(ov);
  r.overflow_max = ov < inf && is_max(ov);
  r.inf_nan = is_nan(inf);
  r.inf_max = is_max(inf);
  return r;
}

/// Per sign: values +-0, underflowing, in between, overflowing, +-inf.
struct region_counts {
  std::uint64_t zero = 0, under = 0, normal = 0, over = 0, inf = 0;
};

/// The counts of one sign turned into the events of value_stats.
inline void add_regions(value_stats& st, const region_counts& c, const sign_regions& r) noexcept {
  st.zeros += c.zero;
  st.underflow += c.under;
  st.overflow += c.over;
  st.inf_inputs += c.inf;
  st.nan += (r.zero_nan ? c.zero : 0) + (r.normal_nan ? c.normal : 0) + (r.overflow_nan ? c.over : 0) +
            (r.inf_nan ? c.inf : 0);
  st.saturated += (r.overflow_max ? c.over : 0) + (r.inf_max ? c.inf : 0);
}

/// Classifies n values v_i = value(i) (exact doubles) by the regions of F for each sign.
template <class F, class Value>
value_stats classify_all(std::size_t n, const sign_regions (&r)[2], Value value) noexcept {
  const double fb0 = r[0].flush_below, fb1 = r[1].flush_below;
  const double ov0 = r[0].overflow_from, ov1 = r[1].overflow_from;
  std::uint64_t c[2][5] = {};  // [sign][zero, under, normal, over, inf]
  std::uint64_t nans = 0;
  for (std::size_t i = 0; i < n; ++i) {  // selects only, so that it vectorizes
    const double v = value(i);
    const bool neg = std::signbit(v);
    const double av = neg ? -v : v;
    const double fb = neg ? fb1 : fb0, ov = neg ? ov1 : ov0;
    const bool finite = av <= std::numeric_limits<double>::max();
    const bool inf = av > std::numeric_limits<double>::max();
    const bool cls[5] = {av == 0, av > 0 && av < fb, av >= fb && av < ov && av > 0, finite && av >= ov, inf};
    nans += !(av == av) ? 1 : 0;
    for (int k = 0; k < 5; ++k) {
      c[0][k] += (cls[k] && !neg) ? 1 : 0;
      c[1][k] += (cls[k] && neg) ? 1 : 0;
    }
  }
  value_stats s;
  s.count = n;
  s.nan_inputs = nans;
  for (int sg = 0; sg < 2; ++sg) add_regions(s, {c[sg][0], c[sg][1], c[sg][2], c[sg][3], c[sg][4]}, r[sg]);
  return s;
}

/// The bits of the smallest float at least t > 0 (+inf's bits above float's range; the
/// smallest subnormal's below it). The default rounding mode is the caller's.
inline std::uint32_t float_bits_at_least(double t) noexcept {
  if (!(t > 0)) return 1;  // (t underflowed double: any positive t rounds up to this)
  if (t > static_cast<double>(std::numeric_limits<float>::max())) return 0x7F800000u;
  float f = static_cast<float>(t);
  if (static_cast<double>(f) < t) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f > 0 ? bit_cast<std::uint32_t>(f) : 1u;
}

/// c[j] += how many of the n floats x have bits, as unsigned integers, below t[j], j < 11:
/// integer compares and adds only, in blocks with 32-bit counts, which the compiler
/// vectorizes (exact counts on every instruction set).
inline void count_below(const float* x, std::size_t n, const std::uint32_t (&t)[11], std::uint64_t (&c)[11]) noexcept {
  constexpr std::size_t block = std::size_t(1) << 16;
  for (std::size_t b = 0; b < n; b += block) {
    const std::size_t e = n - b < block ? n : b + block;
    std::uint32_t acc[11] = {};
    for (std::size_t i = b; i < e; ++i) {
      const std::uint32_t u = bit_cast<std::uint32_t>(x[i]);
      for (int j = 0; j < 11; ++j) acc[j] += u < t[j] ? 1u : 0u;
    }
    for (int j = 0; j < 11; ++j) c[j] += acc[j];
  }
}

/// classify_all for v_i = x_i * 2^k with x float and |k| <= 600, on the floats' bits: v < T
/// exactly when |x| < T * 2^-k, i.e. when the bits of |x| are below those of the smallest
/// float at least T * 2^-k (an exact double product here). Eleven unsigned counts over the
/// signed bits (count_below) give both signs' regions.
template <class F>
value_stats classify_floats(const float* x, std::size_t n, const sign_regions (&r)[2], int k) noexcept {
  const double down = std::ldexp(1.0, -k);
  std::uint32_t t[11];
  for (int s = 0; s < 2; ++s) {
    const std::uint32_t base = s ? 0x80000000u : 0u;
    t[5 * s + 0] = base + 1u;  // +-0
    t[5 * s + 1] = base + float_bits_at_least(r[s].flush_below * down);
    t[5 * s + 2] = base + float_bits_at_least(r[s].overflow_from * down);
    t[5 * s + 3] = base + 0x7F800000u;  // finite
    t[5 * s + 4] = base + 0x7F800001u;  // +-inf
  }
  t[10] = 0x80000000u;  // the positive ones
  std::uint64_t c[11] = {};
  count_below(x, n, t, c);
  const std::uint64_t positive = c[10], negative = n - c[10];
  std::uint64_t lt[2][5];
  for (int j = 0; j < 5; ++j) lt[0][j] = c[j], lt[1][j] = c[5 + j] - positive;
  value_stats s;
  s.count = n;
  s.nan_inputs = (positive - lt[0][4]) + (negative - lt[1][4]);
  for (int sg = 0; sg < 2; ++sg)
    add_regions(s, {lt[sg][0], lt[sg][1] - lt[sg][0], lt[sg][2] - lt[sg][1], lt[sg][3] - lt[sg][2], lt[sg][4] - lt[sg][3]},
                r[sg]);
  return s;
}

/// The regions of F for both signs (computed once per F, R, O).
template <class F, rounding R, overflow O>
const sign_regions (&regions())[2] {
  static const sign_regions r[2] = {regions_of<F, R, O>(false), regions_of<F, R, O>(true)};
  return r;
}

}  // namespace detail

/// What quantizing x[0..n) * 2^scale.exponent to F in mode R, overflow O, does (nothing is
/// written; stochastic rounding is counted as nearest_even would round).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] value_stats measure_quantization(const float* x, std::size_t n, pow2_scale scale = {}) noexcept {
  static_assert(is_float_format_v<F>, "cpd::measure_quantization: F must be a cpd::float_t");
  const detail::default_fp_env fp_env;
  if (scale.exponent >= -600 && scale.exponent <= 600)
    return detail::classify_floats<F>(x, n, detail::regions<F, R, O>(), scale.exponent);
  const double f = scale.factor();
  return detail::classify_all<F>(n, detail::regions<F, R, O>(),
                                 [&](std::size_t i) { return static_cast<double>(x[i]) * f; });
}

/// The same for a float scale: x[i] * scale.value is rounded to float first, as Transformer Engine does.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] value_stats measure_quantization(const float* x, std::size_t n, float_scale scale) noexcept {
  static_assert(is_float_format_v<F>, "cpd::measure_quantization: F must be a cpd::float_t");
  const detail::default_fp_env fp_env;
  return detail::classify_all<F>(n, detail::regions<F, R, O>(),
                                 [&](std::size_t i) { return static_cast<double>(x[i] * scale.value); });
}

}  // namespace cpd
