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
//
// cpd's side is computed a block of consecutive inputs at a time by the same
// scalar calls, compiled for the CPU's vector instruction set (exhaustive.hpp);
// the comparisons, element by element, are unchanged.

#include "exhaustive.hpp"

#include <cpd/core/float.hpp>

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
using cpd_test::block_size;
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

float from_half_soft(std::uint16_t c) noexcept { return static_cast<float>(half_of(c)); }

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
__attribute__((target("f16c"))) float from_half_f16c(std::uint16_t c) noexcept {
  return static_cast<float>(half_of(c));
}
bool cpu_has_f16c() noexcept {
  __builtin_cpu_init();  // needed before main() (this runs in a static initializer)
  return __builtin_cpu_supports("f16c");
}
const bool use_f16c = cpu_has_f16c();
#else
float from_half_f16c(std::uint16_t c) noexcept { return from_half_soft(c); }
const bool use_f16c = false;
#endif

/// The reference for the inputs [begin, begin + block_size): (_Float16)x as code and
/// as float bits, and the float bits of the code for overflow::saturate; compiled
/// with F16C (to_half_block_f16c) and without (to_half_block_soft).
struct half_block {
  std::uint16_t code[block_size];
  std::uint32_t value[block_size];
  std::uint32_t sat_value[block_size];
};
CPD_TEST_ALWAYS_INLINE void to_half_block(std::uint32_t begin, half_block& r) noexcept {
  for (std::uint32_t i = 0; i < block_size; ++i) {
    const auto h = static_cast<_Float16>(float_of(begin + i));
    r.code[i] = bits_of(h);
    r.value[i] = bits_of(static_cast<float>(h));
    r.sat_value[i] = bits_of(static_cast<float>(half_of(saturated(r.code[i], f16_inf))));
  }
}
void to_half_block_soft(std::uint32_t begin, half_block& r) noexcept { to_half_block(begin, r); }
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
__attribute__((target("f16c"))) void to_half_block_f16c(std::uint32_t begin, half_block& r) noexcept {
  to_half_block(begin, r);
}
#else
void to_half_block_f16c(std::uint32_t begin, half_block& r) noexcept { to_half_block(begin, r); }
#endif

constexpr std::uint16_t bf16_inf = 0x7F80;

/// cpd's results of F for the inputs [begin, begin + block_size): [0] overflow::infinity,
/// [1] overflow::saturate, both nearest_even.
struct cpd_block {
  std::uint32_t begin;
  std::uint16_t code[2][block_size];   ///< cpd::convert<F, rne, O>(x).bits()
  std::uint32_t value[2][block_size];  ///< cpd::quantize<F, rne, O>(x), as bits
};

/// Fills a cpd_block with cpd's scalar convert and quantize of F (isa_variants);
/// with SatValue false, value[1] (quantize with saturate) is left out.
template <class F, bool SatValue>
struct cpd_side {
  static CPD_TEST_ALWAYS_INLINE void run(cpd_block& r) {
    for (std::uint32_t i = 0; i < block_size; ++i) {
      const float x = float_of(r.begin + i);
      r.code[0][i] = cpd::convert<F>(x).bits();
      r.value[0][i] = bits_of(cpd::quantize<F>(x));
      r.code[1][i] = cpd::convert<F, rne, saturate>(x).bits();
      if constexpr (SatValue) r.value[1][i] = bits_of(cpd::quantize<F, rne, saturate>(x));
    }
  }
};

}  // namespace

TEST_CASE("float16: convert and quantize of every float match _Float16") {
  enum { convert_rne, quantize_rne, convert_sat, quantize_sat, nan_in, count };
  const std::string which =
      std::string("_Float16 reference: ") + (use_f16c ? "F16C vcvtps2ph/vcvtph2ps" : "libgcc soft-fp");
  MESSAGE(which);
  cpd_test::report_isa();
  const auto t = cpd_test::for_each_float32_block<count>("float16 vs _Float16", [](std::uint32_t begin, auto& tl) {
    half_block r;
    (use_f16c ? to_half_block_f16c : to_half_block_soft)(begin, r);
    cpd_block b;
    b.begin = begin;
    cpd_test::isa_variants<cpd_side<cpd::float16, true>>::run(b);
    for (std::uint32_t i = 0; i < block_size; ++i) {
      const std::uint32_t u = begin + i;
      const float x = float_of(u);
      const std::uint16_t ref = r.code[i];
      const std::uint32_t ref_value = r.value[i];

      const std::uint16_t c = b.code[0][i];
      const std::uint32_t q = b.value[0][i];
      const std::uint16_t cs = b.code[1][i];
      const std::uint32_t qs = b.value[1][i];

      if (is_nan_bits(u)) {
        // NaN: any payload, but NaN with the input's sign (the reference too).
        const bool s = sign_bit(u);
        const bool ok = is_nan16(ref, f16_inf) && is_nan_bits(ref_value) && is_nan16(c, f16_inf) &&
                        sign16(c) == s && is_nan_bits(q) && sign_bit(q) == s && is_nan16(cs, f16_inf) &&
                        sign16(cs) == s && is_nan_bits(qs) && sign_bit(qs) == s;
        if (!ok)
          tl[nan_in].add("x=0x%08x: cpd 0x%04x/0x%08x (sat 0x%04x/0x%08x), _Float16 0x%04x/0x%08x", u, c, q, cs,
                         qs, ref, ref_value);
        continue;
      }
      if (c != ref) tl[convert_rne].add("x=0x%08x (%a): cpd 0x%04x, _Float16 0x%04x", u, double(x), c, ref);
      if (q != ref_value)
        tl[quantize_rne].add("x=0x%08x (%a): cpd 0x%08x, _Float16 0x%08x", u, double(x), q, ref_value);
      // overflow::saturate: the same, but +-inf becomes +-max (65504).
      const std::uint16_t ref_sat = saturated(ref, f16_inf);
      if (cs != ref_sat)
        tl[convert_sat].add("x=0x%08x (%a): cpd 0x%04x, expected 0x%04x", u, double(x), cs, ref_sat);
      const std::uint32_t ref_sat_value = r.sat_value[i];  // (float)(_Float16 with bits ref_sat)
      if (qs != ref_sat_value)
        tl[quantize_sat].add("x=0x%08x (%a): cpd 0x%08x, expected 0x%08x", u, double(x), qs, ref_sat_value);
    }
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

/// The reference for the inputs [begin, begin + block_size): __float2bfloat16_rn(x)
/// and __bfloat162float of it, as bits.
struct bf16_block {
  std::uint32_t begin;
  std::uint16_t code[block_size];
  std::uint32_t value[block_size];
};
/// Fills a bf16_block with the toolkit's host conversions (isa_variants).
struct bf16_side {
  static CPD_TEST_ALWAYS_INLINE void run(bf16_block& r) {
    for (std::uint32_t i = 0; i < block_size; ++i) {
      const __nv_bfloat16 b = __float2bfloat16_rn(float_of(r.begin + i));
      r.code[i] = bits_of(b);
      r.value[i] = bits_of(__bfloat162float(b));
    }
  }
};
}  // namespace

// The toolkit's __float2bfloat16_rn maps every NaN to the canonical +NaN 0x7FFF,
// dropping the sign; DESIGN keeps NaN as NaN with any payload, and cpd keeps
// the sign. For NaN inputs we therefore assert NaN-ness of both and the sign
// of cpd's result, and count the inputs whose codes differ.
TEST_CASE("bfloat16: convert and quantize of every float match CUDA __float2bfloat16_rn") {
  enum { convert_rne, quantize_rne, convert_sat, nan_in, nan_code_differs, count };
  cpd_test::report_isa();
  const auto t = cpd_test::for_each_float32_block<count>(
      "bfloat16 vs __float2bfloat16_rn", [](std::uint32_t begin, auto& tl) {
        bf16_block r;
        r.begin = begin;
        cpd_test::isa_variants<bf16_side>::run(r);
        cpd_block b;
        b.begin = begin;
        cpd_test::isa_variants<cpd_side<cpd::bfloat16, false>>::run(b);
        for (std::uint32_t i = 0; i < block_size; ++i) {
          const std::uint32_t u = begin + i;
          const float x = float_of(u);
          const std::uint16_t ref = r.code[i];
          const std::uint32_t ref_value = r.value[i];

          const std::uint16_t c = b.code[0][i];
          const std::uint32_t q = b.value[0][i];
          const std::uint16_t cs = b.code[1][i];

          if (is_nan_bits(u)) {
            const bool s = sign_bit(u);
            const bool ok = is_nan16(ref, bf16_inf) && is_nan16(c, bf16_inf) && sign16(c) == s && is_nan_bits(q) &&
                            sign_bit(q) == s && is_nan16(cs, bf16_inf) && sign16(cs) == s;
            if (!ok) tl[nan_in].add("x=0x%08x: cpd 0x%04x/0x%08x (sat 0x%04x), CUDA 0x%04x", u, c, q, cs, ref);
            if (c != ref) tl[nan_code_differs].add("x=0x%08x: cpd 0x%04x, CUDA 0x%04x", u, c, ref);
            continue;
          }
          if (c != ref) tl[convert_rne].add("x=0x%08x (%a): cpd 0x%04x, CUDA 0x%04x", u, double(x), c, ref);
          if (q != ref_value)
            tl[quantize_rne].add("x=0x%08x (%a): cpd 0x%08x, CUDA 0x%08x", u, double(x), q, ref_value);
          const std::uint16_t ref_sat = saturated(ref, bf16_inf);
          if (cs != ref_sat)
            tl[convert_sat].add("x=0x%08x (%a): cpd 0x%04x, expected 0x%04x", u, double(x), cs, ref_sat);
        }
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
