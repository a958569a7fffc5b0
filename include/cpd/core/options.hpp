// SPDX-License-Identifier: MIT
#pragma once

// The options and the statistics of a bulk call (quantize, encode, decode): one
// struct of each, shared by the host calls (cpd/host/bulk.hpp) and the device
// calls (cpd/device/), so that a scale, a random key or a request for counts is
// spelled the same way everywhere.

#include <cpd/core/config.hpp>

#include <cstddef>
#include <cstdint>

namespace cpd {

/// What a bulk call did to the values (filled when bulk_options::stats is set).
struct bulk_stats {
  std::size_t underflow = 0;  ///< non-zero finite inputs that became zero
  std::size_t overflow = 0;   ///< finite inputs that overflowed (IEEE: rounded with an unbounded exponent, above max)
  std::size_t nan = 0;        ///< non-NaN inputs that became NaN (overflow without inf; negative in fnu)
  std::size_t saturated = 0;  ///< overflowed or infinite inputs that became +-max
  std::size_t nan_inputs = 0;  ///< inputs that were NaN (decode: NaN codes), whatever they became
  std::size_t inf_inputs = 0;  ///< inputs that were +-inf (decode: inf codes), whatever they became

  /// nan_inputs + inf_inputs.
  [[nodiscard]] constexpr std::size_t nonfinite_inputs() const noexcept { return nan_inputs + inf_inputs; }

  /// Adds the counts of o.
  constexpr bulk_stats& operator+=(const bulk_stats& o) noexcept {
    underflow += o.underflow;
    overflow += o.overflow;
    nan += o.nan;
    saturated += o.saturated;
    nan_inputs += o.nan_inputs;
    inf_inputs += o.inf_inputs;
    return *this;
  }
  friend constexpr bool operator==(const bulk_stats& a, const bulk_stats& b) noexcept {
    return a.underflow == b.underflow && a.overflow == b.overflow && a.nan == b.nan && a.saturated == b.saturated &&
           a.nan_inputs == b.nan_inputs && a.inf_inputs == b.inf_inputs;
  }
  friend constexpr bool operator!=(const bulk_stats& a, const bulk_stats& b) noexcept { return !(a == b); }
};

/// Options of the bulk calls; the defaults round the values as they are.
struct bulk_options {
  /// Power-of-two scale k: x * 2^k is rounded (exactly, whatever k), and quantize
  /// and decode return the rounded value * 2^-k.
  int scale_exponent = 0;
  /// Any scale s: x * s (a float or double product) is rounded.
  float scale = 1.0f;
  /// The factor applied to quantize and decode results after rounding; 0 means 1 / scale.
  float scale_inverse = 0.0f;
  /// Stochastic rounding: the seed of the counter-based generator (cpd::random_bits).
  std::uint64_t seed = 0;
  /// Stochastic rounding: an independent stream (a tensor, a step, a worker...).
  std::uint64_t stream = 0;
  /// Stochastic rounding: the counter of element 0, so that pieces of one tensor
  /// processed separately draw what the whole would.
  std::uint64_t offset = 0;
  /// Stochastic rounding: the number of random bits per element, in [1, 32].
  int random_bits = 32;
  /// When set, receives the counts of this call.
  bulk_stats* stats = nullptr;
};

}  // namespace cpd
