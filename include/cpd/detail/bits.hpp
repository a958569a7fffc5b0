// SPDX-License-Identifier: MIT
#pragma once

// The one place that knows how to look at the bits of a float or a double on
// host and device, and the facts about the two source formats.

#include <cpd/config.hpp>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace cpd::detail {

#if defined(__has_builtin)
#if __has_builtin(__builtin_bit_cast)
#define CPD_HAS_BUILTIN_BIT_CAST 1
#endif
#endif
#if !defined(CPD_HAS_BUILTIN_BIT_CAST) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define CPD_HAS_BUILTIN_BIT_CAST 1
#endif

/// std::bit_cast for C++17: constexpr where the compiler has __builtin_bit_cast.
template <class To, class From>
CPD_HOST_DEVICE constexpr To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From), "cpd::detail::bit_cast: sizes differ");
#if defined(CPD_HAS_BUILTIN_BIT_CAST)
  return __builtin_bit_cast(To, from);
#else
  To to{};
  std::memcpy(&to, &from, sizeof(To));
  return to;
#endif
}

/// Number of leading zero bits of a non-zero 32- or 64-bit value.
template <class U>
CPD_HOST_DEVICE constexpr int countl_zero(U x) noexcept {
  static_assert(std::is_same_v<U, std::uint32_t> || std::is_same_v<U, std::uint64_t>,
                "cpd::detail::countl_zero: U must be uint32_t or uint64_t");
#if CPD_DEVICE_PASS
  if constexpr (sizeof(U) == 4) return __clz(static_cast<int>(x));
  else return __clzll(static_cast<long long>(x));
#elif defined(__GNUC__) || defined(__clang__)
  if constexpr (sizeof(U) == 4) return __builtin_clz(x);
  else return __builtin_clzll(x);
#else
  int n = 0;
  for (U bit = U(1) << (sizeof(U) * 8 - 1); bit != 0 && !(x & bit); bit >>= 1) ++n;
  return n;
#endif
}

/// Facts about a source type: float (binary32) or double (binary64).
template <class T>
struct source;

template <>
struct source<float> {
  using uint = std::uint32_t;
  static constexpr int mantissa_bits = 23;
  static constexpr int exponent_bits = 8;
  static constexpr int bias = 127;
  static constexpr int emin = -126;
  static constexpr int emax = 127;
  static constexpr int width = 32;
  static constexpr uint abs_mask = 0x7FFFFFFFu;
  static constexpr uint inf_bits = 0x7F800000u;
  static constexpr uint qnan_bits = 0x7FC00000u;
};

template <>
struct source<double> {
  using uint = std::uint64_t;
  static constexpr int mantissa_bits = 52;
  static constexpr int exponent_bits = 11;
  static constexpr int bias = 1023;
  static constexpr int emin = -1022;
  static constexpr int emax = 1023;
  static constexpr int width = 64;
  static constexpr uint abs_mask = 0x7FFFFFFFFFFFFFFFull;
  static constexpr uint inf_bits = 0x7FF0000000000000ull;
  static constexpr uint qnan_bits = 0x7FF8000000000000ull;
};

template <class T>
using uint_of = typename source<T>::uint;

/// The bits of 2^k as a T; k must lie in [emin - mantissa_bits, emax] of T.
template <class T>
CPD_HOST_DEVICE constexpr uint_of<T> pow2_bits(int k) noexcept {
  using S = source<T>;
  using U = uint_of<T>;
  return k >= S::emin ? U(U(k + S::bias) << S::mantissa_bits)
                      : U(U(1) << (k - S::emin + S::mantissa_bits));
}

/// 2^k as a T (exact); k in [emin - mantissa_bits, emax] of T.
template <class T>
CPD_HOST_DEVICE constexpr T pow2(int k) noexcept {
  return bit_cast<T>(pow2_bits<T>(k));
}

}  // namespace cpd::detail
