// SPDX-License-Identifier: MIT
// Exhaustive: every one of the 2^32 float32 bit patterns, converted to
// cpd::float16 and cpd::bfloat16, against references that share no code with
// cpd:
//   - float16: the compiler's _Float16, IEEE binary16 with round to nearest
//     even. On x86-64 GCC lowers the conversions to libgcc's soft-fp
//     __truncsfhf2 / __extendhfsf2 (~200 ns each here, too slow for 2^32
//     inputs) unless F16C is enabled, then to vcvtps2ph / vcvtph2ps. We compile
//     the reference functions both ways and use the F16C ones when the CPU has
//     F16C (checked at run time), else the soft-fp ones;
//   - bfloat16: the CUDA toolkit's host __float2bfloat16_rn (cuda_bf16.h),
//     when the toolkit's headers are on the include path.
// Plus every code of both formats decoded against the same references.

#include "exhaustive.hpp"

#include <cpd/float.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>

#if __has_include(<cuda_bf16.h>)
#include "cuda_host_reference.hpp"
#define CPD_TEST_HAVE_CUDA_BF16 1
#else
#define CPD_TEST_HAVE_CUDA_BF16 0
#endif

namespace {

using cpd_test::bits_of;
using cpd_test::float_of;
using cpd_test::is_nan_bits;
using cpd_test::sign_bit;
using cpd_test::tally;

constexpr auto rne = cpd::rounding::nearest_even;
constexpr auto saturate = cpd::overflow::saturate;

std::uint16_t bits_of(_Float16 h) noexcept {
  std::uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}
_Float16 half_of(std::uint16_t b) noexcept {
  _Float16 h;
  std::memcpy(&h, &b, sizeof h);
  return h;
}

// binary16 and bfloat16 share the layout sign | exponent | mantissa in 16 bits.
constexpr bool is_nan16(std::uint16_t c, std::uint16_t inf) noexcept { return (c & 0x7FFFu) > inf; }
constexpr bool sign16(std::uint16_t c) noexcept { return (c >> 15) != 0; }
/// The code for overflow::saturate given the IEEE (overflow::infinity) code.
constexpr std::uint16_t saturated(std::uint16_t c, std::uint16_t inf) noexcept {
  return (c & 0x7FFFu) == inf ? static_cast<std::uint16_t>((c & 0x8000u) | (inf - 1u)) : c;
}

constexpr std::uint16_t f16_inf = 0x7C00;

/// (_Float16)x, and (float) of that, as bits.
struct half_ref {
  std::uint16_t code;
  std::uint32_t value;
};
half_ref to_half_soft(float x) noexcept {
  const auto h = static_cast<_Float16>(x);
  return {bits_of(h), bits_of(static_cast<float>(h))};
}
float from_half_soft(std::uint16_t c) noexcept { return static_cast<float>(half_of(c)); }

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
__attribute__((target("f16c"))) half_ref to_half_f16c(float x) noexcept {
  const auto h = static_cast<_Float16>(x);
  return {bits_of(h), bits_of(static_cast<float>(h))};
}
__attribute__((target("f16c"))) float from_half_f16c(std::uint16_t c) noexcept {
  return static_cast<float>(half_of(c));
}
bool cpu_has_f16c() noexcept {
  __builtin_cpu_init();  // needed before main() (this runs in a static initializer)
  return __builtin_cpu_supports("f16c");
}
const bool use_f16c = cpu_has_f16c();
#else
half_ref to_half_f16c(float x) noexcept { return to_half_soft(x); }
float from_half_f16c(std::uint16_t c) noexcept { return from_half_soft(c); }
const bool use_f16c = false;
#endif

half_ref to_half(float x) noexcept { return use_f16c ? to_half_f16c(x) : to_half_soft(x); }
float from_half(std::uint16_t c) noexcept { return use_f16c ? from_half_f16c(c) : from_half_soft(c); }
constexpr std::uint16_t bf16_inf = 0x7F80;

}  // namespace

TEST_CASE("float16: convert and quantize of every float match _Float16") {
  enum { convert_rne, quantize_rne, convert_sat, quantize_sat, nan_in, count };
  const std::string which =
      std::string("_Float16 reference: ") + (use_f16c ? "F16C vcvtps2ph/vcvtph2ps" : "libgcc soft-fp");
  MESSAGE(which);
  const auto t = cpd_test::for_each_float32<count>("float16 vs _Float16", [](std::uint32_t u, auto& tl) {
    const float x = float_of(u);
    const half_ref r = to_half(x);
    const std::uint16_t ref = r.code;
    const std::uint32_t ref_value = r.value;

    const std::uint16_t c = cpd::convert<cpd::float16>(x).bits();
    const std::uint32_t q = bits_of(cpd::quantize<cpd::float16>(x));
    const std::uint16_t cs = cpd::convert<cpd::float16, rne, saturate>(x).bits();
    const std::uint32_t qs = bits_of(cpd::quantize<cpd::float16, rne, saturate>(x));

    if (is_nan_bits(u)) {
      // NaN: any payload, but NaN with the input's sign (the reference too).
      const bool s = sign_bit(u);
      const bool ok = is_nan16(ref, f16_inf) && is_nan_bits(ref_value) && is_nan16(c, f16_inf) &&
                      sign16(c) == s && is_nan_bits(q) && sign_bit(q) == s && is_nan16(cs, f16_inf) &&
                      sign16(cs) == s && is_nan_bits(qs) && sign_bit(qs) == s;
      if (!ok)
        tl[nan_in].add("x=0x%08x: cpd 0x%04x/0x%08x (sat 0x%04x/0x%08x), _Float16 0x%04x/0x%08x", u, c, q, cs,
                       qs, ref, ref_value);
      return;
    }
    if (c != ref) tl[convert_rne].add("x=0x%08x (%a): cpd 0x%04x, _Float16 0x%04x", u, double(x), c, ref);
    if (q != ref_value)
      tl[quantize_rne].add("x=0x%08x (%a): cpd 0x%08x, _Float16 0x%08x", u, double(x), q, ref_value);
    // overflow::saturate: the same, but +-inf becomes +-max (65504).
    const std::uint16_t ref_sat = saturated(ref, f16_inf);
    if (cs != ref_sat)
      tl[convert_sat].add("x=0x%08x (%a): cpd 0x%04x, expected 0x%04x", u, double(x), cs, ref_sat);
    const std::uint32_t ref_sat_value = bits_of(from_half(ref_sat));
    if (qs != ref_sat_value)
      tl[quantize_sat].add("x=0x%08x (%a): cpd 0x%08x, expected 0x%08x", u, double(x), qs, ref_sat_value);
  });
  cpd_test::require_none("convert<float16> (nearest_even, infinity)", t[convert_rne]);
  cpd_test::require_none("quantize<float16> (nearest_even, infinity)", t[quantize_rne]);
  cpd_test::require_none("convert<float16> (nearest_even, saturate)", t[convert_sat]);
  cpd_test::require_none("quantize<float16> (nearest_even, saturate)", t[quantize_sat]);
  cpd_test::require_none("float16 NaN inputs (NaN out, sign kept)", t[nan_in]);
}

TEST_CASE("float16: every code decodes like _Float16") {
  tally mismatches;
  for (std::uint32_t c = 0; c <= 0xFFFFu; ++c) {
    const auto code = static_cast<std::uint16_t>(c);
    const std::uint32_t ref = bits_of(from_half_soft(code));
    const std::uint32_t ref_f16c = bits_of(from_half_f16c(code));
    if (ref != ref_f16c) mismatches.add("code=0x%04x: soft-fp 0x%08x, F16C 0x%08x", c, ref, ref_f16c);
    const std::uint32_t got = bits_of(static_cast<float>(cpd::float16::from_bits(code)));
    const bool ok = is_nan16(code, f16_inf) ? is_nan_bits(got) && sign_bit(got) == sign16(code) && is_nan_bits(ref)
                                             : got == ref;
    if (!ok) mismatches.add("code=0x%04x: cpd 0x%08x, _Float16 0x%08x", c, got, ref);
  }
  cpd_test::require_none("float16 decode", mismatches);
}

#if CPD_TEST_HAVE_CUDA_BF16

namespace {
std::uint16_t bits_of(__nv_bfloat16 b) noexcept { return static_cast<__nv_bfloat16_raw>(b).x; }
__nv_bfloat16 bf16_of(std::uint16_t c) noexcept {
  __nv_bfloat16_raw r;
  r.x = c;
  return __nv_bfloat16(r);
}
}  // namespace

// The toolkit's __float2bfloat16_rn maps every NaN to the canonical +NaN 0x7FFF,
// dropping the sign; DESIGN keeps NaN as NaN with any payload, and cpd keeps
// the sign. For NaN inputs we therefore assert NaN-ness of both and the sign
// of cpd's result, and count the inputs whose codes differ.
TEST_CASE("bfloat16: convert and quantize of every float match CUDA __float2bfloat16_rn") {
  enum { convert_rne, quantize_rne, convert_sat, nan_in, nan_code_differs, count };
  const auto t = cpd_test::for_each_float32<count>("bfloat16 vs __float2bfloat16_rn", [](std::uint32_t u, auto& tl) {
    const float x = float_of(u);
    const __nv_bfloat16 b = __float2bfloat16_rn(x);
    const std::uint16_t ref = bits_of(b);
    const std::uint32_t ref_value = bits_of(__bfloat162float(b));

    const std::uint16_t c = cpd::convert<cpd::bfloat16>(x).bits();
    const std::uint32_t q = bits_of(cpd::quantize<cpd::bfloat16>(x));
    const std::uint16_t cs = cpd::convert<cpd::bfloat16, rne, saturate>(x).bits();

    if (is_nan_bits(u)) {
      const bool s = sign_bit(u);
      const bool ok = is_nan16(ref, bf16_inf) && is_nan16(c, bf16_inf) && sign16(c) == s && is_nan_bits(q) &&
                      sign_bit(q) == s && is_nan16(cs, bf16_inf) && sign16(cs) == s;
      if (!ok) tl[nan_in].add("x=0x%08x: cpd 0x%04x/0x%08x (sat 0x%04x), CUDA 0x%04x", u, c, q, cs, ref);
      if (c != ref) tl[nan_code_differs].add("x=0x%08x: cpd 0x%04x, CUDA 0x%04x", u, c, ref);
      return;
    }
    if (c != ref) tl[convert_rne].add("x=0x%08x (%a): cpd 0x%04x, CUDA 0x%04x", u, double(x), c, ref);
    if (q != ref_value) tl[quantize_rne].add("x=0x%08x (%a): cpd 0x%08x, CUDA 0x%08x", u, double(x), q, ref_value);
    const std::uint16_t ref_sat = saturated(ref, bf16_inf);
    if (cs != ref_sat) tl[convert_sat].add("x=0x%08x (%a): cpd 0x%04x, expected 0x%04x", u, double(x), cs, ref_sat);
  });
  cpd_test::require_none("convert<bfloat16> (nearest_even, infinity)", t[convert_rne]);
  cpd_test::require_none("quantize<bfloat16> (nearest_even, infinity)", t[quantize_rne]);
  cpd_test::require_none("convert<bfloat16> (nearest_even, saturate)", t[convert_sat]);
  cpd_test::require_none("bfloat16 NaN inputs (NaN out, sign kept)", t[nan_in]);
  cpd_test::report_documented("bfloat16 NaN inputs whose code differs from CUDA's canonical 0x7FFF", t[nan_code_differs]);
}

TEST_CASE("bfloat16: every code decodes like CUDA __bfloat162float") {
  tally mismatches;
  for (std::uint32_t c = 0; c <= 0xFFFFu; ++c) {
    const auto code = static_cast<std::uint16_t>(c);
    const std::uint32_t ref = bits_of(__bfloat162float(bf16_of(code)));
    const std::uint32_t got = bits_of(static_cast<float>(cpd::bfloat16::from_bits(code)));
    const bool ok = is_nan16(code, bf16_inf) ? is_nan_bits(got) && sign_bit(got) == sign16(code) && is_nan_bits(ref)
                                              : got == ref;
    if (!ok) mismatches.add("code=0x%04x: cpd 0x%08x, CUDA 0x%08x", c, got, ref);
  }
  cpd_test::require_none("bfloat16 decode", mismatches);
}

#else

TEST_CASE("bfloat16: CUDA reference not available") {
  const std::string msg = "cuda_bf16.h not on the include path: the bfloat16 comparison is skipped";
  MESSAGE(msg);
}

#endif
