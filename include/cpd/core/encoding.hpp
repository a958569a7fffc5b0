// SPDX-License-Identifier: MIT
#pragma once

// What the bits of a format mean. Every fact about a format (bias, emin, emax,
// the largest finite code, the codes of inf and NaN, ...) is computed here, once,
// from (E, M, encoding, bias); the compile-time type cpd::float_t and the runtime
// cpd::format both read them from a detail::spec.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>

#include <cstdint>

namespace cpd {

/// The encodings of special values, as value-level tags.
enum class encoding_kind : unsigned char {
  ieee,    ///< IEEE 754 style: subnormals, +-inf and NaNs in the all-ones exponent
  fn,      ///< finite + NaN: no inf; NaN only where exponent and mantissa are all ones
  fnuz,    ///< finite + NaN, unsigned zero: no inf, no -0, NaN is the -0 pattern
  finite,  ///< no inf, no NaN (OCP FP6/FP4)
  fnu      ///< unsigned, finite + NaN, no zero and no subnormals (OCP MX E8M0 scale)
};

/// IEEE-style encoding (the default): subnormals, +-inf, NaNs.
struct ieee {
  static constexpr encoding_kind kind = encoding_kind::ieee;
};
/// Finite + NaN (OCP E4M3): no inf, NaN where exponent and mantissa are all ones.
struct fn {
  static constexpr encoding_kind kind = encoding_kind::fn;
};
/// Finite, NaN, unsigned zero (AMD/Graphcore FP8): no inf, no -0, NaN = 0b1000...0.
struct fnuz {
  static constexpr encoding_kind kind = encoding_kind::fnuz;
};
/// Finite only: no inf and no NaN (OCP FP6 and FP4).
struct finite {
  static constexpr encoding_kind kind = encoding_kind::finite;
};
/// Unsigned, exponent-style, no zero, NaN = all ones (OCP MX E8M0 scale).
struct fnu {
  static constexpr encoding_kind kind = encoding_kind::fnu;
};

/// The name of an encoding ("ieee", "fn", "fnuz", "finite", "fnu").
CPD_HOST_DEVICE constexpr const char* to_string(encoding_kind k) noexcept {
  switch (k) {
    case encoding_kind::ieee: return "ieee";
    case encoding_kind::fn: return "fn";
    case encoding_kind::fnuz: return "fnuz";
    case encoding_kind::finite: return "finite";
    case encoding_kind::fnu: return "fnu";
  }
  return "?";
}

namespace detail {

/// The bias a format has unless told otherwise: 2^(E-1) for fnuz, else 2^(E-1) - 1.
CPD_HOST_DEVICE constexpr int default_bias(int e, encoding_kind k) noexcept {
  if (e < 1 || e > 11) return 0;  // not a format; format_error says why
  return k == encoding_kind::fnuz ? (1 << (e - 1)) : (1 << (e - 1)) - 1;
}

/// The largest exponent field that holds a finite value.
CPD_HOST_DEVICE constexpr int max_finite_field(int e, int m, encoding_kind k) noexcept {
  if (e < 1 || e > 11) return 0;  // not a format; format_error says why
  const bool all_ones_special = k == encoding_kind::ieee || ((k == encoding_kind::fn || k == encoding_kind::fnu) && m == 0);
  return (1 << e) - (all_ones_special ? 2 : 1);
}

/// The exponent of the largest finite value (2^emax <= max < 2^(emax+1)), in 64 bits:
/// exact for every int bias, so that a bias far out of range is found, not overflowed.
CPD_HOST_DEVICE constexpr long long max_exponent(int e, int m, encoding_kind k, int bias) noexcept {
  return static_cast<long long>(max_finite_field(e, m, k)) - bias;
}

/// The exponent of the finest step between values, in 64 bits (exact for every int bias):
/// every value is a multiple of 2^min_exponent (the smallest subnormal; with no
/// subnormals, fnu, the ulp of the lowest binade, 2^(-bias - M)).
CPD_HOST_DEVICE constexpr long long min_exponent(int m, encoding_kind k, int bias) noexcept {
  return (k == encoding_kind::fnu ? 0 : 1) - static_cast<long long>(bias) - m;
}

/// Why (E, M, encoding, bias) is not a format, or nullptr when it is one.
/// The same sentences serve the static_asserts' intent and the runtime errors.
CPD_HOST_DEVICE constexpr const char* format_error(int e, int m, encoding_kind k, int bias) noexcept {
  if (e < 1 || e > 11) return "exponent bits E must be in [1, 11]";
  if (m < 0 || m > 52) return "mantissa bits M must be in [0, 52]";
  if (k != encoding_kind::ieee && k != encoding_kind::fn && k != encoding_kind::fnuz && k != encoding_kind::finite &&
      k != encoding_kind::fnu)
    return "encoding must be one of ieee, fn, fnuz, finite, fnu (a value cast from an int is no encoding_kind)";
  if (k == encoding_kind::ieee && e < 2) return "cpd::ieee needs E >= 2 (one exponent code is inf/NaN)";
  if (k == encoding_kind::ieee && m < 1) return "cpd::ieee needs M >= 1 to encode NaN; use cpd::fn or cpd::finite for M = 0";
  if (k == encoding_kind::fn && e + m < 2) return "cpd::fn needs E + M >= 2 (one code is NaN)";
  if (k == encoding_kind::fnu && e + m < 2) return "cpd::fnu needs E + M >= 2 (one code is NaN)";
  if (max_exponent(e, m, k, bias) > 1023) return "bias too small: the largest value would exceed the range of double";
  if (min_exponent(m, k, bias) < -1074) return "bias too large: the smallest value would be below the range of double";
  return nullptr;
}

/// All facts about one format, derived once from (E, M, encoding, bias).
struct spec {
  int E = 0;           ///< exponent bits
  int M = 0;           ///< mantissa (trailing significand) bits
  int bias = 0;        ///< exponent bias
  encoding_kind enc{};  ///< special-value encoding
  bool has_sign = true;
  bool has_inf = false;
  bool has_nan = false;
  bool has_neg_zero = false;
  bool has_zero = true;
  bool has_subnormals = true;
  int bits = 0;             ///< total bits of a code (1 + E + M, or E + M when unsigned)
  int emin = 0;             ///< exponent of the smallest normal (of code 1 << M; of code 0 for fnu)
  int emax = 0;             ///< exponent of the largest finite value
  std::uint64_t mag_mask = 0;  ///< the bits of a code below the sign
  std::uint64_t sign_bit = 0;  ///< the sign bit of a code (0 when unsigned)
  std::uint64_t max_code = 0;  ///< magnitude code of the largest finite value
  std::uint64_t inf_code = 0;  ///< code of +inf (0 when there is none)
  std::uint64_t nan_code = 0;  ///< canonical NaN code (0 when there is none)
  std::uint64_t min_code = 0;  ///< magnitude code of the smallest positive value
  double max_value = 0;         ///< largest finite value
  double min_normal = 0;        ///< smallest positive normal value
  double min_positive = 0;      ///< smallest positive value (a subnormal where they exist)
  bool fits_float = false;      ///< every value is exactly a float
  std::uint32_t max_bits_f32 = 0;  ///< float bits of max_value (when fits_float)
  std::uint32_t min_bits_f32 = 0;  ///< float bits of min_positive (when fits_float)
  std::uint64_t max_bits_f64 = 0;  ///< double bits of max_value
  std::uint64_t min_bits_f64 = 0;  ///< double bits of min_positive
};

/// The bits of the value of a magnitude code as a T, exactly (finite codes whose value is
/// a T), by integer arithmetic: no result depends on the floating-point environment.
template <class T>
CPD_HOST_DEVICE constexpr uint_of<T> code_bits(const spec& s, std::uint64_t mag) noexcept {
  const std::uint64_t field = mag >> s.M;
  const std::uint64_t frac = mag & ((std::uint64_t(1) << s.M) - 1);
  if (s.has_subnormals && field == 0) return scaled_bits<T>(frac, s.emin - s.M);
  const int exp = s.has_subnormals ? int(field) - 1 + s.emin : int(field) + s.emin;
  return scaled_bits<T>((std::uint64_t(1) << s.M) | frac, exp - s.M);
}

/// The value of a magnitude code, exactly, as a double (codes of finite values only).
CPD_HOST_DEVICE constexpr double code_value(const spec& s, std::uint64_t mag) noexcept {
  return bit_cast<double>(code_bits<double>(s, mag));
}

/// Sets the encoding of s and its yes/no facts: the one table from an encoding to its
/// flags (make_spec, and the host kernels' encoding_spec, whose k is a constant).
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr void set_encoding(spec& s, encoding_kind k) noexcept {
  s.enc = k;
  s.has_sign = k != encoding_kind::fnu;
  s.has_inf = k == encoding_kind::ieee;
  s.has_nan = k != encoding_kind::finite;
  s.has_neg_zero = k == encoding_kind::ieee || k == encoding_kind::fn || k == encoding_kind::finite;
  s.has_zero = k != encoding_kind::fnu;
  s.has_subnormals = k != encoding_kind::fnu;
}

/// Builds the spec of a valid format (check it with format_error first).
CPD_HOST_DEVICE constexpr spec make_spec(int e, int m, encoding_kind k, int bias) noexcept {
  spec s{};
  s.E = e;
  s.M = m;
  s.bias = bias;
  set_encoding(s, k);
  const std::uint64_t all = (std::uint64_t(1) << (e + m)) - 1;  // all ones below the sign
  s.bits = e + m + (s.has_sign ? 1 : 0);
  s.mag_mask = all;
  s.sign_bit = s.has_sign ? (std::uint64_t(1) << (e + m)) : 0;
  switch (k) {
    case encoding_kind::ieee:
      s.max_code = ((std::uint64_t((1 << e) - 1)) << m) - 1;
      s.inf_code = std::uint64_t((1 << e) - 1) << m;
      s.nan_code = s.inf_code | (std::uint64_t(1) << (m - 1));
      break;
    case encoding_kind::fn:
    case encoding_kind::fnu:
      s.max_code = all - 1;
      s.nan_code = all;
      break;
    case encoding_kind::fnuz:
      s.max_code = all;
      s.nan_code = s.sign_bit;
      break;
    case encoding_kind::finite:
      s.max_code = all;
      break;
  }
  s.emin = s.has_subnormals ? 1 - bias : -bias;
  s.emax = int(s.max_code >> m) - bias;  // field f >= 1 (any f for fnu) has exponent f - bias
  s.min_code = s.has_zero ? 1 : 0;
  s.max_value = code_value(s, s.max_code);
  s.min_positive = code_value(s, s.min_code);
  s.min_normal = code_value(s, s.has_subnormals ? (std::uint64_t(1) << m) : 0);
  s.fits_float = m <= 23 && s.emax <= 127 && s.emin - m >= -149;  // the finest step is 2^(emin - m)
  s.max_bits_f64 = code_bits<double>(s, s.max_code);
  s.min_bits_f64 = code_bits<double>(s, s.min_code);
  if (s.fits_float) {
    s.max_bits_f32 = code_bits<float>(s, s.max_code);
    s.min_bits_f32 = code_bits<float>(s, s.min_code);
  }
  return s;
}

/// The magnitude bits of T that hold the largest finite value of s.
template <class T>
CPD_HOST_DEVICE constexpr uint_of<T> max_bits(const spec& s) noexcept {
  if constexpr (sizeof(T) == 4) return s.max_bits_f32;
  else return s.max_bits_f64;
}

/// The magnitude bits of T that hold the smallest positive value of s.
template <class T>
CPD_HOST_DEVICE constexpr uint_of<T> min_bits(const spec& s) noexcept {
  if constexpr (sizeof(T) == 4) return s.min_bits_f32;
  else return s.min_bits_f64;
}

/// True when s can be rounded in T itself (round_bits<R, O, T>), as the host vector
/// kernels and the device functors do: emin >= emin(T), and every value is a T (for
/// float also E <= 8 and M <= 23). Other formats are rounded in double.
template <class T>
CPD_HOST_DEVICE constexpr bool vector_kernel_takes(const spec& s) noexcept {
  return s.emin >= source<T>::emin && (sizeof(T) == 8 || (s.fits_float && s.E <= 8 && s.M <= 23));
}

/// The smallest unsigned integer type that holds N bits.
template <int N>
using storage_for = std::conditional_t<
    (N <= 8), std::uint8_t,
    std::conditional_t<(N <= 16), std::uint16_t, std::conditional_t<(N <= 32), std::uint32_t, std::uint64_t>>>;

}  // namespace detail
}  // namespace cpd
