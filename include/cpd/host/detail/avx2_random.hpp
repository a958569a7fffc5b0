// SPDX-License-Identifier: MIT
#pragma once

// The generators of cpd/core/random.hpp, 8 counters at a time in AVX2 registers, bit for
// bit (tests/test_random.cpp compares every lane with cpd::random_bits); the 8-lane
// counterpart of avx512_random.hpp, with the same interface:
//  - vrandom8<G>(key).at(lo): the words of counters lo .. lo + 7 (any lo), for tails;
//  - vrandom8<G>(key).from(lo) then next(): the words of lo .. lo + 7, lo + 8 .. lo + 15...
//    in order, for main loops.
// v1 hashes each counter by two mix32 rounds (vpmulld). v2 hashes 4 pairs of counters in
// 64-bit lanes (SplitMix64; AVX2 has no 64-bit multiply: each is three vpmuludq, the
// cross products shifted up), the low and high halves of lane q being the words of
// counters 2q and 2q + 1; a run from an odd counter takes words 1 .. 8 of two such vectors.
// Lanes past the key's block of 2^32 counters (lo + j >= 2^32) are not the scalar words
// (the kernels never use them: a piece of a call stays within one block).

#include <cpd/core/config.hpp>
#include <cpd/core/random.hpp>
#include <cpd/host/detail/fast_plan.hpp>  // (CPD_FAST_KERNELS, <immintrin.h>)
#include <cpd/host/detail/isa.hpp>

#include <cstdint>

namespace cpd::detail::fast {

#if CPD_FAST_KERNELS

template <random_generator G>
struct vrandom8;

/// v1: two mix32 rounds under (k0, k1) per counter.
template <>
struct vrandom8<random_generator::v1> {
  __m256i k0, k1, lanes;
  std::uint32_t lo = 0;  ///< next()'s first counter

  CPD_TARGET_AVX2 CPD_ALWAYS_INLINE explicit vrandom8(random_key key) noexcept
      : k0(_mm256_set1_epi32(static_cast<int>(key.k0))),
        k1(_mm256_set1_epi32(static_cast<int>(key.k1))),
        lanes(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)) {}

  CPD_TARGET_AVX2 static CPD_ALWAYS_INLINE __m256i mix(__m256i x) noexcept {
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(mix32_mul1)));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(static_cast<int>(mix32_mul2)));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  }
  /// random_bits(key, c + j) in lane j (c + j modulo 2^32, as the scalar call's).
  CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i at(std::uint32_t c) const noexcept {
    const __m256i x = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(c)), lanes);
    return mix(_mm256_xor_si256(mix(_mm256_xor_si256(x, k0)), k1));
  }
  /// next() starts at counter c.
  CPD_TARGET_AVX2 CPD_ALWAYS_INLINE void from(std::uint32_t c) noexcept { lo = c; }
  /// The words of the next 8 counters.
  CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i next() noexcept {
    const __m256i r = at(lo);
    lo += 8;
    return r;
  }
};

/// v2: SplitMix64 over pairs of counters, 4 pairs (8 words) per vector.
template <>
struct vrandom8<random_generator::v2> {
  std::uint64_t first;  ///< the state of the block's first pair
  __m256i state;        ///< next(): the states of its next 4 pairs
  __m256i held;         ///< next() from an odd counter: the words of the pairs before them
  bool odd = false;     ///< next() started at an odd counter

  CPD_TARGET_AVX2 CPD_ALWAYS_INLINE explicit vrandom8(random_key key) noexcept
      : first(key.state()), state(_mm256_setzero_si256()), held(_mm256_setzero_si256()) {}

  /// z * m modulo 2^64 in each 64-bit lane: lo(z) lo(m) + (hi(z) lo(m) + lo(z) hi(m)) 2^32.
  CPD_TARGET_AVX2 static CPD_ALWAYS_INLINE __m256i mul64(__m256i z, std::uint64_t m) noexcept {
    const __m256i ml = _mm256_set1_epi64x(static_cast<long long>(m));
    const __m256i mh = _mm256_set1_epi64x(static_cast<long long>(m >> 32));
    const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(z, 32), ml), _mm256_mul_epu32(z, mh));
    return _mm256_add_epi64(_mm256_mul_epu32(z, ml), _mm256_slli_epi64(cross, 32));
  }
  /// mix64 in each 64-bit lane.
  CPD_TARGET_AVX2 static CPD_ALWAYS_INLINE __m256i mix(__m256i z) noexcept {
    z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xBF58476D1CE4E5B9ull);
    z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), 0x94D049BB133111EBull);
    return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
  }
  /// 4 * gamma in each 64-bit lane: from 4 pairs to the next 4.
  CPD_TARGET_AVX2 static CPD_ALWAYS_INLINE __m256i step() noexcept {
    return _mm256_set1_epi64x(static_cast<long long>(4 * splitmix_gamma));
  }
  /// Lanes 1 .. 7 of lo, then lane 0 of hi: the words from an odd counter.
  CPD_TARGET_AVX2 static CPD_ALWAYS_INLINE __m256i shift_one(__m256i lo, __m256i hi) noexcept {
    const __m256i rot = _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0);
    return _mm256_blend_epi32(_mm256_permutevar8x32_epi32(lo, rot), _mm256_permutevar8x32_epi32(hi, rot), 0x80);
  }
  /// The states of the 4 pairs from the one of counter c.
  CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i states(std::uint32_t c) const noexcept {
    const __m256i pairs = _mm256_setr_epi64x(0, static_cast<long long>(splitmix_gamma),
                                             static_cast<long long>(2 * splitmix_gamma),
                                             static_cast<long long>(3 * splitmix_gamma));
    return _mm256_add_epi64(_mm256_set1_epi64x(static_cast<long long>(first + (c >> 1) * splitmix_gamma)), pairs);
  }

  /// random_bits(key, c + j) in lane j, for c + j < 2^32.
  CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i at(std::uint32_t c) const noexcept {
    const __m256i s = states(c);
    const __m256i h = mix(s);
    if ((c & 1u) == 0) return h;
    return shift_one(h, mix(_mm256_add_epi64(s, step())));
  }
  /// next() starts at counter c.
  CPD_TARGET_AVX2 CPD_ALWAYS_INLINE void from(std::uint32_t c) noexcept {
    state = states(c);
    odd = (c & 1u) != 0;
    if (odd) {
      held = mix(state);
      state = _mm256_add_epi64(state, step());
    }
  }
  /// The words of the next 8 counters.
  CPD_TARGET_AVX2 CPD_ALWAYS_INLINE __m256i next() noexcept {
    const __m256i h = mix(state);
    state = _mm256_add_epi64(state, step());
    if (!odd) return h;
    const __m256i r = shift_one(held, h);
    held = h;
    return r;
  }
};

#endif  // CPD_FAST_KERNELS

}  // namespace cpd::detail::fast
