// SPDX-License-Identifier: MIT
#pragma once

// cpd::value_stats: what rounding did to a set of values, one set of counters with
// one meaning wherever cpd counts: a bulk call (bulk_options::stats), a measurement
// without writing (cpd::measure_quantization), an allreduce (allreduce_result::scaled)
// and a training run. value_stats_fields lists the counters by name, once: sums,
// comparisons, printers, MPI reductions and the Python package's dicts iterate it.
// The events are the rounding core's (cpd/core/detail/round.hpp): an overflow is
// IEEE's (the magnitude, rounded with an unbounded exponent, exceeds the largest
// finite value), whatever the overflow mode then makes of it.

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

  /// Adds the counts of o (every counter of value_stats_fields).
  constexpr value_stats& operator+=(const value_stats& o) noexcept;

 private:
  [[nodiscard]] constexpr double fraction(std::uint64_t k) const noexcept {
    return count == 0 ? 0.0 : static_cast<double>(k) / static_cast<double>(count);
  }
};

/// One counter of value_stats: its name (as printed, and the key of the Python package's
/// dicts) and its member.
struct value_stats_field {
  /// A pointer to a counter of value_stats.
  using member_type = std::uint64_t value_stats::*;
  const char* name;
  member_type member;
};

/// Every counter of value_stats, in declaration order.
inline constexpr value_stats_field value_stats_fields[] = {
    {"count", &value_stats::count},         {"zeros", &value_stats::zeros},
    {"underflow", &value_stats::underflow}, {"overflow", &value_stats::overflow},
    {"nan", &value_stats::nan},             {"saturated", &value_stats::saturated},
    {"nan_inputs", &value_stats::nan_inputs}, {"inf_inputs", &value_stats::inf_inputs}};
static_assert(sizeof(value_stats) == sizeof value_stats_fields / sizeof value_stats_fields[0] * sizeof(std::uint64_t),
              "cpd::value_stats_fields must list every counter of cpd::value_stats");

constexpr value_stats& value_stats::operator+=(const value_stats& o) noexcept {
  for (const value_stats_field& f : value_stats_fields) this->*f.member += o.*f.member;
  return *this;
}

/// Every counter equal.
constexpr bool operator==(const value_stats& a, const value_stats& b) noexcept {
  for (const value_stats_field& f : value_stats_fields)
    if (a.*f.member != b.*f.member) return false;
  return true;
}
constexpr bool operator!=(const value_stats& a, const value_stats& b) noexcept { return !(a == b); }

}  // namespace cpd
