// SPDX-License-Identifier: MIT
#pragma once

// Rounded sums (docs/reduction.md): one addition Q(a + b) rounds the exact sum of
// a and b once to F, through the rounding core, never through float on the way;
// rounded_sub and rounded_mul likewise; accumulate and sum, whose every partial
// result is rounded to F. Their stochastic roundings draw from the one random key,
// cpd::random_stream: rounding number s of element i draws key.bits(s, i) =
// random_bits(seed, stream + s, i, generator) (docs/reduction.md lists s for every call).
//
// Values are floats that hold values of F ("fake quantization"). No result
// depends on the caller's floating-point environment (cpd/core/detail/fenv.hpp):
// the scalar operations form the exact sum or product by integer arithmetic or
// exact double products of exactly widened floats; the array operations run their
// faster float arithmetic (TwoSum) inside a detail::default_fp_env.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>

#include <cstddef>
#include <cstdint>

namespace cpd {

namespace detail {

/// 32 random bits for one rounding, keyed by (seed, stream, index) under generator g:
/// cpd::random_bits, the counter-based generator of the bulk kernels (docs/random.md), so
/// that bulk rounding and these scalar loops draw the same bits.
CPD_HOST_DEVICE constexpr std::uint32_t reduce_random_bits(std::uint64_t seed, std::uint64_t stream,
                                                           std::uint64_t index,
                                                           random_generator g = default_generator) noexcept {
  return ::cpd::random_bits(seed, stream, index, g);
}

/// Rounds a double to F, giving a float (F must fit float; the narrowing is integer).
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float round_to(double v, std::uint32_t rnd) noexcept {
  return bit_cast<float>(narrow_bits(round_bits<R, O, double>(F::spec, bit_cast<std::uint64_t>(v), rnd).value));
}

/// Rounds a float to F.
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float round_to(float v, std::uint32_t rnd) noexcept {
  return bit_cast<float>(round_bits<R, O, float>(F::spec, bit_cast<std::uint32_t>(v), rnd).value);
}

/// The float sum of a and b made round-to-odd (24 bits), exactly: TwoSum gives the error.
/// Valid when a + b does not overflow float; inf and NaN pass through. Needs the default
/// floating-point environment (round to nearest, no FTZ/DAZ): a default_fp_env scope.
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float add_odd_float(float a, float b) noexcept {
  const float s = a + b;
  const float bb = s - a;
  const float err = (a - (s - bb)) + (b - bb);
  const auto bits = bit_cast<std::uint32_t>(s);
  if (err == 0 || (bits & 1u) != 0 || !(s - s == 0)) return s;
  const bool away = (err > 0) == (s > 0);
  return bit_cast<float>(away ? bits + 1 : bits - 1);
}

/// True when F's sums can go through float round-to-odd: p + 2 <= 24 bits (a float sum that
/// overflows falls back to double). Stochastic rounding always takes the (exact) double path.
template <class F, rounding R>
inline constexpr bool float_sum_path = F::mantissa_bits <= 21 && R != rounding::stochastic;

/// True when F is IEEE binary32 itself and the mode is the hardware's (nearest_even, inf on
/// overflow): then the exact sum rounded to F is the float sum a + b (in the default
/// floating-point environment).
template <class F, rounding R, overflow O>
inline constexpr bool native_float_sum = F::exponent_bits == 8 && F::mantissa_bits == 23 &&
                                         F::encoding::kind == encoding_kind::ieee && F::bias == 127 &&
                                         R == rounding::nearest_even && O == overflow::infinity;

/// r, or the canonical +qNaN when r is a NaN (every sum's NaN).
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float canonical_nan(float r) noexcept {
  return r == r ? r : bit_cast<float>(0x7FC00000u);
}

/// a + b rounded once to F in any environment: the exact sum rounded to odd in double by
/// integer arithmetic (detail::add_odd), then by the core. NaN not made canonical.
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_add_exact(float a, float b, std::uint32_t random_bits) noexcept {
  return round_to<F, R, O>(add_odd(widen(a), widen(b)), random_bits);
}

/// a + b rounded once to F with float arithmetic (TwoSum): the array operations' step,
/// valid in the default floating-point environment only (a default_fp_env scope, or
/// device code). NaN results are the canonical +qNaN.
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_add_in_default_env(float a, float b, std::uint32_t random_bits) noexcept {
  if constexpr (native_float_sum<F, R, O>) {
    return canonical_nan(a + b);
  } else if constexpr (float_sum_path<F, R>) {
    const float s = add_odd_float(a, b);
    // Overflow of float itself (inputs outside F) falls back to the exact double path.
    if (s - s == 0 || !(a - a == 0) || !(b - b == 0)) return canonical_nan(round_to<F, R, O>(s, random_bits));
    return canonical_nan(rounded_add_exact<F, R, O>(a, b, random_bits));
  } else {
    return canonical_nan(rounded_add_exact<F, R, O>(a, b, random_bits));
  }
}

/// a + b rounded once to F in any floating-point environment: in the default one (one read
/// of MXCSR tells) the float path; otherwise the exact sum rounded to odd in double by
/// integer arithmetic (detail::add_odd), then by the core (half as fast). On a device, whose
/// float arithmetic does not see the host's MXCSR, the float path.
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_add_any_env(float a, float b, std::uint32_t random_bits) noexcept {
#if CPD_DEVICE_PASS
  return rounded_add_in_default_env<F, R, O>(a, b, random_bits);
#else
  if (in_default_fp_env()) return rounded_add_in_default_env<F, R, O>(a, b, random_bits);
  return canonical_nan(rounded_add_exact<F, R, O>(a, b, random_bits));
#endif
}

/// rounded_add_in_default_env when InDefaultEnv, else rounded_add_any_env.
template <class F, rounding R, overflow O, bool InDefaultEnv>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_add_as(float a, float b, std::uint32_t random_bits) noexcept {
  if constexpr (InDefaultEnv) return rounded_add_in_default_env<F, R, O>(a, b, random_bits);
  else return rounded_add_any_env<F, R, O>(a, b, random_bits);
}

}  // namespace detail

/// a + b rounded once to F (a and b are any floats; F must fit float). A NaN result is
/// always the canonical +qNaN (0x7FC00000), whatever the operands' order or payloads.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_add(float a, float b,
                                                                  std::uint32_t random_bits = 0) noexcept {
  static_assert(is_float_format_v<F> && F::fits_float, "cpd::rounded_add: F must be a cpd::float_t that fits float");
  return detail::rounded_add_any_env<F, R, O>(a, b, random_bits);
}

/// a - b rounded once to F.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_sub(float a, float b,
                                                                  std::uint32_t random_bits = 0) noexcept {
  return rounded_add<F, R, O>(a, -b, random_bits);
}

/// a * b rounded once to F (the double product of two floats is exact); NaN is +qNaN.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE float rounded_mul(float a, float b,
                                                                  std::uint32_t random_bits = 0) noexcept {
  static_assert(is_float_format_v<F> && F::fits_float, "cpd::rounded_mul: F must be a cpd::float_t that fits float");
  // (The product of two floats, widened exactly, is exact in double: no environment matters.)
  return detail::canonical_nan(detail::round_to<F, R, O>(detail::widen(a) * detail::widen(b), random_bits));
}

/// Element-wise acc[i] = Q(acc[i] + x[i]); random bits key.bits(0, i).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void accumulate(float* acc, const float* x, std::size_t n, random_stream key = {}) noexcept {
  const detail::default_fp_env fp_env;
  for (std::size_t i = 0; i < n; ++i)
    acc[i] = detail::rounded_add_in_default_env<F, R, O>(acc[i], x[i], R == rounding::stochastic ? key.bits(0, i) : 0u);
}

/// The sum of x[0..n) in F, left to right from 0: s = Q(s + x[i]); random bits key.bits(0, i).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] float sum(const float* x, std::size_t n, random_stream key = {}) noexcept {
  const detail::default_fp_env fp_env;
  float s = 0.0f;
  for (std::size_t i = 0; i < n; ++i)
    s = detail::rounded_add_in_default_env<F, R, O>(s, x[i], R == rounding::stochastic ? key.bits(0, i) : 0u);
  detail::fp_fence(s);
  return s;
}

}  // namespace cpd
