// SPDX-License-Identifier: MIT
#pragma once

// cpd::float_t<E, M, Enc, Bias>: a value of a customized-precision format, and
// the scalar entry points convert<> and quantize<>.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/rounding.hpp>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace cpd {

/// A floating-point format with E exponent bits, M mantissa bits, encoding Enc
/// (cpd::ieee, cpd::fn, cpd::fnuz, cpd::finite, cpd::fnu, and IEEE P3109's cpd::p3109_sf,
/// p3109_se, p3109_uf, p3109_ue) and exponent bias Bias.
template <int E, int M, class Enc = ieee, int Bias = detail::default_bias(E, Enc::kind)>
class float_t {
  static_assert(E >= 1 && E <= 11, "cpd::float_t: E must be in [1, 11]");
  static_assert(M >= 0 && M <= 52, "cpd::float_t: M must be in [0, 52]");
  static_assert(Enc::kind != encoding_kind::ieee || E >= 2,
                "cpd::float_t: cpd::ieee needs E >= 2 (one exponent code is inf/NaN)");
  static_assert(Enc::kind != encoding_kind::ieee || M >= 1,
                "cpd::float_t: cpd::ieee needs M >= 1 to encode NaN; use cpd::fn or cpd::finite for M = 0");
  static_assert((Enc::kind != encoding_kind::fn && Enc::kind != encoding_kind::fnu) || E + M >= 2,
                "cpd::float_t: cpd::fn and cpd::fnu need E + M >= 2 (one code is NaN)");
  static_assert((Enc::kind != encoding_kind::p3109_se && Enc::kind != encoding_kind::p3109_uf &&
                 Enc::kind != encoding_kind::p3109_ue) ||
                    E + M >= 2,
                "cpd::float_t: cpd::p3109_se, p3109_uf and p3109_ue need E + M >= 2 (a finite value beside inf "
                "and NaN)");
  static_assert(detail::max_exponent(E, M, Enc::kind, Bias) <= 1023,
                "cpd::float_t: Bias too small, the largest value would exceed the range of double");
  static_assert(detail::min_exponent(M, Enc::kind, Bias) >= -1074,
                "cpd::float_t: Bias too large, the smallest value would be below the range of double");

 public:
  using encoding = Enc;
  /// The smallest unsigned integer that holds a code.
  using storage_type = detail::storage_for<E + M + (is_unsigned(Enc::kind) ? 0 : 1)>;

  static constexpr int exponent_bits = E;
  static constexpr int mantissa_bits = M;
  static constexpr int bias = Bias;
  /// Every fact about the format (emin, emax, max code, ...), computed once.
  static constexpr detail::spec spec = detail::make_spec(E, M, Enc::kind, Bias);
  /// True when every value of the format is exactly a float.
  static constexpr bool fits_float = spec.fits_float;

  /// +0 (for cpd::fnu, which has no zero, the smallest value).
  float_t() = default;

  /// Rounds a float or a double to nearest, ties to even.
  CPD_HOST_DEVICE explicit constexpr float_t(float x) noexcept;
  CPD_HOST_DEVICE explicit constexpr float_t(double x) noexcept;

  /// The value with code b. Bits of b above the format's width are dropped (b & mask), so a
  /// float_t always holds a code of its format; cpd::decode rejects such codes instead.
  [[nodiscard]] CPD_HOST_DEVICE static constexpr float_t from_bits(storage_type b) noexcept {
    float_t f;
    f.bits_ = static_cast<storage_type>(b & mask_);
    return f;
  }
  /// The code.
  [[nodiscard]] CPD_HOST_DEVICE constexpr storage_type bits() const noexcept { return bits_; }

  /// The exact value as a float (requires fits_float) or a double.
  CPD_HOST_DEVICE explicit constexpr operator float() const noexcept {
    static_assert(fits_float,
                  "cpd::float_t: this format has values that are not floats; convert to double");
    constexpr detail::spec s = spec;  // a copy: device code may not refer to a host constexpr object
    return detail::bit_cast<float>(detail::decode_bits<float>(s, bits_));
  }
  CPD_HOST_DEVICE explicit constexpr operator double() const noexcept {
    constexpr detail::spec s = spec;
    return detail::bit_cast<double>(detail::decode_bits<double>(s, bits_));
  }

  /// Negation (exact; in fnuz and P3109's signed formats, -0 is +0; in an unsigned format,
  /// NaN, but for P3109's 0, which stays 0).
  [[nodiscard]] CPD_HOST_DEVICE constexpr float_t operator-() const noexcept {
    if constexpr (is_unsigned(Enc::kind)) {
      return spec.has_zero && bits_ == 0 ? *this : from_bits(static_cast<storage_type>(spec.nan_code));
    } else if constexpr (!spec.has_neg_zero) {
      return (bits_ & spec.mag_mask) == 0 ? *this : from_bits(static_cast<storage_type>(bits_ ^ spec.sign_bit));
    } else {
      return from_bits(static_cast<storage_type>(bits_ ^ spec.sign_bit));
    }
  }
  [[nodiscard]] CPD_HOST_DEVICE constexpr float_t operator+() const noexcept { return *this; }

 private:
  static constexpr storage_type mask_ = static_cast<storage_type>(
      spec.bits == 64 ? ~std::uint64_t(0) : ((std::uint64_t(1) << spec.bits) - 1));
  storage_type bits_ = 0;
};

/// True for the instantiations of cpd::float_t.
template <class T>
struct is_float_format : std::false_type {};
template <int E, int M, class Enc, int B>
struct is_float_format<float_t<E, M, Enc, B>> : std::true_type {};
template <class T>
inline constexpr bool is_float_format_v = is_float_format<T>::value;

/// Rounds x (float or double) to F in mode R; for stochastic rounding the low
/// `random_bits_used` bits of `random_bits` decide, as `variant` says (see docs/rounding.md).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class T>
[[nodiscard]] CPD_HOST_DEVICE constexpr F convert(T x, std::uint32_t random_bits = 0, int random_bits_used = 32,
                                                  stochastic_variant variant = stochastic_variant::a) noexcept {
  static_assert(is_float_format_v<F>, "cpd::convert: F must be a cpd::float_t");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "cpd::convert: the source must be float or double");
  static_assert(std::is_same_v<T, double> || (F::exponent_bits <= 8 && F::mantissa_bits <= 23),
                "cpd::convert: from float, F needs E <= 8 and M <= 23 (1 + E + M <= 32); convert from double");
  constexpr detail::spec s = F::spec;  // a copy: device code may not refer to a host constexpr object
  const auto r = detail::round_bits<R, O, T>(s, detail::bit_cast<detail::uint_of<T>>(x), random_bits,
                                            random_bits_used, variant);
  return F::from_bits(static_cast<typename F::storage_type>(r.code));
}

/// Rounds x to the nearest... value of F in mode R and returns it as the same
/// type as x ("fake quantization"); F's values must all be representable in T.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class T>
[[nodiscard]] CPD_HOST_DEVICE constexpr T quantize(T x, std::uint32_t random_bits = 0, int random_bits_used = 32,
                                                   stochastic_variant variant = stochastic_variant::a) noexcept {
  static_assert(is_float_format_v<F>, "cpd::quantize: F must be a cpd::float_t");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "cpd::quantize: the value must be float or double");
  static_assert(std::is_same_v<T, double> || F::fits_float,
                "cpd::quantize: from float, every value of F must be a float (E <= 8, M <= 23, range of float)");
  constexpr detail::spec s = F::spec;  // a copy: device code may not refer to a host constexpr object
  const auto r = detail::round_bits<R, O, T>(s, detail::bit_cast<detail::uint_of<T>>(x), random_bits,
                                            random_bits_used, variant);
  return detail::bit_cast<T>(r.value);
}

template <int E, int M, class Enc, int B>
CPD_HOST_DEVICE constexpr float_t<E, M, Enc, B>::float_t(float x) noexcept
    : bits_(convert<float_t, rounding::nearest_even, overflow::infinity>(x).bits()) {}

template <int E, int M, class Enc, int B>
CPD_HOST_DEVICE constexpr float_t<E, M, Enc, B>::float_t(double x) noexcept
    : bits_(convert<float_t, rounding::nearest_even, overflow::infinity>(x).bits()) {}

// --- classification ---------------------------------------------------------

/// True for a NaN code.
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr bool isnan(float_t<E, M, Enc, B> f) noexcept {
  using F = float_t<E, M, Enc, B>;
  constexpr detail::spec s = F::spec;  // a copy: device code may not refer to a host constexpr object
  return detail::is_nan_code(s, f.bits());
}

/// True for +-inf.
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr bool isinf(float_t<E, M, Enc, B> f) noexcept {
  using F = float_t<E, M, Enc, B>;
  return F::spec.has_inf && (f.bits() & F::spec.mag_mask) == F::spec.inf_code;
}

/// True for a finite value (neither inf nor NaN).
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr bool isfinite(float_t<E, M, Enc, B> f) noexcept {
  return !isnan(f) && !isinf(f);
}

/// True when the sign bit is set (the fnuz NaN counts as negative, as its code says).
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr bool signbit(float_t<E, M, Enc, B> f) noexcept {
  using F = float_t<E, M, Enc, B>;
  return (f.bits() & F::spec.sign_bit) != 0;
}

/// True for +-0.
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr bool iszero(float_t<E, M, Enc, B> f) noexcept {
  using F = float_t<E, M, Enc, B>;
  return F::spec.has_zero && (f.bits() & F::spec.mag_mask) == 0 && !isnan(f);
}

/// |f| (NaN stays NaN).
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr float_t<E, M, Enc, B> abs(float_t<E, M, Enc, B> f) noexcept {
  using F = float_t<E, M, Enc, B>;
  if (isnan(f)) return f;
  return F::from_bits(static_cast<typename F::storage_type>(f.bits() & F::spec.mag_mask));
}

// --- comparisons with IEEE meaning: NaN unordered, +0 == -0 -------------------

namespace detail {
/// A key that orders the finite and infinite values of F like their values.
template <class F>
CPD_HOST_DEVICE constexpr std::int64_t order_key(F f) noexcept {
  const std::uint64_t c = f.bits();
  const auto mag = static_cast<std::int64_t>(c & F::spec.mag_mask);
  return (c & F::spec.sign_bit) ? -mag : mag;
}
}  // namespace detail

template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr bool operator==(float_t<E, M, Enc, B> a, float_t<E, M, Enc, B> b) noexcept {
  return !isnan(a) && !isnan(b) && detail::order_key(a) == detail::order_key(b);
}
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr bool operator!=(float_t<E, M, Enc, B> a, float_t<E, M, Enc, B> b) noexcept {
  return !(a == b);
}
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr bool operator<(float_t<E, M, Enc, B> a, float_t<E, M, Enc, B> b) noexcept {
  return !isnan(a) && !isnan(b) && detail::order_key(a) < detail::order_key(b);
}
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr bool operator>(float_t<E, M, Enc, B> a, float_t<E, M, Enc, B> b) noexcept {
  return b < a;
}
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr bool operator<=(float_t<E, M, Enc, B> a, float_t<E, M, Enc, B> b) noexcept {
  return !isnan(a) && !isnan(b) && detail::order_key(a) <= detail::order_key(b);
}
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr bool operator>=(float_t<E, M, Enc, B> a, float_t<E, M, Enc, B> b) noexcept {
  return b <= a;
}

// --- arithmetic, rounded once ------------------------------------------------
//
// a op b is computed in double and then rounded once to F. The double result is
// exact for products (2p <= 53) and made "round-to-odd" for sums and quotients
// with an error-free transformation; rounding a round-to-odd result with at least
// p + 2 bits to p bits equals rounding the exact result (Boldo & Melquiond 2008),
// in every deterministic mode. This needs p = M + 1 <= 26 and an exponent range
// in which double neither overflows nor underflows (E <= 9 with the usual bias).

namespace detail {

/// Turns a double s that is a rounding of s + err (err exact) into round-to-odd.
CPD_HOST_DEVICE constexpr double make_odd(double s, double err) noexcept {
  const auto b = bit_cast<std::uint64_t>(s);
  if (err == 0 || (b & 1) != 0) return s;
  const bool away = (err > 0) == (s > 0);  // the exact value lies farther from zero
  return bit_cast<double>(away ? b + 1 : b - 1);
}

/// round_to_odd(a + b) at double's precision, exactly, by integer arithmetic on the bits
/// (TwoSum in double would need round-to-nearest and no DAZ: the caller's environment). A
/// sum beyond double's range is +-inf, inf and NaN operands give the IEEE sum.
CPD_HOST_DEVICE constexpr double add_odd(double a, double b) noexcept {
  using U = std::uint64_t;
  constexpr U sign = U(1) << 63, inf = source<double>::inf_bits, frac_mask = (U(1) << 52) - 1;
  U ua = bit_cast<U>(a), ub = bit_cast<U>(b);
  U xa = ua & ~sign, xb = ub & ~sign;
  if (xa >= inf || xb >= inf) {
    if (xa > inf || xb > inf || (xa == inf && xb == inf && ua != ub)) return bit_cast<double>(source<double>::qnan_bits);
    return bit_cast<double>(xa == inf ? ua : ub);
  }
  if (xa < xb) {  // |a| >= |b| from here on
    const U t = ua;
    ua = ub;
    ub = t;
    xa = ua & ~sign;
    xb = ub & ~sign;
  }
  const U sa = ua & sign;
  if (xb == 0) return bit_cast<double>(xa != 0 ? ua : (ua & ub));  // a + 0 (+-0 + +-0: -0 only from two)
  // Significands with 9 guard bits (the sum stays below 2^63); b's bits shifted out of
  // the guard bits are kept as a sticky bit, which decides nothing but inexactness.
  const int fa = static_cast<int>(xa >> 52), fb = static_cast<int>(xb >> 52);
  const U A = ((xa & frac_mask) | (fa != 0 ? U(1) << 52 : 0)) << 9;
  U B = ((xb & frac_mask) | (fb != 0 ? U(1) << 52 : 0)) << 9;
  const int d = (fa != 0 ? fa : 1) - (fb != 0 ? fb : 1);
  if (d > 0) B = d >= 63 ? U(1) : (B >> d) | U((B & ((U(1) << d) - 1)) != 0);
  U r = sa == (ub & sign) ? A + B : A - B;
  if (r == 0) return 0.0;  // x + (-x) = +0
  // r * 2^k, rounded to odd at 53 bits. (A sum that is a subnormal double is exact: its
  // operands are then subnormal or in the lowest normal binades, so d <= 1.)
  int k = (fa != 0 ? fa : 1) - 1075 - 9;
  const int p = 63 - countl_zero(r);
  if (p > 52) {
    const int sh = p - 52;
    r = (r >> sh) | U((r & ((U(1) << sh) - 1)) != 0);
    k += sh;
  }
  // (Rounding to odd never carries: the leading bit stays where it is.)
  if ((p > 52 ? 52 : p) + k > 1023) return bit_cast<double>(sa | inf);  // beyond double: +-inf, as a double sum
  return bit_cast<double>(sa | scaled_bits<double>(r, k));
}

/// p, or the canonical quiet NaN (positive) where p is a NaN: the NaN of a product or
/// quotient is the hardware's choice (x86 returns the first NaN operand, or a negative
/// NaN for 0 * inf, a GPU a positive one, and a compiler may swap the operands of a
/// product), so that no result depends on it. add_odd gives the same NaN.
CPD_HOST_DEVICE constexpr double canonical_nan(double p) noexcept {
  return p == p ? p : bit_cast<double>(source<double>::qnan_bits);
}

/// round_to_odd(a / b) for a, b of at most 26 significant bits.
CPD_HOST_DEVICE constexpr double div_odd(double a, double b) noexcept {
  const double q = a / b;
  if (!(q == q)) return canonical_nan(q);
  if (q - q != 0 || q == 0) return q;  // inf or 0: exact or special
  // r = a - q*b exactly in sign: q = qh + ql with 26 and 27 significant bits, so
  // both partial products are exact, and a - qh*b is exact by Sterbenz's lemma.
  const double qh = bit_cast<double>(bit_cast<std::uint64_t>(q) & ~((std::uint64_t(1) << 27) - 1));
  const double ql = q - qh;
  const double r = (a - qh * b) - ql * b;
  return make_odd(q, b > 0 ? r : -r);
}

template <class F>
CPD_HOST_DEVICE constexpr void check_arithmetic() noexcept {
  static_assert(F::mantissa_bits <= 25,
                "cpd::float_t arithmetic: needs M <= 25 (a double must hold 2(M+1) + 2 bits)");
  static_assert(2 * (F::spec.emax + 1) <= 1023 && 2 * (F::spec.emin - F::mantissa_bits) >= -1022,
                "cpd::float_t arithmetic: the exponent range is too wide for exact double intermediates");
}

}  // namespace detail

/// a + b rounded once to F in mode R.
template <rounding R = rounding::nearest_even, overflow O = overflow::infinity, class F>
[[nodiscard]] CPD_HOST_DEVICE constexpr std::enable_if_t<is_float_format_v<F>, F> add(
    F a, F b, std::uint32_t random_bits = 0, int random_bits_used = 32) noexcept {
  detail::check_arithmetic<F>();
  return convert<F, R, O>(detail::add_odd(static_cast<double>(a), static_cast<double>(b)), random_bits,
                          random_bits_used);
}
/// a - b rounded once to F in mode R.
template <rounding R = rounding::nearest_even, overflow O = overflow::infinity, class F>
[[nodiscard]] CPD_HOST_DEVICE constexpr std::enable_if_t<is_float_format_v<F>, F> sub(
    F a, F b, std::uint32_t random_bits = 0, int random_bits_used = 32) noexcept {
  detail::check_arithmetic<F>();
  return convert<F, R, O>(detail::add_odd(static_cast<double>(a), -static_cast<double>(b)), random_bits,
                          random_bits_used);
}
/// a * b rounded once to F in mode R (the double product is exact).
template <rounding R = rounding::nearest_even, overflow O = overflow::infinity, class F>
[[nodiscard]] CPD_HOST_DEVICE constexpr std::enable_if_t<is_float_format_v<F>, F> mul(
    F a, F b, std::uint32_t random_bits = 0, int random_bits_used = 32) noexcept {
  detail::check_arithmetic<F>();
  return convert<F, R, O>(detail::canonical_nan(static_cast<double>(a) * static_cast<double>(b)), random_bits,
                          random_bits_used);
}
/// a / b rounded once to F in mode R.
template <rounding R = rounding::nearest_even, overflow O = overflow::infinity, class F>
[[nodiscard]] CPD_HOST_DEVICE constexpr std::enable_if_t<is_float_format_v<F>, F> div(
    F a, F b, std::uint32_t random_bits = 0, int random_bits_used = 32) noexcept {
  detail::check_arithmetic<F>();
  return convert<F, R, O>(detail::div_odd(static_cast<double>(a), static_cast<double>(b)), random_bits,
                          random_bits_used);
}

template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr float_t<E, M, Enc, B> operator+(float_t<E, M, Enc, B> a,
                                                                       float_t<E, M, Enc, B> b) noexcept {
  return add(a, b);
}
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr float_t<E, M, Enc, B> operator-(float_t<E, M, Enc, B> a,
                                                                       float_t<E, M, Enc, B> b) noexcept {
  return sub(a, b);
}
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr float_t<E, M, Enc, B> operator*(float_t<E, M, Enc, B> a,
                                                                       float_t<E, M, Enc, B> b) noexcept {
  return mul(a, b);
}
template <int E, int M, class Enc, int B>
[[nodiscard]] CPD_HOST_DEVICE constexpr float_t<E, M, Enc, B> operator/(float_t<E, M, Enc, B> a,
                                                                       float_t<E, M, Enc, B> b) noexcept {
  return div(a, b);
}
template <int E, int M, class Enc, int B>
CPD_HOST_DEVICE constexpr float_t<E, M, Enc, B>& operator+=(float_t<E, M, Enc, B>& a, float_t<E, M, Enc, B> b) noexcept {
  return a = a + b;
}
template <int E, int M, class Enc, int B>
CPD_HOST_DEVICE constexpr float_t<E, M, Enc, B>& operator-=(float_t<E, M, Enc, B>& a, float_t<E, M, Enc, B> b) noexcept {
  return a = a - b;
}
template <int E, int M, class Enc, int B>
CPD_HOST_DEVICE constexpr float_t<E, M, Enc, B>& operator*=(float_t<E, M, Enc, B>& a, float_t<E, M, Enc, B> b) noexcept {
  return a = a * b;
}
template <int E, int M, class Enc, int B>
CPD_HOST_DEVICE constexpr float_t<E, M, Enc, B>& operator/=(float_t<E, M, Enc, B>& a, float_t<E, M, Enc, B> b) noexcept {
  return a = a / b;
}

// --- the aliases the ecosystem knows (ml_dtypes names) ----------------------

using float8_e4m3fn = float_t<4, 3, fn>;            ///< OCP FP8 E4M3 (max 448)
using float8_e4m3 = float_t<4, 3, ieee>;            ///< IEEE-like E4M3 (max 240, inf)
using float8_e5m2 = float_t<5, 2, ieee>;            ///< OCP FP8 E5M2 (max 57344)
using float8_e4m3fnuz = float_t<4, 3, fnuz>;        ///< E4M3, bias 8, no -0, NaN = 0x80 (max 240)
using float8_e5m2fnuz = float_t<5, 2, fnuz>;        ///< E5M2, bias 16, no -0, NaN = 0x80 (max 57344)
using float8_e4m3b11fnuz = float_t<4, 3, fnuz, 11>; ///< E4M3, bias 11, fnuz (max 30)
using float8_e3m4 = float_t<3, 4, ieee>;            ///< IEEE-like E3M4 (max 15.5)
using float8_e8m0fnu = float_t<8, 0, fnu>;          ///< OCP MX scale: 2^-127 .. 2^127, NaN = 0xFF
using float6_e3m2fn = float_t<3, 2, finite>;        ///< OCP FP6 E3M2 (max 28)
using float6_e2m3fn = float_t<2, 3, finite>;        ///< OCP FP6 E2M3 (max 7.5)
using float4_e2m1fn = float_t<2, 1, finite>;        ///< OCP FP4 E2M1 (max 6)
using float16 = float_t<5, 10, ieee>;               ///< IEEE binary16
using bfloat16 = float_t<8, 7, ieee>;               ///< bfloat16
using tfloat32 = float_t<8, 10, ieee>;              ///< NVIDIA TF32 (19 bits, stored in 32)

}  // namespace cpd

// std::numeric_limits of every cpd::float_t (it belongs to the type).
#include <cpd/core/limits.hpp>
