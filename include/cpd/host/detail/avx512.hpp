// SPDX-License-Identifier: MIT
#pragma once

// AVX-512 kernels for the bulk calls' common case: float input, rounded to a
// format whose values are all normal floats or zero, quantized (float out) or
// encoded (8- or 16-bit codes out), without statistics. They give exactly the
// bits of detail::round_bits (tests/test_bulk.cpp compares them on every
// mode, encoding and overflow rule); what differs is the arithmetic:
//
//  * integer method, formats with float's emin (-126: bfloat16, E = 8): every
//    finite float rounds at the same bit position d0 = 23 - M of its bits, so
//    rounding is an add and a mask on the bits (float subnormals included).
//  * fp method, formats with a smaller range (float16, FP8, FP6, FP4): x is
//    rounded by a float addition of C = 2^(max(e, emin) + 23 - M), whose ulp is
//    the format's quantum at x's exponent, in the rounding mode of the
//    instruction (AVX-512 embedded rounding, which ignores MXCSR.RC); subtracting
//    C back is exact. Modes without a hardware rounding (nearest_away, odd,
//    stochastic) start from the truncated value and add one quantum where the
//    core would.
//
// Everything the core decides for overflow, infinities and NaN is read off the
// core itself once per call (detail::fast::make_plan, in cpd/host/detail/fast_plan.hpp):
// the smallest magnitude that overflows, and the value and code each special input gets. The kernels
// run inside their entry point's detail::default_fp_env (cpd/core/detail/fenv.hpp):
// embedded rounding overrides MXCSR's rounding control, but not its DAZ and FTZ,
// which would change the fp method's arithmetic on tiny values.
//
// They are a second implementation of the seven rounding modes, next to the core's:
// only the selector (cpd/host/detail/select.hpp) runs them, and
// tests/test_fast_formats.cpp holds them to round_bits bit for bit over every format
// their acceptance predicate (fast::method_for) takes.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/detail/avx512_random.hpp>
#include <cpd/host/detail/fast_plan.hpp>
#include <cpd/host/detail/isa.hpp>
#include <cpd/host/detail/tuning.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_* in their
// masked forms) as "may be used uninitialized" once inlined (GCC bug 105593,
// fixed in 12.3 and 13); the diagnostic is about the compiler's header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace cpd::detail::fast {

#if CPD_FAST_KERNELS

/// The constants of a plan in vector registers.
struct vconsts {
  __m512i abs_mask, sign_mask, exp_mask, quiet, one;
  __m512i low, half_minus_one, half;  // integer method
  __m512i lsb_mask;                   // integer method: 1, or all ones when M = 0 (see kept_lsb)
  __m512i emin_bits, c_shift, max_bits, above;
  __m512i thr0, thr1, big0, big1, inf0, inf1, nan0, nan1;
  __m512i code_normal, sign_code, code_one;  // code_one: 1 << M
  __m512i kmask;
  __m512i guard;     // |x| bits below it: no overflow, inf or NaN (finish16 without Specials)
  __m512i sr_scale;  // fp method, stochastic: (k + 277) << 23, less C's bits: 2^(k + 23 - c)
  __m128i d0, ksh_right;            // shift counts (ksh_right: 32 - k, the fp method's)
  __m128i int_right, int_left;      // stochastic rounding by the integer method: the k bits to the d0 dropped
  bool hardware_overflow;           // f16c: vcvtps2ph's overflow and infinities are the core's
  bool sr_mul;                      // sr_scale - C is a normal float for every C of finite x
};

/// Stores the first lanes (mask m) of 16 32-bit results to Out (narrowed for codes). All 16
/// narrow in a register and store plainly: the masked narrowing stores to memory
/// (vpmovdb/vpmovdw m{k}) are microcoded on Zen 4, at about a fifth of the speed.
template <class Out>
struct store16 {
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE void masked(Out* p, __mmask16 m, __m512i v) noexcept {
    if (m == 0xFFFF) {
      if constexpr (sizeof(Out) == 4) _mm512_storeu_si512(p, v);
      else if constexpr (sizeof(Out) == 2) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
      else _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v));
      return;
    }
    if constexpr (sizeof(Out) == 4) _mm512_mask_storeu_epi32(p, m, v);
    else if constexpr (sizeof(Out) == 2) _mm512_mask_cvtepi32_storeu_epi16(p, m, v);
    else _mm512_mask_cvtepi32_storeu_epi8(p, m, v);
  }
};

/// 64 bytes of Out from `vectors` vectors of 16 32-bit results (codes fit Out).
template <class Out>
struct lines {
  static constexpr std::size_t vectors = 4 / sizeof(Out);
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE __m512i pack(const __m512i* v) noexcept {
    if constexpr (sizeof(Out) == 4) {
      return v[0];
    } else if constexpr (sizeof(Out) == 2) {
      // packus works per 128-bit lane: lane k holds v0[4k..4k+3], v1[4k..4k+3].
      const __m512i w = _mm512_packus_epi32(v[0], v[1]);
      return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), w);
    } else {
      // Lane k holds the 4-byte groups v0[4k..], v1[4k..], v2[4k..], v3[4k..].
      const __m512i b = _mm512_packus_epi16(_mm512_packus_epi32(v[0], v[1]), _mm512_packus_epi32(v[2], v[3]));
      return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), b);
    }
  }
};

/// The embedded-rounding constant of a directed mode (fp method).
template <rounding R>
constexpr int embedded_rounding() noexcept {
  if constexpr (R == rounding::nearest_even) return _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  else if constexpr (R == rounding::upward) return _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC;
  else if constexpr (R == rounding::downward) return _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC;
  else return _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;  // toward_zero, and the truncation of the others
}

/// The integer method: the last bit of the kept significand of each magnitude a (1 or
/// 0), which ties to even and round to odd read. It is bit d0 of a when M >= 1. With
/// M = 0 bit d0 is the exponent field's last bit, while the kept significand is the
/// implicit bit alone: 1 for a normal float, 0 for a subnormal one, i.e. min(field, 1)
/// (lsb_mask is all ones then).
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i kept_lsb(const vconsts& c, __m512i a) noexcept {
  return _mm512_min_epu32(_mm512_and_si512(_mm512_srl_epi32(a, c.d0), c.lsb_mask), c.one);
}

/// A vector of 16 copies of u.
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i splat(std::uint32_t u) noexcept {
  return _mm512_set1_epi32(static_cast<int>(u));
}

/// Prefetches the line tuning::prefetch_distance floats' bytes past p, for a loop that reads
/// forward (address arithmetic on integers: the prefetched address may lie past the array).
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE void prefetch_ahead(const void* p) noexcept {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) +
                                             tuning::prefetch_distance * sizeof(float)),
               _MM_HINT_T0);
}

/// IEEE binary16 in a hardware mode, 16 floats (bits x, magnitudes a, signs neg).
template <rounding R, bool Code>
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i round16_f16c(const vconsts& c, __m512i x, __m512i a,
                                                         __mmask16 neg) noexcept {
  // IEEE binary16 in a hardware mode: vcvtps2ph rounds finite values as the
  // core does (signs and zeros included); overflow in saturate mode, NaN
  // payloads and codes are blended in from the plan as below.
  constexpr int er = embedded_rounding<R>();
  const __m256i h = _mm512_cvtps_ph(_mm512_castsi512_ps(x), er);
  if (c.hardware_overflow) {
    // overflow::infinity: the conversion's own overflow and infinities are the core's.
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, c.exp_mask);
    if constexpr (Code) return _mm512_mask_mov_epi32(_mm512_cvtepu16_epi32(h), nan, _mm512_mask_blend_epi32(neg, c.nan0, c.nan1));
    else return _mm512_mask_or_epi32(_mm512_castps_si512(_mm512_cvtph_ps(h)), nan, x, c.quiet);
  }
  const __mmask16 big = _mm512_cmpge_epu32_mask(a, _mm512_mask_blend_epi32(neg, c.thr0, c.thr1));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(a, c.exp_mask);
  __m512i r = Code ? _mm512_cvtepu16_epi32(h) : _mm512_castps_si512(_mm512_cvtph_ps(h));
  const __mmask16 inf = _mm512_cmpeq_epi32_mask(a, c.exp_mask);
  r = _mm512_mask_mov_epi32(r, big, _mm512_mask_blend_epi32(neg, c.big0, c.big1));
  r = _mm512_mask_mov_epi32(r, inf, _mm512_mask_blend_epi32(neg, c.inf0, c.inf1));
  if constexpr (Code) return _mm512_mask_mov_epi32(r, nan, _mm512_mask_blend_epi32(neg, c.nan0, c.nan1));
  else return _mm512_mask_or_epi32(r, nan, x, c.quiet);
}

/// Stochastic rounding of magnitudes a that are zero or in F's normal range, where the
/// dropped bits of every value are its low d0 bits (the integer method's every value; the
/// fp method's vectors without subnormals of F): the k random bits aligned with the d0
/// dropped bits are added, and the carry out of the dropped field is the core's
/// "remk > kmask ^ rnd"; then the dropped bits are cleared (exponent unbounded).
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i magnitude_stochastic_normal(const vconsts& c, __m512i a,
                                                                        __m512i rnd) noexcept {
  const __m512i rk = _mm512_and_si512(rnd, c.kmask);
  const __m512i t = _mm512_add_epi32(a, _mm512_sll_epi32(_mm512_srl_epi32(rk, c.int_right), c.int_left));
  return _mm512_andnot_si512(c.low, t);
}

/// The integer method: the rounded magnitudes of a (exponent unbounded).
template <rounding R>
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i magnitude_integer(const vconsts& c, __m512i a, __mmask16 neg,
                                                              __m512i rnd) noexcept {
  constexpr bool stochastic = R == rounding::stochastic;
  __m512i v;
  __m512i t;
  if constexpr (R == rounding::nearest_even) {
    t = _mm512_add_epi32(_mm512_add_epi32(a, c.half_minus_one), kept_lsb(c, a));
  } else if constexpr (R == rounding::nearest_away) {
    t = _mm512_add_epi32(a, c.half);
  } else if constexpr (R == rounding::upward) {
    t = _mm512_mask_add_epi32(a, static_cast<__mmask16>(~neg), a, c.low);
  } else if constexpr (R == rounding::downward) {
    t = _mm512_mask_add_epi32(a, neg, a, c.low);
  } else if constexpr (stochastic) {
    return magnitude_stochastic_normal(c, a, rnd);
  } else {
    t = a;  // toward_zero, odd
  }
  v = _mm512_andnot_si512(c.low, t);
  if constexpr (R == rounding::odd) {  // one quantum up where inexact and the kept part is even
    const __mmask16 up = _mm512_mask_cmpeq_epi32_mask(_mm512_test_epi32_mask(a, c.low), kept_lsb(c, a),
                                                      _mm512_setzero_si512());
    v = _mm512_mask_add_epi32(v, up, v, _mm512_add_epi32(c.low, c.one));
  }
  return v;
}

/// The fp method: the rounded magnitudes of x (bits x, magnitudes a; exponent unbounded).
template <rounding R>
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i magnitude_fp(const vconsts& c, __m512i x, __m512i a,
                                                         __m512i rnd) noexcept {
  constexpr bool stochastic = R == rounding::stochastic;
  __m512i v;
  constexpr int er = embedded_rounding<R>();
  const __m512i E = _mm512_max_epu32(_mm512_and_si512(a, c.exp_mask), c.emin_bits);
  const __m512i C = _mm512_add_epi32(E, c.c_shift);
  const __m512 Cs = _mm512_castsi512_ps(_mm512_ternarylogic_epi32(C, x, c.sign_mask, 0xF8));
  const __m512 xf = _mm512_castsi512_ps(x);
  const __m512 y = _mm512_add_round_ps(xf, Cs, er);
  const __m512 r = _mm512_sub_round_ps(y, Cs, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);  // exact
  v = _mm512_and_si512(_mm512_castps_si512(r), c.abs_mask);
  if constexpr (R == rounding::nearest_away || R == rounding::odd || stochastic) {
    // r is x truncated; q is the quantum (C * 2^-23), up says where to add it.
    const __m512 q = _mm512_castsi512_ps(_mm512_sub_epi32(C, _mm512_set1_epi32(23 << 23)));
    __mmask16 up;
    if constexpr (R == rounding::nearest_away) {
      // Up when |x - r| >= q / 2, compared as 2 |x - r| >= q (both exact): q / 2 is a float
      // subnormal where the format's smallest quantum is 2^-126, and its bits are then no
      // exponent step below q's.
      const __m512 rem = _mm512_castsi512_ps(
          _mm512_and_si512(_mm512_castps_si512(_mm512_sub_round_ps(xf, r, er)), c.abs_mask));
      up = _mm512_cmpge_epu32_mask(_mm512_castps_si512(_mm512_add_round_ps(rem, rem, er)), _mm512_castps_si512(q));
    } else if constexpr (R == rounding::odd) {
      const __mmask16 inexact = _mm512_cmp_ps_mask(r, xf, _CMP_NEQ_UQ);
      const __mmask16 odd = _mm512_test_epi32_mask(_mm512_castps_si512(y), c.one);
      up = _kandn_mask16(odd, inexact);
    } else {
      // remk = floor(rem / q * 2^k), the k-bit truncation of the dropped part, and up where
      // remk > kmask ^ rnd (the core's test), i.e. where remk + the k random bits carry.
      // rem = |x| - |r| is exact (the dropped bits of x).
      constexpr int rz = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;
      const __m512 rem = _mm512_sub_round_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(v), rz);
      __m512i remk;
      if (c.sr_mul) {
        // rem * 2^(k + 23 - c) for C = 2^c: a power of two formed from C's bits, a product
        // below 2^k that is exact (rem's bits move up, or down without leaving float's
        // normal range), truncated to an integer.
        const __m512 f = _mm512_castsi512_ps(_mm512_sub_epi32(c.sr_scale, C));
        remk = _mm512_cvtt_roundps_epu32(_mm512_mul_round_ps(rem, f, rz), _MM_FROUND_NO_EXC);
      } else {
        // The factor 2^(55 - c) reaches 2^158 for the formats whose quantum is near 2^-126,
        // beyond float: vscalefps applies it exactly (then the top k of 32 bits).
        const __m512 k = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_set1_epi32(182), _mm512_srli_epi32(C, 23)));
        remk = _mm512_srl_epi32(_mm512_cvtt_roundps_epu32(_mm512_scalef_round_ps(rem, k, rz), _MM_FROUND_NO_EXC),
                                c.ksh_right);
      }
      up = _mm512_cmpgt_epu32_mask(remk, _mm512_andnot_si512(rnd, c.kmask));
    }
    v = _mm512_castps_si512(_mm512_mask_add_round_ps(_mm512_castsi512_ps(v), up, _mm512_castsi512_ps(v), q, er));
  }
  (void)rnd;
  return v;
}

/// The rounded magnitudes v of x made results: overflow, infinities and NaN blended in
/// from the plan (Specials; without, the caller knows that no x overflows, is inf or is
/// NaN), the sign put back, and (Code) the values made codes (Normal: the fp method's v
/// are all zero or normal in F, whose codes are a shift and a subtraction).
template <rounding R, encoding_kind K, method H, bool Code, bool Specials = true, bool Normal = false>
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i finish16(const vconsts& c, __m512i x, __m512i a, __mmask16 neg,
                                                     __m512i v) noexcept {
  constexpr bool stochastic = R == rounding::stochastic;
  // Overflow: deterministic modes from the threshold, stochastic from the result.
  __mmask16 big = 0, inf = 0, nan = 0;
  if constexpr (Specials) {
    if constexpr (stochastic) {
      big = _mm512_cmpge_epu32_mask(a, c.above) | _mm512_cmpgt_epu32_mask(v, c.max_bits);
    } else {
      big = _mm512_cmpge_epu32_mask(a, _mm512_mask_blend_epi32(neg, c.thr0, c.thr1));
    }
    inf = _mm512_cmpeq_epi32_mask(a, c.exp_mask);
    nan = _mm512_cmpgt_epu32_mask(a, c.exp_mask);
  }
  if constexpr (Code) {
    __m512i code;
    if constexpr (H == method::integer) {
      code = _mm512_srl_epi32(v, c.d0);
    } else if constexpr (Normal) {
      code = _mm512_maskz_sub_epi32(_mm512_test_epi32_mask(v, v), _mm512_srl_epi32(v, c.d0), c.code_normal);
    } else {
      const __mmask16 sub = _mm512_cmplt_epu32_mask(v, c.emin_bits);
      const __m512 w = _mm512_mask_add_round_ps(_mm512_castsi512_ps(v), sub, _mm512_castsi512_ps(v),
                                                _mm512_castsi512_ps(c.emin_bits), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      code = _mm512_sub_epi32(_mm512_srl_epi32(_mm512_castps_si512(w), c.d0), c.code_normal);
      code = _mm512_mask_sub_epi32(code, sub, code, c.code_one);
    }
    if constexpr (K == encoding_kind::fnuz) {
      code = _mm512_mask_or_epi32(code, neg & _mm512_test_epi32_mask(code, code), code, c.sign_code);
    } else {
      code = _mm512_mask_or_epi32(code, neg, code, c.sign_code);
    }
    if constexpr (Specials) {
      code = _mm512_mask_mov_epi32(code, big, _mm512_mask_blend_epi32(neg, c.big0, c.big1));
      code = _mm512_mask_mov_epi32(code, inf, _mm512_mask_blend_epi32(neg, c.inf0, c.inf1));
      code = _mm512_mask_mov_epi32(code, nan, _mm512_mask_blend_epi32(neg, c.nan0, c.nan1));
    }
    return code;
  } else {
    if constexpr (K == encoding_kind::fnuz) {
      v = _mm512_mask_or_epi32(v, neg & _mm512_test_epi32_mask(v, v), v, c.sign_mask);
    } else {
      v = _mm512_ternarylogic_epi32(v, x, c.sign_mask, 0xF8);  // v | (x & sign)
    }
    if constexpr (!Specials) return v;
    v = _mm512_mask_mov_epi32(v, big, _mm512_mask_blend_epi32(neg, c.big0, c.big1));
    v = _mm512_mask_mov_epi32(v, inf, _mm512_mask_blend_epi32(neg, c.inf0, c.inf1));
    if constexpr (K == encoding_kind::ieee || K == encoding_kind::fn) {
      v = _mm512_mask_or_epi32(v, nan, x, c.quiet);  // quiet, payload and sign kept
    } else if constexpr (K == encoding_kind::fnuz) {
      v = _mm512_mask_or_epi32(v, nan, a, c.quiet);  // quiet, payload kept, positive
    } else {
      v = _mm512_mask_mov_epi32(v, nan, _mm512_mask_blend_epi32(neg, c.nan0, c.nan1));
    }
    return v;
  }
}

/// finish16 with or without the blends of specials: overflow, infinities and NaN are rare,
/// and their blends run only for the 16 values that hold one (a branch the predictor gets
/// right on ordinary data).
template <rounding R, encoding_kind K, method H, bool Code, bool Specials, bool Normal>
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i finish_checked(const vconsts& c, __m512i x, __m512i a, __mmask16 neg,
                                                           __m512i v) noexcept {
  if constexpr (Specials)
    if (_mm512_cmpge_epu32_mask(a, c.guard) != 0) return finish16<R, K, H, Code, true, Normal>(c, x, a, neg, v);
  return finish16<R, K, H, Code, false, Normal>(c, x, a, neg, v);
}

/// Rounds 16 floats (bits x; stochastic: random bits rnd) and returns 16 values
/// (Code false) or codes (Code true), exactly as round_bits would. Without Specials the
/// caller knows that no x overflows, is inf or is NaN (|x| below min(thr0, thr1)).
template <rounding R, encoding_kind K, method H, bool Code, bool Specials = true>
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i round16(const vconsts& c, __m512i x, __m512i rnd) noexcept {
  constexpr bool hardware_mode = R == rounding::nearest_even || R == rounding::toward_zero ||
                                 R == rounding::upward || R == rounding::downward;
  const __m512i a = _mm512_and_si512(x, c.abs_mask);
  const __mmask16 neg = _mm512_movepi32_mask(x);
  if constexpr (H == method::f16c && hardware_mode) {
    (void)rnd;
    return round16_f16c<R, Code>(c, x, a, neg);
  } else {
    if constexpr (H == method::fp && R == rounding::stochastic) {
      // The fp method's vectors whose values are all zero or normal in F (ordinary data:
      // the 16 values of a vector rarely reach F's subnormals) round as the integer method
      // does, in 4 integer operations instead of 14, and their codes are a shift and a
      // subtraction (the same bits: tests/test_bulk.cpp, every binade of every format).
      const __mmask16 sub = _mm512_mask_cmplt_epu32_mask(_mm512_test_epi32_mask(a, a), a, c.emin_bits);
      if (sub == 0)
        return finish_checked<R, K, H, Code, Specials, true>(c, x, a, neg, magnitude_stochastic_normal(c, a, rnd));
    }
    __m512i v;
    if constexpr (H == method::integer) v = magnitude_integer<R>(c, a, neg, rnd);
    else v = magnitude_fp<R>(c, x, a, rnd);
    return finish_checked<R, K, H, Code, Specials, false>(c, x, a, neg, v);
  }
}

/// The fast kernel (run_kernel's interface): rounds floats to Out, values or codes.
template <rounding R, encoding_kind K, class Out>
struct kernel {
  using in_type = float;
  using out_type = Out;
  static constexpr bool stochastic = R == rounding::stochastic;
  static constexpr bool dispatch = false;  // run() is AVX-512 code itself
  static constexpr bool quantizes = std::is_same_v<Out, float>;
  static constexpr bool codes = !quantizes;
  static constexpr bool hardware_mode = R == rounding::nearest_even || R == rounding::toward_zero ||
                                        R == rounding::upward || R == rounding::downward;

  plan p;
  bool stream = false;
  random_key key{};

  /// The constants of the plan in vector registers, for method H.
  template <method H>
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE vconsts make_consts() const noexcept {
    vconsts c;
    c.abs_mask = splat(0x7FFFFFFFu);
    c.sign_mask = splat(0x80000000u);
    c.exp_mask = splat(0x7F800000u);
    c.quiet = splat(0x00400000u);
    c.one = splat(1u);
    c.lsb_mask = splat(p.M == 0 ? 0xFFFFFFFFu : 1u);
    const std::uint32_t low = (std::uint32_t(1) << p.d0) - 1;
    c.low = splat(low);
    c.half_minus_one = splat(low >> 1);
    c.half = splat((low >> 1) + 1);
    c.emin_bits = splat(p.emin_bits);
    c.c_shift = splat(p.c_shift);
    c.max_bits = splat(p.max_bits);
    c.above = splat(p.above);
    c.thr0 = splat(p.thr[0]);
    c.thr1 = splat(p.thr[1]);
    c.big0 = splat(codes ? p.big_code[0] : p.big_value[0]);
    c.big1 = splat(codes ? p.big_code[1] : p.big_value[1]);
    c.inf0 = splat(codes ? p.inf_code[0] : p.inf_value[0]);
    c.inf1 = splat(codes ? p.inf_code[1] : p.inf_value[1]);
    c.nan0 = splat(codes ? p.nan_code[0] : p.nan_value[0]);
    c.nan1 = splat(codes ? p.nan_code[1] : p.nan_value[1]);
    c.code_normal = splat(p.code_normal);
    c.sign_code = splat(p.sign_code);
    c.code_one = splat(std::uint32_t(1) << p.M);
    const int k = p.rbits;
    c.kmask = splat(k == 32 ? 0xFFFFFFFFu : ((std::uint32_t(1) << k) - 1));
    // Below the guard nothing overflows (deterministic: the thresholds; stochastic: a
    // value at most max cannot round past it) and nothing is inf or NaN.
    std::uint32_t guard = stochastic ? p.max_bits + 1 : (p.thr[0] < p.thr[1] ? p.thr[0] : p.thr[1]);
    if (guard > 0x7F800000u) guard = 0x7F800000u;
    c.guard = splat(guard);
    // 2^(k + 23 - c) is a normal float for every c = max(e, emin) + 23 - M of a finite x
    // at most max (c <= 127 by the fp method's condition, so only c >= k - 104 can fail).
    c.sr_scale = splat(static_cast<std::uint32_t>(k + 277) << 23);
    c.sr_mul = static_cast<int>((p.emin_bits + p.c_shift) >> 23) - 127 >= k - 104;
    c.d0 = _mm_cvtsi32_si128(p.d0);
    c.hardware_overflow = p.hardware_overflow;
    c.int_right = _mm_cvtsi32_si128(k >= p.d0 ? k - p.d0 : 0);
    c.int_left = _mm_cvtsi32_si128(k >= p.d0 ? 0 : p.d0 - k);
    c.ksh_right = _mm_cvtsi32_si128(32 - k);
    return c;
  }

  /// The random bits of in[i..i+16): random_bits(key, lo0 + i + j) in lane j.
  template <class Gen>
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE __m512i draw(const Gen& gen, std::uint32_t lo0, std::size_t i) noexcept {
    if constexpr (stochastic) return gen.at(lo0 + static_cast<std::uint32_t>(i));
    else return _mm512_setzero_si512();
  }
  /// The random bits of the main loop's next 16 elements.
  template <class Gen>
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE __m512i draw_next(Gen& gen) noexcept {
    if constexpr (stochastic) return gen.next();
    else return _mm512_setzero_si512();
  }

  /// Rounds in[0..n) to out[0..n) by method H; lo0 is the random counter of in[0], G the
  /// generator of the key (stochastic only).
  template <method H, random_generator G>
  CPD_TARGET_AVX512 CPD_NOINLINE CPD_FAST_NO_SANITIZE void loop(const float* in, Out* out, std::size_t n,
                                                              std::uint32_t lo0) const noexcept {
    const vconsts c = make_consts<H>();
    vrandom<G> gen(key);  // (stochastic only; unused otherwise)
    std::size_t i = 0;
    // Streaming stores go to whole 64-byte lines: the values before the first
    // line boundary of out go through masked stores.
    const bool streaming = stream && reinterpret_cast<std::uintptr_t>(out) % sizeof(Out) == 0;
    if (streaming) {
      const std::size_t mis = reinterpret_cast<std::uintptr_t>(out) % 64;
      std::size_t head = mis == 0 ? 0 : (64 - mis) / sizeof(Out);
      if (head > n) head = n;
      while (i < head) {
        const std::size_t cnt = head - i < 16 ? head - i : 16;
        const __mmask16 mk = static_cast<__mmask16>((1u << cnt) - 1);
        const __m512i x = _mm512_maskz_loadu_epi32(mk, in + i);
        store16<Out>::masked(out + i, mk, round16<R, K, H, codes>(c, x, draw(gen, lo0, i)));
        i += cnt;
      }
    }
    constexpr std::size_t line = 16 * lines<Out>::vectors;  // values per 64 bytes of out
    if constexpr (stochastic) gen.from(lo0 + static_cast<std::uint32_t>(i));
    for (; i + line <= n; i += line) {
      __m512i v[lines<Out>::vectors];
#pragma GCC unroll 4
      for (std::size_t u = 0; u < lines<Out>::vectors; ++u) {
        prefetch_ahead(in + i + 16 * u);
        v[u] = round16<R, K, H, codes>(c, _mm512_loadu_si512(in + i + 16 * u), draw_next(gen));
      }
      const __m512i packed = lines<Out>::pack(v);
      if (streaming) _mm512_stream_si512(reinterpret_cast<__m512i*>(out + i), packed);
      else _mm512_storeu_si512(out + i, packed);
    }
    for (; i < n; i += 16) {
      const std::size_t cnt = n - i < 16 ? n - i : 16;
      const __mmask16 mk = static_cast<__mmask16>((1u << cnt) - 1);
      const __m512i x = _mm512_maskz_loadu_epi32(mk, in + i);
      store16<Out>::masked(out + i, mk, round16<R, K, H, codes>(c, x, draw(gen, lo0, i)));
    }
    if (streaming) _mm_sfence();
  }

  /// loop<H> with the key's generator (one loop for the deterministic modes).
  template <method H>
  void loop_for(const float* in, Out* out, std::size_t n, std::uint32_t lo0) const noexcept {
    if constexpr (stochastic) {
      if (key.generator == random_generator::v1) {
        loop<H, random_generator::v1>(in, out, n, lo0);
        return;
      }
    }
    loop<H, random_generator::v2>(in, out, n, lo0);
  }

  template <class Counts>  // (detail::bulk_counts; the fast kernels count nothing)
  void run(const float* in, Out* out, std::size_t n, std::uint32_t lo0, Counts& c) const noexcept {
    // Only the loops a (K, R, Out) can need are compiled: the integer method
    // serves E = 8 formats, whose codes have 16 bits or more; vcvtps2ph serves
    // IEEE binary16 in the hardware modes, to floats or 16-bit codes (binary16
    // also meets the fp method's conditions, which serves the other cases).
    constexpr bool integer_ok = sizeof(Out) >= 2;
    constexpr bool f16c_ok = hardware_mode && K == encoding_kind::ieee && (quantizes || sizeof(Out) == 2);
    if (integer_ok && p.how == method::integer) loop_for<integer_ok ? method::integer : method::fp>(in, out, n, lo0);
    else if (f16c_ok && p.how == method::f16c) loop_for<f16c_ok ? method::f16c : method::fp>(in, out, n, lo0);
    else loop_for<method::fp>(in, out, n, lo0);
    c = Counts{};
  }
};

#endif  // CPD_FAST_KERNELS

}  // namespace cpd::detail::fast

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
