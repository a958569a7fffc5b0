// SPDX-License-Identifier: MIT
#pragma once

// NVFP4's array calls on the host (docs/scaling.md#nvfp4): nvfp4_encode, nvfp4_decode and
// nvfp4_quantize, with the format's arithmetic of <cpd/core/nvfp4.hpp>, in chunks of
// detail::nvfp4_chunk values:
//   1. each block's amax, E4M3 code and factor s * b, then x / factor (0 in a NaN block);
//   2. the E2M1 rounding of the quotients by the bulk kernels (cpd::quantize / cpd::encode,
//      saturating: the rounding core's bits in every mode, element i drawing
//      key.bits(0, first_index + i));
//   3. value * factor (quantize), the packing (encode), the counts.
// Steps 1 and 3 are loops compiled per instruction set (host/detail/lanes.hpp; AVX-512 bodies
// in intrinsics), step 2 is the bulk calls' own selection: every path gives the element-by-
// element definition's bits (tests/test_nvfp4.cpp holds them to torchao's formulas and to the
// scalar functions, on every instruction set). On AVX-512, nearest-even and stochastic
// rounding run the three steps in one pass per chunk (nvfp4_fused_avx512: a block of 16 is
// one vector, and E2M1's rounding a few vector operations, e2m1_round16). The calls run in
// the default floating-point environment (cpd/core/detail/fenv.hpp).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/nvfp4.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/core/stats.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/host/detail/isa.hpp>
#include <cpd/host/detail/lanes.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

// GCC 12's own AVX-512 intrinsics warn once inlined (GCC bug 105593; see avx512.hpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace cpd {
namespace detail {

/// Values per chunk of the array calls (a multiple of the block and of 2: whole bytes).
inline constexpr std::size_t nvfp4_chunk = 2048;
inline constexpr std::size_t nvfp4_chunk_blocks = nvfp4_chunk / nvfp4_block_size;

/// The counts of nvfp4_count, kept as integers by the loops.
struct nvfp4_counts {
  std::uint64_t zeros = 0, nan_inputs = 0, inf_inputs = 0, nan = 0, underflow = 0;

  void add_to(value_stats& st, std::size_t n) const noexcept {
    st.count += n;
    st.zeros += zeros;
    st.nan_inputs += nan_inputs;
    st.inf_inputs += inf_inputs;
    st.nan += nan;
    st.underflow += underflow;
  }
};

#if CPD_FAST_KERNELS
/// The counts of nvfp4_count in 16 lanes of 32 bits (a chunk adds at most 128 to a lane).
struct nvfp4_lane_counts {
  __m512i zeros, nan_inputs, inf_inputs, nan, underflow;
  __m512i abs, inf, ones;  // (the constants, held: set in the loop, GCC broadcasts them per block)

  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE nvfp4_lane_counts() noexcept
      : zeros(_mm512_setzero_si512()),
        nan_inputs(zeros),
        inf_inputs(zeros),
        nan(zeros),
        underflow(zeros),
        abs(_mm512_set1_epi32(0x7FFFFFFF)),
        inf(_mm512_set1_epi32(0x7F800000)),
        ones(_mm512_set1_epi32(1)) {}

  /// The classes of the lanes mk of x (NaN, inf, zero); returns the lanes of finite non-zero
  /// x, the only ones whose results count (nan_where, underflow_where).
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __mmask16 inputs(__m512 x, __mmask16 mk) noexcept {
    const __m512i b = _mm512_and_si512(_mm512_castps_si512(x), abs);
    nan_inputs = _mm512_mask_add_epi32(nan_inputs, _mm512_cmpgt_epu32_mask(b, inf) & mk, nan_inputs, ones);
    inf_inputs = _mm512_mask_add_epi32(inf_inputs, _mm512_cmpeq_epu32_mask(b, inf) & mk, inf_inputs, ones);
    zeros = _mm512_mask_add_epi32(zeros, _mm512_testn_epi32_mask(b, b) & mk, zeros, ones);
    return _mm512_cmplt_epu32_mask(b, inf) & _mm512_test_epi32_mask(b, b) & mk;
  }
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE void nan_where(__mmask16 k) noexcept {
    nan = _mm512_mask_add_epi32(nan, k, nan, ones);
  }
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE void underflow_where(__mmask16 k) noexcept {
    underflow = _mm512_mask_add_epi32(underflow, k, underflow, ones);
  }
  /// The lanes mk of x, whose results are NaN where y_nan and zero where y_zero.
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE void add(__m512 x, __mmask16 mk, __mmask16 y_nan, __mmask16 y_zero) noexcept {
    const __mmask16 fnz = inputs(x, mk);
    nan_where(fnz & y_nan);
    underflow_where(fnz & static_cast<__mmask16>(~y_nan) & y_zero);
  }

  /// c += the sums of the lanes.
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE void add_to(nvfp4_counts& c) const noexcept {
    alignas(64) std::uint32_t lane[16];
    std::uint64_t* const fields[5] = {&c.zeros, &c.nan_inputs, &c.inf_inputs, &c.nan, &c.underflow};
    const __m512i all[5] = {zeros, nan_inputs, inf_inputs, nan, underflow};
    for (int f = 0; f < 5; ++f) {
      _mm512_store_si512(lane, all[f]);
      for (std::uint32_t u : lane) *fields[f] += u;
    }
  }
};
#endif

/// nvfp4_count of one element without branches: x's class, and whether what it became is
/// NaN or zero (only a finite non-zero x counts those).
CPD_ALWAYS_INLINE void nvfp4_count_into(nvfp4_counts& c, float x, bool y_nan, bool y_zero) noexcept {
  const std::uint32_t b = bit_cast<std::uint32_t>(x) & 0x7FFFFFFFu;
  const bool finite_nonzero = (b < 0x7F800000u) & (b != 0);
  c.nan_inputs += b > 0x7F800000u;
  c.inf_inputs += b == 0x7F800000u;
  c.zeros += b == 0;
  c.nan += finite_nonzero & y_nan;
  c.underflow += finite_nonzero & !y_nan & y_zero;
}

/// nvfp4_finite_amax's bits: the largest finite magnitude of x[0, n) (0 for none).
struct nvfp4_finite_amax_loop {
  static CPD_ALWAYS_INLINE std::uint32_t run(const float* x, std::size_t n) noexcept {
    std::uint32_t m = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t b = bit_cast<std::uint32_t>(x[i]) & 0x7FFFFFFFu;
      const std::uint32_t f = b < 0x7F800000u ? b : 0u;
      m = f > m ? f : m;
    }
    return m;
  }
#if CPD_FAST_KERNELS
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE std::uint32_t run_avx512(const float* x, std::size_t n) noexcept {
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
    std::size_t i = 0;
    // (the magnitudes below inf's bits, others 0: a masked max)
    for (; i + 64 <= n; i += 64) {
      const __m512i b0 = _mm512_and_si512(_mm512_loadu_si512(x + i), abs),
                    b1 = _mm512_and_si512(_mm512_loadu_si512(x + i + 16), abs),
                    b2 = _mm512_and_si512(_mm512_loadu_si512(x + i + 32), abs),
                    b3 = _mm512_and_si512(_mm512_loadu_si512(x + i + 48), abs);
      m0 = _mm512_mask_max_epu32(m0, _mm512_cmplt_epu32_mask(b0, inf), m0, b0);
      m1 = _mm512_mask_max_epu32(m1, _mm512_cmplt_epu32_mask(b1, inf), m1, b1);
      m2 = _mm512_mask_max_epu32(m2, _mm512_cmplt_epu32_mask(b2, inf), m2, b2);
      m3 = _mm512_mask_max_epu32(m3, _mm512_cmplt_epu32_mask(b3, inf), m3, b3);
    }
    for (; i < n; i += 16) {
      const __mmask16 k = fast::tail_mask(n - i);
      const __m512i b = _mm512_and_si512(_mm512_maskz_loadu_epi32(k, x + i), abs);
      m0 = _mm512_mask_max_epu32(m0, _mm512_cmplt_epu32_mask(b, inf), m0, b);
    }
    return static_cast<std::uint32_t>(
        _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3))));
  }
#endif
};

/// The tensor scale of an array call: the given one (checked), or amax / 2688 from the
/// input's finite amax by the loop of instruction set `where` (nvfp4_resolve_scale's).
inline float nvfp4_scale_of(isa where, const char* who, const nvfp4_options& opt, const float* in, std::size_t n) {
  if (opt.tensor_scale != 0.0f) return nvfp4_resolve_scale(who, opt, in, n);
  return nvfp4_tensor_scale(bit_cast<float>(lanes<nvfp4_finite_amax_loop>(where, in, n)));
}

/// Step 1 over x[0, m) (m <= nvfp4_chunk; blocks of 16, the last may be shorter): codes[k]
/// and factors[k] of block k (nvfp4_scale_code, nvfp4_block_factor with the tensor scale s),
/// and y[i] = x[i] / factor (0 in a NaN block).
struct nvfp4_divide_loop {
  static CPD_ALWAYS_INLINE int run(const float* x, std::size_t m, float s, std::uint8_t* codes, float* factors,
                                   float* y) noexcept {
    for (std::size_t k = 0, lo = 0; lo < m; ++k, lo += nvfp4_block_size) {
      const std::size_t hi = lo + nvfp4_block_size < m ? lo + nvfp4_block_size : m;
      const std::uint8_t code = nvfp4_scale_code(bit_cast<float>(nvfp4_block_amax_bits(x + lo, hi - lo)), s);
      const float f = nvfp4_block_factor(code, s);
      codes[k] = code;
      factors[k] = f;
      const bool nan = code == nvfp4_nan_scale;
      for (std::size_t i = lo; i < hi; ++i) y[i] = nan ? 0.0f : x[i] / f;
    }
    return 0;
  }
#if CPD_FAST_KERNELS
  // The block codes sixteen blocks at a time: b = (amax / 6) / s clamped to [2^-6, 448], E4M3's
  // normal range, where rounding to nearest even is the integer method on b's bits (3 mantissa
  // bits kept, a carry moving into the exponent; 448 stays the largest), rebiased from 127 to
  // 7; the factor is s times that rounded b, a float.
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE void codes_avx512(const float* x, std::size_t m, float s,
                                                               std::uint8_t* codes, float* factors) noexcept {
    const std::size_t blocks = (m + nvfp4_block_size - 1) / nvfp4_block_size;
    alignas(64) std::uint32_t amax[nvfp4_chunk_blocks];
    block_amax_loop::run_avx512(x, m, nvfp4_block_size, amax);
    const __m512 six = _mm512_set1_ps(6.0f), vs = _mm512_set1_ps(s), lo_b = _mm512_set1_ps(nvfp4_min_block_scale),
                 hi_b = _mm512_set1_ps(448.0f);
    const __m512i inf = _mm512_set1_epi32(0x7F800000), half = _mm512_set1_epi32(0x7FFFF),
                  one = _mm512_set1_epi32(1), rebias = _mm512_set1_epi32(960), nan_code = _mm512_set1_epi32(0x7F);
    for (std::size_t k = 0; k < blocks; k += 16) {
      const std::size_t len = blocks - k < 16 ? blocks - k : 16;
      const __mmask16 mk = fast::tail_mask(len);
      const __m512i a = _mm512_maskz_loadu_epi32(mk, amax + k);
      const __mmask16 nonfinite = _mm512_cmpge_epu32_mask(a, inf);
      __m512 b = _mm512_div_ps(_mm512_div_ps(_mm512_castsi512_ps(a), six), vs);
      b = _mm512_min_ps(_mm512_max_ps(b, lo_b), hi_b);  // (b is not NaN where a is finite)
      const __m512i bb = _mm512_castps_si512(b);
      const __m512i r = _mm512_srli_epi32(
          _mm512_add_epi32(_mm512_add_epi32(bb, half), _mm512_and_si512(_mm512_srli_epi32(bb, 20), one)), 20);
      const __m512i code = _mm512_mask_mov_epi32(_mm512_sub_epi32(r, rebias), nonfinite, nan_code);
      const __m512 value = _mm512_castsi512_ps(_mm512_slli_epi32(r, 20));
      const __m512 f = _mm512_mask_mov_ps(_mm512_mul_ps(vs, value), nonfinite,
                                          _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
      _mm_mask_storeu_epi8(codes + k, mk, _mm512_cvtepi32_epi8(code));
      _mm512_mask_storeu_ps(factors + k, mk, f);
    }
  }
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE int run_avx512(const float* x, std::size_t m, float s,
                                                            std::uint8_t* codes, float* factors, float* y) noexcept {
    codes_avx512(x, m, s, codes, factors);
    const std::size_t blocks = (m + nvfp4_block_size - 1) / nvfp4_block_size;
    for (std::size_t k = 0; k < blocks; ++k) {
      const std::size_t lo = k * nvfp4_block_size, len = m - lo < 16 ? m - lo : 16;
      const __mmask16 mk = fast::tail_mask(len);
      const __mmask16 keep = codes[k] == nvfp4_nan_scale ? __mmask16(0) : mk;
      const __m512 q = _mm512_maskz_div_ps(keep, _mm512_maskz_loadu_ps(mk, x + lo), _mm512_set1_ps(factors[k]));
      _mm512_mask_storeu_ps(y + lo, mk, q);
    }
    return 0;
  }
#endif
};

/// Step 3 of quantize over m values: out[i] = v[i] * the factor of its block (the canonical
/// NaN in a NaN block), v the E2M1 values of step 2; the counts of x (x may be out).
struct nvfp4_product_loop {
  static CPD_ALWAYS_INLINE nvfp4_counts run(const float* x, const float* v, const std::uint8_t* codes,
                                            const float* factors, float* out, std::size_t m) noexcept {
    nvfp4_counts c;
    for (std::size_t i = 0; i < m; ++i) {
      const std::size_t k = i / nvfp4_block_size;
      const bool nan_block = codes[k] == nvfp4_nan_scale;
      const float y = nan_block ? bit_cast<float>(0x7FC00000u) : v[i] * factors[k];
      nvfp4_count_into(c, x[i], y != y, y == 0.0f);
      out[i] = y;
    }
    return c;
  }
#if CPD_FAST_KERNELS
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE nvfp4_counts run_avx512(const float* x, const float* v,
                                                                     const std::uint8_t* codes, const float* factors,
                                                                     float* out, std::size_t m) noexcept {
    const __m512 qnan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000));
    nvfp4_lane_counts lc;
    for (std::size_t lo = 0, k = 0; lo < m; lo += nvfp4_block_size, ++k) {
      const std::size_t len = m - lo < 16 ? m - lo : 16;
      const __mmask16 mk = fast::tail_mask(len);
      const __m512 y = codes[k] == nvfp4_nan_scale
                           ? qnan
                           : _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, v + lo), _mm512_set1_ps(factors[k]));
      lc.add(_mm512_maskz_loadu_ps(mk, x + lo), mk, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q),
             _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_EQ_OQ));
      _mm512_mask_storeu_ps(out + lo, mk, y);
    }
    nvfp4_counts c;
    lc.add_to(c);
    return c;
  }
#endif
};

/// Step 3 of encode over m values (m even, or the array's last piece): packed[j] = the codes
/// 2j and 2j + 1 of step 2 (low nibble first; 0 in a NaN block; a last odd byte's high nibble
/// 0); the counts of x, whose value is q's (NaN in a NaN block).
struct nvfp4_pack_loop {
  static CPD_ALWAYS_INLINE nvfp4_counts run(const float* x, const std::uint8_t* q, const std::uint8_t* codes,
                                            std::uint8_t* packed, std::size_t m) noexcept {
    nvfp4_counts c;
    for (std::size_t i = 0; i < m; i += 2) {
      unsigned pair = 0;
      for (std::size_t j = i; j < i + 2 && j < m; ++j) {
        const bool nan_block = codes[j / nvfp4_block_size] == nvfp4_nan_scale;
        const unsigned code = nan_block ? 0u : q[j];
        nvfp4_count_into(c, x[j], nan_block, (code & 7u) == 0);
        pair |= code << (4 * (j - i));
      }
      packed[i / 2] = static_cast<std::uint8_t>(pair);
    }
    return c;
  }
#if CPD_FAST_KERNELS
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE nvfp4_counts run_avx512(const float* x, const std::uint8_t* q,
                                                                     const std::uint8_t* codes, std::uint8_t* packed,
                                                                     std::size_t m) noexcept {
    const __m512i seven = _mm512_set1_epi32(7);
    const __m128i low_byte = _mm_set1_epi16(0x00FF);
    nvfp4_lane_counts lc;
    std::size_t lo = 0, k = 0;
    for (; lo + nvfp4_block_size <= m; lo += nvfp4_block_size, ++k) {  // whole blocks: 8 bytes each
      const bool nan_block = codes[k] == nvfp4_nan_scale;
      const __m128i v = nan_block ? _mm_setzero_si128() : _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + lo));
      const __m128i pairs = _mm_or_si128(_mm_and_si128(v, low_byte), _mm_slli_epi16(_mm_srli_epi16(v, 8), 4));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(packed + lo / 2), _mm_packus_epi16(pairs, _mm_setzero_si128()));
      // (a branch on the block, not a mask from an integer: those cost 10 %)
      const __mmask16 fnz = lc.inputs(_mm512_loadu_ps(x + lo), 0xFFFF);
      if (nan_block) lc.nan_where(fnz);
      else lc.underflow_where(fnz & _mm512_testn_epi32_mask(_mm512_cvtepu8_epi32(v), seven));
    }
    nvfp4_counts c = run(x + lo, q + lo, codes + k, packed + lo / 2, m - lo);  // (the last, partial block)
    lc.add_to(c);
    return c;
  }
#endif
};

#if CPD_FAST_KERNELS
/// E2M1 (saturating) of 16 quotients.
struct e2m1_lanes {
  __m512 value;  ///< the rounded quotient
  __m512i code;  ///< its E2M1 code, the sign in bit 3
};

/// E2M1 of the finite q, to nearest even or stochastically with the random words r (the
/// core's variant a with 32 bits: up when the dropped fraction's top 32 bits exceed ~r),
/// saturating. The quantum is 1/2 below 2 (the subnormals and the first binade), 1 in [2, 4)
/// and 2 from 4; t = |q| / quantum is exact (a power of two) and its rounded integer part n
/// the kept quanta, so the value is n * quantum and the code's magnitude n, n + 2 or n + 4
/// (n at most 4, the value at most 6, the code at most 7: saturation), with q's sign. The
/// parity of n is the code's, so rounding t to nearest even is E2M1's.
template <bool Stochastic>
CPD_TARGET_AVX512 CPD_ALWAYS_INLINE e2m1_lanes e2m1_round16(__m512 q, __m512i r) noexcept {
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(q), sign_bit);
  const __m512 a = _mm512_castsi512_ps(_mm512_andnot_si512(sign_bit, _mm512_castps_si512(q)));
  const __mmask16 ge2 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.0f), _CMP_GE_OQ);
  const __mmask16 ge4 = _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.0f), _CMP_GE_OQ);
  const __m512 one = _mm512_set1_ps(1.0f), half = _mm512_set1_ps(0.5f), two = _mm512_set1_ps(2.0f);
  const __m512 quantum = _mm512_mask_mov_ps(_mm512_mask_mov_ps(half, ge2, one), ge4, two);
  const __m512 t = _mm512_mul_ps(a, _mm512_mask_mov_ps(_mm512_mask_mov_ps(two, ge2, one), ge4, half));
  __m512 n;
  if constexpr (Stochastic) {
    n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    // (t - n is exact, and times 2^32 below 2^32: truncated, the top 32 bits of the fraction)
    const __m512i dropped = _mm512_cvttps_epu32(_mm512_mul_ps(_mm512_sub_ps(t, n), _mm512_set1_ps(4294967296.0f)));
    const __m512i not_r = _mm512_xor_si512(r, _mm512_set1_epi32(-1));
    n = _mm512_mask_add_ps(n, _mm512_cmpgt_epu32_mask(dropped, not_r), n, one);
  } else {
    (void)r;
    n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  n = _mm512_min_ps(n, _mm512_set1_ps(4.0f));
  const __m512 v = _mm512_min_ps(_mm512_mul_ps(n, quantum), _mm512_set1_ps(6.0f));
  const __m512i offset =
      _mm512_mask_mov_epi32(_mm512_maskz_mov_epi32(ge2, _mm512_set1_epi32(2)), ge4, _mm512_set1_epi32(4));
  const __m512i mag = _mm512_min_epu32(_mm512_add_epi32(_mm512_cvttps_epu32(n), offset), _mm512_set1_epi32(7));
  return {_mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign)),
          _mm512_or_si512(mag, _mm512_srli_epi32(sign, 28))};
}

/// Steps 1 to 3 of one chunk in one pass, on AVX-512, for nearest-even and stochastic
/// rounding (a block of 16 is one vector): step 1's block codes and factors, then per block
/// x / factor (0 in a NaN block), its E2M1 by e2m1_round16 (element i drawing the word of
/// counter c0 + i under key), and the product into out (quantize) or the codes packed
/// (Encode), with the counts of x. The same bits as the three steps (tests/test_nvfp4.cpp).
template <bool Stochastic, random_generator G, bool Encode>
struct nvfp4_fused_avx512 {
  /// Block k of the chunk, len values (Whole: 16, with plain loads and stores).
  template <bool Whole>
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE void block(const float* x, const std::uint8_t* codes,
                                                        const float* factors, float* out, std::uint8_t* packed,
                                                        std::size_t k, std::size_t len, fast::vrandom<G>& gen,
                                                        nvfp4_lane_counts& lc) noexcept {
    const std::size_t lo = k * nvfp4_block_size;
    const __mmask16 mk = Whole ? __mmask16(0xFFFF) : fast::tail_mask(len);
    const __m512 xv = Whole ? _mm512_loadu_ps(x + lo) : _mm512_maskz_loadu_ps(mk, x + lo);
    const __m512i r = Stochastic ? gen.next() : _mm512_setzero_si512();  // (a NaN block's too)
    // (branches on the block, not masks from integers: those cost 10 %)
    if (codes[k] == nvfp4_nan_scale) {  // every value NaN, every code 0
      lc.nan_where(lc.inputs(xv, mk));
      if constexpr (Encode) _mm_mask_storeu_epi8(packed + lo / 2, tail_bytes(len), _mm_setzero_si128());
      else _mm512_mask_storeu_ps(out + lo, mk, _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
      return;
    }
    const __m512 f = _mm512_set1_ps(factors[k]);
    const e2m1_lanes e = e2m1_round16<Stochastic>(Whole ? _mm512_div_ps(xv, f) : _mm512_maskz_div_ps(mk, xv, f), r);
    if constexpr (Encode) {
      // (in each 64-bit lane the codes 2j and 2j + 1: the byte code | code >> 28, then its
      // low bytes)
      const __m128i bytes = _mm512_cvtepi64_epi8(_mm512_or_si512(e.code, _mm512_srli_epi64(e.code, 28)));
      if (Whole) _mm_storel_epi64(reinterpret_cast<__m128i*>(packed + lo / 2), bytes);
      else _mm_mask_storeu_epi8(packed + lo / 2, tail_bytes(len), bytes);
      lc.underflow_where(lc.inputs(xv, mk) & _mm512_testn_epi32_mask(e.code, _mm512_set1_epi32(7)));
    } else {
      (void)packed;
      const __m512 y = _mm512_mul_ps(e.value, f);
      lc.underflow_where(lc.inputs(xv, mk) & _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_EQ_OQ));
      if (Whole) _mm512_storeu_ps(out + lo, y);
      else _mm512_mask_storeu_ps(out + lo, mk, y);
    }
  }

  /// The bytes of len codes.
  static CPD_ALWAYS_INLINE __mmask16 tail_bytes(std::size_t len) noexcept {
    return static_cast<__mmask16>((1u << ((len + 1) / 2)) - 1u);
  }

  CPD_TARGET_AVX512 static CPD_NOINLINE nvfp4_counts run(const float* x, std::size_t m, float s, random_key key,
                                                          std::uint32_t c0, std::uint8_t* codes, float* out,
                                                          std::uint8_t* packed) noexcept {
    float factors[nvfp4_chunk_blocks];
    nvfp4_divide_loop::codes_avx512(x, m, s, codes, factors);
    fast::vrandom<G> gen(key);
    if constexpr (Stochastic) gen.from(c0);
    nvfp4_lane_counts lc;
    const std::size_t whole = m / nvfp4_block_size;
    for (std::size_t k = 0; k < whole; ++k) block<true>(x, codes, factors, out, packed, k, nvfp4_block_size, gen, lc);
    if (m % nvfp4_block_size) block<false>(x, codes, factors, out, packed, whole, m % nvfp4_block_size, gen, lc);
    nvfp4_counts c;
    lc.add_to(c);
    return c;
  }
};
#endif

/// One chunk of nvfp4_quantize (Encode false) or nvfp4_encode by nvfp4_fused_avx512, where
/// that applies (the AVX-512 path, R nearest-even or stochastic; for stochastic the chunk's
/// counters first .. first + m - 1 within one block of 2^32): true when it ran.
template <rounding R, bool Encode>
bool nvfp4_fused_chunk(isa where, const float* x, std::size_t m, float s, const random_stream& stream,
                       std::uint64_t first, std::uint8_t* codes, float* out, std::uint8_t* packed, value_stats& st) {
#if CPD_FAST_KERNELS
  if constexpr (R == rounding::nearest_even || R == rounding::stochastic) {
    if (where != isa::avx512) return false;
    nvfp4_counts c;
    if constexpr (R == rounding::nearest_even) {
      c = nvfp4_fused_avx512<false, random_generator::v1, Encode>::run(x, m, s, random_key{}, 0, codes, out, packed);
    } else {
      const auto c0 = static_cast<std::uint32_t>(first);
      if (c0 + std::uint64_t(m) > (std::uint64_t(1) << 32)) return false;
      const random_key key = stream.key(static_cast<std::uint32_t>(first >> 32));
      c = stream.generator == random_generator::v1
              ? nvfp4_fused_avx512<true, random_generator::v1, Encode>::run(x, m, s, key, c0, codes, out, packed)
              : nvfp4_fused_avx512<true, random_generator::v2, Encode>::run(x, m, s, key, c0, codes, out, packed);
    }
    c.add_to(st, m);
    return true;
  }
#endif
  (void)where, (void)x, (void)m, (void)s, (void)stream, (void)first, (void)codes, (void)out, (void)packed, (void)st;
  return false;
}

/// nvfp4_decode over n values: out[i] = nvfp4_decoded(value of code i, factor of its block).
struct nvfp4_decode_loop {
  static CPD_ALWAYS_INLINE int run(const std::uint8_t* packed, const std::uint8_t* scales, float s, std::size_t n,
                                   float* out) noexcept {
    const float* values = nvfp4_values();
    for (std::size_t blk = 0, lo = 0, hi = 0; lo < n; ++blk, lo = hi) {
      hi = block_end(lo, nvfp4_block_size, n);
      const float factor = nvfp4_block_factor(scales[blk], s);
      for (std::size_t i = lo; i < hi; ++i)
        out[i] = nvfp4_decoded(values[(packed[i / 2] >> ((i & 1u) ? 4 : 0)) & 0x0Fu], factor);
    }
    return 0;
  }
#if CPD_FAST_KERNELS
  // A block's 8 bytes, each doubled, widened to 16 lanes and shifted by 0 or 4: the 16
  // codes; their values from the 16-entry table by a permute, times the factor.
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE int run_avx512(const std::uint8_t* packed, const std::uint8_t* scales,
                                                            float s, std::size_t n, float* out) noexcept {
    const __m512 table = _mm512_loadu_ps(nvfp4_values());
    const __m512i shifts = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0),
                  fifteen = _mm512_set1_epi32(15);
    const __m512 qnan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000));
    for (std::size_t lo = 0, blk = 0; lo < n; lo += nvfp4_block_size, ++blk) {
      const std::size_t len = n - lo < 16 ? n - lo : 16;
      const __mmask16 mk = fast::tail_mask(len);
      const __mmask16 bytes = static_cast<__mmask16>((1u << ((len + 1) / 2)) - 1u);
      const __m128i b = _mm_maskz_loadu_epi8(bytes, packed + lo / 2);
      const __m512i c = _mm512_and_si512(_mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b)), shifts),
                                         fifteen);
      const __m512 y = _mm512_mul_ps(_mm512_permutexvar_ps(c, table),
                                     _mm512_set1_ps(nvfp4_block_factor(scales[blk], s)));
      _mm512_mask_storeu_ps(out + lo, mk, _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), qnan));
    }
    return 0;
  }
#endif
};

}  // namespace detail

/// Encodes n values as NVFP4: packed[nvfp4_packed_size(n)] E2M1 code pairs (value 2j in the
/// low nibble of byte j, torchao's pack_uint4 order; a last odd byte's high nibble is 0),
/// scales[nvfp4_scale_count(n)] E4M3 block codes and *tensor_scale (s). Returns the counts
/// of what happened to the values (value_stats: underflow = finite non-zero values whose code
/// is +-0; nan = finite values of a block holding an inf or NaN).
template <rounding R = rounding::nearest_even>
value_stats nvfp4_encode(const float* in, std::size_t n, std::uint8_t* packed, std::uint8_t* scales,
                         float* tensor_scale, const nvfp4_options& opt = {}) {
  const detail::default_fp_env fp_env;
  const char* who = "cpd::nvfp4_encode";
  if (tensor_scale == nullptr) detail::fail_invalid(std::string(who) + ": tensor_scale is null");
  detail::check_nvfp4(who, n,
                      {{in, n * sizeof(float), "the input"},
                       {packed, nvfp4_packed_size(n), "the packed codes"},
                       {scales, nvfp4_scale_count(n), "the scales"},
                       {tensor_scale, sizeof(float), "the tensor scale"}});
  const detail::isa where = detail::active_isa();
  const float s = detail::nvfp4_scale_of(where, who, opt, in, n);
  *tensor_scale = s;
  value_stats st;
  float y[detail::nvfp4_chunk], factors[detail::nvfp4_chunk_blocks];
  std::uint8_t q[detail::nvfp4_chunk];
  bulk_options o = detail::keyed_options(opt.key);
  for (std::size_t lo = 0; lo < n; lo += detail::nvfp4_chunk) {
    const std::size_t m = n - lo < detail::nvfp4_chunk ? n - lo : detail::nvfp4_chunk;
    std::uint8_t* codes = scales + lo / nvfp4_block_size;
    if (detail::nvfp4_fused_chunk<R, true>(where, in + lo, m, s, opt.key, opt.first_index + lo, codes, nullptr,
                                           packed + lo / 2, st))
      continue;
    detail::lanes<detail::nvfp4_divide_loop>(where, in + lo, m, s, codes, +factors, +y);
    o.offset = opt.first_index + lo;
    encode<nvfp4_element, R, overflow::saturate>(execution::seq, static_cast<const float*>(y), +q, m, o);
    detail::lanes<detail::nvfp4_pack_loop>(where, in + lo, static_cast<const std::uint8_t*>(q),
                                           static_cast<const std::uint8_t*>(codes), packed + lo / 2, m)
        .add_to(st, m);
  }
  return st;
}

/// Decodes NVFP4: out[i] = value(code i) * (tensor_scale * value(block scale)) in float32
/// (NaN for a block whose scale code is a NaN). Any byte is a valid code pair.
inline void nvfp4_decode(const std::uint8_t* packed, const std::uint8_t* scales, float tensor_scale, std::size_t n,
                         float* out) {
  const detail::default_fp_env fp_env;
  detail::check_nvfp4("cpd::nvfp4_decode", n,
                      {{packed, nvfp4_packed_size(n), "the packed codes"},
                       {scales, nvfp4_scale_count(n), "the scales"},
                       {out, n * sizeof(float), "the output"}});
  detail::lanes<detail::nvfp4_decode_loop>(detail::active_isa(), packed, scales, tensor_scale, n, out);
}

/// NVFP4 fake quantization: out = decode(encode(in)) (in == out allowed), with the counts of
/// nvfp4_encode.
template <rounding R = rounding::nearest_even>
value_stats nvfp4_quantize(const float* in, float* out, std::size_t n, const nvfp4_options& opt = {}) {
  const detail::default_fp_env fp_env;
  const char* who = "cpd::nvfp4_quantize";
  detail::check_nvfp4(who, n, {{in, n * sizeof(float), "the input"}, {out, n * sizeof(float), "the output"}}, true);
  const detail::isa where = detail::active_isa();
  const float s = detail::nvfp4_scale_of(where, who, opt, in, n);
  value_stats st;
  float y[detail::nvfp4_chunk], factors[detail::nvfp4_chunk_blocks];
  std::uint8_t codes[detail::nvfp4_chunk_blocks];
  bulk_options o = detail::keyed_options(opt.key);
  for (std::size_t lo = 0; lo < n; lo += detail::nvfp4_chunk) {
    const std::size_t m = n - lo < detail::nvfp4_chunk ? n - lo : detail::nvfp4_chunk;
    if (detail::nvfp4_fused_chunk<R, false>(where, in + lo, m, s, opt.key, opt.first_index + lo, +codes, out + lo,
                                            nullptr, st))
      continue;
    detail::lanes<detail::nvfp4_divide_loop>(where, in + lo, m, s, +codes, +factors, +y);
    o.offset = opt.first_index + lo;
    quantize<nvfp4_element, R, overflow::saturate>(execution::seq, static_cast<const float*>(y), +y, m, o);
    detail::lanes<detail::nvfp4_product_loop>(where, in + lo, static_cast<const float*>(y),
                                              static_cast<const std::uint8_t*>(codes),
                                              static_cast<const float*>(factors), out + lo, m)
        .add_to(st, m);
  }
  return st;
}

}  // namespace cpd

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
