// SPDX-License-Identifier: MIT
#pragma once

// An independent reference for cpd's rounding, built on GNU MPFR. It shares no
// code with the library: the value sets of the encodings, the overflow rules and
// the special cases are written here from the "Semantics" section of
// docs/DESIGN.md, and every rounding is done by MPFR (mpfr_set_d in a restricted
// exponent range, then mpfr_subnormalize), never by cpd.
//
// MPFR's exponent convention is x = 0.1b... * 2^exp, one more than IEEE's
// x = 1.b... * 2^e. A format with M mantissa bits is emulated with precision
// M + 1, and its smallest subnormal 2^(1 - bias - M) = 0.1b * 2^(2 - bias - M)
// sets emin. The exponent is left unbounded above (emax is huge): overflow is
// decided here, on the rounded value, with the rules of the format.

#include <cmath>
#include <cstdint>
#include <limits>

#include <mpfr.h>

namespace mpfr_oracle {

/// The special-value encodings (see DESIGN.md, "Format").
enum class kind { ieee, fn, fnuz, finite, fnu };

/// The deterministic rounding modes.
enum class mode { nearest_even, nearest_away, toward_zero, upward, downward, odd, nearest_zero };
inline constexpr int mode_count = 7;

inline const char* name(mode m) {
  switch (m) {
    case mode::nearest_even: return "nearest_even";
    case mode::nearest_away: return "nearest_away";
    case mode::toward_zero: return "toward_zero";
    case mode::upward: return "upward";
    case mode::downward: return "downward";
    case mode::odd: return "odd";
    case mode::nearest_zero: return "nearest_zero";
  }
  return "?";
}

inline const char* name(kind k) {
  switch (k) {
    case kind::ieee: return "ieee";
    case kind::fn: return "fn";
    case kind::fnuz: return "fnuz";
    case kind::finite: return "finite";
    case kind::fnu: return "fnu";
  }
  return "?";
}

/// The bias a format has by default: 2^(E-1) for fnuz, 2^(E-1) - 1 otherwise.
inline int default_bias(int E, kind k) { return k == kind::fnuz ? (1 << (E - 1)) : (1 << (E - 1)) - 1; }

/// A format: E exponent bits, M mantissa bits, a bias and an encoding.
struct format {
  int E = 0;
  int M = 0;
  int bias = 0;
  kind k = kind::ieee;
  /// No subnormal values (cpd's bulk_options::subnormals = flush): the value set is 0 and
  /// the normal values; MPFR rounds to it with emin at the smallest normal and no
  /// mpfr_subnormalize (in MPFR_RNDN, the midpoint of 0 and the smallest normal goes to 0).
  bool flush = false;

  bool is_signed() const { return k != kind::fnu; }
  bool has_subnormals() const { return k != kind::fnu && !flush; }
  /// Bits of a code (the sign bit, if any, is the top one).
  int bits() const { return E + M + (is_signed() ? 1 : 0); }
  std::uint64_t code_count() const { return std::uint64_t(1) << bits(); }
  std::uint64_t sign_bit() const { return is_signed() ? std::uint64_t(1) << (E + M) : 0; }
  std::uint64_t all_ones() const { return (std::uint64_t(1) << (E + M)) - 1; }

  /// Magnitude code of the largest finite value.
  std::uint64_t max_mag_code() const {
    switch (k) {
      case kind::ieee: return (std::uint64_t((1 << E) - 1) << M) - 1;  // below the inf/NaN exponent
      case kind::fn:
      case kind::fnu: return all_ones() - 1;                            // all ones is NaN
      case kind::fnuz:
      case kind::finite: return all_ones();
    }
    return 0;
  }

  /// The value of a code: +-inf, NaN or a finite value (field arithmetic, ldexp).
  double decode(std::uint64_t code) const {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    const bool neg = (code & sign_bit()) != 0;
    const std::uint64_t mag = code & all_ones();
    const std::uint64_t field = mag >> M;
    const std::uint64_t frac = mag & ((std::uint64_t(1) << M) - 1);
    const std::uint64_t top_field = (std::uint64_t(1) << E) - 1;
    switch (k) {
      case kind::ieee:
        if (field == top_field) return frac == 0 ? (neg ? -inf : inf) : nan;
        break;
      case kind::fn:
      case kind::fnu:
        if (mag == all_ones()) return nan;
        break;
      case kind::fnuz:
        if (neg && mag == 0) return nan;
        break;
      case kind::finite: break;
    }
    double v;
    if (k == kind::fnu) {
      v = std::ldexp(double((std::uint64_t(1) << M) + frac), int(field) - bias - M);
    } else if (field == 0) {
      v = std::ldexp(double(frac), 1 - bias - M);
    } else {
      v = std::ldexp(double((std::uint64_t(1) << M) + frac), int(field) - bias - M);
    }
    return neg ? -v : v;
  }

  double max_value() const { return decode(max_mag_code()); }
  /// The smallest positive value (a subnormal where there are subnormals).
  double min_positive() const { return k == kind::fnu ? decode(0) : flush ? min_normal() : decode(1); }
  /// The smallest positive normal value.
  double min_normal() const { return k == kind::fnu ? std::ldexp(1.0, -bias) : std::ldexp(1.0, 1 - bias); }
  /// The quantum (ulp) of the values in [v, 2v) for a positive v of the format.
  double ulp_at(double v) const {
    if (has_subnormals() && v < min_normal()) return std::ldexp(1.0, 1 - bias - M);
    return std::ldexp(1.0, std::ilogb(v) - M);
  }
};

inline format make_format(int E, int M, kind k) { return format{E, M, default_bias(E, k), k}; }
inline format make_format(int E, int M, kind k, int bias) { return format{E, M, bias, k}; }

namespace detail {

/// Per-thread MPFR workspace (MPFR's exponent range is per thread when built with TLS).
struct workspace {
  mpfr_t y, x, s, t;
  workspace() {
    mpfr_init2(y, 64);
    mpfr_init2(x, 64);
    mpfr_init2(s, 256);
    mpfr_init2(t, 256);
  }
  ~workspace() {
    mpfr_clear(y);
    mpfr_clear(x);
    mpfr_clear(s);
    mpfr_clear(t);
  }
  workspace(const workspace&) = delete;
  workspace& operator=(const workspace&) = delete;
};

inline workspace& ws() {
  thread_local workspace w;
  return w;
}

/// Rounds x to the format's value set with an unbounded exponent above (the
/// value just past max is the next value of the grid) and subnormals below, in
/// MPFR rounding mode rnd. Returns the value as a double (+-inf when it is
/// 2^1024, which overflows every format anyway); *inexact gets the ternary.
inline double round_unbounded(const format& f, double x, mpfr_rnd_t rnd, int* ternary = nullptr) {
  workspace& w = ws();
  const mpfr_exp_t old_emin = mpfr_get_emin();
  const mpfr_exp_t old_emax = mpfr_get_emax();
  mpfr_set_prec(w.y, f.M + 1);
  // IEEE exponent of the smallest positive value, plus one for MPFR's convention.
  const mpfr_exp_t emin = f.has_subnormals() ? mpfr_exp_t(2 - f.bias - f.M)
                          : f.k == kind::fnu  ? mpfr_exp_t(1 - f.bias)
                                              : mpfr_exp_t(2 - f.bias);  // flush: the smallest normal
  mpfr_set_emin(emin);
  mpfr_set_emax(1 << 20);
  int t = mpfr_set_d(w.y, x, rnd);
  if (f.has_subnormals()) t = mpfr_subnormalize(w.y, t, rnd);
  const double r = mpfr_get_d(w.y, MPFR_RNDN);
  mpfr_set_emin(old_emin);
  mpfr_set_emax(old_emax);
  if (ternary) *ternary = t;
  return r;
}

/// -1, 0, +1 as 2|x| is below, at, above lo + hi (exact).
inline int compare_to_midpoint(double ax, double lo, double hi) {
  workspace& w = ws();
  // hi is +inf only when it is 2^1024 (the grid value past DBL_MAX).
  if (std::isinf(hi)) mpfr_set_ui_2exp(w.s, 1, 1024, MPFR_RNDN);
  else mpfr_set_d(w.s, hi, MPFR_RNDN);       // exact (256 bits)
  mpfr_add_d(w.s, w.s, lo, MPFR_RNDN);       // exact: both are multiples of one ulp
  mpfr_set_d(w.t, ax, MPFR_RNDN);
  mpfr_mul_2ui(w.t, w.t, 1, MPFR_RNDN);
  return mpfr_cmp(w.t, w.s);
}

}  // namespace detail

/// The expected results for one input: value[mode][saturate] (NaN for NaN, +-inf, or
/// the exact value, with the sign of zero as the format has it).
struct results {
  double value[mode_count][2];  ///< the value of the code the conversion gives
  double get(mode m, bool saturate) const { return value[int(m)][saturate ? 1 : 0]; }
};

/// What quantize (the rounded value as a float or double) gives where convert gives
/// a code of value `code_value`: the same, except that a NaN stays NaN even in a
/// format without NaN (whose code is then +-max: the NaN/inf policy of docs/reliability.md).
inline double quantized_value(const format& f, double x, double code_value) {
  if (std::isnan(x) && f.k == kind::finite) return std::copysign(std::numeric_limits<double>::quiet_NaN(), x);
  return code_value;
}

/// The expected result of rounding x to f in every deterministic mode and both
/// overflow modes (DESIGN.md "Semantics", plus the decisions for finite/fnu).
inline results round_all(const format& f, double x) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const double maxv = f.max_value();
  results out{};
  auto fill = [&](double v) {
    for (auto& row : out.value) row[0] = row[1] = v;
  };
  const bool neg = std::signbit(x);

  // 1. NaN stays NaN; a format without NaN gives +-max with the NaN's sign.
  if (std::isnan(x)) {
    fill(f.k == kind::finite ? (neg ? -maxv : maxv) : nan);
    return out;
  }
  // 2. fnu is unsigned and has no zero: negative non-zero inputs are NaN;
  //    +inf is NaN unless saturating; anything below the smallest value
  //    (+-0 included) is the smallest value.
  if (f.k == kind::fnu) {
    if (neg && x != 0) {
      fill(nan);
      return out;
    }
    if (std::isinf(x)) {
      for (auto& row : out.value) {
        row[0] = nan;
        row[1] = maxv;
      }
      return out;
    }
    if (x < f.min_positive()) {
      fill(f.min_positive());
      return out;
    }
  }
  // 3. +-inf: with overflow::infinity, +-inf, else NaN, else +-max; saturate: +-max.
  if (std::isinf(x)) {
    const double special = f.k == kind::ieee ? x : (f.k == kind::finite ? (neg ? -maxv : maxv) : nan);
    for (auto& row : out.value) {
      row[0] = special;
      row[1] = neg ? -maxv : maxv;
    }
    return out;
  }

  // 4. Round with MPFR in each mode, the exponent unbounded above.
  int tz = 0;
  const double rn = detail::round_unbounded(f, x, MPFR_RNDN);
  const double rz = detail::round_unbounded(f, x, MPFR_RNDZ, &tz);
  const double ru = detail::round_unbounded(f, x, MPFR_RNDU);
  const double rd = detail::round_unbounded(f, x, MPFR_RNDD);
  const double ax = std::fabs(x);
  const double lo = std::fabs(rz);                  // the neighbour toward zero
  const double hi = std::fabs(neg ? rd : ru);       // the neighbour away from zero
  // Ties away: compare |x| with the midpoint of the two neighbours.
  // Ties toward zero: the same comparison, a tie staying toward zero.
  double ra = rz, rnz = rz;
  if (lo != hi) {
    const int c = detail::compare_to_midpoint(ax, lo, hi);
    ra = c >= 0 ? (neg ? rd : ru) : rz;
    rnz = c > 0 ? (neg ? rd : ru) : rz;
  }
  // Odd: truncate, then set the last bit of the significand when inexact.
  double ro = rz;
  if (tz != 0) {
    const double q = f.ulp_at(lo == 0 ? f.min_positive() : lo);
    if (lo == 0 && f.flush) ro = neg ? -f.min_normal() : f.min_normal();  // the next value above 0 (its code is even)
    else if (std::fmod(lo / q, 2.0) == 0) ro = neg ? -(lo + q) : lo + q;
  }
  const double r[mode_count] = {rn, ra, rz, ru, rd, ro, rnz};

  // 5. Overflow: a result beyond max gives +-inf (ieee), NaN (fn, fnuz, fnu) or
  //    +-max (finite) when the mode rounds away from zero, else +-max; saturate:
  //    +-max. (A result in range never changes.)
  const double smax = neg ? -maxv : maxv;
  for (int m = 0; m < mode_count; ++m) {
    double v = r[m];
    if (std::fabs(v) > maxv) {
      const mode md = mode(m);
      const bool away = md == mode::nearest_even || md == mode::nearest_away || md == mode::nearest_zero ||
                        (md == mode::upward && !neg) || (md == mode::downward && neg);
      double special = smax;
      if (away) special = f.k == kind::ieee ? (neg ? -inf : inf) : (f.k == kind::finite ? smax : nan);
      out.value[m][0] = special;
      out.value[m][1] = smax;
    } else {
      // 6. fnuz has no -0.
      if (f.k == kind::fnuz && v == 0) v = 0.0;
      out.value[m][0] = out.value[m][1] = v;
    }
  }
  return out;
}

/// The expected result of one mode.
inline double round(const format& f, mode m, bool saturate, double x) { return round_all(f, x).get(m, saturate); }

/// The two neighbours of a finite |x| in f (lo <= |x| <= hi, equal when exact),
/// with an unbounded exponent above (hi may exceed max, or be inf for 2^1024).
inline void neighbours(const format& f, double x, double* lo, double* hi) {
  const double ax = std::fabs(x);
  *lo = detail::round_unbounded(f, ax, MPFR_RNDZ);
  *hi = detail::round_unbounded(f, ax, MPFR_RNDU);
}

/// floor((|x| - lo) / (hi - lo) * 2^k): the number of k-bit random values that
/// move a stochastic rounding of x up (exact; lo < |x| < hi, hi finite).
inline std::uint64_t stochastic_up_count(double x, double lo, double hi, int k) {
  detail::workspace& w = detail::ws();
  mpfr_set_d(w.s, std::fabs(x), MPFR_RNDN);  // exact, 256 bits
  mpfr_sub_d(w.s, w.s, lo, MPFR_RNDN);       // exact
  mpfr_set_d(w.t, hi, MPFR_RNDN);
  mpfr_sub_d(w.t, w.t, lo, MPFR_RNDN);       // a power of two
  mpfr_div(w.s, w.s, w.t, MPFR_RNDN);        // exact (division by a power of two)
  mpfr_mul_2si(w.s, w.s, k, MPFR_RNDN);
  return static_cast<std::uint64_t>(mpfr_get_ui(w.s, MPFR_RNDD));
}

/// Same value, same sign of zero, or both NaN.
inline bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

}  // namespace mpfr_oracle
