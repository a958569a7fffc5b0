// SPDX-License-Identifier: MIT
#pragma once

// Applying a selected scale to one value: Q(x * scale), rounded once to F, and
// its inverse, unscale(v) = v / scale, both exact where the scale is a power of two.
// For cpd::pow2_scale, x * 2^k is formed in float when it stays normal there, else
// in double; for cpd::float_scale, x * value is rounded to float first, then to F
// (Transformer Engine's order). The exchange (exchange/protocol.hpp, exchange/elements.hpp)
// applies every scale through here, on the host and on a device alike: a float product is
// rounded once (mul_rn), never fused by the device compiler into the subtraction that
// follows it in error feedback.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/reduce/sum.hpp>
#include <cpd/scaling/scaling.hpp>

#include <cstdint>

namespace cpd::detail {

/// a * b rounded once to float: on a device __fmul_rn, which nvcc never contracts with an
/// addition into an FMA (the host compiles ISO C++, which contracts nothing).
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float mul_rn(float a, float b) noexcept {
#if CPD_DEVICE_PASS
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/// float_scale: x * value rounded to float, then to F (Transformer Engine).
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float scaled_quantize(float x, const float_scale& s, std::uint32_t rnd) noexcept {
  return round_to<F, R, O>(mul_rn(x, s.value), rnd);
}
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float unscale(float v, const float_scale& s) noexcept {
  return mul_rn(v, s.inverse);
}

/// Whether y = x * 2^k, formed in float, is exact: y is a finite normal float, or x is zero.
CPD_HOST_DEVICE CPD_ALWAYS_INLINE bool exact_in_float(float x, float y) noexcept {
  const float ay = y < 0 ? -y : y;
  return (ay >= 1.17549435e-38f && ay <= 3.40282347e38f) || x == 0;
}

/// pow2_scale: x * 2^k is exact (in float when it stays normal there, else in double), rounded once.
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float scaled_quantize(float x, const pow2_scale& s, std::uint32_t rnd) noexcept {
  if (s.exponent >= -126 && s.exponent <= 127) {
    const float y = x * pow2<float>(s.exponent);
    if (exact_in_float(x, y)) return round_to<F, R, O>(y, rnd);
  }
  return round_to<F, R, O>(static_cast<double>(x) * s.factor(), rnd);
}
template <class F, rounding R, overflow O>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE float unscale(float v, const pow2_scale& s) noexcept {
  return static_cast<float>(static_cast<double>(v) * s.inverse());
}

}  // namespace cpd::detail
