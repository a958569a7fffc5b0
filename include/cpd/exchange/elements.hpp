// SPDX-License-Identifier: MIT
#pragma once

// The exchange one value at a time (docs/architecture.md, "The exchange, written once"):
// the random bits of every rounding of an allreduce, and the steps of one tensor's element
// on one rank, exchange_element: load (the code of Q(x * scale)), error feedback, add (one
// rounded hop, or one Kahan step), finish (unscale, the mean, NaN canonical), two_step's
// wide accumulation and its one rounding, and the NaN bits that the messages of a format
// without NaN carry. Every one is CPD_HOST_DEVICE and made of the scalar calls of the
// rounding core and the reductions (round_to, rounded_add_in_default_env, kahan_step,
// scaled_quantize, unscale). The host's summation (exchange/protocol.hpp) calls them where
// it goes value by value and runs faster passes over blocks that tests hold to them; the
// element backend (exchange/elementwise.hpp: a host loop, or the CUDA kernels of
// device/exchange.cuh) calls them for every element. The rounding of hop `step` made by
// rank `rank` draws, for element i, allreduce_random_bits(key, W, step, rank, k, i), k the
// rounding's number within the hop (step -1: the load).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/exchange/codes.hpp>
#include <cpd/reduce/kahan.hpp>
#include <cpd/reduce/sum.hpp>
#include <cpd/scaling/apply.hpp>
#include <cpd/scaling/scale.hpp>

#include <cstddef>
#include <cstdint>

namespace cpd::detail {

/// The stream of rounding k (0..7) of the addition that `rank` performs at `step` of an
/// allreduce among w workers (step -1: the quantization of the inputs).
template <class Key>
[[nodiscard]] CPD_HOST_DEVICE constexpr std::uint64_t allreduce_stream(const Key& key, int w, int step, int rank,
                                                                       int k) noexcept {
  return key.stream + (static_cast<std::uint64_t>(step + 1) * static_cast<std::uint64_t>(w) +
                       static_cast<std::uint64_t>(rank)) * 8u + static_cast<std::uint64_t>(k);
}

/// The random bits of rounding k for element i: reduce_random_bits(seed, allreduce_stream(...), i,
/// the key's generator).
template <class Key>
[[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t allreduce_random_bits(const Key& key, int w, int step, int rank,
                                                                            int k, std::uint64_t i) noexcept {
  return reduce_random_bits(key.seed, allreduce_stream(key, w, step, rank, k), i, key.generator);
}

/// finish of one value: unscale(v), divided by w (in float) for a mean; a NaN the canonical +qNaN.
template <class F, rounding R, overflow O, class Scale>
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE float finish_value(float v, const Scale& sc, int w,
                                                                   bool mean) noexcept {
  float u = unscale<F, R, O>(v, sc);
  if (mean) u = u / static_cast<float>(w);
  return canonical_nan(u);
}

/// Error feedback of one value: the residual x - unscale(q) of x loaded as q; NaN canonical.
template <class F, rounding R, overflow O, class Scale>
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE float feedback_value(float x, float q, const Scale& sc) noexcept {
  return canonical_nan(x - unscale<F, R, O>(q, sc));
}

/// two_step's sum s + q on its way to a narrow accumulator: the float sum rounded to odd (one
/// rounding of the exact sum follows), a float overflow of two finite values +-FLT_MAX (odd),
/// so that the accumulator's overflow rule decides.
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE float accumulate_odd(float s, float q) noexcept {
  const float t = add_odd_float(s, q);
  if (!(t - t == 0) && s - s == 0 && q - q == 0) return t > 0 ? 3.40282347e38f : -3.40282347e38f;
  return t;
}

/// two_step's accumulation of one value, s + q in the accumulator `acc`: in float when it is
/// float32 (`f32`), else accumulate_odd rounded nearest-even to acc; a NaN the canonical +qNaN.
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE float accumulate_value(float s, float q, const spec& acc,
                                                                       bool f32) noexcept {
  if (f32) return canonical_nan(s + q);
  return canonical_nan(round_spec<rounding::nearest_even, overflow::infinity, float>(acc, accumulate_odd(s, q), 0, 32)
                           .value);
}

/// Bit j of the NaN bits at mask: some rank had NaN at element j of the piece.
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE bool nan_bit(const unsigned char* mask, std::size_t j) noexcept {
  return ((mask[j / 8] >> (j % 8)) & 1u) != 0;
}

/// Byte b of the NaN bits of the m values at x: bit k set where x[8 b + k] is NaN.
[[nodiscard]] CPD_HOST_DEVICE CPD_ALWAYS_INLINE unsigned char nan_byte(const float* x, std::size_t m,
                                                                       std::size_t b) noexcept {
  unsigned v = 0;
  for (std::size_t k = 0; k < 8 && 8 * b + k < m; ++k) v |= (x[8 * b + k] != x[8 * b + k] ? 1u : 0u) << k;
  return static_cast<unsigned char>(v);
}

/// The steps of the elements of one tensor on rank `rank` of `world`: its scale and random key,
/// and whether the result is a mean. Trivially copyable (a kernel argument).
template <class F, rounding R, overflow O, class Scale>
struct exchange_element {
  using codes = format_codes<F>;
  using storage = typename codes::storage;
  static constexpr bool sr = R == rounding::stochastic;

  Scale scale{};
  random_stream key{};
  int world = 1;
  int rank = 0;
  bool mean = false;

  /// The random bits of rounding k of the hop made by `by` at `step`, for element i.
  [[nodiscard]] CPD_HOST_DEVICE std::uint32_t bits(int step, int by, int k, std::uint64_t i) const noexcept {
    return sr ? allreduce_random_bits(key, world, step, by, k, i) : 0u;
  }
  /// The value of a code (a NaN the canonical one).
  [[nodiscard]] CPD_HOST_DEVICE static float value(storage c) noexcept { return codes::decoded(c); }
  /// The code of a value of F (exact: any mode gives it).
  [[nodiscard]] CPD_HOST_DEVICE static storage code(float v) noexcept { return codes::code_of(v); }

  /// load: the code of Q(x * scale), x being element i of this rank's tensor.
  [[nodiscard]] CPD_HOST_DEVICE storage load(float x, std::uint64_t i) const noexcept {
    return code(scaled_quantize<F, R, O>(x, scale, bits(-1, rank, 0, i)));
  }
  /// Error feedback: the residual of x loaded as the code q.
  [[nodiscard]] CPD_HOST_DEVICE float feedback(float x, storage q) const noexcept {
    return feedback_value<F, R, O>(x, value(q), scale);
  }
  /// add: (s, c) += q at element i, the hop of `by` at `step`: Q(s + q), or with Kahan the
  /// compensated step (four roundings, k = 0..3).
  CPD_HOST_DEVICE void add(float& s, float& c, float q, std::uint64_t i, int step, int by, bool kahan) const noexcept {
    if (kahan)
      kahan_step<F, R, O, true>(s, c, q, bits(step, by, 0, i), bits(step, by, 1, i), bits(step, by, 2, i),
                                bits(step, by, 3, i));
    else
      s = rounded_add_in_default_env<F, R, O>(s, q, bits(step, by, 0, i));
  }
  /// finish: the reduced value unscaled (and divided by W for a mean).
  [[nodiscard]] CPD_HOST_DEVICE float finish(float v) const noexcept {
    return finish_value<F, R, O>(v, scale, world, mean);
  }
  /// two_step's one rounding to F of the accumulated sum s of element i, made by `owner`.
  [[nodiscard]] CPD_HOST_DEVICE float round_sum(float s, std::uint64_t i, int owner) const noexcept {
    return canonical_nan(round_to<F, R, O>(s, bits(0, owner, 0, i)));
  }
};

}  // namespace cpd::detail
