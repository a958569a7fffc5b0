// SPDX-License-Identifier: MIT
#pragma once

// cpd::value_stats: what rounding did to a set of values, one set of counters with
// one meaning wherever cpd counts: a bulk call (bulk_options::stats, under its old
// name bulk_stats), a measurement without writing (cpd::measure_quantization, under
// its old name quantization_stats), an allreduce (allreduce_result::scaled) and a
// training run. The events are the rounding core's (cpd/core/detail/round.hpp): an
// overflow is IEEE's (the magnitude, rounded with an unbounded exponent, exceeds the
// largest finite value), whatever the overflow mode then makes of it.

#include <cpd/core/config.hpp>

#include <cstdint>

namespace cpd {

/// Counts of what rounding did to values (decode: to codes, read as inputs).
struct value_stats {
  std::uint64_t count = 0;       ///< values looked at
  std::uint64_t zeros = 0;       ///< inputs that were +-0 (decode: codes of +-0)
  std::uint64_t underflow = 0;   ///< non-zero finite inputs that became zero (flushed)
  std::uint64_t overflow = 0;    ///< finite inputs that overflowed, whatever they became (inf, NaN or +-max)
  std::uint64_t nan = 0;         ///< non-NaN inputs that became NaN (overflow without inf; negative in fnu)
  std::uint64_t saturated = 0;   ///< overflowed or infinite inputs that became +-max
  std::uint64_t nan_inputs = 0;  ///< inputs that were NaN (decode: NaN codes), whatever they became
  std::uint64_t inf_inputs = 0;  ///< inputs that were +-inf (decode: inf codes), whatever they became

  /// nan_inputs + inf_inputs.
  [[nodiscard]] constexpr std::uint64_t nonfinite_inputs() const noexcept { return nan_inputs + inf_inputs; }
  /// underflow / count (0 for no values).
  [[nodiscard]] constexpr double underflow_fraction() const noexcept { return fraction(underflow); }
  /// overflow / count.
  [[nodiscard]] constexpr double overflow_fraction() const noexcept { return fraction(overflow); }
  /// saturated / count.
  [[nodiscard]] constexpr double saturated_fraction() const noexcept { return fraction(saturated); }
  /// nonfinite_inputs() / count.
  [[nodiscard]] constexpr double nonfinite_fraction() const noexcept { return fraction(nonfinite_inputs()); }

  /// Adds the counts of o.
  constexpr value_stats& operator+=(const value_stats& o) noexcept {
    count += o.count;
    zeros += o.zeros;
    underflow += o.underflow;
    overflow += o.overflow;
    nan += o.nan;
    saturated += o.saturated;
    nan_inputs += o.nan_inputs;
    inf_inputs += o.inf_inputs;
    return *this;
  }
  friend constexpr bool operator==(const value_stats& a, const value_stats& b) noexcept {
    return a.count == b.count && a.zeros == b.zeros && a.underflow == b.underflow && a.overflow == b.overflow &&
           a.nan == b.nan && a.saturated == b.saturated && a.nan_inputs == b.nan_inputs &&
           a.inf_inputs == b.inf_inputs;
  }
  friend constexpr bool operator!=(const value_stats& a, const value_stats& b) noexcept { return !(a == b); }

 private:
  [[nodiscard]] constexpr double fraction(std::uint64_t k) const noexcept {
    return count == 0 ? 0.0 : static_cast<double>(k) / static_cast<double>(count);
  }
};

/// The statistics of a bulk call (bulk_options::stats): the name before value_stats.
using bulk_stats = value_stats;
/// The statistics of cpd::measure_quantization: the name before value_stats.
using quantization_stats = value_stats;

}  // namespace cpd
