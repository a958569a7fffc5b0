// SPDX-License-Identifier: MIT
#pragma once

// OCP Microscaling (MX) block scaling (docs/scaling.md): blocks of k values
// (32 by default) share one float8_e8m0fnu scale X = 2^e, and each element is
// stored as V / X in an element format: float8_e4m3fn, float8_e5m2,
// float6_e3m2fn, float6_e2m3fn, float4_e2m1fn, mx_int8, mx_int4 or mx_int2. Every element is
// rounded by the rounding core.
//
// This header holds the format's facts: the integer elements, the scale rules and the scale
// code of a block, the options; the array calls mx_encode / mx_decode / mx_quantize are in
// <cpd/host/mx.hpp>, the exchange rule mx_block_scaling in <cpd/scaling/mx.hpp>.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/names.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace cpd {

/// MXINT8's element as a float format: k * 2^-6 for |k| <= 127, sign-magnitude (E = 1 with
/// bias 1 makes the grid uniform); mx_int8_to_twos / mx_int8_from_twos convert codes.
using mx_int8 = float_t<1, 6, finite, 1>;

/// MXINT4 and MXINT2 (microxcaling's int4 and int2: sign and magnitude, emax 0): k * 2^-2 for
/// |k| <= 7, and k for |k| <= 1.
using mx_int4 = float_t<1, 2, finite, 1>;
using mx_int2 = float_t<1, 0, finite, 1>;

/// The two's-complement int8 of an mx_int8 code (k of the value k / 64).
[[nodiscard]] constexpr std::int8_t mx_int8_to_twos(std::uint8_t code) noexcept {
  const int k = code & 0x7F;
  return static_cast<std::int8_t>((code & 0x80) ? -k : k);
}

/// The mx_int8 code of a two's-complement k in [-127, 127] (-128 is read as -127).
[[nodiscard]] constexpr std::uint8_t mx_int8_from_twos(std::int8_t k) noexcept {
  const int v = k < -127 ? -127 : k;
  return static_cast<std::uint8_t>(v < 0 ? (0x80 | -v) : v);
}

/// How a block's shared exponent e (X = 2^e) follows from its largest magnitude amax.
enum class mx_scale_rule : unsigned char {
  floor,  ///< e = floor(log2(amax)) - emax(elem): the OCP MX v1.0 rule; V / X may exceed max(elem) and saturates
  ceil,   ///< e = ceil(log2(amax)) - emax(elem): never saturates, may waste a binade
  rceil,  ///< e = ceil(log2(amax / max(elem))): the smallest e with amax / 2^e <= max(elem) (NVIDIA)
  even    ///< e = floor(log2(amax rounded to M(elem) + 1 significant bits, halves up)) - emax(elem) (torchao)
};

/// The name of a rule ("floor", "ceil", "rceil", "even"); "?" for a value that is no enumerator.
constexpr const char* to_string(mx_scale_rule r) noexcept {
  switch (r) {
    case mx_scale_rule::floor: return "floor";
    case mx_scale_rule::ceil: return "ceil";
    case mx_scale_rule::rceil: return "rceil";
    case mx_scale_rule::even: return "even";
  }
  return "?";
}

template <>
struct enum_names<mx_scale_rule> {
  static constexpr const char* type = "cpd::mx_scale_rule";
  static constexpr mx_scale_rule values[] = {mx_scale_rule::floor, mx_scale_rule::ceil, mx_scale_rule::rceil,
                                             mx_scale_rule::even};
};

/// Options of MX encoding.
struct mx_options {
  std::size_t block_size = 32;                ///< values per shared scale (k)
  mx_scale_rule rule = mx_scale_rule::floor;  ///< how the shared exponent is chosen
  random_stream key{};                        ///< random bits of element i: key.bits(0, i) (stochastic)
};

/// The e8m0 code NaN (0xFF) of a block holding inf or NaN.
inline constexpr std::uint8_t mx_nan_scale = 0xFF;

/// Number of scales for n values in blocks of block_size (the last block may be partial).
[[nodiscard]] constexpr std::size_t mx_scale_count(std::size_t n, std::size_t block_size) noexcept {
  return block_size == 0 ? 0 : detail::ceil_div(n, block_size);
}

namespace detail {
/// One array of an MX call: count elements of size bytes at p.
struct mx_array {
  const void* p;
  std::size_t count, size;
  const char* name;
};

/// Checks the options of an MX call (std::invalid_argument naming the field).
inline void check_mx_options(const char* who, const mx_options& opt) {
  if (opt.block_size == 0) fail_invalid(std::string(who) + ": mx_options::block_size must be >= 1");
  if (opt.rule != mx_scale_rule::floor && opt.rule != mx_scale_rule::ceil && opt.rule != mx_scale_rule::rceil &&
      opt.rule != mx_scale_rule::even)
    fail_invalid(std::string(who) + ": mx_options::rule " + std::to_string(static_cast<int>(opt.rule)) +
                 " is not a cpd::mx_scale_rule");
}

/// Checks the options and the arrays of an MX call of n values: no null pointer when n > 0,
/// sizes that fit in the address space (std::length_error), and no two arrays that share a
/// byte, except arrays that are the same (in == out of mx_quantize) when same_ok.
inline void check_mx(const char* who, const mx_options& opt, std::size_t n, std::initializer_list<mx_array> arrays,
                     bool same_ok = false) {
  check_mx_options(who, opt);
  if (n == 0) return;
  byte_range r[3];
  std::size_t k = 0;
  for (const mx_array& a : arrays) {
    if (a.p == nullptr) fail_invalid(std::string(who) + ": null pointer with n > 0");
    r[k++] = bytes_of(who, a.name, a.p, a.count, a.size);
  }
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t j = i + 1; j < k; ++j)
      if (overlap(r[i], r[j]) && !(same_ok && r[i].begin == r[j].begin && r[i].end == r[j].end))
        fail_invalid(std::string(who) + ": " + arrays.begin()[i].name + " and " + arrays.begin()[j].name + " overlap" +
                     (same_ok ? " (only in == out is allowed)" : ""));
}
}  // namespace detail

namespace detail {
/// The float8_e8m0fnu code e + 127 of a block whose bound a (> 0, finite, exact in double) gives
/// e by the rule, clamped to [-127, 127]; 0xFF for a rule that is no enumerator.
template <class Elem>
[[nodiscard]] std::uint8_t mx_code_of_bound(double a, mx_scale_rule rule) noexcept {
  int e = 0;
  switch (rule) {
    case mx_scale_rule::floor: e = floor_log2(a) - Elem::spec.emax; break;
    case mx_scale_rule::ceil: e = ceil_log2(a) - Elem::spec.emax; break;
    case mx_scale_rule::rceil: {
      // Smallest e with max * 2^e >= a; both sides exact in double.
      const double mx = Elem::spec.max_value;
      e = ceil_log2(a) - floor_log2(mx);
      while (mx * pow2<double>(e - 1) >= a) --e;
      while (mx * pow2<double>(e) < a) ++e;
      break;
    }
    case mx_scale_rule::even: {
      // a rounded to M + 1 significant bits with halves up reaches the next binade exactly when
      // its significand is >= 2 - 2^-(M + 1); torchao's EVEN adds that half to the float32 bits.
      const int f = floor_log2(a);
      const double top = (2.0 - pow2<double>(-(Elem::spec.M + 1))) * pow2<double>(f);
      e = f + (a >= top ? 1 : 0) - Elem::spec.emax;
      break;
    }
    default: return 0xFF;  // no cpd::mx_scale_rule (the bulk calls reject it first)
  }
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return static_cast<std::uint8_t>(e + 127);
}
}  // namespace detail

/// The float8_e8m0fnu code of a block's scale from its amax: 0xFF for inf/NaN (and for a rule
/// that is no enumerator); code 0 (2^-127) for an all-zero block; otherwise e + 127 with e from
/// the rule, clamped to [-127, 127].
template <class Elem>
[[nodiscard]] std::uint8_t mx_scale_code(float amax, mx_scale_rule rule) noexcept {
  static_assert(is_float_format_v<Elem> && Elem::fits_float, "cpd::mx: the element must be a float format");
  const std::uint32_t b = detail::bit_cast<std::uint32_t>(amax) & 0x7FFFFFFFu;
  if (b >= 0x7F800000u) return mx_nan_scale;
  if (b == 0) return 0;
  // (integer: DAZ would read a subnormal as 0)
  return detail::mx_code_of_bound<Elem>(detail::widen(detail::bit_cast<float>(b)), rule);
}

}  // namespace cpd
