// SPDX-License-Identifier: MIT
#pragma once

// The generators of cpd/core/random.hpp, 16 counters at a time in AVX-512 registers, bit
// for bit (tests/test_random.cpp compares every lane with cpd::random_bits):
//  - vrandom<G>(key).at(lo): the words of counters lo .. lo + 15 (any lo), for the heads
//    and tails of the fast loops;
//  - vrandom<G>(key).from(lo) then next(): the words of lo .. lo + 15, lo + 16 .. lo + 31...
//    in order, for their main loops.
// v1 hashes each counter by two mix32 rounds (four vpmulld per 16 words). v2 hashes 8
// pairs of counters in 64-bit lanes: the SplitMix64 state of pair p is the one of the
// first pair plus p * gamma (an add per 8 pairs in the main loop), its mix64 two vpmullq,
// and the low and high halves of lane q are the words of counters 2q and 2q + 1, in place.
// A run that starts at an odd counter takes words 1 .. 16 of two such vectors (valignd).
// Lanes past the key's block of 2^32 counters (lo + j >= 2^32) are not the scalar words
// (the kernels never use them: a piece of a call stays within one block).

#include <cpd/core/config.hpp>
#include <cpd/core/random.hpp>
#include <cpd/host/detail/fast_plan.hpp>  // (CPD_FAST_KERNELS)
#include <cpd/host/detail/isa.hpp>

#include <cstdint>

// (GCC 12's own AVX-512 intrinsics reported as uninitialized: see avx512.hpp)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace cpd::detail::fast {

#if CPD_FAST_KERNELS

template <random_generator G>
struct vrandom;

/// v1: two mix32 rounds under (k0, k1) per counter. GCC vectorizes the scalar loop only at
/// -O3 and with 256-bit vectors, and through a buffer; this is 2.3x faster than that.
template <>
struct vrandom<random_generator::v1> {
  __m512i k0, k1, mul1, mul2, lanes;
  std::uint32_t lo = 0;  ///< next()'s first counter

  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE explicit vrandom(random_key key) noexcept
      : k0(_mm512_set1_epi32(static_cast<int>(key.k0))),
        k1(_mm512_set1_epi32(static_cast<int>(key.k1))),
        mul1(_mm512_set1_epi32(static_cast<int>(mix32_mul1))),
        mul2(_mm512_set1_epi32(static_cast<int>(mix32_mul2))),
        lanes(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)) {}

  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i mix(__m512i x) const noexcept {
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 16));
    x = _mm512_mullo_epi32(x, mul1);
    x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
    x = _mm512_mullo_epi32(x, mul2);
    return _mm512_xor_si512(x, _mm512_srli_epi32(x, 15));
  }

  /// random_bits(key, c + j) in lane j (c + j modulo 2^32, as the scalar call's).
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i at(std::uint32_t c) const noexcept {
    const __m512i x = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(c)), lanes);
    return mix(_mm512_xor_si512(mix(_mm512_xor_si512(x, k0)), k1));
  }
  /// next() starts at counter c.
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE void from(std::uint32_t c) noexcept { lo = c; }
  /// The words of the next 16 counters.
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i next() noexcept {
    const __m512i r = at(lo);
    lo += 16;
    return r;
  }
};

/// v2: SplitMix64 over pairs of counters, 8 pairs (16 words) per vector. The constants are
/// written where they are used, not held in registers: the compiler gives them to the
/// multiplies and adds as broadcast memory operands, and the fast kernels' 30-odd
/// constant vectors keep their registers.
template <>
struct vrandom<random_generator::v2> {
  std::uint64_t first;  ///< the state of the block's first pair
  __m512i state;        ///< next(): the states of its next 8 pairs
  __m512i held;         ///< next() from an odd counter: the words of the pairs before them
  bool odd = false;     ///< next() started at an odd counter

  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE explicit vrandom(random_key key) noexcept
      : first(key.state()), state(_mm512_setzero_si512()), held(_mm512_setzero_si512()) {}

  /// 8 * gamma in each 64-bit lane: from 8 pairs to the next 8.
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE __m512i step() noexcept {
    return _mm512_set1_epi64(static_cast<long long>(8 * splitmix_gamma));
  }
  /// mix64 in each 64-bit lane.
  CPD_TARGET_AVX512 static CPD_ALWAYS_INLINE __m512i mix(__m512i z) noexcept {
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                           _mm512_set1_epi64(static_cast<long long>(0xBF58476D1CE4E5B9ull)));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                           _mm512_set1_epi64(static_cast<long long>(0x94D049BB133111EBull)));
    return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
  }
  /// The states of the 8 pairs from the one of counter c.
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i states(std::uint32_t c) const noexcept {
    const __m512i pairs =
        _mm512_setr_epi64(0, static_cast<long long>(splitmix_gamma), static_cast<long long>(2 * splitmix_gamma),
                          static_cast<long long>(3 * splitmix_gamma), static_cast<long long>(4 * splitmix_gamma),
                          static_cast<long long>(5 * splitmix_gamma), static_cast<long long>(6 * splitmix_gamma),
                          static_cast<long long>(7 * splitmix_gamma));
    return _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(first + (c >> 1) * splitmix_gamma)), pairs);
  }

  /// random_bits(key, c + j) in lane j, for c + j < 2^32.
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i at(std::uint32_t c) const noexcept {
    const __m512i s = states(c);
    const __m512i h = mix(s);
    if ((c & 1u) == 0) return h;
    return _mm512_alignr_epi32(mix(_mm512_add_epi64(s, step())), h, 1);
  }
  /// next() starts at counter c.
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE void from(std::uint32_t c) noexcept {
    state = states(c);
    odd = (c & 1u) != 0;
    if (odd) {
      held = mix(state);
      state = _mm512_add_epi64(state, step());
    }
  }
  /// The words of the next 16 counters.
  CPD_TARGET_AVX512 CPD_ALWAYS_INLINE __m512i next() noexcept {
    const __m512i h = mix(state);
    state = _mm512_add_epi64(state, step());
    if (!odd) return h;
    const __m512i r = _mm512_alignr_epi32(h, held, 1);
    held = h;
    return r;
  }
};

#endif  // CPD_FAST_KERNELS

}  // namespace cpd::detail::fast

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
