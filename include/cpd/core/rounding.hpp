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
  odd,           ///< toward zero, then set the last bit of the code when inexact
  nearest_zero   ///< to nearest, ties toward zero (CPFloat's and chop's; not an IEEE 754 mode)
};

/// What happens to a finite value beyond the format's largest finite value.
enum class overflow : unsigned char {
  infinity,  ///< IEEE 754: +-inf when the mode rounds away from zero, else +-max (NaN without inf)
  saturate,  ///< +-max, also for +-inf inputs (IEEE P3109 SatFinite)
  propagate  ///< finite values saturate to +-max, +-inf inputs stay +-inf (IEEE P3109 SatPropagate)
};

/// How the N random bits R of rounding::stochastic decide, for a value whose distance to the
/// lower neighbour is f ulps (0 <= f < 1): IEEE P3109's variants StochasticA, B and C
/// (docs/rounding.md), which round up with probability f when f is a multiple of 2^-N, and
/// equal-probability stochastic rounding (CPFloat's and chop's "SE" mode).
enum class stochastic_variant : unsigned char {
  a,  ///< up when floor(f * 2^N) + R >= 2^N (cpd's stochastic rounding; N in [1, 32])
  b,  ///< up when floor(f * 2^(N+1)) + 2R + 1 >= 2^(N+1) (N in [1, 31])
  c,  ///< up when round-to-nearest-even(f * 2^N) + R >= 2^N (N in [1, 32])
  equal  ///< up when f > 0 and R >= 2^(N-1): either neighbour with probability 1/2 (N in [1, 32])
};

/// What a format's values are below its smallest normal (CPFloat's fpopts.subnormal, chop's
/// options.subnormal): the format's subnormals, or none (docs/rounding.md).
enum class subnormal_mode : unsigned char {
  keep,  ///< the format's subnormals (gradual underflow, IEEE 754)
  flush  ///< no subnormals: a value below the smallest normal rounds, in the mode, to 0 or to it
};

/// The exponent range a value is rounded in (CPFloat's fpopts.explim): the format's, or
/// unbounded: the precision of the format (M + 1 significant bits) with the exponent range
/// of the source type, float or double (docs/rounding.md).
enum class exponent_range : unsigned char {
  format,    ///< the format's own: its largest value overflows, its smallest underflows
  unbounded  ///< the source type's (CPFloat's CPFLOAT_EXPRANGE_STOR): only the precision is the format's
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
    case rounding::nearest_zero: return "nearest_zero";
  }
  return "?";
}

/// The name of an overflow mode ("infinity", "saturate" or "propagate").
CPD_HOST_DEVICE constexpr const char* to_string(overflow o) noexcept {
  return o == overflow::saturate ? "saturate" : o == overflow::propagate ? "propagate" : "infinity";
}

/// The name of a stochastic variant ("a", "b", "c" or "equal").
CPD_HOST_DEVICE constexpr const char* to_string(stochastic_variant v) noexcept {
  return v == stochastic_variant::b       ? "b"
         : v == stochastic_variant::c     ? "c"
         : v == stochastic_variant::equal ? "equal"
                                          : "a";
}

/// The name of a subnormal mode ("keep" or "flush").
CPD_HOST_DEVICE constexpr const char* to_string(subnormal_mode m) noexcept {
  return m == subnormal_mode::flush ? "flush" : "keep";
}

/// The name of an exponent range ("format" or "unbounded").
CPD_HOST_DEVICE constexpr const char* to_string(exponent_range r) noexcept {
  return r == exponent_range::unbounded ? "unbounded" : "format";
}

/// Every rounding mode, in declaration order, for loops over modes.
inline constexpr rounding all_roundings[] = {rounding::nearest_even, rounding::nearest_away,
                                             rounding::toward_zero,  rounding::upward,
                                             rounding::downward,     rounding::stochastic,
                                             rounding::odd,          rounding::nearest_zero};

}  // namespace cpd
