// SPDX-License-Identifier: MIT
#pragma once

// The counter-based generator of cpd's stochastic rounding (docs/random.md).
//
// The random bits of element `counter` of stream `stream` under `seed` are a pure
// function of those three numbers: no state is carried from one element to the
// next, so every thread count, chunking and backend (host loop, SIMD lanes, a
// CUDA thread per element) draws the same bits for the same element.
//
// A counter is 64 bits: its high half selects a 32-bit key (derived once per 2^32
// elements with a 64-bit mixer), its low half is hashed under that key by two
// rounds of a 32-bit xorshift-multiply bijection. The per-element work is four
// 32-bit multiplies, shifts and xors: cheap in SIMD lanes and on a GPU.

#include <cpd/core/config.hpp>

#include <cstdint>

namespace cpd {

namespace detail {

/// splitmix64's finalizer: a bijection of 64-bit integers with full avalanche.
CPD_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// mix32's two multipliers (Wellons' lowbias32 constants); the SIMD copy of mix32
/// (cpd/host/detail/avx512.hpp, random16) takes them from here.
inline constexpr std::uint32_t mix32_mul1 = 0x21F0AAADu;
inline constexpr std::uint32_t mix32_mul2 = 0x735A2D97u;

/// A bijection of 32-bit integers with low avalanche bias (Wellons' lowbias32 constants).
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr std::uint32_t mix32(std::uint32_t x) noexcept {
  x ^= x >> 16;
  x *= mix32_mul1;
  x ^= x >> 15;
  x *= mix32_mul2;
  x ^= x >> 15;
  return x;
}

}  // namespace detail

/// The key of the 2^32 counters [hi * 2^32, (hi + 1) * 2^32) of one (seed, stream).
struct random_key {
  std::uint32_t k0 = 0;  ///< xor-ed into the counter before the first round
  std::uint32_t k1 = 0;  ///< xor-ed in between the two rounds
};

/// The key of counters hi * 2^32 + [0, 2^32) of stream `stream` under `seed`.
[[nodiscard]] CPD_HOST_DEVICE constexpr random_key make_random_key(std::uint64_t seed, std::uint64_t stream,
                                                                   std::uint32_t hi = 0) noexcept {
  const std::uint64_t z = detail::mix64(detail::mix64(detail::mix64(seed) ^ stream) + hi);
  return {static_cast<std::uint32_t>(z), static_cast<std::uint32_t>(z >> 32)};
}

/// 32 random bits for the counter whose low half is `lo`, under the key of its high half.
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr std::uint32_t random_bits(random_key key,
                                                                                   std::uint32_t lo) noexcept {
  return detail::mix32(detail::mix32(lo ^ key.k0) ^ key.k1);
}

/// 32 random bits for element `counter` of stream `stream` under `seed`.
[[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t random_bits(std::uint64_t seed, std::uint64_t stream,
                                                                  std::uint64_t counter) noexcept {
  return random_bits(make_random_key(seed, stream, static_cast<std::uint32_t>(counter >> 32)),
                     static_cast<std::uint32_t>(counter));
}

/// cpd's one random key: (seed, stream), by value. Every stochastic call of every layer
/// takes its random bits from one (bulk_options::seed/stream, the reductions' and the
/// exchange's `key`, the codecs' key, the device functors); element i of sub-stream s
/// draws random_bits(seed, stream + s, i).
struct random_stream {
  std::uint64_t seed = 0;    ///< the user's seed
  std::uint64_t stream = 0;  ///< an independent stream (a tensor, a step, a worker...)

  /// 32 random bits for element `counter` of this stream.
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t operator()(std::uint64_t counter) const noexcept {
    return random_bits(seed, stream, counter);
  }
  /// 32 random bits for element i of sub-stream s (stream + s): a call that rounds each
  /// element several times uses one sub-stream per rounding (docs/reduction.md).
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t bits(std::uint64_t s, std::uint64_t i) const noexcept {
    return random_bits(seed, stream + s, i);
  }
};

}  // namespace cpd
