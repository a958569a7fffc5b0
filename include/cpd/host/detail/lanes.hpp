// SPDX-License-Identifier: MIT
#pragma once

// The elementwise float loops of the exchange (cpd/exchange/protocol.hpp) between
// its bulk calls: a power-of-two scale, the float sums rounded to odd, canonical
// NaNs, the unscaling of results. Like the bulk loops (cpd/host/detail/run.hpp),
// each loop is compiled for the baseline, AVX2 and AVX-512 from one body and
// called for the instruction set the selector chose (host/detail/select.hpp); the bodies are plain float
// arithmetic written without branches (conditions as integer masks), which the
// compiler vectorizes at -O3; the two loops of every hop (the scale and the odd
// sum) also have an AVX-512 body in intrinsics (run_avx512), vector at any
// optimization level. Every body is IEEE operations in the default floating-point
// environment (the caller holds a default_fp_env scope) and integer operations on
// their bits, so every instruction set gives the same bits (tests/test_lanes.cpp
// holds each to the element-by-element operations).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/random.hpp>
#include <cpd/host/detail/avx512_random.hpp>
#include <cpd/host/detail/fast_plan.hpp>
#include <cpd/host/detail/isa.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

// GCC 12's own AVX-512 intrinsics warn once inlined (GCC bug 105593; see avx512.hpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace cpd::detail {

template <class L, class... A>
CPD_NOINLINE auto lanes_baseline(A... a) noexcept {
  return L::run(a...);
}

#if CPD_ISA_DISPATCH
template <class L, class... A>
CPD_TARGET_AVX2_VECTOR CPD_NOINLINE auto lanes_avx2(A... a) noexcept {
  return L::run(a...);
}

template <class L, class = void>
struct has_avx512_body : std::false_type {};
template <class L>
struct has_avx512_body<L, std::void_t<decltype(&L::run_avx512)>> : std::true_type {};

template <class L, class... A>
CPD_TARGET_AVX512 CPD_NOINLINE auto lanes_avx512(A... a) noexcept {
  if constexpr (has_avx512_body<L>::value) return L::run_avx512(a...);
  else return L::run(a...);
}
#endif

/// L::run(a...) compiled for the instruction set `where` (the one the selector chose:
/// host/detail/select.hpp).
template <class L, class... A>
auto lanes(isa where, A... a) noexcept {
#if CPD_ISA_DISPATCH
  switch (where) {
    case isa::avx512: return lanes_avx512<L>(a...);
    case isa::avx2: return lanes_avx2<L>(a...);
    case isa::baseline: break;
  }
#else
  (void)where;
#endif
  return lanes_baseline<L>(a...);
}

/// y[j] = x[j] * f1 * f2 (f1, f2 powers of two, normal floats); true when every product
/// is exact: a normal float, or x[j] == 0. (With f1 and f2 on the same side of 1 a
/// normal final product means an exact intermediate one.)
struct scale_pow2_loop {
  static CPD_ALWAYS_INLINE bool run(const float* x, float f1, float f2, float* y, std::size_t n) noexcept {
    std::int32_t bad = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const float v = x[j] * f1 * f2;
      const std::int32_t a = bit_cast<std::int32_t>(v) & 0x7FFFFFFF;
      const std::int32_t nonzero = -((bit_cast<std::int32_t>(x[j]) & 0x7FFFFFFF) != 0);
      bad |= (-(a < 0x00800000) | -(a > 0x7F7FFFFF)) & nonzero;  // not normal, x not zero
      y[j] = v;
    }
    return bad == 0;
  }
#if CPD_FAST_KERNELS
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE bool run_avx512(const float* x, float f1, float f2, float* y,
                                                             std::size_t n) noexcept {
    const __m512 v1 = _mm512_set1_ps(f1), v2 = _mm512_set1_ps(f2);
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), tiny = _mm512_set1_epi32(0x00800000),
                  big = _mm512_set1_epi32(0x7F7FFFFF);
    __mmask16 bad = 0;
    for (std::size_t j = 0; j < n; j += 16) {
      const __mmask16 m = fast::tail_mask(n - j);
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + j);
      const __m512 v = _mm512_mul_ps(_mm512_mul_ps(xv, v1), v2);
      const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), abs);
      const __mmask16 nonzero = _mm512_test_epi32_mask(_mm512_castps_si512(xv), abs);
      bad |= (_mm512_cmplt_epu32_mask(a, tiny) | _mm512_cmpgt_epu32_mask(a, big)) & nonzero;
      _mm512_mask_storeu_ps(y + j, m, v);
    }
    return bad == 0;
  }
#endif
};

/// The largest of the n magnitudes |g[j]| as float bits (an unsigned maximum: a NaN's bits
/// are above +inf's).
struct amax_loop {
  static CPD_ALWAYS_INLINE std::uint32_t run(const float* g, std::size_t n) noexcept {
    std::uint32_t m = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t a = bit_cast<std::uint32_t>(g[i]) & 0x7FFFFFFFu;
      m = a > m ? a : m;
    }
    return m;
  }
#if CPD_FAST_KERNELS
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE std::uint32_t run_avx512(const float* g, std::size_t n) noexcept {
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF);
    __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
    std::size_t i = 0;
    // Four chains: a memory stream, not a dependency chain. (No software prefetch: the
    // hardware's reads a long stream at ~27 GB/s here, a prefetch 4 KiB ahead at ~19.)
    for (; i + 64 <= n; i += 64) {
      m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(g + i), abs));
      m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(g + i + 16), abs));
      m2 = _mm512_max_epu32(m2, _mm512_and_si512(_mm512_loadu_si512(g + i + 32), abs));
      m3 = _mm512_max_epu32(m3, _mm512_and_si512(_mm512_loadu_si512(g + i + 48), abs));
    }
    for (; i < n; i += 16) {
      const __mmask16 k = fast::tail_mask(n - i);
      m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_maskz_loadu_epi32(k, g + i), abs));
    }
    return static_cast<std::uint32_t>(
        _mm512_reduce_max_epu32(_mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3))));
  }
#endif
};

/// The blocks' amax bits (NaN's above inf's) of x[0, m) in blocks of k: amax[b], b < ceil(m / k).
struct block_amax_loop {
  static CPD_ALWAYS_INLINE int run(const float* x, std::size_t m, std::size_t k, std::uint32_t* amax) noexcept {
    for (std::size_t lo = 0, b = 0; lo < m; lo += k, ++b) {
      const std::size_t hi = lo + k < m ? lo + k : m;
      std::uint32_t a = 0;
      for (std::size_t i = lo; i < hi; ++i) {
        const std::uint32_t v = bit_cast<std::uint32_t>(x[i]) & 0x7FFFFFFFu;
        a = v > a ? v : a;
      }
      amax[b] = a;
    }
    return 0;
  }
#if CPD_FAST_KERNELS
  /// In each 128-bit part: [max(a0, a1), max(a2, a3), max(b0, b1), max(b2, b3)].
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE __m512i pairs(__m512i a, __m512i b) noexcept {
    const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
    return _mm512_max_epu32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x88)),
                            _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xDD)));
  }

  /// Lane j: the largest lane of v[j] (16 vectors reduced together: 15 max and 31 shuffles,
  /// where one reduction each costs 16 instructions in a chain). Level by level, the halves,
  /// then quarters... of pairs of vectors are maxed side by side; at the end lane 4c + j holds
  /// the reduction of v[4j + c], which one permute puts in lane 4j + c.
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE __m512i reduce16(const __m512i* v) noexcept {
    __m512i w[8], u[4], t[2];
    for (int i = 0; i < 8; ++i)  // lanes 0-7: v[2i]'s halves maxed; 8-15: v[2i + 1]'s
      w[i] = _mm512_max_epu32(_mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0x44),
                              _mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; ++i)  // 128-bit part c: 4 lanes of v[4i + c]
      u[i] = _mm512_max_epu32(_mm512_shuffle_i64x2(w[2 * i], w[2 * i + 1], 0x88),
                              _mm512_shuffle_i64x2(w[2 * i], w[2 * i + 1], 0xDD));
    t[0] = pairs(u[0], u[1]);
    t[1] = pairs(u[2], u[3]);
    const __m512i r = pairs(t[0], t[1]);  // lane 4c + j: v[4j + c]
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), r);
  }

  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE int run_avx512(const float* x, std::size_t m, std::size_t k,
                                                            std::uint32_t* amax) noexcept {
    if (k < 16) return run(x, m, k, amax);  // (plain code: a masked vector and a reduction per block cost more)
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF);
    std::size_t lo = 0, b = 0;
    if (k % 16 == 0) {  // 16 whole blocks at a time
      for (; lo + 16 * k <= m; lo += 16 * k, b += 16) {
        __m512i v[16];
        for (int j = 0; j < 16; ++j) {
          const float* p = x + lo + static_cast<std::size_t>(j) * k;
          __m512i a = _mm512_and_si512(_mm512_loadu_si512(p), abs);
          for (std::size_t i = 16; i < k; i += 16)
            a = _mm512_max_epu32(a, _mm512_and_si512(_mm512_loadu_si512(p + i), abs));
          v[j] = a;
        }
        _mm512_storeu_si512(amax + b, reduce16(v));
      }
    }
    for (; lo < m; lo += k, ++b) {
      const std::size_t hi = lo + k < m ? lo + k : m;
      __m512i a = _mm512_setzero_si512();
      for (std::size_t i = lo; i < hi; i += 16) {
        const __mmask16 mk = fast::tail_mask(hi - i);
        a = _mm512_max_epu32(a, _mm512_and_si512(_mm512_maskz_loadu_epi32(mk, x + i), abs));
      }
      amax[b] = static_cast<std::uint32_t>(_mm512_reduce_max_epu32(a));
    }
    return 0;
  }
#endif
};

/// Flags of odd_sum_loop.
enum : unsigned {
  odd_sum_overflow = 1,  ///< the sum of two finite floats overflowed float
  odd_sum_nan = 2        ///< some sum is NaN
};

/// t[j] = a[j] + b[j] rounded to odd in float, exactly (TwoSum gives the error: the
/// float sum, one ulp toward the exact sum when it is inexact and even); a NaN sum is
/// the canonical +qNaN. The element-by-element add_odd_float (cpd/reduce/sum.hpp)
/// without its branches. Returns odd_sum_* flags.
struct odd_sum_loop {
  static CPD_ALWAYS_INLINE unsigned run(const float* a, const float* b, float* t, std::size_t n) noexcept {
    std::int32_t over = 0, nan = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const float x = a[j], y = b[j];
      const float s = x + y;
      const float bb = s - x;
      const float err = (x - (s - bb)) + (y - bb);
      const std::int32_t u = bit_cast<std::int32_t>(s), e = bit_cast<std::int32_t>(err);
      const std::int32_t mag = u & 0x7FFFFFFF;
      const std::int32_t finite = -(mag < 0x7F800000);
      const std::int32_t is_nan = -(mag > 0x7F800000);
      const std::int32_t fix = finite & -((e & 0x7FFFFFFF) != 0) & ((u & 1) - 1);  // inexact and even
      const std::int32_t dir = ((e ^ u) >> 31) | 1;  // +1: away from zero (err has s's sign), -1: toward
      const std::int32_t r = u + (fix & dir);
      over |= ~finite & -((bit_cast<std::int32_t>(x) & 0x7F800000) != 0x7F800000) &
              -((bit_cast<std::int32_t>(y) & 0x7F800000) != 0x7F800000);
      nan |= is_nan;
      t[j] = bit_cast<float>((r & ~is_nan) | (0x7FC00000 & is_nan));
    }
    return (over != 0 ? odd_sum_overflow : 0u) | (nan != 0 ? odd_sum_nan : 0u);
  }
#if CPD_FAST_KERNELS
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE unsigned run_avx512(const float* a, const float* b, float* t,
                                                                 std::size_t n) noexcept {
    const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000),
                  one = _mm512_set1_epi32(1), qnan = _mm512_set1_epi32(0x7FC00000);
    __mmask16 over = 0, nan = 0;
    for (std::size_t j = 0; j < n; j += 16) {
      const __mmask16 m = fast::tail_mask(n - j);
      const __m512 x = _mm512_maskz_loadu_ps(m, a + j), y = _mm512_maskz_loadu_ps(m, b + j);
      const __m512 s = _mm512_add_ps(x, y);
      const __m512 bb = _mm512_sub_ps(s, x);
      const __m512 err = _mm512_add_ps(_mm512_sub_ps(x, _mm512_sub_ps(s, bb)), _mm512_sub_ps(y, bb));
      const __m512i u = _mm512_castps_si512(s), e = _mm512_castps_si512(err);
      const __m512i mag = _mm512_and_si512(u, abs);
      const __mmask16 finite = _mm512_cmplt_epu32_mask(mag, inf);
      const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(mag, inf);
      const __mmask16 fix = finite & _mm512_test_epi32_mask(e, abs) & _mm512_testn_epi32_mask(u, one);
      const __m512i dir = _mm512_or_si512(_mm512_srai_epi32(_mm512_xor_si512(e, u), 31), one);
      __m512i r = _mm512_mask_add_epi32(u, fix, u, dir);
      r = _mm512_mask_mov_epi32(r, is_nan, qnan);
      const __mmask16 fx = _mm512_cmpneq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), inf), inf);
      const __mmask16 fy = _mm512_cmpneq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(y), inf), inf);
      over |= static_cast<__mmask16>(~finite) & fx & fy & m;
      nan |= is_nan & m;
      _mm512_mask_storeu_epi32(t + j, m, r);
    }
    return (over != 0 ? odd_sum_overflow : 0u) | (nan != 0 ? odd_sum_nan : 0u);
  }
#endif
};

/// t[j] = double(a[j]) + double(b[j]) rounded to odd in double, exactly (add_odd of the
/// widened floats, cpd/core/float.hpp, by TwoSum in double without branches: the double
/// sum, one ulp toward the exact sum when it is inexact and even). inf and NaN as the sum
/// gives them (two floats never overflow a double).
struct odd_sum_double_loop {
  static CPD_ALWAYS_INLINE int run(const float* a, const float* b, double* t, std::size_t n) noexcept {
    for (std::size_t j = 0; j < n; ++j) {
      const double x = a[j], y = b[j];
      const double s = x + y;
      const double bb = s - x;
      const double err = (x - (s - bb)) + (y - bb);
      const std::int64_t u = bit_cast<std::int64_t>(s), e = bit_cast<std::int64_t>(err);
      const std::int64_t finite = -std::int64_t((u & 0x7FFFFFFFFFFFFFFF) < 0x7FF0000000000000);
      const std::int64_t fix = finite & -std::int64_t((e & 0x7FFFFFFFFFFFFFFF) != 0) & ((u & 1) - 1);
      const std::int64_t dir = ((e ^ u) >> 63) | 1;  // +1: away from zero (err has s's sign), -1: toward
      t[j] = bit_cast<double>(u + (fix & dir));
    }
    return 0;
  }
};

/// s[j], or the canonical +qNaN where s[j] is a NaN.
struct canonical_nan_loop {
  static CPD_ALWAYS_INLINE int run(float* s, std::size_t n) noexcept {
    for (std::size_t j = 0; j < n; ++j) {
      const std::int32_t u = bit_cast<std::int32_t>(s[j]);
      const std::int32_t is_nan = -((u & 0x7FFFFFFF) > 0x7F800000);
      s[j] = bit_cast<float>((u & ~is_nan) | (0x7FC00000 & is_nan));
    }
    return 0;
  }
};

/// out[j] = the word of counter lo + j under key (generator G), j < n, lo + n <= 2^32: the
/// AVX-512 generator's 16 lanes, else fill_random_bits.
template <random_generator G>
struct random_fill_loop {
  static CPD_ALWAYS_INLINE int run(random_key key, std::uint32_t lo, std::uint32_t n, std::uint32_t* out) noexcept {
    fill_random_bits<G>(key, lo, n, out);
    return 0;
  }
#if CPD_FAST_KERNELS
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE int run_avx512(random_key key, std::uint32_t lo, std::uint32_t n,
                                                            std::uint32_t* out) noexcept {
    fast::vrandom<G> gen(key);
    gen.from(lo);
    std::uint32_t j = 0;
    for (; j + 16 <= n; j += 16) _mm512_storeu_si512(out + j, gen.next());
    if (j < n) _mm512_mask_storeu_epi32(out + j, static_cast<__mmask16>((1u << (n - j)) - 1u), gen.next());
    return 0;
  }
#endif
};

/// Stochastic rounding to F, with 32 random bits, of the double sums t[j] (rounded to odd:
/// odd_sum_double_loop's) where |t[j]| is zero or a normal value of F at most F's max: there
/// the dropped bits are the low 52 - M bits of the double, and the integer method (the random
/// bits aligned with them, added; the carry out of the dropped field is the core's "remk >
/// kmask ^ rnd"; then cleared) gives the core's result, narrowed to float exactly (+0 for a
/// zero in a format without -0). Elsewhere (F's subnormals, beyond max, inf, NaN) out[j] is
/// left and bad[j] set, for the core. Returns how many are bad.
template <class F>
struct stochastic_double_sum_loop {
  static constexpr int d0 = 52 - F::spec.M;
  static constexpr int left = d0 > 32 ? d0 - 32 : 0, right = d0 < 32 ? 32 - d0 : 0;
  static constexpr std::uint64_t low = (std::uint64_t(1) << d0) - 1;
  static constexpr std::uint64_t emin_bits = static_cast<std::uint64_t>(F::spec.emin + 1023) << 52;
  static constexpr std::uint64_t max_bits = F::spec.max_bits_f64;
  static constexpr std::uint64_t zero_sign = F::spec.enc == encoding_kind::fnuz ? 0 : 0x8000000000000000u;

  static CPD_ALWAYS_INLINE std::size_t run(const double* t, const std::uint32_t* rnd, float* out, unsigned char* bad,
                                           std::size_t n) noexcept {
    std::size_t nbad = 0;
    for (std::size_t j = 0; j < n; ++j) {
      const std::uint64_t u = bit_cast<std::uint64_t>(t[j]);
      const std::uint64_t a = u & 0x7FFFFFFFFFFFFFFFu;
      const bool ok = a == 0 || (a >= emin_bits && a <= max_bits);
      const std::uint64_t r = (a + ((static_cast<std::uint64_t>(rnd[j]) << left) >> right)) & ~low;
      const std::uint64_t sign = u & (r == 0 ? zero_sign : 0x8000000000000000u);
      const float v = static_cast<float>(bit_cast<double>(r | sign));
      out[j] = ok ? v : out[j];
      bad[j] = static_cast<unsigned char>(!ok);
      nbad += !ok;
    }
    return nbad;
  }
};

/// out[j] = float(double(v[j]) * inverse), divided by w in float when w != 1; a NaN is the
/// canonical +qNaN.
struct unscale_loop {
  static CPD_ALWAYS_INLINE int run(const float* v, double inverse, float w, float* out, std::size_t n) noexcept {
    if (w != 1.0f) {
      for (std::size_t j = 0; j < n; ++j) out[j] = static_cast<float>(static_cast<double>(v[j]) * inverse) / w;
    } else {
      for (std::size_t j = 0; j < n; ++j) out[j] = static_cast<float>(static_cast<double>(v[j]) * inverse);
    }
    return canonical_nan_loop::run(out, n);
  }
};

}  // namespace cpd::detail

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
