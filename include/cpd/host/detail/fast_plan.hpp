// SPDX-License-Identifier: MIT
#pragma once

// The plans of the AVX-512 fast kernels (cpd/host/detail/avx512.hpp,
// avx512_decode.hpp): which formats they take (the acceptance predicates
// method_for, decode_method_for and the selector's fast_kernel_takes), and the
// per-call constants they read, computed from the format's spec and, for
// everything the core decides about overflow, infinities and NaN, from
// detail::round_bits itself (make_plan). No intrinsics here: the selector
// (cpd/host/detail/select.hpp) reads the predicates on every build.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/detail/isa.hpp>

#include <cstddef>
#include <cstdint>


// CPD_FAST_KERNELS: 1 when the fast kernels are compiled. Not under ASan (the
// instrumented intrinsic loops, hundreds of them in a test of the runtime-format
// calls, took gigabytes and many minutes to compile; the tests were run under
// ASan+UBSan with them once, clean), nor with -DCPD_NO_FAST_KERNELS.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CPD_DETAIL_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CPD_DETAIL_ASAN 1
#endif
#if CPD_ISA_DISPATCH && !defined(CPD_NO_FAST_KERNELS) && !defined(CPD_DETAIL_ASAN)
#define CPD_FAST_KERNELS 1
#include <immintrin.h>
/// The fast loops are not instrumented by ASan/UBSan: their memory accesses are
/// whole vectors and masked vectors whose bounds the loop computes (checked under
/// the sanitizers once: tests/test_bulk.cpp, clean), and instrumenting hundreds
/// of intrinsic loops made a sanitizer build of the bulk tests take many minutes
/// and gigabytes. The scalar core and the generic loops stay instrumented.
#define CPD_FAST_NO_SANITIZE __attribute__((no_sanitize("address", "undefined")))
#else
#define CPD_FAST_KERNELS 0
#endif

namespace cpd::detail::fast {

#if CPD_FAST_KERNELS
/// The mask of the first min(left, 16) lanes (a 16-lane loop's last, partial vector).
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __mmask16 tail_mask(std::size_t left) noexcept {
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
}
#endif

/// How a format is rounded by the fast kernels (none: not by them).
enum class method : unsigned char { none, integer, fp, f16c };

/// The per-call constants of a fast kernel, computed from the spec and the core.
struct plan {
  method how = method::none;
  int M = 0;
  int d0 = 0;                   ///< 23 - M: the dropped bits of a normal float
  int rbits = 32;               ///< stochastic: random bits per value
  std::uint32_t emin_bits = 0;  ///< float bits of 2^emin
  std::uint32_t c_shift = 0;    ///< (23 - M) << 23: from 2^e to C = 2^(e + 23 - M)
  std::uint32_t max_bits = 0;   ///< float bits of the largest finite value
  std::uint32_t above = 0;      ///< float bits of 2^(emax + 1) (inf's when not a float)
  std::uint32_t code_normal = 0;  ///< (bits >> d0) - code_normal is the code of a normal value
  std::uint32_t sign_code = 0;    ///< the sign bit of a code
  std::uint32_t thr[2] = {};      ///< deterministic modes: |x| bits >= thr[neg] overflow (or inf, NaN)
  std::uint32_t big_value[2] = {}, big_code[2] = {};  ///< what an overflowing x of each sign gives
  std::uint32_t inf_value[2] = {}, inf_code[2] = {};  ///< what +-inf give
  std::uint32_t nan_value[2] = {}, nan_code[2] = {};  ///< what a NaN gives (value: finite encoding only)
  bool hardware_overflow = false;  ///< f16c with overflow::infinity: the conversion's overflow is the core's
};

/// IEEE P3109's signed formats with at least one fraction bit (binary{K}p{P}, s or e,
/// P >= 2, at any bias: a scale_exponent moves it): their codes are fnuz's (no -0, NaN at
/// the sign bit alone; p3109_se's +-inf at the largest magnitude code), and what they do
/// with overflow, infinities and NaN is read off the core like every format's (make_plan),
/// so they take fnuz's kernels. P = 1 (ties to the even code, which is then the exponent's
/// parity) and the unsigned formats stay with the generic kernels.
constexpr bool p3109_fast(const spec& s) noexcept {
  return (s.enc == encoding_kind::p3109_sf || s.enc == encoding_kind::p3109_se) && s.M >= 1;
}

/// The formats the fast kernels can take at all: formats the vector kernels round in
/// float (vector_kernel_takes<float>) with M <= 22, zero, subnormals (not flushed) and a
/// sign, and codes of at most max_bits bits. method_for and decode_method_for start from it.
constexpr bool fast_shape(const spec& s, int max_bits) noexcept {
  return vector_kernel_takes<float>(s) && s.M <= 22 && s.has_subnormals && !s.flush && s.has_zero &&
         s.enc != encoding_kind::fnu && (!is_p3109(s.enc) || p3109_fast(s)) && s.bits <= max_bits;
}

/// The encoding whose fast kernel rounds to formats of encoding K (P3109's signed formats:
/// fnuz's, p3109_fast).
template <encoding_kind K>
inline constexpr encoding_kind kernel_encoding = is_p3109(K) ? encoding_kind::fnuz : K;

/// The modes the fast kernels implement: all but nearest_zero (ties toward zero), which the
/// generic vector kernels round.
template <rounding R>
inline constexpr bool fast_mode = R != rounding::nearest_zero;

/// The method that rounds floats to s in mode R (none: not the fast kernels). The one
/// acceptance predicate: make_plan follows it, and the tests enumerate every format it
/// accepts (tests/test_fast_formats.cpp).
template <rounding R>
constexpr method method_for(const spec& s) noexcept {
  if (!fast_mode<R> || !fast_shape(s, 32)) return method::none;
  constexpr bool hardware_mode = R == rounding::nearest_even || R == rounding::toward_zero ||
                                 R == rounding::upward || R == rounding::downward;
  if (s.emin == -126) return method::integer;
  if (hardware_mode && s.E == 5 && s.M == 10 && s.bias == 15 && s.enc == encoding_kind::ieee)
    return method::f16c;  // IEEE binary16: the CPU's own conversion (vcvtps2ph)
  if (s.emax + 23 - s.M <= 127 && s.emin - s.M >= -126) return method::fp;
  return method::none;
}

/// The method that decodes codes of s to floats (none: not the fast decoder), the
/// decoder's acceptance predicate: formats of at most 16 bits that the rounding kernels take.
constexpr method decode_method_for(const spec& s) noexcept {
  if (!fast_shape(s, 16)) return method::none;
  if (s.emin == -126) return method::integer;
  if (s.emin - s.M >= -126) return method::fp;
  return method::none;
}

/// True when the fast kernel rounds floats to s in mode R with outputs Out (floats or
/// 8/16-bit codes): the selector's predicate. The integer method's few formats with
/// 8-bit codes (E <= 7 and bias 127) are left to the generic kernels.
template <rounding R, class Out>
constexpr bool fast_kernel_takes(const spec& s) noexcept {
  const method m = method_for<R>(s);
  return m != method::none && !(m == method::integer && sizeof(Out) == 1);
}

/// The plan for rounding floats to s in mode R, overflow O (method none when the
/// fast kernels do not handle s).
template <rounding R, overflow O>
plan make_plan(const spec& s, int rbits) noexcept {
  plan p;
  p.how = method_for<R>(s);
  if (p.how == method::none) return p;
  p.M = s.M;
  p.d0 = 23 - s.M;
  p.rbits = clamp_random_bits(rbits);
  p.emin_bits = static_cast<std::uint32_t>(s.emin + 127) << 23;
  p.c_shift = static_cast<std::uint32_t>(23 - s.M) << 23;
  p.max_bits = s.max_bits_f32;
  p.above = s.emax + 1 <= 127 ? static_cast<std::uint32_t>(s.emax + 1 + 127) << 23 : 0x7F800000u;
  p.code_normal = static_cast<std::uint32_t>(s.emin + 126) << s.M;
  p.sign_code = static_cast<std::uint32_t>(s.sign_bit);
  constexpr bool stochastic = R == rounding::stochastic;
  for (int neg = 0; neg < 2; ++neg) {
    const std::uint32_t sg = neg != 0 ? 0x80000000u : 0u;
    // The smallest magnitude whose rounding overflows: the core's overflow flag
    // is monotone in |x|, false at max and true at 2^(emax + 1).
    std::uint32_t lo = p.max_bits, hi = p.above;
    if (!stochastic) {
      while (hi - lo > 1) {
        const std::uint32_t mid = lo + (hi - lo) / 2;
        if (round_bits<R, O, float>(s, mid | sg, 0u, 32).overflow != 0) hi = mid;
        else lo = mid;
      }
    }
    p.thr[neg] = hi;
    // An overflowing value (stochastic: one that does round up past max).
    const auto big = round_bits<R, O, float>(s, (stochastic ? 0x7F7FFFFFu : hi) | sg, 0xFFFFFFFFu, 32);
    p.big_value[neg] = big.value;
    p.big_code[neg] = big.code;
    const auto inf = round_bits<R, O, float>(s, 0x7F800000u | sg, 0u, 32);
    p.inf_value[neg] = inf.value;
    p.inf_code[neg] = inf.code;
    const auto nan = round_bits<R, O, float>(s, 0x7FC00000u | sg, 0u, 32);
    p.nan_value[neg] = nan.value;
    p.nan_code[neg] = nan.code;
  }
  // vcvtps2ph overflows to +-inf where the mode rounds away from zero and to
  // +-max where it does not, and keeps infinities: IEEE's rule, and the core's
  // under overflow::infinity (tests/test_bulk.cpp checks it on every binade).
  p.hardware_overflow = p.how == method::f16c && O == overflow::infinity;
  return p;
}

/// make_plan, remembered per thread for the last format and random-bit count
/// (small arrays would otherwise pay the plan's bisection on every call).
template <rounding R, overflow O>
plan cached_plan(const spec& s, int rbits) noexcept {
  struct entry {
    int E = -1, M = 0, bias = 0, rbits = 0;
    encoding_kind enc{};
    plan p;
  };
  thread_local entry last;
  if (last.E != s.E || last.M != s.M || last.bias != s.bias || last.enc != s.enc || last.rbits != rbits) {
    last.p = make_plan<R, O>(s, rbits);
    last.E = s.E;
    last.M = s.M;
    last.bias = s.bias;
    last.enc = s.enc;
    last.rbits = rbits;
  }
  return last.p;
}

/// The per-call constants of the fast decoder of s (how == none: not handled).
struct decode_plan {
  method how = method::none;
  int d0 = 0;
  std::uint32_t mag_mask = 0, sign_code = 0, max_code = 0, inf_code = 0, nan_code = 0;
  std::uint32_t normal_off = 0;   ///< added to mag << d0 for a normal code: (emin + 126) << 23
  std::uint32_t sub_one = 0;      ///< 1 << M: codes below are subnormal
  std::uint32_t emin_bits = 0;    ///< float bits of 2^emin
  encoding_kind enc = encoding_kind::ieee;
};

/// The decoder plan of s.
inline decode_plan make_decode_plan(const spec& s) noexcept {
  decode_plan p;
  p.how = decode_method_for(s);
  if (p.how == method::none) return p;
  p.d0 = 23 - s.M;
  p.mag_mask = static_cast<std::uint32_t>(s.mag_mask);
  p.sign_code = static_cast<std::uint32_t>(s.sign_bit);
  p.max_code = static_cast<std::uint32_t>(s.max_code);
  p.inf_code = static_cast<std::uint32_t>(s.inf_code);
  p.nan_code = static_cast<std::uint32_t>(s.nan_code);
  p.normal_off = static_cast<std::uint32_t>(s.emin + 126) << 23;
  p.sub_one = std::uint32_t(1) << s.M;
  p.emin_bits = static_cast<std::uint32_t>(s.emin + 127) << 23;
  p.enc = s.enc;
  return p;
}

}  // namespace cpd::detail::fast
