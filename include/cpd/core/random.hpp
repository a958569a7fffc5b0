// SPDX-License-Identifier: MIT
#pragma once

// The counter-based generators of cpd's stochastic rounding (docs/random.md).
//
// The random bits of element `counter` of stream `stream` under `seed` are a pure
// function of those three numbers and of the generator: no state is carried from one
// element to the next, so every thread count, chunking and backend (host loop, SIMD
// lanes, a CUDA thread per element) draws the same bits for the same element.
//
// A counter is 64 bits: its high half selects a key (random_key, derived once per 2^32
// elements), its low half is hashed under that key. Two generators, by name:
//  - v1: two rounds of a 32-bit xorshift-multiply bijection (mix32) per element, keyed
//    by two 32-bit words: four 32-bit multiplies per element.
//  - v2 (the default): SplitMix64 over pairs of elements. Elements 2p and 2p + 1 take
//    the low and the high half of SplitMix64's output number p seeded with K, a 64-bit key
//    of (seed, stream), i.e. of mix64(K + (p + 1) * gamma):
//    two 64-bit multiplies per two elements, half of v1's work on 16-lane AVX-512 and
//    about two thirds of its instructions on a GPU.

#include <cpd/core/config.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cpd {

/// The counter-based generator of stochastic rounding's random bits (docs/random.md).
enum class random_generator : unsigned char {
  v1,  ///< two mix32 rounds per element (cpd 1.x; every result before generator v2)
  v2   ///< SplitMix64 over element pairs: half the work (the default)
};

/// The generator that keys, options and calls use when none is named.
inline constexpr random_generator default_generator = random_generator::v2;

/// The name of a generator ("v1" or "v2").
CPD_HOST_DEVICE constexpr const char* to_string(random_generator g) noexcept {
  return g == random_generator::v1 ? "v1" : "v2";
}

namespace detail {

/// splitmix64's finalizer (Stafford's Mix13): a bijection of 64-bit integers with full avalanche.
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// mix32's two multipliers (Wellons' lowbias32 constants); the SIMD copy of mix32
/// (cpd/host/detail/avx512.hpp, vrandom) takes them from here.
inline constexpr std::uint32_t mix32_mul1 = 0x21F0AAADu;
inline constexpr std::uint32_t mix32_mul2 = 0x735A2D97u;

/// SplitMix64's increment (2^64 / golden ratio, odd): v2's step from one pair to the next.
inline constexpr std::uint64_t splitmix_gamma = 0x9E3779B97F4A7C15ull;

/// A bijection of 32-bit integers with low avalanche bias (Wellons' lowbias32 constants).
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr std::uint32_t mix32(std::uint32_t x) noexcept {
  x ^= x >> 16;
  x *= mix32_mul1;
  x ^= x >> 15;
  x *= mix32_mul2;
  x ^= x >> 15;
  return x;
}

/// v2's 64-bit key of (seed, stream): K, the seed of its SplitMix64 sequence (pair p draws
/// mix64(K + (p + 1) * gamma), SplitMix64's output number p).
CPD_HOST_DEVICE constexpr std::uint64_t v2_stream_key(std::uint64_t seed, std::uint64_t stream) noexcept {
  return mix64(mix64(seed) ^ stream);
}

}  // namespace detail

/// The key of the 2^32 counters [hi * 2^32, (hi + 1) * 2^32) of one (seed, stream) under
/// one generator. v1: k0 and k1 are xor-ed in before and between the two mix32 rounds;
/// v2: (k1, k0) is the SplitMix64 state of the block's first pair, K + (hi * 2^31 + 1) * gamma.
struct random_key {
  std::uint32_t k0 = 0;  ///< v1: xor-ed into the counter before the first round; v2: the state's low half
  std::uint32_t k1 = 0;  ///< v1: xor-ed in between the two rounds; v2: the state's high half
  random_generator generator = default_generator;  ///< which generator the words are for

  /// v2: the SplitMix64 state of the block's first pair.
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint64_t state() const noexcept {
    return (static_cast<std::uint64_t>(k1) << 32) | k0;
  }
};

/// The key of counters hi * 2^32 + [0, 2^32) of stream `stream` under `seed`, for generator g.
[[nodiscard]] CPD_HOST_DEVICE constexpr random_key make_random_key(std::uint64_t seed, std::uint64_t stream,
                                                                   std::uint32_t hi = 0,
                                                                   random_generator g = default_generator) noexcept {
  if (g == random_generator::v1) {
    const std::uint64_t z = detail::mix64(detail::mix64(detail::mix64(seed) ^ stream) + hi);
    return {static_cast<std::uint32_t>(z), static_cast<std::uint32_t>(z >> 32), g};
  }
  const std::uint64_t s =
      detail::v2_stream_key(seed, stream) + ((static_cast<std::uint64_t>(hi) << 31) + 1) * detail::splitmix_gamma;
  return {static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(s >> 32), g};
}

namespace detail {

/// v1's word for the counter whose low half is lo.
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr std::uint32_t random_bits_v1(random_key key, std::uint32_t lo) noexcept {
  return mix32(mix32(lo ^ key.k0) ^ key.k1);
}

/// v2's 64 bits of the pair of counters whose low halves are lo & ~1 and lo | 1.
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr std::uint64_t random_pair_v2(random_key key, std::uint32_t lo) noexcept {
  return mix64(key.state() + static_cast<std::uint64_t>(lo >> 1) * splitmix_gamma);
}

/// v2's word for the counter whose low half is lo: the low half of its pair's bits for an
/// even counter, the high half for an odd one.
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr std::uint32_t random_bits_v2(random_key key, std::uint32_t lo) noexcept {
  return static_cast<std::uint32_t>(random_pair_v2(key, lo) >> ((lo & 1u) * 32u));
}

/// The word of generator G (known at compile time: loops that draw many words).
template <random_generator G>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr std::uint32_t random_bits_of(random_key key, std::uint32_t lo) noexcept {
  if constexpr (G == random_generator::v1) return random_bits_v1(key, lo);
  else return random_bits_v2(key, lo);
}

/// out[j] = the word of counter lo + j under key (generator G), j < n, lo + n <= 2^32: v2
/// hashes each pair once.
template <random_generator G>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE void fill_random_bits(random_key key, std::uint32_t lo, std::uint32_t n,
                                             std::uint32_t* out) noexcept {
  if constexpr (G == random_generator::v1) {
    for (std::uint32_t j = 0; j < n; ++j) out[j] = random_bits_v1(key, lo + j);
  } else {
    std::uint32_t j = 0;
    if (n != 0 && (lo & 1u) != 0) out[j++] = random_bits_v2(key, lo);
    std::uint64_t s = key.state() + static_cast<std::uint64_t>((lo + j) >> 1) * splitmix_gamma;
#if !CPD_DEVICE_PASS && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    // A pair's 64 bits are its two words in memory order here: hashed into a buffer of
    // 64-bit words (a loop that vectorizes: the interleaved 32-bit stores below do not),
    // then copied.
    constexpr std::uint32_t chunk = 64;
    while (n - j >= 2) {
      const std::uint32_t pairs = (n - j) / 2 < chunk ? (n - j) / 2 : chunk;
      std::uint64_t h[chunk];
      for (std::uint32_t p = 0; p < pairs; ++p) h[p] = mix64(s + p * splitmix_gamma);
      std::memcpy(out + j, h, 8 * static_cast<std::size_t>(pairs));
      j += 2 * pairs;
      s += pairs * splitmix_gamma;
    }
#endif
    for (; j + 2 <= n; j += 2, s += splitmix_gamma) {
      const std::uint64_t h = mix64(s);
      out[j] = static_cast<std::uint32_t>(h);
      out[j + 1] = static_cast<std::uint32_t>(h >> 32);
    }
    if (j < n) out[j] = static_cast<std::uint32_t>(mix64(s));
  }
}

/// out[j] = the word of counter lo + j under key, j < 4, lo <= 2^32 - 4: a GPU thread's four
/// elements (v2: two or three pair hashes, not four).
CPD_HOST_DEVICE CPD_ALWAYS_INLINE void random_bits4(random_key key, std::uint32_t lo,
                                                    std::uint32_t (&out)[4]) noexcept {
  if (key.generator == random_generator::v1) {
    for (std::uint32_t j = 0; j < 4; ++j) out[j] = random_bits_v1(key, lo + j);
    return;
  }
  const std::uint64_t s = key.state() + static_cast<std::uint64_t>(lo >> 1) * splitmix_gamma;
  const std::uint64_t h0 = mix64(s), h1 = mix64(s + splitmix_gamma);
  if ((lo & 1u) == 0) {
    out[0] = static_cast<std::uint32_t>(h0), out[1] = static_cast<std::uint32_t>(h0 >> 32);
    out[2] = static_cast<std::uint32_t>(h1), out[3] = static_cast<std::uint32_t>(h1 >> 32);
  } else {
    const std::uint64_t h2 = mix64(s + 2 * splitmix_gamma);
    out[0] = static_cast<std::uint32_t>(h0 >> 32), out[1] = static_cast<std::uint32_t>(h1);
    out[2] = static_cast<std::uint32_t>(h1 >> 32), out[3] = static_cast<std::uint32_t>(h2);
  }
}

/// A generator as a type (for with_generator's callers).
template <random_generator G>
struct generator_tag {
  static constexpr random_generator value = G;
};

/// fn(generator_tag<g>{}): the generator g as a compile-time value (host code).
template <class Fn>
CPD_ALWAYS_INLINE decltype(auto) with_generator(random_generator g, Fn&& fn) {
  if (g == random_generator::v1) return fn(generator_tag<random_generator::v1>{});
  return fn(generator_tag<random_generator::v2>{});
}

}  // namespace detail

/// 32 random bits for the counter whose low half is `lo`, under the key of its high half.
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr std::uint32_t random_bits(random_key key,
                                                                                   std::uint32_t lo) noexcept {
  return key.generator == random_generator::v1 ? detail::random_bits_v1(key, lo) : detail::random_bits_v2(key, lo);
}

/// 32 random bits for element `counter` of stream `stream` under `seed` (generator g).
[[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t random_bits(std::uint64_t seed, std::uint64_t stream,
                                                                  std::uint64_t counter,
                                                                  random_generator g = default_generator) noexcept {
  return random_bits(make_random_key(seed, stream, static_cast<std::uint32_t>(counter >> 32), g),
                     static_cast<std::uint32_t>(counter));
}

/// cpd's one random key: (seed, stream, generator), by value. Every stochastic call of every
/// layer takes its random bits from one (bulk_options::seed/stream/generator, the reductions'
/// and the exchange's `key`, the codecs' key, the device functors); element i of sub-stream s
/// draws random_bits(seed, stream + s, i, generator).
struct random_stream {
  std::uint64_t seed = 0;    ///< the user's seed
  std::uint64_t stream = 0;  ///< an independent stream (a tensor, a step, a worker...)
  random_generator generator = default_generator;  ///< the generator (v1 reproduces cpd 1.x results)

  /// 32 random bits for element `counter` of this stream.
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t operator()(std::uint64_t counter) const noexcept {
    return random_bits(seed, stream, counter, generator);
  }
  /// 32 random bits for element i of sub-stream s (stream + s): a call that rounds each
  /// element several times uses one sub-stream per rounding (docs/reduction.md).
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t bits(std::uint64_t s, std::uint64_t i) const noexcept {
    return random_bits(seed, stream + s, i, generator);
  }
  /// The same seed and generator with stream `s` (a sub-stream, a worker's or a tensor's).
  [[nodiscard]] CPD_HOST_DEVICE constexpr random_stream with_stream(std::uint64_t s) const noexcept {
    return {seed, s, generator};
  }
  /// The key of counters hi * 2^32 + [0, 2^32) of this stream.
  [[nodiscard]] CPD_HOST_DEVICE constexpr random_key key(std::uint32_t hi = 0) const noexcept {
    return make_random_key(seed, stream, hi, generator);
  }
};

}  // namespace cpd
