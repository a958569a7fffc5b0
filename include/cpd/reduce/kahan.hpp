// SPDX-License-Identifier: MIT
#pragma once

// Kahan-compensated sums in which every operation is rounded to F, as CPD does
// (docs/reduction.md): the step that adds one value to a (sum, compensation)
// pair, the compensated combine of two pairs (the tree nodes of an allreduce),
// kahan_accumulator, kahan_accumulate and kahan_sum.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/reduce/sum.hpp>

#include <cstddef>
#include <cstdint>

namespace cpd {

namespace detail {

/// One Kahan step on (sum, comp) with x, every operation rounded to F: y = Q(x - c),
/// t = Q(s + y), c = Q(Q(t - s) - y), s = t (InDefaultEnv: with the float path).
template <class F, rounding R, overflow O, bool InDefaultEnv>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE void kahan_step(float& sum, float& comp, float x, std::uint32_t r0, std::uint32_t r1,
                                                  std::uint32_t r2, std::uint32_t r3) noexcept {
  const float y = rounded_add_as<F, R, O, InDefaultEnv>(x, -comp, r0);
  const float t = rounded_add_as<F, R, O, InDefaultEnv>(sum, y, r1);
  comp = rounded_add_as<F, R, O, InDefaultEnv>(rounded_add_as<F, R, O, InDefaultEnv>(t, -sum, r2), -y, r3);
  sum = t;
}

/// The compensated combine of two Kahan pairs, (s1, c1) += (s2, c2), every operation rounded
/// to F with the float path (a default_fp_env scope): u = Q(c1 + c2), y = Q(s2 - u),
/// t = Q(s1 + y), c1 = Q(Q(t - s1) - y), s1 = t. rb(k, a, b) gives the random bits of
/// rounding k = 0..4, whose operands are a and b as written here (b before its negation).
/// The simulation's tree and MPI's native op both call it: one protocol, the same bits.
CPD_EXEC_CHECK_DISABLE
template <class F, rounding R, overflow O, class RandomBits>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE void kahan_merge_step(float& s1, float& c1, float s2, float c2,
                                                        RandomBits&& rb) noexcept {
  const float u = rounded_add_in_default_env<F, R, O>(c1, c2, rb(0, c1, c2));
  const float y = rounded_add_in_default_env<F, R, O>(s2, -u, rb(1, s2, u));
  const float t = rounded_add_in_default_env<F, R, O>(s1, y, rb(2, s1, y));
  const float d = rounded_add_in_default_env<F, R, O>(t, -s1, rb(3, t, s1));
  c1 = rounded_add_in_default_env<F, R, O>(d, -y, rb(4, d, y));
  s1 = t;
}

}  // namespace detail

/// A running sum in F with Kahan compensation where every operation is rounded to F:
/// y = Q(x - c), t = Q(s + y), c = Q(Q(t - s) - y), s = t.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
struct kahan_accumulator {
  float sum = 0.0f;           ///< the running sum s (a value of F)
  float compensation = 0.0f;  ///< c: what the last additions lost, negated (a value of F)

  /// Adds x; r0..r3 are the random bits of the four roundings (stochastic rounding only).
  CPD_HOST_DEVICE CPD_ALWAYS_INLINE void add(float x, std::uint32_t r0 = 0, std::uint32_t r1 = 0,
                                             std::uint32_t r2 = 0, std::uint32_t r3 = 0) noexcept {
    detail::kahan_step<F, R, O, false>(sum, compensation, x, r0, r1, r2, r3);
  }
};

/// Element-wise Kahan step of (sum[i], comp[i]) with x[i]; random bits key.bits(k, i), k = 0..3.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
void kahan_accumulate(float* sum, float* comp, const float* x, std::size_t n, random_stream key = {}) noexcept {
  constexpr bool sr = R == rounding::stochastic;
  const detail::default_fp_env fp_env;
  for (std::size_t i = 0; i < n; ++i)
    detail::kahan_step<F, R, O, true>(sum[i], comp[i], x[i], sr ? key.bits(0, i) : 0u, sr ? key.bits(1, i) : 0u,
                                      sr ? key.bits(2, i) : 0u, sr ? key.bits(3, i) : 0u);
}

/// The Kahan sum of x[0..n) in F, every step rounded; random bits key.bits(k, i), k = 0..3.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
[[nodiscard]] float kahan_sum(const float* x, std::size_t n, random_stream key = {}) noexcept {
  constexpr bool sr = R == rounding::stochastic;
  const detail::default_fp_env fp_env;
  float s = 0.0f, c = 0.0f;
  for (std::size_t i = 0; i < n; ++i)
    detail::kahan_step<F, R, O, true>(s, c, x[i], sr ? key.bits(0, i) : 0u, sr ? key.bits(1, i) : 0u,
                                      sr ? key.bits(2, i) : 0u, sr ? key.bits(3, i) : 0u);
  detail::fp_fence(s);
  return s;
}

}  // namespace cpd
