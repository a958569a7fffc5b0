// SPDX-License-Identifier: MIT
// Exhaustive: every one of the 2^32 float32 bit patterns, converted to cpd's
// FP8 (and, when the toolkit has them, FP6 and FP4) formats, against the CUDA
// toolkit's host conversions, which share no code with cpd:
//   cpd::float8_e4m3fn  vs __nv_cvt_float_to_fp8(x, sat, __NV_E4M3)
//   cpd::float8_e5m2    vs __nv_cvt_float_to_fp8(x, sat, __NV_E5M2)
//   cpd::float6_e3m2fn  vs __nv_cvt_float_to_fp6(x, __NV_E3M2, cudaRoundNearest)
//   cpd::float6_e2m3fn  vs __nv_cvt_float_to_fp6(x, __NV_E2M3, cudaRoundNearest)
//   cpd::float4_e2m1fn  vs __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)
// with cpd::overflow::saturate <-> __NV_SATFINITE and cpd::overflow::infinity
// <-> __NV_NOSAT (FP6/FP4 have no inf and no NaN and always saturate, so both
// cpd modes are compared with the toolkit's one). Both the code (convert) and
// the value (quantize, against the toolkit's decode of its code) are compared.
// Every code is also decoded against __nv_cvt_fp8/fp6/fp4_to_halfraw.
//
// How the toolkit's host path (cuda_fp8.hpp, CUDA 12/13) treats the special
// classes, read from its source, and how that compares with DESIGN:
//   - finite overflow: E4M3 NOSAT gives +-NaN (0x7F | sign; E4M3 has no inf),
//     E5M2 NOSAT gives +-inf, SATFINITE gives +-max. The threshold is the
//     midpoint above max (464 for E4M3, 61440 for E5M2; a tie at it rounds
//     to even: 464 -> 448, 61440 -> overflow). Same as cpd: must match.
//   - +-inf: SATFINITE gives +-max (as DESIGN's overflow::saturate), NOSAT
//     gives +-NaN (E4M3) / +-inf (E5M2). Same as cpd: must match.
//   - NaN: every NaN becomes the canonical +NaN 0x7F (the sign is dropped) in
//     both modes. DESIGN keeps NaN as NaN with any payload and cpd keeps the
//     sign, and its E5M2 NaN is 0x7E | sign (quiet, top mantissa bit). So for
//     NaN inputs we assert DESIGN (NaN out, sign of the input) and that the
//     toolkit gives NaN, and count the codes that differ: every negative NaN
//     for E4M3, every NaN for E5M2.
//   - FP6/FP4 (cuda_fp6.hpp, cuda_fp4.hpp): +-inf and finite overflow give
//     +-max; NaN gives +max whatever its sign. cpd's code is +-max with the
//     NaN's sign (for negative NaNs the codes differ, counted) and its quantized
//     value NaN with that sign (a NaN never becomes a number): asserted.
// All other inputs must match bit for bit.
//
// cpd's side is computed a block of consecutive inputs at a time by the same
// scalar calls, compiled for the CPU's vector instruction set (exhaustive.hpp),
// and so is a branch-free pass that marks the inputs where a comparison could
// count anything (NaN inputs, any difference); the comparisons, element by
// element, run on those (a third less time in all).

#include "exhaustive.hpp"

#include <cpd/core/float.hpp>

#include <doctest/doctest.h>

#include "cuda_host_reference.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using cpd_test::bits_of;
using cpd_test::block_size;
using cpd_test::float_of;
using cpd_test::is_nan_bits;
using cpd_test::sign_bit;
using cpd_test::tally;

constexpr auto rne = cpd::rounding::nearest_even;

/// Facts about a format's codes, written out here (not taken from cpd).
struct format_desc {
  int width;             ///< bits in a code, the sign bit the top one
  std::uint8_t max_mag;  ///< the code of +max
  std::uint8_t nan_mag;  ///< magnitudes >= nan_mag are NaN; 0: no NaN
  std::uint32_t max_value;  ///< +max, as float bits

  [[nodiscard]] std::uint8_t sign_mask() const noexcept { return static_cast<std::uint8_t>(1u << (width - 1)); }
  [[nodiscard]] std::uint8_t mag(std::uint8_t c) const noexcept { return c & (sign_mask() - 1u); }
  [[nodiscard]] bool is_nan(std::uint8_t c) const noexcept { return nan_mag != 0 && mag(c) >= nan_mag; }
  [[nodiscard]] bool sign(std::uint8_t c) const noexcept { return (c & sign_mask()) != 0; }
  [[nodiscard]] int codes() const noexcept { return 1 << width; }
};

constexpr format_desc e4m3{8, 0x7E, 0x7F, 0x43E00000u};  // max 448
constexpr format_desc e5m2{8, 0x7B, 0x7D, 0x47600000u};  // max 57344
constexpr format_desc e3m2{6, 0x1F, 0, 0x41E00000u};     // max 28
constexpr format_desc e2m3{6, 0x1F, 0, 0x40F00000u};     // max 7.5
constexpr format_desc e2m1{4, 0x07, 0, 0x40C00000u};     // max 6

/// A toolkit __half_raw as float bits, through the toolkit's __half2float.
std::uint32_t half_raw_to_float_bits(__half_raw h) { return bits_of(__half2float(__half(h))); }

/// The toolkit's decode of every code, as float bits.
template <class Decode>
std::vector<std::uint32_t> decode_table(const format_desc& d, Decode decode) {
  std::vector<std::uint32_t> t(static_cast<std::size_t>(d.codes()));
  for (int c = 0; c < d.codes(); ++c) t[static_cast<std::size_t>(c)] = half_raw_to_float_bits(decode(c));
  return t;
}

// Tallies for one (format, mode) comparison.
enum channel { code_mismatch, value_mismatch, nan_design, nan_code_differs, n_channels };

/// cpd's results for the inputs [begin, begin + block_size): [0] overflow::saturate,
/// [1] overflow::infinity.
struct cpd_block {
  std::uint32_t begin;
  std::uint8_t code[2][block_size];    ///< cpd::convert<F, rne, O>(x).bits()
  std::uint32_t value[2][block_size];  ///< cpd::quantize<F, rne, O>(x), as bits
};

/// Fills a cpd_block with cpd's scalar convert and quantize of F (isa_variants).
template <class F>
struct cpd_side {
  static CPD_TEST_ALWAYS_INLINE void run(cpd_block& r) {
    for (std::uint32_t i = 0; i < block_size; ++i) {
      const float x = float_of(r.begin + i);
      r.code[0][i] = static_cast<std::uint8_t>(cpd::convert<F, rne, cpd::overflow::saturate>(x).bits());
      r.value[0][i] = bits_of(cpd::quantize<F, rne, cpd::overflow::saturate>(x));
      r.code[1][i] = static_cast<std::uint8_t>(cpd::convert<F, rne, cpd::overflow::infinity>(x).bits());
      r.value[1][i] = bits_of(cpd::quantize<F, rne, cpd::overflow::infinity>(x));
    }
  }
};

/// Whether cpd's value bits q for the input bits u (not a NaN) are the toolkit's value
/// ref_value. A NaN value (E4M3 NOSAT overflow) compares by NaN-ness and sign.
CPD_TEST_ALWAYS_INLINE bool value_matches(std::uint32_t u, std::uint32_t q, std::uint32_t ref_value) {
  return is_nan_bits(ref_value) ? is_nan_bits(q) & (sign_bit(q) == sign_bit(u)) : q == ref_value;
}

/// The toolkit's codes for the inputs of a cpd_block: [0] saturate, [1] no saturation.
struct ref_block {
  std::uint8_t code[2][block_size];
};

/// look[i] = 1 for the inputs of a block that check_one must see: NaN inputs, and those
/// whose code or value differs from the toolkit's in either mode. For every other input
/// check_one counts nothing. Branch-free, compiled for the vector instruction set
/// (isa_variants), so that the element-by-element checks run only where they can count.
struct needs_look {
  static CPD_TEST_ALWAYS_INLINE void run(const cpd_block& r, const ref_block& ref, const std::uint32_t* const& values,
                                         std::uint8_t (&look)[block_size]) {
    for (std::uint32_t i = 0; i < block_size; ++i) {
      const std::uint32_t u = r.begin + i;
      bool l = is_nan_bits(u);
      for (int m = 0; m < 2; ++m)
        l |= (r.code[m][i] != ref.code[m][i]) | !value_matches(u, r.value[m][i], values[ref.code[m][i]]);
      look[i] = l;
    }
  }
};

/// Compares cpd's F in overflow mode O, code c = convert<F, rne, O>(x).bits() and
/// value bits q = quantize<F, rne, O>(x), with the toolkit's code `ref` for x.
template <class F, cpd::overflow O>
inline void check_one(std::uint32_t u, const format_desc& d, std::uint8_t ref, const std::uint32_t* ref_values,
                      std::uint8_t c, std::uint32_t q, tally* tl) {
  const float x = float_of(u);

  if (is_nan_bits(u)) {
    const bool s = sign_bit(u);
    bool design_ok;
    bool ref_as_documented;
    if (d.nan_mag != 0) {  // FP8: NaN out with the input's sign; the toolkit gives +NaN 0x7F
      design_ok = d.is_nan(c) && d.sign(c) == s && is_nan_bits(q) && sign_bit(q) == s;
      ref_as_documented = ref == 0x7F;
    } else {  // FP6/FP4: code +-max with the input's sign, value NaN (docs/reliability.md); the toolkit gives +max
      const auto max_code = static_cast<std::uint8_t>(d.max_mag | (s ? d.sign_mask() : 0u));
      design_ok = c == max_code && is_nan_bits(q) && sign_bit(q) == s;
      ref_as_documented = ref == d.max_mag;
    }
    if (!design_ok || !ref_as_documented)
      tl[nan_design].add("x=0x%08x: cpd 0x%02x / 0x%08x, CUDA 0x%02x", u, c, q, ref);
    if (c != ref) tl[nan_code_differs].add("x=0x%08x: cpd 0x%02x, CUDA 0x%02x", u, c, ref);
    return;
  }
  if (c != ref) tl[code_mismatch].add("x=0x%08x (%a): cpd 0x%02x, CUDA 0x%02x", u, double(x), c, ref);
  const std::uint32_t ref_value = ref_values[ref];
  if (!value_matches(u, q, ref_value))
    tl[value_mismatch].add("x=0x%08x (%a): cpd 0x%08x, CUDA 0x%08x", u, double(x), q, ref_value);
}

/// Reports the tallies of one (format, mode) comparison.
void report(const std::string& what, const tally* tl) {
  cpd_test::require_none((what + ": convert, code").c_str(), tl[code_mismatch]);
  cpd_test::require_none((what + ": quantize, value").c_str(), tl[value_mismatch]);
  cpd_test::require_none((what + ": NaN inputs (DESIGN semantics, toolkit as documented)").c_str(), tl[nan_design]);
  cpd_test::report_documented((what + ": NaN inputs whose code differs from the toolkit's").c_str(),
                              tl[nan_code_differs]);
}

/// Every code of F decodes to the toolkit's value (NaN codes: both NaN, cpd
/// keeping the code's sign; the toolkit returns the canonical +NaN).
template <class F>
void check_decode(const char* name, const format_desc& d, const std::vector<std::uint32_t>& ref_values) {
  tally mismatches;
  tally nan_differs;
  for (int c = 0; c < d.codes(); ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    const std::uint32_t ref = ref_values[code];
    const std::uint32_t got = bits_of(static_cast<float>(F::from_bits(code)));
    if (d.is_nan(code)) {
      if (!(is_nan_bits(got) && sign_bit(got) == d.sign(code) && is_nan_bits(ref)))
        mismatches.add("code=0x%02x: cpd 0x%08x, CUDA 0x%08x", c, got, ref);
      if (got != ref) nan_differs.add("code=0x%02x: cpd 0x%08x, CUDA 0x%08x", c, got, ref);
    } else if (got != ref) {
      mismatches.add("code=0x%02x: cpd 0x%08x, CUDA 0x%08x", c, got, ref);
    }
  }
  cpd_test::require_none((std::string(name) + " decode").c_str(), mismatches);
  cpd_test::report_documented((std::string(name) + " decode: NaN codes whose float differs from the toolkit's").c_str(),
                              nan_differs);
}

/// The toolkit's codes for the inputs [begin, begin + block_size): its conversion functions,
/// which GCC keeps out of line, inlined and folded for each call's constant arguments (about
/// three times faster; the toolkit's code is unchanged).
template <class RefSat, class RefNoSat>
CPD_TEST_FLATTEN void ref_codes(std::uint32_t begin, ref_block& ref, const RefSat& ref_sat, const RefNoSat& ref_nosat) {
  for (std::uint32_t i = 0; i < block_size; ++i) {
    const float x = float_of(begin + i);
    ref.code[0][i] = ref_sat(x);
    // One reference for both modes (FP6, FP4): call it once.
    if constexpr (std::is_same_v<RefSat, RefNoSat>) ref.code[1][i] = ref.code[0][i];
    else ref.code[1][i] = ref_nosat(x);
  }
}

/// Runs the exhaustive comparison of F in both overflow modes against
/// ref_sat(x) (saturate) and ref_nosat(x) (infinity); pass the same function
/// object twice when the toolkit has one mode only.
template <class F, class RefSat, class RefNoSat>
void check_all_floats(const char* name, const format_desc& d, const std::vector<std::uint32_t>& ref_values,
                      RefSat ref_sat, RefNoSat ref_nosat) {
  const std::uint32_t* values = ref_values.data();
  cpd_test::report_isa();
  const auto t = cpd_test::for_each_float32_block<2 * n_channels>(
      name, [&d, values, ref_sat, ref_nosat](std::uint32_t begin, auto& tl) {
        cpd_block r;
        r.begin = begin;
        cpd_test::isa_variants<cpd_side<F>>::run(r);
        ref_block ref;
        ref_codes(begin, ref, ref_sat, ref_nosat);
        std::uint8_t look[block_size];
        cpd_test::isa_variants<needs_look>::run(r, ref, values, look);
        for (std::uint32_t i = 0; i < block_size; ++i) {
          if (!look[i]) continue;
          const std::uint32_t u = begin + i;
          check_one<F, cpd::overflow::saturate>(u, d, ref.code[0][i], values, r.code[0][i], r.value[0][i], tl.data());
          check_one<F, cpd::overflow::infinity>(u, d, ref.code[1][i], values, r.code[1][i], r.value[1][i],
                                                tl.data() + n_channels);
        }
      });
  report(std::string(name) + " overflow::saturate", t.data());
  report(std::string(name) + " overflow::infinity", t.data() + n_channels);
}

std::uint8_t fp8_code(__nv_fp8_storage_t c) { return static_cast<std::uint8_t>(c); }
__half_raw fp8_decode(int c, __nv_fp8_interpretation_t k) {
  return __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(c), k);
}

}  // namespace

TEST_CASE("float8_e4m3fn: every float matches CUDA __nv_cvt_float_to_fp8(__NV_E4M3)") {
  const auto values = decode_table(e4m3, [](int c) { return fp8_decode(c, __NV_E4M3); });
  check_decode<cpd::float8_e4m3fn>("float8_e4m3fn", e4m3, values);
  check_all_floats<cpd::float8_e4m3fn>(
      "float8_e4m3fn", e4m3, values,
      [](float x) { return fp8_code(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)); },
      [](float x) { return fp8_code(__nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3)); });
}

TEST_CASE("float8_e5m2: every float matches CUDA __nv_cvt_float_to_fp8(__NV_E5M2)") {
  const auto values = decode_table(e5m2, [](int c) { return fp8_decode(c, __NV_E5M2); });
  check_decode<cpd::float8_e5m2>("float8_e5m2", e5m2, values);
  check_all_floats<cpd::float8_e5m2>(
      "float8_e5m2", e5m2, values,
      [](float x) { return fp8_code(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)); },
      [](float x) { return fp8_code(__nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E5M2)); });
}

#if CPD_TEST_HAVE_CUDA_FP6_FP4

namespace {
std::uint8_t fp6(float x, __nv_fp6_interpretation_t k) {
  return static_cast<std::uint8_t>(__nv_cvt_float_to_fp6(x, k, cudaRoundNearest));
}
__half_raw fp6_decode(int c, __nv_fp6_interpretation_t k) {
  return __nv_cvt_fp6_to_halfraw(static_cast<__nv_fp6_storage_t>(c), k);
}
}  // namespace

TEST_CASE("float6_e3m2fn: every float matches CUDA __nv_cvt_float_to_fp6(__NV_E3M2)") {
  const auto values = decode_table(e3m2, [](int c) { return fp6_decode(c, __NV_E3M2); });
  check_decode<cpd::float6_e3m2fn>("float6_e3m2fn", e3m2, values);
  const auto ref = [](float x) { return fp6(x, __NV_E3M2); };
  check_all_floats<cpd::float6_e3m2fn>("float6_e3m2fn", e3m2, values, ref, ref);
}

TEST_CASE("float6_e2m3fn: every float matches CUDA __nv_cvt_float_to_fp6(__NV_E2M3)") {
  const auto values = decode_table(e2m3, [](int c) { return fp6_decode(c, __NV_E2M3); });
  check_decode<cpd::float6_e2m3fn>("float6_e2m3fn", e2m3, values);
  const auto ref = [](float x) { return fp6(x, __NV_E2M3); };
  check_all_floats<cpd::float6_e2m3fn>("float6_e2m3fn", e2m3, values, ref, ref);
}

TEST_CASE("float4_e2m1fn: every float matches CUDA __nv_cvt_float_to_fp4(__NV_E2M1)") {
  const auto values = decode_table(e2m1, [](int c) {
    return __nv_cvt_fp4_to_halfraw(static_cast<__nv_fp4_storage_t>(c), __NV_E2M1);
  });
  check_decode<cpd::float4_e2m1fn>("float4_e2m1fn", e2m1, values);
  const auto ref = [](float x) {
    return static_cast<std::uint8_t>(__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest));
  };
  check_all_floats<cpd::float4_e2m1fn>("float4_e2m1fn", e2m1, values, ref, ref);
}

#else

TEST_CASE("FP6/FP4: CUDA reference not available") {
  const std::string msg = "this CUDA toolkit has no cuda_fp6.h / cuda_fp4.h: FP6 and FP4 comparisons skipped";
  MESSAGE(msg);
}

#endif
