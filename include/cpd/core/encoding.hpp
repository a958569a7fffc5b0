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
  fnu,     ///< unsigned, finite + NaN, no zero and no subnormals (OCP MX E8M0 scale)
  p3109_sf,  ///< IEEE P3109 signed finite: fnuz's codes, with P3109's rounding and saturation rules
  p3109_se,  ///< IEEE P3109 signed extended: as p3109_sf, +-inf at the largest magnitude code
  p3109_uf,  ///< IEEE P3109 unsigned finite: zero, subnormals, NaN at all ones
  p3109_ue   ///< IEEE P3109 unsigned extended: as p3109_uf, +inf below the NaN
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

/// IEEE P3109 binary{K}p{P}, signed, finite domain: the codes of cpd::fnuz (E = K - P,
/// M = P - 1), rounded and saturated by P3109's rules (docs/formats.md).
struct p3109_sf {
  static constexpr encoding_kind kind = encoding_kind::p3109_sf;
};
/// IEEE P3109 signed, extended domain: NaN 0x80..., +inf 0x7F..., -inf 0xFF....
struct p3109_se {
  static constexpr encoding_kind kind = encoding_kind::p3109_se;
};
/// IEEE P3109 unsigned, finite domain (E = K - P + 1, M = P - 1, no sign bit): NaN all ones.
struct p3109_uf {
  static constexpr encoding_kind kind = encoding_kind::p3109_uf;
};
/// IEEE P3109 unsigned, extended domain: +inf all ones but the last bit, NaN all ones.
struct p3109_ue {
  static constexpr encoding_kind kind = encoding_kind::p3109_ue;
};

/// The name of an encoding ("ieee", "fn", "fnuz", "finite", "fnu", "p3109_sf", ...).
CPD_HOST_DEVICE constexpr const char* to_string(encoding_kind k) noexcept {
  switch (k) {
    case encoding_kind::ieee: return "ieee";
    case encoding_kind::fn: return "fn";
    case encoding_kind::fnuz: return "fnuz";
    case encoding_kind::finite: return "finite";
    case encoding_kind::fnu: return "fnu";
    case encoding_kind::p3109_sf: return "p3109_sf";
    case encoding_kind::p3109_se: return "p3109_se";
    case encoding_kind::p3109_uf: return "p3109_uf";
    case encoding_kind::p3109_ue: return "p3109_ue";
  }
  return "?";
}

/// True for the four IEEE P3109 encodings.
CPD_HOST_DEVICE constexpr bool is_p3109(encoding_kind k) noexcept {
  return k == encoding_kind::p3109_sf || k == encoding_kind::p3109_se || k == encoding_kind::p3109_uf ||
         k == encoding_kind::p3109_ue;
}

/// True for the encodings without a sign bit (fnu, P3109 unsigned).
CPD_HOST_DEVICE constexpr bool is_unsigned(encoding_kind k) noexcept {
  return k == encoding_kind::fnu || k == encoding_kind::p3109_uf || k == encoding_kind::p3109_ue;
}

namespace detail {

/// The bias a format has unless told otherwise: 2^(E-1) for fnuz and the P3109 encodings
/// (2^(K-P-1) signed, 2^(K-P) unsigned), else 2^(E-1) - 1.
CPD_HOST_DEVICE constexpr int default_bias(int e, encoding_kind k) noexcept {
  if (e < 1 || e > 11) return 0;  // not a format; format_error says why
  return k == encoding_kind::fnuz || is_p3109(k) ? (1 << (e - 1)) : (1 << (e - 1)) - 1;
}

/// How many of the largest magnitude codes are not finite values (inf and NaN codes), for
/// the encodings that keep them at the top of the magnitude range.
CPD_HOST_DEVICE constexpr std::uint64_t top_specials(int m, encoding_kind k) noexcept {
  switch (k) {
    case encoding_kind::ieee: return std::uint64_t(1) << m;  // the all-ones exponent
    case encoding_kind::fn:
    case encoding_kind::fnu:
    case encoding_kind::p3109_se:
    case encoding_kind::p3109_uf: return 1;
    case encoding_kind::p3109_ue: return 2;
    default: return 0;  // fnuz, finite, p3109_sf: NaN, if any, is the -0 pattern
  }
}

/// The largest exponent field that holds a finite value.
CPD_HOST_DEVICE constexpr int max_finite_field(int e, int m, encoding_kind k) noexcept {
  if (e < 1 || e > 11) return 0;  // not a format; format_error says why
  const std::uint64_t all = (std::uint64_t(1) << (e + m)) - 1;  // the largest magnitude code
  return static_cast<int>((all - top_specials(m, k)) >> m);
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
      k != encoding_kind::fnu && !is_p3109(k))
    return "encoding must be one of ieee, fn, fnuz, finite, fnu, p3109_sf, p3109_se, p3109_uf, p3109_ue (a value "
           "cast from an int is no encoding_kind)";
  if (k == encoding_kind::ieee && e < 2) return "cpd::ieee needs E >= 2 (one exponent code is inf/NaN)";
  if (k == encoding_kind::ieee && m < 1) return "cpd::ieee needs M >= 1 to encode NaN; use cpd::fn or cpd::finite for M = 0";
  if (k == encoding_kind::fn && e + m < 2) return "cpd::fn needs E + M >= 2 (one code is NaN)";
  if (k == encoding_kind::fnu && e + m < 2) return "cpd::fnu needs E + M >= 2 (one code is NaN)";
  if (k == encoding_kind::p3109_se && e + m < 2)
    return "cpd::p3109_se needs E + M >= 2 (K >= 3: one magnitude code is inf, and one must be finite)";
  if (k == encoding_kind::p3109_uf && e + m < 2) return "cpd::p3109_uf needs E + M >= 2 (one code is NaN)";
  if (k == encoding_kind::p3109_ue && e + m < 2)
    return "cpd::p3109_ue needs E + M >= 2 (K >= 2: two codes are inf and NaN, and one must be finite)";
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
  /// IEEE P3109's rules (docs/formats.md): with M = 0, ties and round-to-odd go by the
  /// parity of the code (the exponent field); overflow in overflow::infinity gives +-max
  /// where there is no inf; round-to-odd overflows to inf where the largest finite code is
  /// even; negative values of an unsigned format give 0 or NaN (P3109's Saturate).
  bool p3109 = false;
  /// No subnormal values (bulk_options::subnormals = flush): below emin the quantum is the
  /// smallest normal, so values round to 0 or to it. The codes are the encoding's (a subset of
  /// them is used); min_code, min_positive and min_bits_* are the smallest normal's.
  bool flush = false;
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
  s.has_sign = !is_unsigned(k);
  s.has_inf = k == encoding_kind::ieee || k == encoding_kind::p3109_se || k == encoding_kind::p3109_ue;
  s.has_nan = k != encoding_kind::finite;
  s.has_neg_zero = k == encoding_kind::ieee || k == encoding_kind::fn || k == encoding_kind::finite;
  s.has_zero = k != encoding_kind::fnu;
  s.has_subnormals = k != encoding_kind::fnu;
  s.p3109 = is_p3109(k);
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
    case encoding_kind::p3109_sf:
      s.max_code = all;
      s.nan_code = s.sign_bit;
      break;
    case encoding_kind::p3109_se:
      s.max_code = all - 1;
      s.inf_code = all;  // -inf: the sign bit with it
      s.nan_code = s.sign_bit;
      break;
    case encoding_kind::p3109_uf:
      s.max_code = all - 1;
      s.nan_code = all;
      break;
    case encoding_kind::p3109_ue:
      s.max_code = all - 2;
      s.inf_code = all - 1;
      s.nan_code = all;
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

/// s without its subnormal values (bulk_options::subnormals = flush); s itself where it
/// has none (fnu).
CPD_HOST_DEVICE constexpr spec flushed(spec s) noexcept {
  if (!s.has_subnormals) return s;
  s.flush = true;
  s.min_code = std::uint64_t(1) << s.M;
  s.min_positive = s.min_normal;
  s.min_bits_f64 = code_bits<double>(s, s.min_code);
  if (s.fits_float) s.min_bits_f32 = code_bits<float>(s, s.min_code);
  return s;
}

/// True when code (sign and magnitude bits of a code of s) is a NaN of s.
CPD_HOST_DEVICE constexpr bool is_nan_code(const spec& s, std::uint64_t code) noexcept {
  const std::uint64_t mag = code & s.mag_mask;
  switch (s.enc) {
    case encoding_kind::ieee: return mag > s.inf_code;
    case encoding_kind::fn:
    case encoding_kind::fnu:
    case encoding_kind::p3109_uf:
    case encoding_kind::p3109_ue: return mag == s.nan_code;
    case encoding_kind::fnuz:
    case encoding_kind::p3109_sf:
    case encoding_kind::p3109_se: return code == s.nan_code;
    case encoding_kind::finite: return false;
  }
  return false;
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
