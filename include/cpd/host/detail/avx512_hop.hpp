// SPDX-License-Identifier: MIT
#pragma once

// The two steps of every hop of a low-precision allreduce (cpd/exchange/protocol.hpp),
// each fused into one AVX-512 pass over the values of one block:
//
//   scale_round  q = Q(x * 2^k): the power-of-two product in float (two factors, so
//                that k may leave float's exponent range), checked exact, and rounded
//                by the fast kernel's round16 (avx512.hpp) to values or codes of F;
//   add_round    s = Q(s + q): the operands (values, or codes decoded by decode16),
//                their float sum rounded to odd (TwoSum), and that rounded once to F
//                by round16. A float sum rounded to odd and then to F is the exact sum
//                rounded to F when F has at most 22 significand bits (p + 2 <= 24);
//   chain_round  both over the w workers of an element in turn, the sum in registers
//                (the simulation's ring and sequential orders).
//
// A NaN sum is the canonical +qNaN before it is rounded; round16 keeps it (ieee, fn,
// fnuz), so every NaN result is the protocol's canonical one. What the passes do not
// take is left to the caller's element-by-element path: scale_round reports a product
// that is not exact (inf, NaN, a product outside float's normal range), add_round
// stops before the first 16 values where the sum of two finite floats overflowed
// float. Held to the element-by-element protocol bit for bit by tests/test_lanes.cpp.

#include <cpd/core/config.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/detail/avx512.hpp>
#include <cpd/host/detail/avx512_decode.hpp>
#include <cpd/host/detail/fast_plan.hpp>
#include <cpd/host/detail/isa.hpp>
#include <cpd/host/detail/tuning.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace cpd::detail::fast {

#if CPD_FAST_KERNELS

/// The fused hop passes for mode R (deterministic), encoding K, values or codes Out.
template <rounding R, encoding_kind K, class Out>
struct hop_kernel {
  static_assert(R != rounding::stochastic, "hop_kernel: deterministic modes only");
  static constexpr bool codes = !std::is_same_v<Out, float>;

  plan p;          ///< the rounding plan of F
  decode_plan dp;  ///< codes: the decoder of F

  /// 16 operands of add_round as float bits (codes decoded by method D).
  template <method D>
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i operand(const Out* v, __mmask16 m, __m128i d0) const noexcept {
    if constexpr (codes) return decode16<D>(dp, decode_kernel<Out>::load16(v, m), d0);
    else return _mm512_maskz_loadu_epi32(m, v);
  }

  /// True when some lane of m is at or above the smaller overflow threshold: overflow,
  /// infinity or NaN (left to the caller).
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE bool special(__m512i a, __m512i thr, __mmask16 m) noexcept {
    return _mm512_mask_cmpge_epu32_mask(m, a, thr) != 0;
  }

  /// odd_sum16's threshold for the threshold thr.
  template <bool Exact>
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE __m512i sum_threshold(__m512i thr) noexcept {
    return Exact ? thr : _mm512_sub_epi32(thr, splat(1u));
  }

  /// Keeps eight vectors in registers (GCC would otherwise build some of them again where
  /// they are used, from immediates).
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE void registers(__m512i& a, __m512i& b, __m512i& c, __m512i& d,
                                                            __m512i& e, __m512i& f, __m512i& g,
                                                            __m512i& h) noexcept {
    __asm__("" : "+v"(a), "+v"(b), "+v"(c), "+v"(d), "+v"(e), "+v"(f), "+v"(g), "+v"(h));
  }

  /// v = x * f1 * f2 (16 floats, lanes m), true when every product is the exact value
  /// scale_round rounds: a normal float (or x zero), below F's smaller overflow threshold
  /// (not inf or NaN either).
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE bool scaled16(const vconsts& c, __m512 xv, __m512 v1, __m512 v2,
                                                           __m512i tiny, __m512i thr, __mmask16 m,
                                                           __m512i& v) noexcept {
    v = _mm512_castps_si512(_mm512_mul_ps(_mm512_mul_ps(xv, v1), v2));
    const __m512i a = _mm512_and_si512(v, c.abs_mask);
    // One unsigned compare finds every product outside [tiny, thr) (below tiny, a - tiny
    // wraps around); only then the exact test, which lets zeros of zero x through. (thr <=
    // inf's bits: a product that overflowed float, or inf or NaN, is special too.)
    if (_mm512_mask_cmpge_epu32_mask(m, _mm512_sub_epi32(a, tiny), _mm512_sub_epi32(thr, tiny)) == 0) return true;
    const __mmask16 inexact = _mm512_mask_cmplt_epu32_mask(m, a, tiny) &
                              _mm512_test_epi32_mask(_mm512_castps_si512(xv), c.abs_mask);
    return inexact == 0 && !special(a, thr, m);
  }

  /// t = the float sum x + y rounded to odd (Exact: every sum of two values of F is a float,
  /// the sum itself), true when no sum of lanes m reaches the smaller overflow threshold
  /// (F's overflow, float's, inf or NaN), before or after the odd step. sum_thr is
  /// sum_threshold(thr): the odd step moves |u| by at most one unit in its bits, so |t| >=
  /// thr only where |u| >= thr - 1, tested instead (a few more 16 values left to the
  /// caller).
  template <bool Exact>
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE bool odd_sum16(const vconsts& c, __m512 x, __m512 y, __m512i sum_thr,
                                                            __mmask16 m, __m512i& t) noexcept {
    const __m512 sum = _mm512_add_ps(x, y);
    const __m512i u = _mm512_castps_si512(sum);
    t = u;
    if constexpr (!Exact) {
      const __m512 bb = _mm512_sub_ps(sum, x);
      const __m512 err = _mm512_add_ps(_mm512_sub_ps(x, _mm512_sub_ps(sum, bb)), _mm512_sub_ps(y, bb));
      const __m512i e = _mm512_castps_si512(err);
      // Inexact and even: one ulp toward the exact sum (err's sign against the sum's).
      const __mmask16 fix = _mm512_test_epi32_mask(e, c.abs_mask) & _mm512_testn_epi32_mask(u, c.one);
      if (fix != 0) {
        const __m512i dir = _mm512_or_si512(_mm512_srai_epi32(_mm512_xor_si512(e, u), 31), c.one);
        t = _mm512_mask_add_epi32(u, fix, u, dir);
      }
    }
    return !special(_mm512_and_si512(u, c.abs_mask), sum_thr, m);
  }

  /// q[j] = Q(x[j] * f1 * f2) by rounding method H, for the j below the returned count: n,
  /// or the start of the first 16 values where some product is not an exact normal float
  /// (x[j] nonzero), overflows F, or is inf or NaN.
  template <method H>
  CPD_TARGET_AVX512 CPD_NOINLINE CPD_FAST_NO_SANITIZE std::size_t scale_round(const float* x, float f1, float f2,
                                                                            Out* q, std::size_t n) const noexcept {
    const vconsts c = kernel<R, K, Out>{p, false, {}}.template make_consts<H>();
    const __m512i thr = splat(p.thr[0] < p.thr[1] ? p.thr[0] : p.thr[1]);
    const __m512 v1 = _mm512_set1_ps(f1), v2 = _mm512_set1_ps(f2);
    const __m512i tiny = splat(0x00800000u), zero = _mm512_setzero_si512();
    for (std::size_t j = 0; j < n; j += 16) {
      const __mmask16 m = tail_mask(n - j);
      prefetch_ahead(x + j);
      __m512i v;
      if (!scaled16(c, _mm512_maskz_loadu_ps(m, x + j), v1, v2, tiny, thr, m, v)) return j;
      store16<Out>::masked(q + j, m, round16<R, K, H, codes, false>(c, v, zero));
    }
    return n;
  }

  /// s[j] = Q(s[j] + q[j]) by rounding method H (codes decoded by method D), for the j
  /// below the returned count: n, or the start of the first 16 values where some sum
  /// overflows F (or float), or is inf or NaN. Exact: every sum of two values of F is a
  /// float (no error term).
  template <method H, method D, bool Exact>
  CPD_TARGET_AVX512 CPD_NOINLINE CPD_FAST_NO_SANITIZE std::size_t add_round(Out* s, const Out* q,
                                                                          std::size_t n) const noexcept {
    const vconsts c = kernel<R, K, Out>{p, false, {}}.template make_consts<H>();
    const __m512i thr = splat(p.thr[0] < p.thr[1] ? p.thr[0] : p.thr[1]);
    const __m128i d0 = _mm_cvtsi32_si128(dp.d0);
    const __m512i sum_thr = sum_threshold<Exact>(thr);
    const __m512i zero = _mm512_setzero_si512();
    for (std::size_t j = 0; j < n; j += 16) {
      const __mmask16 m = tail_mask(n - j);
      const __m512i xi = operand<D>(s + j, m, d0), yi = operand<D>(q + j, m, d0);
      const __m512 x = _mm512_castsi512_ps(xi), y = _mm512_castsi512_ps(yi);
      __m512i t;
      if (!odd_sum16<Exact>(c, x, y, sum_thr, m, t)) return j;
      store16<Out>::masked(s + j, m, round16<R, K, H, codes, false>(c, t, zero));
    }
    return n;
  }

  /// The chain of one element over w workers with the sum held in registers, for the
  /// elements `at` + j of x[r] and out:
  /// s[j] = Q(...Q(Q(x[0][j] f) + Q(x[1][j] f))... + Q(x[w-1][j] f)) with f = f1 * f2, i.e.
  /// scale_round of each worker's value and add_round in worker order, for the j below the
  /// returned count: n, or the start of the first 16 values where scale_round or add_round
  /// would stop for some worker (nothing of those 16 is stored). Values only. The sums
  /// go out finished: out[j] = float(double(s[j]) * inverse), divided by mean_w when it is
  /// not 1 (finish's unscaling; a sum here is finite, so no NaN to make canonical). (The
  /// simulation's ring and sequential orders: the sums never go through memory.)
  template <method H, bool Exact>
  CPD_TARGET_AVX512 CPD_NOINLINE CPD_FAST_NO_SANITIZE std::size_t chain_round(const float* const* x, int w,
                                                                            std::size_t at, float f1, float f2,
                                                                            double inverse, float mean_w,
                                                                            float* out, std::size_t n) const noexcept {
    static_assert(!codes, "hop_kernel::chain_round: values only");
    vconsts c = kernel<R, K, Out>{p, false, {}}.template make_consts<H>();
    __m512i thr = splat(p.thr[0] < p.thr[1] ? p.thr[0] : p.thr[1]);
    __m512 v1 = _mm512_set1_ps(f1), v2 = _mm512_set1_ps(f2);
    __m512i tiny = splat(0x00800000u);
    const __m512i zero = _mm512_setzero_si512();
    // (GCC rebuilds these constants in the loop, two instructions each time, unless told
    // that they are not constants)
    if constexpr (H == method::integer) registers(c.abs_mask, c.sign_mask, c.one, c.low, c.half_minus_one, c.lsb_mask, thr, tiny);
    else registers(c.abs_mask, c.sign_mask, c.exp_mask, c.one, c.emin_bits, c.c_shift, thr, tiny);
    __m512i sum_thr = sum_threshold<Exact>(thr);
    __asm__("" : "+v"(v1), "+v"(v2), "+v"(sum_thr));
    const unscaler u(inverse, mean_w);
    out += at;
    for (std::size_t j = 0; j < n; j += 16) {
      const __mmask16 m = tail_mask(n - j);
      __m512i v;
      if (!scaled16(c, _mm512_maskz_loadu_ps(m, x[0] + at + j), v1, v2, tiny, thr, m, v)) return j;
      __m512i sum = round16<R, K, H, false, false>(c, v, zero);
      for (int r = 1; r < w; ++r) {
        if (!scaled16(c, _mm512_maskz_loadu_ps(m, x[r] + at + j), v1, v2, tiny, thr, m, v)) return j;
        const __m512i q = round16<R, K, H, false, false>(c, v, zero);
        __m512i t;
        if (!odd_sum16<Exact>(c, _mm512_castsi512_ps(sum), _mm512_castsi512_ps(q), sum_thr, m, t)) return j;
        sum = round16<R, K, H, false, false>(c, t, zero);
      }
      const __m512 r = u(_mm512_castsi512_ps(sum));
      if (m == 0xFFFF) _mm512_storeu_ps(out + j, r);
      else _mm512_mask_storeu_ps(out + j, m, r);
    }
    return n;
  }

  /// out[j] = float(double(decode(s[j])) * inverse), divided by w in float when w != 1, a
  /// NaN the canonical +qNaN (lanes' unscale_loop on the decoded values), for every j < n.
  /// inverse = 2^e. With e in [-126, 127], one float product: the same correctly rounded
  /// value of the same exact product (subnormal or infinite included). With e in
  /// [-252, -127] or [128, 254], two, (v 2^(e - e2)) 2^e2 with e2 = -126 or 127 (normal
  /// factors: a subnormal operand costs a microcode assist on some CPUs): the first is
  /// exact, or overflows where the exact product does, or falls below 2^-126 where the
  /// exact product is below 2^-252 and both round to the same zero. Else in double.
  template <method D>
  CPD_TARGET_AVX512 CPD_NOINLINE CPD_FAST_NO_SANITIZE void finish(const Out* s, double inverse, float w, float* out,
                                                                 std::size_t n) const noexcept {
    static_assert(codes, "hop_kernel::finish: codes only");
    const __m128i d0 = _mm_cvtsi32_si128(dp.d0);
    const unscaler u(inverse, w);
    const __m512 qnan = _mm512_castsi512_ps(splat(0x7FC00000u));
    for (std::size_t j = 0; j < n; j += 16) {
      const __mmask16 m = tail_mask(n - j);
      __m512 r = u(_mm512_castsi512_ps(operand<D>(s + j, m, d0)));
      r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q), qnan);
      if (m == 0xFFFF) _mm512_storeu_ps(out + j, r);
      else _mm512_mask_storeu_ps(out + j, m, r);
    }
  }

  /// float(double(v) * inverse), divided by w in float when w != 1 (see finish).
  struct unscaler {
    __m512d inv;
    __m512 f1, f2, wv;
    int e2;
    bool in_float, divide;

    CPD_TARGET_AVX512 CPD_ALWAYS_INLINE unscaler(double inverse, float w) noexcept {
      const int e = std::ilogb(inverse);
      e2 = e < -126 ? -126 : e > 127 ? 127 : 0;
      in_float = e >= -252 && e <= 254;
      inv = _mm512_set1_pd(inverse);
      f1 = _mm512_set1_ps(in_float ? std::ldexp(1.0f, e - e2) : 1.0f);
      f2 = _mm512_set1_ps(std::ldexp(1.0f, e2));
      wv = _mm512_set1_ps(w);
      divide = w != 1.0f;
    }

    CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512 operator()(__m512 v) const noexcept {
      __m512 r;
      if (in_float) {
        r = _mm512_mul_ps(v, f1);
        if (e2 != 0) r = _mm512_mul_ps(r, f2);
      } else {
        const __m256 lo = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), inv));
        const __m256 hi = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)), inv));
        r = _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
      }
      if (divide) r = _mm512_div_ps(r, wv);
      return r;
    }
  };
};

#endif  // CPD_FAST_KERNELS

}  // namespace cpd::detail::fast

namespace cpd::detail {

/// What hop_scale_round and hop_add_round return when they do not take the call.
inline constexpr std::size_t hop_not_taken = ~std::size_t(0);

/// The bits the exact sum of two values of F can need: every value is a multiple of
/// 2^(emin - M) below 2^(emax + 1). At most 24: every such sum is a float.
template <class F>
inline constexpr int pair_sum_bits = F::spec.emax + 2 - (F::spec.emin - F::spec.M);

/// Runs a fused pass over [0, len): fused(at, count) rounds from element `at` and returns how
/// many it did (hop_not_taken: none, the pass is not taken); slow(at, m) does the at most 16
/// values where it stopped, and the pass goes on after them. False when the pass is not
/// taken (nothing done).
template <class Fused, class Slow>
bool hop_with_fallback(std::size_t len, Fused&& fused, Slow&& slow) {
  std::size_t at = 0;
  while (at < len) {
    const std::size_t done = fused(at, len - at);
    if (done == hop_not_taken) return false;  // (the same answer on every call: only at 0)
    at += done;
    if (at == len) break;
    const std::size_t m = len - at < 16 ? len - at : 16;
    slow(at, m);
    at += m;
  }
  return true;
}

/// True when the fused hop passes take rounding to F in mode R with values or codes Out
/// on the instruction set `where` (AVX-512, a build with the fast kernels, a format the
/// fast kernel takes and, for codes, decodes). Asked by the selector (choose_hop), once
/// per summation: the passes below trust it.
template <class F, rounding R, class Out>
bool hop_kernel_takes(isa where) noexcept {
#if CPD_FAST_KERNELS
  constexpr encoding_kind K = F::encoding::kind;
  if constexpr (fast::fast_mode<R> && R != rounding::stochastic && K != encoding_kind::fnu && !is_p3109(K) &&
                (std::is_same_v<Out, float> || sizeof(Out) <= 2)) {
    if (where != isa::avx512 || !fast::fast_kernel_takes<R, Out>(F::spec)) return false;
    return std::is_same_v<Out, float> || fast::decode_method_for(F::spec) != fast::method::none;
  }
#endif
  (void)where;
  return false;
}

/// True when hop_finish takes codes Out of F on the instruction set `where`.
template <class F, class Out>
bool hop_finish_takes(isa where) noexcept {
#if CPD_FAST_KERNELS
  constexpr encoding_kind K = F::encoding::kind;
  if constexpr (K != encoding_kind::fnu && !is_p3109(K) && !std::is_same_v<Out, float> && sizeof(Out) <= 2)
    return where == isa::avx512 && fast::decode_method_for(F::spec) != fast::method::none;
#endif
  (void)where;
  return false;
}

/// q[j] = Q(x[j] * f1 * f2) for F in mode R, overflow O, through the fused pass, for the j
/// below the returned count (see hop_kernel::scale_round; hop_not_taken when the pass is not
/// taken).
template <class F, rounding R, overflow O, class Out>
std::size_t hop_scale_round(const float* x, float f1, float f2, Out* q, std::size_t n) noexcept {
#if CPD_FAST_KERNELS
  constexpr encoding_kind K = F::encoding::kind;
  if constexpr (fast::fast_mode<R> && R != rounding::stochastic && K != encoding_kind::fnu && !is_p3109(K) &&
                (std::is_same_v<Out, float> || sizeof(Out) <= 2)) {
    constexpr fast::method H = fast::method_for<R>(F::spec);  // (make_plan's, for F known here)
    const fast::hop_kernel<R, K, Out> k{fast::cached_plan<R, O>(F::spec, 32), {}};
    return k.template scale_round<H>(x, f1, f2, q, n);
  }
#endif
  (void)x, (void)f1, (void)f2, (void)q, (void)n;
  return hop_not_taken;
}

/// out[at + j] = the chain of element at + j over w workers, finished (see hop_kernel::chain_round),
/// for F through the fused pass, for the j below the returned count (hop_not_taken when
/// not taken).
template <class F, rounding R, overflow O>
std::size_t hop_chain_round(const float* const* x, int w, std::size_t at, float f1, float f2, double inverse,
                            float mean_w, float* out, std::size_t n) noexcept {
#if CPD_FAST_KERNELS
  constexpr encoding_kind K = F::encoding::kind;
  if constexpr (fast::fast_mode<R> && R != rounding::stochastic && K != encoding_kind::fnu && !is_p3109(K)) {
    constexpr fast::method H = fast::method_for<R>(F::spec);  // (make_plan's, for F known here)
    const fast::hop_kernel<R, K, float> k{fast::cached_plan<R, O>(F::spec, 32), {}};
    return k.template chain_round<H, (pair_sum_bits<F> <= 24)>(x, w, at, f1, f2, inverse, mean_w, out, n);
  }
#endif
  (void)x, (void)w, (void)at, (void)f1, (void)f2, (void)inverse, (void)mean_w, (void)out, (void)n;
  return hop_not_taken;
}

/// s[j] = Q(s[j] + q[j]) for F through the fused pass, for the j below the returned count
/// (see hop_kernel::add_round; hop_not_taken when the pass is not taken).
template <class F, rounding R, overflow O, class Out>
std::size_t hop_add_round(Out* sum, const Out* q, std::size_t n) noexcept {
#if CPD_FAST_KERNELS
  constexpr encoding_kind K = F::encoding::kind;
  if constexpr (fast::fast_mode<R> && R != rounding::stochastic && K != encoding_kind::fnu && !is_p3109(K) &&
                (std::is_same_v<Out, float> || sizeof(Out) <= 2)) {
    constexpr spec s = F::spec;
    constexpr bool exact = pair_sum_bits<F> <= 24;  // (no error term to round to odd)
    constexpr fast::method H = fast::method_for<R>(s);  // (make_plan's, for F known here)
    fast::hop_kernel<R, K, Out> k{fast::cached_plan<R, O>(s, 32), {}};
    if constexpr (std::is_same_v<Out, float>) {
      return k.template add_round<H, fast::method::integer, exact>(sum, q, n);  // (no decoding)
    } else {
      constexpr fast::method D = fast::decode_method_for(s);
      k.dp = fast::make_decode_plan(s);
      return k.template add_round<H, D, exact>(sum, q, n);
    }
  }
#endif
  (void)sum, (void)q, (void)n;
  return hop_not_taken;
}

/// out[j] = the unscaled value of code s[j] (see hop_kernel::finish) for F through the fused
/// pass; false when the pass is not taken (nothing done).
template <class F, class Out>
bool hop_finish(const Out* s, double inverse, float w, float* out, std::size_t n) noexcept {
#if CPD_FAST_KERNELS
  constexpr encoding_kind K = F::encoding::kind;
  if constexpr (K != encoding_kind::fnu && !is_p3109(K) && !std::is_same_v<Out, float> && sizeof(Out) <= 2) {
    constexpr spec sp = F::spec;
    constexpr fast::method D = fast::decode_method_for(sp);
    if constexpr (D != fast::method::none) {
      fast::hop_kernel<rounding::nearest_even, K, Out> k{{}, fast::make_decode_plan(sp)};
      k.template finish<D>(s, inverse, w, out, n);
      return true;
    }
  }
#endif
  (void)s, (void)inverse, (void)w, (void)out, (void)n;
  return false;
}

}  // namespace cpd::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
