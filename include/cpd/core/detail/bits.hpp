// SPDX-License-Identifier: MIT
#pragma once

// The one place that knows how to look at the bits of a float or a double on
// host and device, and the facts about the two source formats.

#include <cpd/core/config.hpp>

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

// Conversions by integer arithmetic on the bits, never by the FPU: their results do
// not depend on the floating-point environment (MXCSR's FTZ and DAZ flush subnormal
// results and read subnormal operands as zero; see cpd/core/detail/fenv.hpp).

/// The position of the leading one bit of x != 0 (constant-evaluable everywhere, unlike
/// the device's clz intrinsics: format specs are built with it at compile time).
CPD_HOST_DEVICE constexpr int leading_bit(std::uint64_t x) noexcept {
  int p = 0;
  for (int w = 32; w != 0; w /= 2)
    if ((x >> w) != 0) {
      x >>= w;
      p += w;
    }
  return p;
}

/// The bits of sig * 2^k as a T, for an integer sig < 2^63 whose value is exactly a T
/// (normal or subnormal); 0 for sig == 0.
template <class T>
CPD_HOST_DEVICE constexpr uint_of<T> scaled_bits(std::uint64_t sig, int k) noexcept {
  using S = source<T>;
  using U = uint_of<T>;
  if (sig == 0) return U(0);
  const int p = leading_bit(sig);  // the value is in [2^(p + k), 2^(p + k + 1))
  const int e = p + k;
  if (e >= S::emin) {
    // sig aligned so that its leading bit is the implicit bit; adding it to the field
    // (e + bias - 1) << SM carries it into the exponent.
    const std::uint64_t m = p <= S::mantissa_bits ? sig << (S::mantissa_bits - p) : sig >> (p - S::mantissa_bits);
    return U(U(e + S::bias - 1) << S::mantissa_bits) + U(m);
  }
  const int sh = k - (S::emin - S::mantissa_bits);  // subnormal: sig in units of 2^(emin - SM)
  return sh >= 0 ? U(sig << (sh < 63 ? sh : 63)) : U(-sh < 64 ? sig >> -sh : 0);
}

/// The bits of the double equal to the float with bits u (exact; a NaN keeps its sign and
/// payload and is made quiet, as the CPU's conversion does).
CPD_HOST_DEVICE constexpr std::uint64_t widen_bits(std::uint32_t u) noexcept {
  const std::uint64_t sign = std::uint64_t(u >> 31) << 63;
  const std::uint32_t field = (u >> 23) & 0xFFu;
  const std::uint64_t frac = u & 0x7FFFFFu;
  if (field == 0xFFu) return sign | source<double>::inf_bits | (frac << 29) | (frac != 0 ? (std::uint64_t(1) << 51) : 0);
  if (field != 0) return sign | (std::uint64_t(field + 896) << 52) | (frac << 29);
  return sign | scaled_bits<double>(frac, -149);
}

/// The bits of the double with bits v rounded to float, to nearest with ties to even (what
/// a conversion does in the default environment); exact when v is a float. A NaN keeps its
/// sign and top payload bits, made quiet.
CPD_HOST_DEVICE constexpr std::uint32_t narrow_bits(std::uint64_t v) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(v >> 63) << 31;
  const int field = static_cast<int>((v >> 52) & 0x7FFu);
  const std::uint64_t frac = v & ((std::uint64_t(1) << 52) - 1);
  if (field == 0x7FF) return sign | 0x7F800000u | (frac != 0 ? static_cast<std::uint32_t>(frac >> 29) | 0x400000u : 0u);
  if (field == 0) return sign;  // a subnormal double rounds to 0
  const int e = field - 1023;
  // Keep 24 bits (fewer below 2^-126: float subnormals), round the dropped ones to nearest even.
  const int drop = 29 + (e < -126 ? -126 - e : 0);
  const std::uint64_t sig = frac | (std::uint64_t(1) << 52);
  const int dc = drop < 63 ? drop : 63;
  const std::uint64_t half = std::uint64_t(1) << (dc - 1), rem = sig & ((std::uint64_t(1) << dc) - 1);
  std::uint64_t q = sig >> dc;
  q += (rem > half || (rem == half && (q & 1) != 0)) ? 1 : 0;
  // A normal q carries its implicit bit (2^23; 2^24 after a carry) into the exponent field.
  const std::uint64_t bits = e >= -126 ? (std::uint64_t(e + 126) << 23) + q : q;
  return sign | (bits >= 0x7F800000u ? 0x7F800000u : static_cast<std::uint32_t>(bits));
}

/// The float x as a double (exact, whatever the floating-point environment).
CPD_HOST_DEVICE constexpr double widen(float x) noexcept { return bit_cast<double>(widen_bits(bit_cast<std::uint32_t>(x))); }

/// The double x rounded to float, to nearest even, whatever the environment (exact for a float).
CPD_HOST_DEVICE constexpr float narrow(double x) noexcept { return bit_cast<float>(narrow_bits(bit_cast<std::uint64_t>(x))); }

/// ceil(log2(v)) for a finite v > 0, exactly.
inline int ceil_log2(double v) noexcept {
  const auto b = bit_cast<std::uint64_t>(v);
  int field = static_cast<int>(b >> 52);
  std::uint64_t frac = b & ((std::uint64_t(1) << 52) - 1);
  if (field == 0) {  // subnormal double: normalize
    const int lz = countl_zero(frac) - 11;
    frac = (frac << lz) & ((std::uint64_t(1) << 52) - 1);
    field = 1 - lz;
  }
  return field - 1023 + (frac != 0 ? 1 : 0);
}

/// floor(log2(v)) for a finite v > 0, exactly.
inline int floor_log2(double v) noexcept {
  const auto b = bit_cast<std::uint64_t>(v);
  const int field = static_cast<int>(b >> 52);
  if (field == 0) return -1011 - countl_zero(b & ((std::uint64_t(1) << 52) - 1));  // subnormal
  return field - 1023;
}

}  // namespace cpd::detail
