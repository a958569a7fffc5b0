// SPDX-License-Identifier: MIT
#pragma once

#include <cpd/core/config.hpp>

namespace cpd {

/// How a value between two neighbours of a format is rounded (docs/rounding.md).
enum class rounding : unsigned char {
  nearest_even,  ///< to nearest, ties to the even code (IEEE roundTiesToEven)
  nearest_away,  ///< to nearest, ties away from zero (IEEE roundTiesToAway)
  toward_zero,   ///< truncation (IEEE roundTowardZero)
  upward,        ///< toward +inf (IEEE roundTowardPositive)
  downward,      ///< toward -inf (IEEE roundTowardNegative)
  stochastic,    ///< up with probability equal to the distance to the lower neighbour in ulps
  odd            ///< toward zero, then set the last bit of the code when inexact
};

/// What happens to a finite value beyond the format's largest finite value.
enum class overflow : unsigned char {
  infinity,  ///< IEEE 754: +-inf when the mode rounds away from zero, else +-max (NaN without inf)
  saturate   ///< +-max, also for +-inf inputs
};

/// The name of a rounding mode, as used on command lines ("nearest_even", ...).
CPD_HOST_DEVICE constexpr const char* to_string(rounding r) noexcept {
  switch (r) {
    case rounding::nearest_even: return "nearest_even";
    case rounding::nearest_away: return "nearest_away";
    case rounding::toward_zero: return "toward_zero";
    case rounding::upward: return "upward";
    case rounding::downward: return "downward";
    case rounding::stochastic: return "stochastic";
    case rounding::odd: return "odd";
  }
  return "?";
}

/// The name of an overflow mode ("infinity" or "saturate").
CPD_HOST_DEVICE constexpr const char* to_string(overflow o) noexcept {
  return o == overflow::saturate ? "saturate" : "infinity";
}

/// Every rounding mode, in declaration order, for loops over modes.
inline constexpr rounding all_roundings[] = {rounding::nearest_even, rounding::nearest_away,
                                             rounding::toward_zero,  rounding::upward,
                                             rounding::downward,     rounding::stochastic,
                                             rounding::odd};

}  // namespace cpd
