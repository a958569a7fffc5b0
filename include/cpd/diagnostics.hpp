// SPDX-License-Identifier: MIT
#pragma once

// What a format does to a tensor: how many values flush to zero, saturate or
// overflow when quantized, with or without a scale (docs/scaling.md).

#include <cpd/config.hpp>
#include <cpd/detail/bits.hpp>
#include <cpd/detail/round.hpp>
#include <cpd/float.hpp>
#include <cpd/rounding.hpp>
#include <cpd/scaling.hpp>

#include <cstddef>
#include <cstdint>

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

/// Classifies one quantization: input x (already scaled, exactly, as a double) and result q.
template <class F>
CPD_ALWAYS_INLINE void classify(quantization_stats& s, double x, double q) noexcept {
  const double ax = x < 0 ? -x : x;
  const double aq = q < 0 ? -q : q;
  ++s.count;
  if (!(ax - ax == 0)) ++s.nonfinite;
  else if (ax == 0) ++s.zeros;
  else if (!(aq - aq == 0)) ++s.overflowed;
  else if (aq == 0) ++s.flushed;
  else if (ax > F::spec.max_value && aq == F::spec.max_value) ++s.saturated;
}

}  // namespace detail

/// What quantizing x[0..n) * 2^scale.exponent to F in mode R, overflow O, does (nothing is written).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] quantization_stats measure_quantization(const float* x, std::size_t n, pow2_scale scale = {}) noexcept {
  static_assert(is_float_format_v<F>, "cpd::measure_quantization: F must be a cpd::float_t");
  quantization_stats s;
  const double f = scale.factor();
  for (std::size_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i]) * f;
    const double q = detail::bit_cast<double>(
        detail::round_bits<R == rounding::stochastic ? rounding::nearest_even : R, O, double>(
            F::spec, detail::bit_cast<std::uint64_t>(v))
            .value);
    detail::classify<F>(s, v, q);
  }
  return s;
}

/// The same for a float scale: x[i] * scale.value is rounded to float first, as Transformer Engine does.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] quantization_stats measure_quantization(const float* x, std::size_t n, float_scale scale) noexcept {
  static_assert(is_float_format_v<F>, "cpd::measure_quantization: F must be a cpd::float_t");
  quantization_stats s;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = x[i] * scale.value;
    const double q = static_cast<double>(detail::bit_cast<float>(
        detail::round_bits<R == rounding::stochastic ? rounding::nearest_even : R, O, float>(
            F::spec, detail::bit_cast<std::uint32_t>(v))
            .value));
    detail::classify<F>(s, static_cast<double>(v), q);
  }
  return s;
}

}  // namespace cpd
