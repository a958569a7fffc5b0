// SPDX-License-Identifier: MIT
#pragma once

// The pieces of amax and of the APS statistic that every device backend shares:
// |x| as ordered integer bits (so max is an exact, order-independent reduction),
// the canonical NaN of the result, and ceil(log2(amax * world_size)) computed
// exactly from the bits. <cpd/device/thrust.hpp> and <cpd/device/cuda.cuh> reduce with them.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>

#include <climits>
#include <cstdint>
#include <type_traits>

namespace cpd::detail {

/// The bits of |x| as an unsigned integer: ordered like |x|, with every NaN above +inf.
template <class T>
CPD_HOST_DEVICE constexpr uint_of<T> abs_bits(T x) noexcept {
  return bit_cast<uint_of<T>>(x) & source<T>::abs_mask;
}

/// The APS statistic ceil(log2(amax * world_size)) of an amax given by its bits, exactly,
/// with the conventions of cpd::aps (include/cpd/scaling/scaling.hpp): INT32_MIN for an all-zero
/// tensor (the identity of max), INT32_MAX when amax is inf or NaN. amax = m * 2^e with an
/// integer m < 2^24, so amax * world_size = (m * world_size) * 2^e, an exact 64-bit product.
CPD_HOST_DEVICE constexpr std::int32_t aps_statistic_of_amax_bits(std::uint32_t bits, int world_size) noexcept {
  const std::uint32_t a = bits & 0x7FFFFFFFu;
  if (a == 0) return INT32_MIN;
  if (a >= 0x7F800000u) return INT32_MAX;
  const int field = static_cast<int>(a >> 23);
  const std::uint64_t m = field != 0 ? (a & 0x7FFFFFu) | 0x800000u : a;
  const int e = (field != 0 ? field : 1) - 150;
  const std::uint64_t p = m * static_cast<std::uint64_t>(world_size < 1 ? 1 : world_size);
  const int ceil_log2_p = p == 1 ? 0 : 64 - countl_zero(p - 1);
  return e + ceil_log2_p;
}

/// The bits of the largest |x| as reduced by max_op: any NaN becomes the canonical +NaN.
template <class U>
CPD_HOST_DEVICE constexpr U canonical_amax_bits(U bits) noexcept {
  using T = std::conditional_t<sizeof(U) == 4, float, double>;
  return bits > source<T>::inf_bits ? source<T>::qnan_bits : bits;
}

/// x -> the bits of |x| (max over them is the bits of amax; see cpd::amax).
struct abs_bits_op {
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t operator()(float x) const noexcept { return abs_bits(x); }
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint64_t operator()(double x) const noexcept { return abs_bits(x); }
};

/// The larger of two unsigned integers: an exact, order-independent reduction.
struct max_op {
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t operator()(std::uint32_t a, std::uint32_t b) const noexcept {
    return a < b ? b : a;
  }
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const noexcept {
    return a < b ? b : a;
  }
};

}  // namespace cpd::detail
