// SPDX-License-Identifier: MIT
#pragma once

// The scales and the protocol of every scaler (docs/scaling.md):
//
//   auto st = scaler.statistic(data, n);      // local, cheap
//   st = Scaler::combine(st, other_st);       // associative; an allreduce of a few bytes
//   auto sc = scaler.select(st);              // the scale
//
// Statistics are 32-bit values that combine by `max`, so that any communication
// engine can combine them with one MPI_MAX over MPI_INT32_T (amax statistics are
// non-negative floats, whose bits order like their values, NaN above +inf).
// The multi-tensor form statistics() fills one statistic per tensor, so that one
// small allreduce covers a whole model.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace cpd {

/// A power-of-two scale: multiply by 2^exponent before quantizing, by 2^-exponent after.
struct pow2_scale {
  int exponent = 0;  ///< the power of two; may exceed float's exponent range (applied in double)
  /// The statistic came from data holding inf or NaN (on some worker): skip the step, as
  /// PyTorch's GradScaler does when it finds an inf; the exchange's result holds NaN or is marked.
  bool nonfinite = false;

  /// 2^exponent as a double (exact for exponents in [-1074, 1023]).
  [[nodiscard]] CPD_HOST_DEVICE constexpr double factor() const noexcept { return detail::pow2<double>(clamp(exponent)); }
  /// 2^-exponent as a double.
  [[nodiscard]] CPD_HOST_DEVICE constexpr double inverse() const noexcept { return detail::pow2<double>(clamp(-exponent)); }

  friend constexpr bool operator==(pow2_scale a, pow2_scale b) noexcept {
    return a.exponent == b.exponent && a.nonfinite == b.nonfinite;
  }
  friend constexpr bool operator!=(pow2_scale a, pow2_scale b) noexcept { return !(a == b); }

 private:
  CPD_HOST_DEVICE static constexpr int clamp(int k) noexcept { return k < -1074 ? -1074 : (k > 1023 ? 1023 : k); }
};

/// A float scale (Transformer Engine, GradScaler): x * value before quantizing, x * inverse after, in float.
struct float_scale {
  float value = 1.0f;    ///< the scale
  float inverse = 1.0f;  ///< 1 / value rounded to float (Transformer Engine's scale_inv)
  bool nonfinite = false;  ///< the statistic came from data holding inf or NaN: skip the step (see pow2_scale)

  /// The scale s with inverse 1/s rounded to float (to nearest, whatever the environment).
  [[nodiscard]] static float_scale of(float s) noexcept {
    const detail::default_fp_env fp_env;
    detail::fp_fence(s);
    float inverse = 1.0f / s;
    detail::fp_fence(inverse);
    return {s, inverse};
  }

  friend constexpr bool operator==(float_scale a, float_scale b) noexcept {
    return a.value == b.value && a.inverse == b.inverse && a.nonfinite == b.nonfinite;
  }
  friend constexpr bool operator!=(float_scale a, float_scale b) noexcept { return !(a == b); }
};

namespace detail {

/// The largest |x| of n floats, as the bits of a non-negative float; any NaN gives
/// the canonical +NaN (0x7FC00000), which is above +inf as an integer.
inline std::uint32_t amax_bits(const float* g, std::size_t n) noexcept {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t a = bit_cast<std::uint32_t>(g[i]) & 0x7FFFFFFFu;
    m = a > m ? a : m;
  }
  return m > 0x7F800000u ? 0x7FC00000u : m;
}

/// True when any of n floats is inf or NaN.
inline bool any_nonfinite(const float* g, std::size_t n) noexcept {
  std::uint32_t any = 0;
  for (std::size_t i = 0; i < n; ++i)
    any |= static_cast<std::uint32_t>((bit_cast<std::uint32_t>(g[i]) & 0x7F800000u) == 0x7F800000u);
  return any != 0;
}

/// True when an amax statistic (a non-negative float) is inf or NaN.
inline bool amax_nonfinite(float amax) noexcept { return (bit_cast<std::uint32_t>(amax) & 0x7FFFFFFFu) >= 0x7F800000u; }

}  // namespace detail

/// The multi-tensor form of the protocol, written once: a scaler derives from
/// tensor_statistics<itself> and has statistics(), one statistic per tensor, so that one small
/// allreduce covers a whole model.
template <class Scaler>
class tensor_statistics {
 public:
  /// out[t] = statistic(g[t], n[t]) for t < count.
  template <class S = Scaler>
  void statistics(const float* const* g, const std::size_t* n, std::size_t count,
                  typename S::statistic_type* out) const noexcept {
    const S& scaler = static_cast<const S&>(*this);
    for (std::size_t t = 0; t < count; ++t) out[t] = scaler.statistic(g[t], n[t]);
  }
};

/// The combined statistic of n per-worker statistics, with Scaler::combine.
template <class Scaler>
[[nodiscard]] typename Scaler::statistic_type combine_all(const typename Scaler::statistic_type* st, std::size_t n) {
  auto r = Scaler::identity;
  for (std::size_t i = 0; i < n; ++i) r = Scaler::combine(r, st[i]);
  return r;
}

/// Element-wise combine of two arrays of statistics (what an allreduce with MPI_MAX does); into a.
template <class Scaler>
void combine_into(typename Scaler::statistic_type* a, const typename Scaler::statistic_type* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) a[i] = Scaler::combine(a[i], b[i]);
}

}  // namespace cpd
