// SPDX-License-Identifier: MIT
#pragma once

// AVX2 kernels of the posit bulk calls (cpd/host/posit_bulk.hpp) from and to float: the
// 8-lane counterparts of avx512_posit.hpp's (read its comment for the method), in
// intrinsics for the same reason (GCC vectorizes no form of the posit core's loop). What
// AVX2 lacks is written out:
//  * masks are vectors of all-ones lanes (compares, vpblendvb), not mask registers;
//  * leading zeros without vplzcntd: the exact int -> float conversion of a value below
//    2^24 puts floor(log2) in its exponent field (a word of up to 31 bits first loses its
//    low 8 bits where it is 2^24 or more: the conversion is exact, floor(log2) unchanged);
//  * unsigned compares flip the sign bits first;
//  * the last, partial vector of a call goes through 8-lane buffers on the stack.
// Without statistics (those calls keep the core's loops). Held to the core bit for bit by
// tests/test_posit_bulk.cpp under CPD_ISA=avx2 (every mode, n = 2 .. 32, es = 0 .. 4,
// every code interval's midpoint and neighbours for n <= 16, in place).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/posit_round.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/host/detail/avx2_random.hpp>
#include <cpd/host/detail/fast_plan.hpp>
#include <cpd/host/detail/isa.hpp>
#include <cpd/host/detail/tuning.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cpd::detail::fast {

#if CPD_FAST_KERNELS

/// What the AVX-512 and AVX2 posit kernels derive from posit<n, es> and the random bits:
/// the per-lane values (each splats them) and the uniform shift counts (the same registers
/// for both; the consts structs derive from this).
struct posit_shifts {
  bool es_zero;
  __m128i es, es_left, es_body, kept_right, round_right, top_left, low_right, linear_right, dec_left, dec_es_right;
};
struct posit_lane_values {
  std::uint32_t lo_k, hi_k, max_code, code_mask, nar, round_mask, kmask, fb_limit;
};

inline posit_shifts posit_shifts_of(const posit_spec& p, int rbits) noexcept {
  const int n = p.n, es = p.es;
  posit_shifts s;
  s.es_zero = es == 0;
  s.es = _mm_cvtsi32_si128(es);
  s.es_left = _mm_cvtsi32_si128(32 - es);  // (32 when es = 0: the shift gives 0)
  s.es_body = _mm_cvtsi32_si128(9 - es);
  s.kept_right = _mm_cvtsi32_si128(33 - n);
  s.round_right = _mm_cvtsi32_si128(32 - n);
  s.top_left = _mm_cvtsi32_si128(n - 1);
  s.low_right = _mm_cvtsi32_si128(33 - n);
  s.linear_right = _mm_cvtsi32_si128(32 - clamp_random_bits(rbits));
  s.dec_left = _mm_cvtsi32_si128(33 - n);
  s.dec_es_right = _mm_cvtsi32_si128(32 - es);
  return s;
}

inline posit_lane_values posit_lane_values_of(const posit_spec& p, int rbits) noexcept {
  const int n = p.n, kb = clamp_random_bits(rbits);
  return {static_cast<std::uint32_t>(-(n - 1)),
          static_cast<std::uint32_t>(n - 2),
          p.max_code(),
          p.code_mask(),
          p.nar_code(),
          (1u << (32 - n)) - 1u,
          kb == 32 ? 0xFFFFFFFFu : ((std::uint32_t(1) << kb) - 1),
          static_cast<std::uint32_t>(n - 1 - p.es)};  // (no fraction bit kept when r > this)
}

/// What the AVX-512 and AVX2 kernels of posit_quantize (Quantize) and posit_encode share
/// (D: the kernel, whose loop<G> is its instruction set's code): the fields, the choice of
/// generator, and the core's redo of the lanes a vector marks.
template <class D, rounding R, class Out, bool Quantize>
struct posit_round_base {
  using in_type = float;
  using out_type = Out;
  static constexpr bool stochastic = R == rounding::stochastic;
  static constexpr bool dispatch = false;  // loop() is the instruction set's code itself
  static constexpr bool quantizes = Quantize;

  posit_spec p;
  std::uint32_t max_bits = 0;  ///< (the other kernels' field; no statistics here)
  random_key key{};
  int rbits = 32;

  /// The lanes j of `lanes` (bit j) again, by the core, from the float bits inputs[j] and
  /// words[j] (copies of the registers: in place, the output has overwritten the input).
  void redo_lanes(const std::uint32_t* inputs, const std::uint32_t* words, unsigned lanes, Out* out) const noexcept {
    for (unsigned j = 0; lanes != 0; ++j, lanes >>= 1) {
      if ((lanes & 1u) == 0) continue;
      const std::uint32_t code = posit_round_bits<R, float>(p, inputs[j], words[j], rbits);
      if constexpr (Quantize) out[j] = bit_cast<float>(posit_decode_as<float>(p, code));
      else out[j] = static_cast<Out>(code);
    }
  }

  template <class Counts>  // (detail::bulk_counts; no statistics here)
  void run(const float* in, Out* out, std::size_t n, std::uint32_t lo0, Counts& counts) const noexcept {
    const D& d = static_cast<const D&>(*this);
    counts = Counts{};
    if constexpr (stochastic) {
      if (key.generator == random_generator::v1) return d.template loop<random_generator::v1>(in, out, n, lo0);
    }
    d.template loop<random_generator::v2>(in, out, n, lo0);
  }
};

/// A vector of 8 copies of u.
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i splat8(std::uint32_t u) noexcept {
  return _mm256_set1_epi32(static_cast<int>(u));
}

/// The lanes of v that are not 0, as all-ones lanes.
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i nonzero8(__m256i v) noexcept {
  return _mm256_xor_si256(_mm256_cmpeq_epi32(v, _mm256_setzero_si256()), _mm256_set1_epi32(-1));
}

/// b where mask m is set, else a.
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i select8(__m256i m, __m256i a, __m256i b) noexcept {
  return _mm256_blendv_epi8(a, b, m);
}

/// a > b as unsigned 32-bit integers.
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i greater_u8(__m256i a, __m256i b) noexcept {
  const __m256i flip = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  return _mm256_cmpgt_epi32(_mm256_xor_si256(a, flip), _mm256_xor_si256(b, flip));
}

/// The bits of the 8 lanes of mask m (lane j: bit j).
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE unsigned lanes8(__m256i m) noexcept {
  return static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(m)));
}

/// The leading zeros of each lane v of 32 bits, 0 < v < 2^31 (see the file's comment).
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i leading_zeros8(__m256i v) noexcept {
  const __m256i small = _mm256_cmpeq_epi32(_mm256_srli_epi32(v, 24), _mm256_setzero_si256());
  const __m256i low = _mm256_andnot_si256(small, _mm256_set1_epi32(0xFF));
  const __m256i f = _mm256_castps_si256(_mm256_cvtepi32_ps(_mm256_andnot_si256(low, v)));
  return _mm256_sub_epi32(_mm256_set1_epi32(158), _mm256_srli_epi32(f, 23));
}

/// The constants of one posit<n, es> in vector registers (posit_consts' fields, 8 lanes).
struct posit_consts8 : posit_shifts {
  __m256i abs_mask, below_inf, mant_mask, one, ones, bias, sub_e, lo_k, hi_k, two, max_code, code_mask, nar,
      round_mask, kmask, thirty_two, thirty_one, twenty_three, fb_limit, sign_bit, qnan, eight;

  /// posit_consts::odd_at_zero with vector masks.
  CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i odd_at_zero(__m256i bit23, __m256i k) const noexcept {
    if (es_zero) return _mm256_cmpgt_epi32(_mm256_setzero_si256(), k);
    return _mm256_xor_si256(bit23, ones);
  }
};

CPD_TARGET_AVX2 CPD_ALWAYS_INLINE posit_consts8 make_posit_consts8(const posit_spec& p, int rbits) noexcept {
  posit_consts8 c;
  static_cast<posit_shifts&>(c) = posit_shifts_of(p, rbits);
  const posit_lane_values v = posit_lane_values_of(p, rbits);
  c.abs_mask = splat8(0x7FFFFFFFu);
  c.below_inf = splat8(0x7F7FFFFFu);
  c.mant_mask = splat8(0x7FFFFFu);
  c.one = splat8(1u);
  c.ones = splat8(0xFFFFFFFFu);
  c.bias = splat8(127u);
  c.sub_e = splat8(static_cast<std::uint32_t>(-118));  // a subnormal's exponent: -118 - lzcnt
  c.lo_k = splat8(v.lo_k);
  c.hi_k = splat8(v.hi_k);
  c.two = splat8(2u);
  c.max_code = splat8(v.max_code);
  c.code_mask = splat8(v.code_mask);
  c.nar = splat8(v.nar);
  c.round_mask = splat8(v.round_mask);
  c.kmask = splat8(v.kmask);
  c.thirty_two = splat8(32u);
  c.thirty_one = splat8(31u);
  c.twenty_three = splat8(23u);
  c.fb_limit = splat8(v.fb_limit);
  c.sign_bit = splat8(0x80000000u);
  c.qnan = splat8(0x7FC00000u);
  c.eight = splat8(8u);
  return c;
}

/// posit_up<R> with vector masks.
template <rounding R>
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i posit_up8(__m256i round_bit, __m256i sticky, __m256i odd,
                                                   __m256i neg) noexcept {
  const __m256i inexact = _mm256_or_si256(round_bit, sticky);
  if constexpr (R == rounding::nearest_even) return _mm256_and_si256(round_bit, _mm256_or_si256(sticky, odd));
  else if constexpr (R == rounding::nearest_away) return round_bit;
  else if constexpr (R == rounding::nearest_zero) return _mm256_and_si256(round_bit, sticky);
  else if constexpr (R == rounding::upward) return _mm256_andnot_si256(neg, inexact);
  else if constexpr (R == rounding::downward) return _mm256_and_si256(inexact, neg);
  else if constexpr (R == rounding::odd) return _mm256_andnot_si256(odd, inexact);
  else return _mm256_setzero_si256();  // toward_zero; stochastic
}

/// posit_round16<R> on 8 floats (bits x): the codes; *core: the lanes the core redoes.
template <rounding R>
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i posit_round8(const posit_consts8& c, __m256i x, __m256i rnd,
                                                       __m256i& core) noexcept {
  const __m256i zero_v = _mm256_setzero_si256();
  const __m256i neg = _mm256_srai_epi32(x, 31);
  const __m256i a = _mm256_and_si256(x, c.abs_mask);
  const __m256i special = _mm256_cmpgt_epi32(a, c.below_inf);
  const __m256i zero = _mm256_cmpeq_epi32(a, zero_v);
  const __m256i field = _mm256_srli_epi32(a, 23);
  const __m256i sub = _mm256_cmpeq_epi32(field, zero_v);
  // |x| = 2^e (1 + frac / 2^23); a subnormal's leading one moved to bit 23 (its
  // leading zeros from the exact conversion of its fraction field).
  const __m256i raw = _mm256_and_si256(a, c.mant_mask);
  const __m256i lz = _mm256_sub_epi32(
      _mm256_set1_epi32(158), _mm256_srli_epi32(_mm256_castps_si256(_mm256_cvtepi32_ps(raw)), 23));
  const __m256i e = select8(sub, _mm256_sub_epi32(field, c.bias), _mm256_sub_epi32(c.sub_e, lz));
  const __m256i shifted = _mm256_sllv_epi32(a, _mm256_sub_epi32(lz, c.eight));
  const __m256i frac = _mm256_and_si256(select8(sub, a, shifted), c.mant_mask);
  // Regime k = floor(e / 2^es) clamped, exponent field ex, regime length r.
  const __m256i k_raw = _mm256_sra_epi32(e, c.es);
  const __m256i ex = _mm256_sub_epi32(e, _mm256_sll_epi32(k_raw, c.es));
  const __m256i k = _mm256_min_epi32(_mm256_max_epi32(k_raw, c.lo_k), c.hi_k);
  const __m256i kpos = _mm256_cmpgt_epi32(k, c.ones);  // k >= 0
  const __m256i r = select8(kpos, _mm256_sub_epi32(c.one, k), _mm256_add_epi32(k, c.two));
  const __m256i body = _mm256_or_si256(_mm256_sll_epi32(ex, c.es_left), _mm256_sll_epi32(frac, c.es_body));
  const __m256i regime = select8(kpos, _mm256_sllv_epi32(c.one, _mm256_sub_epi32(c.thirty_two, r)),
                                 _mm256_sllv_epi32(c.ones, _mm256_sub_epi32(c.thirty_one, k)));
  const __m256i str = _mm256_or_si256(regime, _mm256_srlv_epi32(body, r));
  const __m256i low = _mm256_sllv_epi32(body, _mm256_sub_epi32(c.thirty_two, r));
  const __m256i kept = _mm256_srl_epi32(str, c.kept_right);
  const __m256i round_bit = nonzero8(_mm256_and_si256(_mm256_srl_epi32(str, c.round_right), c.one));
  const __m256i sticky = nonzero8(_mm256_or_si256(_mm256_and_si256(str, c.round_mask), low));
  const __m256i inexact = _mm256_or_si256(round_bit, sticky);
  const __m256i odd = nonzero8(_mm256_and_si256(kept, c.one));
  __m256i up = posit_up8<R>(round_bit, sticky, odd, neg);
  if constexpr (R == rounding::stochastic) {
    const __m256i top = _mm256_or_si256(_mm256_sll_epi32(str, c.top_left), _mm256_srl_epi32(low, c.low_right));
    const __m256i linear = _mm256_srl_epi32(top, c.linear_right);
    const __m256i threshold = _mm256_xor_si256(c.kmask, _mm256_and_si256(rnd, c.kmask));
    up = _mm256_and_si256(inexact, greater_u8(linear, threshold));
    core = _mm256_andnot_si256(special, _mm256_and_si256(_mm256_and_si256(inexact, _mm256_cmpgt_epi32(r, c.fb_limit)),
                                                         _mm256_cmpeq_epi32(k, k_raw)));
  }
  (void)rnd;
  const __m256i bumped = _mm256_sub_epi32(kept, up);  // (up: all-ones lanes, -1)
  const __m256i mag = _mm256_min_epu32(_mm256_max_epu32(bumped, c.one), c.max_code);
  const __m256i code = _mm256_and_si256(select8(neg, mag, _mm256_sub_epi32(zero_v, mag)), c.code_mask);
  return select8(special, _mm256_andnot_si256(zero, code), c.nar);
}

/// posit_value16<R> on 8 floats: the values where *easy marks the lane.
template <rounding R>
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i posit_value8(const posit_consts8& c, __m256i x, __m256i rnd,
                                                       __m256i& easy) noexcept {
  const __m256i zero_v = _mm256_setzero_si256();
  const __m256i a = _mm256_and_si256(x, c.abs_mask);
  const __m256i field = _mm256_srli_epi32(a, 23);
  const __m256i e = _mm256_sub_epi32(field, c.bias);
  const __m256i k = _mm256_sra_epi32(e, c.es);
  const __m256i kpos = _mm256_cmpgt_epi32(k, c.ones);
  const __m256i r = select8(kpos, _mm256_sub_epi32(c.one, k), _mm256_add_epi32(k, c.two));
  const __m256i fb = _mm256_sub_epi32(c.fb_limit, r);
  easy = _mm256_andnot_si256(_mm256_or_si256(_mm256_cmpeq_epi32(field, zero_v), _mm256_cmpgt_epi32(a, c.below_inf)),
                             _mm256_cmpgt_epi32(fb, c.ones));
  const __m256i d = _mm256_sub_epi32(c.twenty_three, fb);  // in [0, 23] on easy lanes
  const __m256i keep = _mm256_sllv_epi32(c.ones, d);
  const __m256i ulp = _mm256_sllv_epi32(c.one, d);
  const __m256i dropped = _mm256_andnot_si256(keep, a);
  const __m256i half = _mm256_srli_epi32(ulp, 1);  // (0 when d = 0: nothing is dropped)
  const __m256i round_bit = nonzero8(_mm256_and_si256(dropped, half));
  const __m256i sticky = _mm256_andnot_si256(_mm256_cmpeq_epi32(half, zero_v),
                                             nonzero8(_mm256_and_si256(dropped, _mm256_sub_epi32(half, c.one))));
  const __m256i inexact = nonzero8(dropped);
  const __m256i at_zero = _mm256_cmpeq_epi32(fb, zero_v);
  const __m256i bit_d = nonzero8(_mm256_and_si256(a, ulp));
  const __m256i odd = select8(at_zero, bit_d, c.odd_at_zero(bit_d, k));
  const __m256i neg = _mm256_srai_epi32(x, 31);
  __m256i up = posit_up8<R>(round_bit, sticky, odd, neg);
  if constexpr (R == rounding::stochastic) {
    const __m256i top = _mm256_sllv_epi32(dropped, _mm256_sub_epi32(c.thirty_two, d));  // (0 when d = 0)
    const __m256i linear = _mm256_srl_epi32(top, c.linear_right);
    const __m256i threshold = _mm256_xor_si256(c.kmask, _mm256_and_si256(rnd, c.kmask));
    up = _mm256_and_si256(inexact, greater_u8(linear, threshold));
  }
  (void)rnd;
  const __m256i mag = _mm256_add_epi32(_mm256_and_si256(a, keep), _mm256_and_si256(up, ulp));
  return _mm256_or_si256(mag, _mm256_and_si256(x, c.sign_bit));
}

/// posit_decode16 on 8 codes of a posit whose values are floats (fits_float).
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i posit_decode8(const posit_consts8& c, __m256i codes) noexcept {
  const __m256i zero_v = _mm256_setzero_si256();
  const __m256i code = _mm256_and_si256(codes, c.code_mask);
  const __m256i neg = nonzero8(_mm256_and_si256(code, c.nar));
  const __m256i mag = _mm256_and_si256(select8(neg, code, _mm256_sub_epi32(zero_v, code)), c.code_mask);
  const __m256i w = _mm256_sll_epi32(mag, c.dec_left);
  const __m256i ones = _mm256_srai_epi32(w, 31);
  // (below 2^31 either way: w | 1 where w's top bit is 0, ~w where it is 1)
  const __m256i v = select8(ones, _mm256_or_si256(w, c.one), _mm256_xor_si256(w, c.ones));
  const __m256i run = leading_zeros8(v);
  const __m256i k = select8(ones, _mm256_sub_epi32(zero_v, run), _mm256_sub_epi32(run, c.one));
  const __m256i rest = _mm256_sllv_epi32(w, _mm256_add_epi32(run, c.one));
  const __m256i ex = _mm256_srl_epi32(rest, c.dec_es_right);
  const __m256i exponent = _mm256_add_epi32(_mm256_sll_epi32(k, c.es), ex);
  const __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(exponent, c.bias), 23),
                                       _mm256_srli_epi32(_mm256_sll_epi32(rest, c.es), 9));
  const __m256i with_sign = _mm256_or_si256(bits, _mm256_and_si256(neg, c.sign_bit));
  const __m256i is_zero = _mm256_cmpeq_epi32(code, zero_v);
  const __m256i is_nar = _mm256_cmpeq_epi32(code, c.nar);
  return select8(is_nar, _mm256_andnot_si256(is_zero, with_sign), c.qnan);
}

/// 8 32-bit results stored as Out (narrowed for codes, which fit Out).
template <class Out>
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE void store8(Out* p, __m256i v) noexcept {
  if constexpr (sizeof(Out) == 4) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  } else if constexpr (sizeof(Out) == 2) {
    // packus works per 128-bit half: quadwords 0 and 2 hold lanes 0..3 and 4..7.
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(w));
  } else {
    const __m256i w = _mm256_packus_epi16(_mm256_packus_epi32(v, v), _mm256_setzero_si256());
    const auto lo = static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm256_castsi256_si128(w)));
    const auto hi = static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm256_extracti128_si256(w, 1)));
    const std::uint64_t both = lo | (static_cast<std::uint64_t>(hi) << 32);
    std::memcpy(p, &both, 8);
  }
}

/// 8 codes of Code widened to 32-bit lanes.
template <class Code>
CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i load8(const Code* p) noexcept {
  const auto* q = reinterpret_cast<const __m128i*>(p);
  if constexpr (sizeof(Code) == 1) return _mm256_cvtepu8_epi32(_mm_loadl_epi64(q));
  else if constexpr (sizeof(Code) == 2) return _mm256_cvtepu16_epi32(_mm_loadu_si128(q));
  else return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

/// Prefetches the line tuning::prefetch_distance floats' bytes past p (prefetch_ahead's).
CPD_ALWAYS_INLINE void prefetch_ahead8(const void* p) noexcept {
  _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) +
                                             tuning::prefetch_distance * sizeof(float)),
               _MM_HINT_T0);
}

/// The AVX2 loop of posit_quantize (Quantize) and posit_encode from float, without
/// statistics, for posit_kernel_takes(p) (posit_kernel's, 8 lanes).
template <rounding R, class Out, bool Quantize>
struct posit_kernel_avx2 : posit_round_base<posit_kernel_avx2<R, Out, Quantize>, R, Out, Quantize> {
  using base = posit_round_base<posit_kernel_avx2<R, Out, Quantize>, R, Out, Quantize>;
  using base::stochastic;

  /// The results of the 8 floats x (random words rnd) into out.
  CPD_TARGET_AVX2 CPD_ALWAYS_INLINE void eight(const posit_consts8& c, __m256i x, __m256i rnd, Out* out) const
      noexcept {
    if constexpr (Quantize) {
      __m256i easy;
      const __m256i value = posit_value8<R>(c, x, rnd, easy);
      if (lanes8(easy) == 0xFFu) {
        store8(out, value);
        return;
      }
    }
    __m256i core = _mm256_setzero_si256();
    const __m256i code = posit_round8<R>(c, x, rnd, core);
    if constexpr (Quantize) store8(out, posit_decode8(c, code));
    else store8(out, code);
    if constexpr (stochastic) {
      const unsigned redo_lanes = lanes8(core);
      if (redo_lanes != 0) redo(x, out, redo_lanes, rnd);
    }
  }

  template <random_generator G>
  CPD_TARGET_AVX2 CPD_NOINLINE CPD_FAST_NO_SANITIZE void loop(const float* in, Out* out, std::size_t n,
                                                            std::uint32_t lo0) const noexcept {
    const posit_consts8 c = make_posit_consts8(this->p, this->rbits);
    vrandom8<G> gen(this->key);  // (stochastic only)
    if constexpr (stochastic) gen.from(lo0);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      prefetch_ahead8(in + i);
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
      __m256i rnd = _mm256_setzero_si256();
      if constexpr (stochastic) rnd = gen.next();
      eight(c, x, rnd, out + i);
    }
    if (i < n) {  // the last m < 8 through buffers
      const std::size_t m = n - i;
      alignas(32) float xs[8] = {};
      alignas(32) Out outs[8] = {};
      std::memcpy(xs, in + i, m * sizeof(float));
      __m256i rnd = _mm256_setzero_si256();
      if constexpr (stochastic) rnd = gen.at(lo0 + static_cast<std::uint32_t>(i));
      eight(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(xs)), rnd, outs);
      std::memcpy(out + i, outs, m * sizeof(Out));
    }
  }

  /// The lanes of `lanes` again, by the core, from their inputs x and words rnd.
  CPD_TARGET_AVX2 CPD_NOINLINE void redo(__m256i x, Out* out, unsigned lanes, __m256i rnd) const noexcept {
    alignas(32) std::uint32_t words[8], inputs[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(words), rnd);
    _mm256_store_si256(reinterpret_cast<__m256i*>(inputs), x);
    this->redo_lanes(inputs, words, lanes, out);
  }
};

/// The AVX2 loop of posit_decode to float (p.fits_float()); stray code bits as
/// posit_decode_kernel's.
template <class Code>
struct posit_decode_kernel_avx2 {
  using in_type = Code;
  using out_type = float;
  static constexpr bool stochastic = false;
  static constexpr bool dispatch = false;
  static constexpr bool quantizes = false;

  posit_spec p;
  Code stray = 0;
  std::atomic<std::uint64_t>* seen = nullptr;

  CPD_TARGET_AVX2 CPD_NOINLINE CPD_FAST_NO_SANITIZE void loop(const Code* in, float* out, std::size_t n) const
      noexcept {
    const posit_consts8 c = make_posit_consts8(p, 32);
    __m256i all = _mm256_setzero_si256();
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      prefetch_ahead8(in + i);
      const __m256i codes = load8(in + i);
      all = _mm256_or_si256(all, codes);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), posit_decode8(c, codes));
    }
    if (i < n) {
      const std::size_t m = n - i;
      alignas(32) Code cs[8] = {};
      alignas(32) float outs[8];
      std::memcpy(cs, in + i, m * sizeof(Code));
      const __m256i codes = load8(cs);
      all = _mm256_or_si256(all, codes);
      _mm256_store_si256(reinterpret_cast<__m256i*>(outs), posit_decode8(c, codes));
      std::memcpy(out + i, outs, m * sizeof(float));
    }
    alignas(32) std::uint32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), all);
    std::uint32_t any = 0;
    for (std::uint32_t l : lanes) any |= l;
    const auto bits = static_cast<Code>(any);
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
