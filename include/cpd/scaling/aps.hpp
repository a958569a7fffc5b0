// SPDX-License-Identifier: MIT
#pragma once

// APS (Han, Si, Demmel, You, PPoPP 2021) and a fixed scale (docs/scaling.md).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/float.hpp>
#include <cpd/scaling/scale.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace cpd {

// --- APS ----------------------------------------------------------------------

/// Automatic precision scaling (Han et al., PPoPP 2021) for world_size workers summing in F:
/// statistic = ceil(log2(max|g| * world_size)), combined by max, shift = emax(F) - statistic - margin.
template <class F>
class aps : public tensor_statistics<aps<F>> {
  static_assert(is_float_format_v<F>, "cpd::aps: F must be a cpd::float_t");

 public:
  using format_type = F;
  /// An int32 exponent; combined by max (MPI_MAX over MPI_INT32_T).
  using statistic_type = std::int32_t;
  /// The statistic of an all-zero (or empty) tensor, and the identity of combine.
  static constexpr statistic_type zero_statistic = std::numeric_limits<std::int32_t>::min();
  /// The statistic of a tensor holding inf or NaN (absorbs everything under max).
  static constexpr statistic_type nonfinite_statistic = std::numeric_limits<std::int32_t>::max();
  /// The identity of combine.
  static constexpr statistic_type identity = zero_statistic;
  /// The range of the statistics of finite, non-zero tensors: ceil(log2(amax * world_size))
  /// for amax in [2^-149, max float] and world_size in [1, 2^31 - 1].
  static constexpr statistic_type min_statistic = -149;
  static constexpr statistic_type max_statistic = 128 + 31;

  /// APS for world_size >= 1 workers; margin >= 0 extra binades of headroom.
  explicit aps(int world_size, int margin = 0) : world_size_(world_size), margin_(margin) {
    if (world_size < 1) detail::fail_invalid("cpd::aps: world_size must be >= 1");
    if (margin < 0 || margin > 64) detail::fail_invalid("cpd::aps: margin must be in [0, 64]");
  }

  [[nodiscard]] int world_size() const noexcept { return world_size_; }
  [[nodiscard]] int margin() const noexcept { return margin_; }

  /// The statistic of a tensor whose largest magnitude is amax (a non-negative float, NaN allowed).
  [[nodiscard]] statistic_type statistic_of_amax(float amax) const noexcept {
    const std::uint32_t b = detail::bit_cast<std::uint32_t>(amax) & 0x7FFFFFFFu;
    if (b == 0) return zero_statistic;
    if (b >= 0x7F800000u) return nonfinite_statistic;
    // amax * world_size is exact in double (24 + 31 bits, far from over/underflow); the
    // widening is integer (DAZ would read a subnormal amax as 0).
    return detail::ceil_log2(detail::widen(detail::bit_cast<float>(b)) * world_size_);
  }

  /// ceil(log2(max|g| * world_size)); zero_statistic when g is all zeros, nonfinite_statistic with inf/NaN.
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return statistic_of_amax(detail::bit_cast<float>(detail::amax_bits(g, n)));
  }

  /// max(a, b).
  [[nodiscard]] static constexpr statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return a > b ? a : b;
  }

  /// True when st came from finite, not all-zero data.
  [[nodiscard]] static constexpr bool informative(statistic_type st) noexcept {
    return st != zero_statistic && st != nonfinite_statistic;
  }

  /// 2^(emax(F) - st - margin); 2^0 for an all-zero statistic; 2^0 marked nonfinite for a
  /// non-finite one (some worker's data held inf or NaN: skip the step). A statistic that
  /// statistic() cannot produce (outside [min_statistic, max_statistic] and neither special
  /// value) is std::invalid_argument: it is corrupt, and no scale is right.
  [[nodiscard]] pow2_scale select(statistic_type st) const {
    if (st == nonfinite_statistic) return {0, true};
    if (!informative(st)) return {0};
    if (st < min_statistic || st > max_statistic)
      detail::fail_invalid("cpd::aps::select: statistic " + std::to_string(st) + " is outside [" +
                           std::to_string(min_statistic) + ", " + std::to_string(max_statistic) +
                           "] and neither zero_statistic nor nonfinite_statistic; no aps::statistic gives it");
    return {F::spec.emax - st - margin_};
  }

 private:
  int world_size_;
  int margin_;
};

// --- a fixed scale ----------------------------------------------------------

/// A scale fixed in advance: the baseline "no scaling" is fixed_scaling{}. Its statistic only
/// says whether the data holds inf or NaN, so that the fixed scale signals it as every scaler does.
class fixed_scaling : public tensor_statistics<fixed_scaling> {
 public:
  /// 1 when the data holds inf or NaN, else 0; combined by max.
  using statistic_type = std::int32_t;
  static constexpr statistic_type identity = 0;

  constexpr fixed_scaling() noexcept = default;
  /// Multiply by 2^exponent before quantizing; the exponent must be in [-1074, 1023] (where
  /// pow2_scale::factor() is exact), else std::invalid_argument.
  constexpr explicit fixed_scaling(pow2_scale s) : scale_{s.exponent, false} {
    if (s.exponent < -1074 || s.exponent > 1023)
      detail::fail_invalid("cpd::fixed_scaling: the exponent " + std::to_string(s.exponent) +
                           " is outside [-1074, 1023]");
  }

  /// 1 when any of g[0..n) is inf or NaN (one read of the data), else 0.
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return detail::any_nonfinite(g, n) ? 1 : 0;
  }
  [[nodiscard]] static constexpr statistic_type combine(statistic_type a, statistic_type b) noexcept {
    return a > b ? a : b;
  }
  /// The fixed scale, marked nonfinite when st != 0.
  [[nodiscard]] constexpr pow2_scale select(statistic_type st) const noexcept { return {scale_.exponent, st != 0}; }

 private:
  pow2_scale scale_{};
};

}  // namespace cpd
