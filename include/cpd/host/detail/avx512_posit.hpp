// SPDX-License-Identifier: MIT
#pragma once

// AVX-512 kernels of the posit bulk calls (cpd/host/posit_bulk.hpp) from and to float,
// in intrinsics: GCC 12 vectorizes neither the core's loop (its 64-bit string mixed with
// 32-bit lanes) nor a 32-bit rewrite of it at -O2, and a scalar 32-bit rewrite ran slower
// than the core. avx2_posit.hpp has the same kernels 8 lanes at a time; the baseline
// keeps the core's loop.
//
//  * posit_round16: detail::posit_round_bits<R, float> 16 lanes at a time. From a float
//    the core's 64-bit bit string (regime, es exponent bits, 23 fraction bits: at most
//    n + 27 bits) is two 32-bit words, `str` and `low` (the bits the regime pushed out);
//    leading zeros by vplzcntd (AVX-512 CD). Taken for posit<n, es> with n <= 31 (every
//    shift count then below 32). Stochastic rounding where the code keeps no fraction bit
//    and drops exponent bits (its probability is a quotient by 2^(2^j) - 1, which the
//    core computes in double) is marked, and those lanes are redone by the core.
//  * posit_value16 (quantize): where every lane keeps a fraction bit, the rounding is the
//    float's own at a per-lane bit position (an add and a mask), no code built.
//  * posit_decode16: detail::posit_decode_as<float> (posits whose values are floats).
//
// Without statistics (those calls keep the core's loops). Held to the core bit for bit by
// tests/test_posit_bulk.cpp under CPD_ISA=avx512: every mode, n = 2 .. 32, es = 0 .. 4,
// every code interval's midpoint and neighbours for n <= 16, in place.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/posit_round.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/detail/avx2_posit.hpp>  // (posit_round_base)
#include <cpd/host/detail/avx512.hpp>
#include <cpd/host/detail/avx512_random.hpp>
#include <cpd/host/detail/fast_plan.hpp>
#include <cpd/host/detail/isa.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__)  // (GCC bug 105593: see avx512.hpp)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace cpd::detail::fast {

#if CPD_FAST_KERNELS

/// The constants of one posit<n, es> in vector registers.
struct posit_consts : posit_shifts {
  __m512i abs_mask, inf_bits, mant_mask, one, ones, bias, sub_e, lo_k, hi_k, two, max_code, code_mask, nar,
      round_mask, kmask, thirty_two, thirty_one, twenty_three, fb_limit, sign_bit, qnan;

  /// The code's last bit where a rounding keeps no fraction bit (posit_value16): with es >= 1
  /// the exponent's last bit, e & 1, which is bit 23 of the float inverted; with es = 0 the
  /// regime's terminating bit, 1 for k < 0.
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __mmask16 odd_at_zero(__mmask16 bit23, __m512i k) const noexcept {
    if (es_zero) return _mm512_cmplt_epi32_mask(k, _mm512_setzero_si512());
    return static_cast<__mmask16>(~bit23);
  }
};

CPD_TARGET_AVX512 CPD_ALWAYS_INLINE posit_consts make_posit_consts(const posit_spec& p, int rbits) noexcept {
  posit_consts c;
  static_cast<posit_shifts&>(c) = posit_shifts_of(p, rbits);
  const posit_lane_values v = posit_lane_values_of(p, rbits);
  c.abs_mask = splat(0x7FFFFFFFu);
  c.inf_bits = splat(0x7F800000u);
  c.mant_mask = splat(0x7FFFFFu);
  c.one = splat(1u);
  c.ones = splat(0xFFFFFFFFu);
  c.bias = splat(127u);
  c.sub_e = splat(static_cast<std::uint32_t>(-118));  // a subnormal's exponent: -118 - lzcnt
  c.lo_k = splat(v.lo_k);
  c.hi_k = splat(v.hi_k);
  c.two = splat(2u);
  c.max_code = splat(v.max_code);
  c.code_mask = splat(v.code_mask);
  c.nar = splat(v.nar);
  c.round_mask = splat(v.round_mask);
  c.kmask = splat(v.kmask);
  c.thirty_two = splat(32u);
  c.thirty_one = splat(31u);
  c.twenty_three = splat(23u);
  c.fb_limit = splat(v.fb_limit);
  c.sign_bit = splat(0x80000000u);
  c.qnan = splat(0x7FC00000u);
  return c;
}

/// Whether each lane moves up to the next code in a deterministic mode R, from the round
/// bit, the sticky bits, the kept code's last bit and the sign (the core's rule; 0 for
/// stochastic, which the callers decide).
template <rounding R>
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __mmask16 posit_up(__mmask16 round_bit, __mmask16 sticky, __mmask16 odd,
                                                     __mmask16 neg) noexcept {
  const __mmask16 inexact = round_bit | sticky;
  if constexpr (R == rounding::nearest_even) return round_bit & (sticky | odd);
  else if constexpr (R == rounding::nearest_away) return round_bit;
  else if constexpr (R == rounding::nearest_zero) return round_bit & sticky;
  else if constexpr (R == rounding::upward) return inexact & static_cast<__mmask16>(~neg);
  else if constexpr (R == rounding::downward) return inexact & neg;
  else if constexpr (R == rounding::odd) return inexact & static_cast<__mmask16>(~odd);
  else return 0;  // toward_zero; stochastic
}

/// posit_round_bits<R, float> of 16 floats (bits x), for posit_kernel_takes(p); *core: the
/// lanes the core must redo (stochastic rounding that drops exponent bits; a clamped
/// regime is +-minpos or +-maxpos whatever the bit decides).
template <rounding R>
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i posit_round16(const posit_consts& c, __m512i x, __m512i rnd,
                                                          __mmask16& core) noexcept {
  const __mmask16 neg = _mm512_movepi32_mask(x);
  const __m512i a = _mm512_and_si512(x, c.abs_mask);
  const __mmask16 special = _mm512_cmpge_epu32_mask(a, c.inf_bits);
  const __mmask16 zero = _mm512_testn_epi32_mask(a, a);
  const __m512i field = _mm512_srli_epi32(a, 23);
  const __mmask16 sub = _mm512_testn_epi32_mask(field, field);
  // |x| = 2^e (1 + frac / 2^23); a subnormal's leading one moved to bit 23.
  const __m512i lz = _mm512_lzcnt_epi32(a);
  const __m512i e = _mm512_mask_blend_epi32(sub, _mm512_sub_epi32(field, c.bias), _mm512_sub_epi32(c.sub_e, lz));
  const __m512i shifted = _mm512_sllv_epi32(a, _mm512_sub_epi32(lz, _mm512_set1_epi32(8)));
  const __m512i frac = _mm512_and_si512(_mm512_mask_blend_epi32(sub, a, shifted), c.mant_mask);
  // Regime k = floor(e / 2^es) clamped, exponent field ex, regime length r.
  const __m512i k_raw = _mm512_sra_epi32(e, c.es);
  const __m512i ex = _mm512_sub_epi32(e, _mm512_sll_epi32(k_raw, c.es));
  const __m512i k = _mm512_min_epi32(_mm512_max_epi32(k_raw, c.lo_k), c.hi_k);
  const __mmask16 kpos = _mm512_cmpge_epi32_mask(k, _mm512_setzero_si512());
  const __m512i r = _mm512_mask_blend_epi32(kpos, _mm512_sub_epi32(c.one, k), _mm512_add_epi32(k, c.two));
  const __m512i body = _mm512_or_si512(_mm512_sll_epi32(ex, c.es_left), _mm512_sll_epi32(frac, c.es_body));
  const __m512i regime = _mm512_mask_blend_epi32(kpos, _mm512_sllv_epi32(c.one, _mm512_sub_epi32(c.thirty_two, r)),
                                                 _mm512_sllv_epi32(c.ones, _mm512_sub_epi32(c.thirty_one, k)));
  const __m512i str = _mm512_or_si512(regime, _mm512_srlv_epi32(body, r));
  const __m512i low = _mm512_sllv_epi32(body, _mm512_sub_epi32(c.thirty_two, r));
  const __m512i kept = _mm512_srl_epi32(str, c.kept_right);
  const __mmask16 round_bit = _mm512_test_epi32_mask(_mm512_srl_epi32(str, c.round_right), c.one);
  const __mmask16 sticky = _mm512_test_epi32_mask(str, c.round_mask) | _mm512_test_epi32_mask(low, low);
  const __mmask16 inexact = round_bit | sticky;
  const __mmask16 odd = _mm512_test_epi32_mask(kept, c.one);
  __mmask16 up = posit_up<R>(round_bit, sticky, odd, neg);
  if constexpr (R == rounding::stochastic) {
    const __m512i top = _mm512_or_si512(_mm512_sll_epi32(str, c.top_left), _mm512_srl_epi32(low, c.low_right));
    const __m512i linear = _mm512_srl_epi32(top, c.linear_right);
    const __m512i threshold = _mm512_xor_si512(c.kmask, _mm512_and_si512(rnd, c.kmask));
    up = inexact & _mm512_cmpgt_epu32_mask(linear, threshold);
    core = inexact & _mm512_cmpgt_epi32_mask(r, c.fb_limit) & _mm512_cmpeq_epi32_mask(k, k_raw) &
           static_cast<__mmask16>(~special);
  }
  (void)rnd;
  const __m512i bumped = _mm512_mask_add_epi32(kept, up, kept, c.one);
  const __m512i mag = _mm512_min_epu32(_mm512_max_epu32(bumped, c.one), c.max_code);
  const __m512i code =
      _mm512_and_si512(_mm512_mask_sub_epi32(mag, neg, _mm512_setzero_si512(), mag), c.code_mask);
  return _mm512_mask_mov_epi32(_mm512_maskz_mov_epi32(static_cast<__mmask16>(~zero), code), special, c.nar);
}

/// The values of posit_round16<R> (quantize) of the lanes of 16 floats whose rounding
/// keeps a fraction bit: *easy marks them (normal floats, not inf or NaN, with fb =
/// n - 1 - r - es >= 0 fraction bits at their binade). On such a lane the code's last
/// n - 1 - r - es bits are the float's first fraction bits, so the rounding is the float's
/// own at bit d = 23 - fb (an add and a mask, a carry going into the next binade: 2^(e + 1),
/// the next code, never above maxpos); the code's last bit is bit d, except where fb = 0:
/// then it is the exponent field's last bit (e & 1, the float field's bit 23 inverted), or
/// with es = 0 the regime's terminating bit (1 for k < 0).
template <rounding R>
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i posit_value16(const posit_consts& c, __m512i x, __m512i rnd,
                                                          __mmask16& easy) noexcept {
  const __m512i a = _mm512_and_si512(x, c.abs_mask);
  const __m512i field = _mm512_srli_epi32(a, 23);
  const __m512i e = _mm512_sub_epi32(field, c.bias);
  const __m512i k = _mm512_sra_epi32(e, c.es);
  const __mmask16 kpos = _mm512_cmpge_epi32_mask(k, _mm512_setzero_si512());
  const __m512i r = _mm512_mask_blend_epi32(kpos, _mm512_sub_epi32(c.one, k), _mm512_add_epi32(k, c.two));
  const __m512i fb = _mm512_sub_epi32(c.fb_limit, r);
  easy = _mm512_test_epi32_mask(field, field) & _mm512_cmplt_epu32_mask(a, c.inf_bits) &
         _mm512_cmpge_epi32_mask(fb, _mm512_setzero_si512());
  const __m512i d = _mm512_sub_epi32(c.twenty_three, fb);  // in [0, 23] on easy lanes
  const __m512i keep = _mm512_sllv_epi32(c.ones, d);
  const __m512i ulp = _mm512_sllv_epi32(c.one, d);
  const __m512i dropped = _mm512_andnot_si512(keep, a);
  const __m512i half = _mm512_srli_epi32(ulp, 1);  // (0 when d = 0: nothing is dropped)
  const __mmask16 round_bit = _mm512_test_epi32_mask(dropped, half);
  const __mmask16 sticky = _mm512_test_epi32_mask(dropped, _mm512_sub_epi32(half, c.one)) &
                           _mm512_test_epi32_mask(half, half);
  const __mmask16 inexact = _mm512_test_epi32_mask(dropped, dropped);
  const __mmask16 at_zero = _mm512_cmpeq_epi32_mask(fb, _mm512_setzero_si512());
  const __mmask16 bit_d = _mm512_test_epi32_mask(a, ulp);
  const __mmask16 odd = (bit_d & static_cast<__mmask16>(~at_zero)) | (at_zero & c.odd_at_zero(bit_d, k));
  const __mmask16 neg = _mm512_movepi32_mask(x);
  __mmask16 up = posit_up<R>(round_bit, sticky, odd, neg);
  if constexpr (R == rounding::stochastic) {
    const __m512i top = _mm512_sllv_epi32(dropped, _mm512_sub_epi32(c.thirty_two, d));  // (0 when d = 0)
    const __m512i linear = _mm512_srl_epi32(top, c.linear_right);
    const __m512i threshold = _mm512_xor_si512(c.kmask, _mm512_and_si512(rnd, c.kmask));
    up = inexact & _mm512_cmpgt_epu32_mask(linear, threshold);
  }
  (void)rnd;
  const __m512i mag = _mm512_mask_add_epi32(_mm512_and_si512(a, keep), up, _mm512_and_si512(a, keep), ulp);
  return _mm512_or_si512(mag, _mm512_and_si512(x, c.sign_bit));
}

/// posit_decode_as<float> of 16 codes of a posit whose values are floats (fits_float).
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i posit_decode16(const posit_consts& c, __m512i codes) noexcept {
  const __m512i code = _mm512_and_si512(codes, c.code_mask);
  const __mmask16 neg = _mm512_test_epi32_mask(code, c.nar);
  const __m512i mag = _mm512_and_si512(_mm512_mask_sub_epi32(code, neg, _mm512_setzero_si512(), code), c.code_mask);
  const __m512i w = _mm512_sll_epi32(mag, c.dec_left);
  const __mmask16 ones = _mm512_movepi32_mask(w);
  const __m512i v = _mm512_mask_blend_epi32(ones, _mm512_or_si512(w, c.one), _mm512_xor_si512(w, c.ones));
  const __m512i run = _mm512_lzcnt_epi32(v);
  const __m512i k = _mm512_mask_blend_epi32(ones, _mm512_sub_epi32(_mm512_setzero_si512(), run),
                                            _mm512_sub_epi32(run, c.one));
  const __m512i rest = _mm512_sllv_epi32(w, _mm512_add_epi32(run, c.one));
  const __m512i ex = _mm512_srl_epi32(rest, c.dec_es_right);
  const __m512i exponent = _mm512_add_epi32(_mm512_sll_epi32(k, c.es), ex);
  const __m512i bits =
      _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(exponent, c.bias), 23),
                      _mm512_srli_epi32(_mm512_sll_epi32(rest, c.es), 9));
  const __m512i with_sign = _mm512_mask_or_epi32(bits, neg, bits, c.sign_bit);
  const __mmask16 is_zero = _mm512_testn_epi32_mask(code, code);
  const __mmask16 is_nar = _mm512_cmpeq_epi32_mask(code, c.nar);
  return _mm512_mask_mov_epi32(_mm512_maskz_mov_epi32(static_cast<__mmask16>(~is_zero), with_sign), is_nar, c.qnan);
}

/// Whether the AVX-512 posit kernels take posit p (every shift count below 32).
constexpr bool posit_kernel_takes(const posit_spec& p) noexcept { return p.n <= 31; }

/// The AVX-512 loop of posit_quantize (Quantize) and posit_encode from float, without
/// statistics, for posit_kernel_takes(p).
template <rounding R, class Out, bool Quantize>
struct posit_kernel : posit_round_base<posit_kernel<R, Out, Quantize>, R, Out, Quantize> {
  using base = posit_round_base<posit_kernel<R, Out, Quantize>, R, Out, Quantize>;
  using base::stochastic;

  template <random_generator G>
  CPD_TARGET_AVX512 CPD_NOINLINE CPD_FAST_NO_SANITIZE void loop(const float* in, Out* out, std::size_t n,
                                                              std::uint32_t lo0) const noexcept {
    const posit_consts c = make_posit_consts(this->p, this->rbits);
    vrandom<G> gen(this->key);  // (stochastic only)
    for (std::size_t i = 0; i < n; i += 16) {
      const __mmask16 mk = tail_mask(n - i);
      prefetch_ahead(in + i);
      const __m512i x = _mm512_maskz_loadu_epi32(mk, in + i);
      __m512i rnd = _mm512_setzero_si512();
      if constexpr (stochastic) rnd = gen.at(lo0 + static_cast<std::uint32_t>(i));
      if constexpr (Quantize) {
        __mmask16 easy = 0;
        const __m512i value = posit_value16<R>(c, x, rnd, easy);
        if ((easy & mk) == mk) {
          _mm512_mask_storeu_epi32(out + i, mk, value);
          continue;
        }
      }
      __mmask16 core = 0;
      const __m512i code = posit_round16<R>(c, x, rnd, core);
      if constexpr (Quantize) _mm512_mask_storeu_epi32(out + i, mk, posit_decode16(c, code));
      else store16<Out>::masked(out + i, mk, code);
      if constexpr (stochastic) {
        if ((core & mk) != 0) redo(x, out + i, static_cast<unsigned>(core & mk), rnd);
      }
    }
  }

  /// The lanes of `lanes` again, by the core, from their inputs x and words rnd (the
  /// registers: in place, the output has overwritten the input).
  CPD_TARGET_AVX512 CPD_NOINLINE void redo(__m512i x, Out* out, unsigned lanes, __m512i rnd) const noexcept {
    alignas(64) std::uint32_t words[16], inputs[16];
    _mm512_store_si512(words, rnd);
    _mm512_store_si512(inputs, x);
    this->redo_lanes(inputs, words, lanes, out);
  }
};

/// The AVX-512 loop of posit_decode to float (p.fits_float()); stray code bits as
/// posit_decode_kernel's.
template <class Code>
struct posit_decode_kernel {
  using in_type = Code;
  using out_type = float;
  static constexpr bool stochastic = false;
  static constexpr bool dispatch = false;
  static constexpr bool quantizes = false;

  posit_spec p;
  Code stray = 0;
  std::atomic<std::uint64_t>* seen = nullptr;

  CPD_TARGET_AVX512 CPD_NOINLINE CPD_FAST_NO_SANITIZE void loop(const Code* in, float* out, std::size_t n) const
      noexcept {
    const posit_consts c = make_posit_consts(p, 32);
    __m512i all = _mm512_setzero_si512();
    for (std::size_t i = 0; i < n; i += 16) {
      const __mmask16 mk = tail_mask(n - i);
      prefetch_ahead(in + i);
      __m512i codes;
      if constexpr (sizeof(Code) == 1) codes = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mk, in + i));
      else if constexpr (sizeof(Code) == 2) codes = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, in + i));
      else codes = _mm512_maskz_loadu_epi32(mk, in + i);
      all = _mm512_or_si512(all, codes);
      _mm512_mask_storeu_epi32(out + i, mk, posit_decode16(c, codes));
    }
    const auto bits = static_cast<Code>(_mm512_reduce_or_epi32(all));
    if ((bits & stray) != 0) seen->fetch_or(bits & stray, std::memory_order_relaxed);
  }

  template <class Counts>
  void run(const Code* in, float* out, std::size_t n, std::uint32_t, Counts& counts) const noexcept {
    loop(in, out, n);
    counts = Counts{};
  }
};

#endif  // CPD_FAST_KERNELS

}  // namespace cpd::detail::fast

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
