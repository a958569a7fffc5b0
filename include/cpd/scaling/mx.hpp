// SPDX-License-Identifier: MIT
#pragma once

// OCP Microscaling (MX) block scaling (docs/scaling.md): blocks of k values
// (32 by default) share one float8_e8m0fnu scale X = 2^e, and each element is
// stored as V / X in an element format: float8_e4m3fn, float8_e5m2,
// float6_e3m2fn, float6_e2m3fn, float4_e2m1fn or mx_int8. Every element is
// rounded by the rounding core; the array calls run in the default
// floating-point environment (cpd/core/detail/fenv.hpp).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/float.hpp>
#include <cpd/reduce/reduce.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/scaling/scaling.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace cpd {

/// MXINT8's element as a float format: k * 2^-6 for |k| <= 127, sign-magnitude (E = 1 with
/// bias 1 makes the grid uniform); mx_int8_to_twos / mx_int8_from_twos convert codes.
using mx_int8 = float_t<1, 6, finite, 1>;

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
  rceil   ///< e = ceil(log2(amax / max(elem))): the smallest e with amax / 2^e <= max(elem) (NVIDIA)
};

/// The name of a rule ("floor", "ceil", "rceil").
constexpr const char* to_string(mx_scale_rule r) noexcept {
  return r == mx_scale_rule::floor ? "floor" : r == mx_scale_rule::ceil ? "ceil" : "rceil";
}

/// Options of MX encoding.
struct mx_options {
  std::size_t block_size = 32;                ///< values per shared scale (k)
  mx_scale_rule rule = mx_scale_rule::floor;  ///< how the shared exponent is chosen
  stream_key key{};                           ///< random bits of element i: key.bits(0, i) (stochastic)
};

/// The e8m0 code NaN (0xFF) of a block holding inf or NaN.
inline constexpr std::uint8_t mx_nan_scale = 0xFF;

/// Number of scales for n values in blocks of block_size (the last block may be partial).
[[nodiscard]] constexpr std::size_t mx_scale_count(std::size_t n, std::size_t block_size) noexcept {
  return block_size == 0 ? 0 : detail::ceil_div(n, block_size);
}

namespace detail {
/// Checks the options and pointers (a, b and c when given) of an MX call (std::invalid_argument naming the field).
inline void check_mx(const char* who, const mx_options& opt, std::size_t n, const void* a, const void* b,
                     const void* c = "") {
  if (opt.block_size == 0) fail_invalid(std::string(who) + ": mx_options::block_size must be >= 1");
  if (opt.rule != mx_scale_rule::floor && opt.rule != mx_scale_rule::ceil && opt.rule != mx_scale_rule::rceil)
    fail_invalid(std::string(who) + ": mx_options::rule " + std::to_string(static_cast<int>(opt.rule)) +
                 " is not a cpd::mx_scale_rule");
  if (n != 0 && (a == nullptr || b == nullptr || c == nullptr))
    fail_invalid(std::string(who) + ": null pointer with n > 0");
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
  const double a = detail::widen(detail::bit_cast<float>(b));  // (integer: DAZ would read a subnormal as 0)
  int e = 0;
  switch (rule) {
    case mx_scale_rule::floor: e = detail::floor_log2(a) - Elem::spec.emax; break;
    case mx_scale_rule::ceil: e = detail::ceil_log2(a) - Elem::spec.emax; break;
    case mx_scale_rule::rceil: {
      // Smallest e with max * 2^e >= amax; both sides exact in double.
      const double mx = Elem::spec.max_value;
      e = detail::ceil_log2(a) - detail::floor_log2(mx);
      while (mx * pow2_scale{e - 1}.factor() >= a) --e;
      while (mx * pow2_scale{e}.factor() < a) ++e;
      break;
    }
    default: return mx_nan_scale;  // no cpd::mx_scale_rule (the bulk calls reject it first)
  }
  e = e < -127 ? -127 : (e > 127 ? 127 : e);
  return static_cast<std::uint8_t>(e + 127);
}

/// Encodes n values into MX blocks: scales[mx_scale_count(n, k)] e8m0 codes and codes[n] element
/// codes, each the code of V * 2^-e rounded to Elem in mode R, saturating at max(Elem). A block
/// with a NaN scale gets element codes 0.
template <class Elem, rounding R = rounding::nearest_even>
void mx_encode(const float* in, std::size_t n, std::uint8_t* scales, typename Elem::storage_type* codes,
               const mx_options& opt = {}) {
  static_assert(is_float_format_v<Elem> && Elem::fits_float, "cpd::mx_encode: the element must be a float format");
  const detail::default_fp_env fp_env;
  detail::check_mx("cpd::mx_encode", opt, n, in, scales, codes);
  for (std::size_t blk = 0, lo = 0, hi = 0; lo < n; ++blk, lo = hi) {
    hi = detail::block_end(lo, opt.block_size, n);
    const std::uint8_t sc = mx_scale_code<Elem>(detail::bit_cast<float>(detail::amax_bits(in + lo, hi - lo)), opt.rule);
    scales[blk] = sc;
    const double inv = pow2_scale{127 - static_cast<int>(sc)}.factor();  // 2^-e
    for (std::size_t i = lo; i < hi; ++i) {
      if (sc == mx_nan_scale) {
        codes[i] = 0;
        continue;
      }
      const std::uint32_t rnd = R == rounding::stochastic ? opt.key.bits(0, i) : 0u;
      codes[i] = convert<Elem, R, overflow::saturate>(static_cast<double>(in[i]) * inv, rnd).bits();
    }
  }
}

/// Decodes MX blocks: out[i] = value(codes[i]) * 2^e of its block (NaN for a NaN scale).
template <class Elem>
void mx_decode(const std::uint8_t* scales, const typename Elem::storage_type* codes, std::size_t n, float* out,
               const mx_options& opt = {}) {
  static_assert(is_float_format_v<Elem> && Elem::fits_float, "cpd::mx_decode: the element must be a float format");
  const detail::default_fp_env fp_env;
  detail::check_mx("cpd::mx_decode", opt, n, scales, codes, out);
  using Code = typename Elem::storage_type;
  const Code stray = detail::stray_bits<Code>(Elem::spec);  // a code with these bits is rejected
  for (std::size_t blk = 0, lo = 0, hi = 0; lo < n; ++blk, lo = hi) {
    hi = detail::block_end(lo, opt.block_size, n);
    const std::uint8_t sc = scales[blk];
    const double x = pow2_scale{static_cast<int>(sc) - 127}.factor();
    for (std::size_t i = lo; i < hi; ++i) {
      if ((codes[i] & stray) != 0) detail::fail_stray_code("cpd::mx_decode", Elem::spec, codes[i], &i);
      out[i] = sc == mx_nan_scale ? detail::bit_cast<float>(0x7FC00000u)
                                  : static_cast<float>(static_cast<double>(Elem::from_bits(codes[i])) * x);
    }
  }
}

/// MX fake quantization: out = decode(encode(in)), block by block (in == out allowed).
template <class Elem, rounding R = rounding::nearest_even>
void mx_quantize(const float* in, float* out, std::size_t n, const mx_options& opt = {}) {
  const detail::default_fp_env fp_env;
  detail::check_mx("cpd::mx_quantize", opt, n, in, out);
  for (std::size_t lo = 0, len = 0; lo < n; lo += len) {
    len = detail::block_end(lo, opt.block_size, n) - lo;
    const std::uint8_t sc =
        mx_scale_code<Elem>(detail::bit_cast<float>(detail::amax_bits(in + lo, len)), opt.rule);
    const double inv = pow2_scale{127 - static_cast<int>(sc)}.factor();
    const double x = pow2_scale{static_cast<int>(sc) - 127}.factor();
    for (std::size_t i = lo; i < lo + len; ++i) {
      if (sc == mx_nan_scale) {
        out[i] = detail::bit_cast<float>(0x7FC00000u);
        continue;
      }
      const std::uint32_t rnd = R == rounding::stochastic ? opt.key.bits(0, i) : 0u;
      const Elem q = convert<Elem, R, overflow::saturate>(static_cast<double>(in[i]) * inv, rnd);
      out[i] = static_cast<float>(static_cast<double>(q) * x);
    }
  }
}

}  // namespace cpd
