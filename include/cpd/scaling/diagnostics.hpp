// SPDX-License-Identifier: MIT
#pragma once

// What a format does to a tensor: how many values flush to zero, saturate or
// overflow when quantized, with or without a scale (docs/scaling.md).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/scaling/scaling.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>

namespace cpd {

/// Counts of what quantizing a tensor did to its values.
struct quantization_stats {
  std::uint64_t count = 0;       ///< values looked at
  std::uint64_t zeros = 0;       ///< inputs that were +-0
  std::uint64_t flushed = 0;     ///< non-zero finite inputs that became zero (underflow)
  std::uint64_t saturated = 0;   ///< finite inputs beyond max(F) that became +-max(F)
  std::uint64_t overflowed = 0;  ///< finite inputs that became inf or NaN
  std::uint64_t nonfinite = 0;   ///< inputs that were inf or NaN

  /// flushed / count (0 for an empty tensor).
  [[nodiscard]] double flushed_fraction() const noexcept { return frac(flushed); }
  /// saturated / count.
  [[nodiscard]] double saturated_fraction() const noexcept { return frac(saturated); }
  /// overflowed / count.
  [[nodiscard]] double overflowed_fraction() const noexcept { return frac(overflowed); }

  /// Adds the counts of another tensor.
  quantization_stats& operator+=(const quantization_stats& o) noexcept {
    count += o.count;
    zeros += o.zeros;
    flushed += o.flushed;
    saturated += o.saturated;
    overflowed += o.overflowed;
    nonfinite += o.nonfinite;
    return *this;
  }

 private:
  [[nodiscard]] double frac(std::uint64_t k) const noexcept {
    return count == 0 ? 0.0 : static_cast<double>(k) / static_cast<double>(count);
  }
};

namespace detail {

/// The magnitudes at which rounding to F changes class, for one sign: a finite v with
/// 0 < |v| < flush_below rounds to zero, and |v| >= overflow_from rounds to inf or NaN.
/// Rounding is monotone in |v| for every deterministic mode, so two bisections over the
/// bits of |v| (each step one call of the core) find them exactly.
struct class_thresholds {
  double flush_below[2];    ///< [sign]: smallest |v| that does not round to zero
  double overflow_from[2];  ///< [sign]: smallest finite |v| that rounds to inf or NaN (+inf if none)
};

template <class F, rounding R, overflow O>
class_thresholds thresholds() noexcept {
  constexpr rounding Rd = R == rounding::stochastic ? rounding::nearest_even : R;
  constexpr spec s = F::spec;
  constexpr std::uint64_t inf = source<double>::inf_bits, sign = std::uint64_t(1) << 63;
  auto rounded = [&](std::uint64_t mag, bool neg) {
    return bit_cast<double>(round_bits<Rd, O, double>(s, neg ? (mag | sign) : mag).value);
  };
  // The smallest magnitude in [lo, hi) whose rounding satisfies pred (hi when none).
  auto first = [&](std::uint64_t lo, std::uint64_t hi, auto pred) {
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (pred(mid)) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  };
  class_thresholds t{};
  for (int neg = 0; neg < 2; ++neg) {
    const std::uint64_t fb = first(0, inf, [&](std::uint64_t m) { return rounded(m, neg) != 0; });
    const std::uint64_t ov = first(0, inf, [&](std::uint64_t m) {
      const double q = rounded(m, neg);
      return !(q - q == 0);
    });
    t.flush_below[neg] = bit_cast<double>(fb);
    t.overflow_from[neg] = bit_cast<double>(ov);  // inf_bits when nothing finite overflows
  }
  return t;
}

/// Classifies n values v_i = value(i) (exact doubles) against the thresholds of F.
template <class F, class Value>
quantization_stats classify_all(std::size_t n, const class_thresholds& t, Value value) noexcept {
  constexpr double maxv = F::spec.max_value;
  const double fb0 = t.flush_below[0], fb1 = t.flush_below[1];
  const double ov0 = t.overflow_from[0], ov1 = t.overflow_from[1];
  std::uint64_t zeros = 0, flushed = 0, saturated = 0, overflowed = 0, nonfinite = 0;
  for (std::size_t i = 0; i < n; ++i) {  // selects only, so that it vectorizes
    const double v = value(i);
    const bool neg = v < 0;
    const double av = neg ? -v : v;
    const double fb = neg ? fb1 : fb0, ov = neg ? ov1 : ov0;
    const bool finite = av <= std::numeric_limits<double>::max();
    nonfinite += finite ? 0 : 1;
    zeros += av == 0 ? 1 : 0;
    flushed += (av > 0 && av < fb) ? 1 : 0;
    overflowed += (finite && av >= ov) ? 1 : 0;
    saturated += (finite && av > maxv && av < ov) ? 1 : 0;
  }
  quantization_stats s;
  s.count = n;
  s.zeros = zeros;
  s.flushed = flushed;
  s.saturated = saturated;
  s.overflowed = overflowed;
  s.nonfinite = nonfinite;
  return s;
}

}  // namespace detail

/// What quantizing x[0..n) * 2^scale.exponent to F in mode R, overflow O, does (nothing is
/// written; stochastic rounding is counted as nearest_even would round).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] quantization_stats measure_quantization(const float* x, std::size_t n, pow2_scale scale = {}) noexcept {
  static_assert(is_float_format_v<F>, "cpd::measure_quantization: F must be a cpd::float_t");
  const detail::default_fp_env fp_env;
  const double f = scale.factor();
  return detail::classify_all<F>(n, detail::thresholds<F, R, O>(),
                                 [&](std::size_t i) { return static_cast<double>(x[i]) * f; });
}

/// The same for a float scale: x[i] * scale.value is rounded to float first, as Transformer Engine does.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] quantization_stats measure_quantization(const float* x, std::size_t n, float_scale scale) noexcept {
  static_assert(is_float_format_v<F>, "cpd::measure_quantization: F must be a cpd::float_t");
  const detail::default_fp_env fp_env;
  return detail::classify_all<F>(n, detail::thresholds<F, R, O>(),
                                 [&](std::size_t i) { return static_cast<double>(x[i] * scale.value); });
}

}  // namespace cpd
