// SPDX-License-Identifier: MIT
// Posits (cpd/core/posit.hpp) against an independent reference written from the Posit
// Standard 2022 (tests/posit_reference.hpp, MPFR): every code of every posit<n, es>
// with n <= 16 and es in [0, 4] decodes to the reference's value, and inputs at, just
// below and just above every value and every midpoint (the (n+1)-bit posit between
// two codes), in double and in float, round as the reference says in every mode;
// posit32 on random codes and random doubles.

#include <cpd/core/posit.hpp>

#include "posit_reference.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <ios>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

namespace {

using cpd::rounding;
namespace pr = posit_ref;

constexpr rounding deterministic[] = {rounding::nearest_even, rounding::nearest_away, rounding::toward_zero,
                                      rounding::upward,       rounding::downward,     rounding::odd,
                                      rounding::nearest_zero};

/// The reference value of a code, which must be an exact double.
double ref_double(int n, int es, std::uint64_t code) {
  const pr::num v = pr::value(n, es, code);
  const double d = mpfr_get_d(v.v, MPFR_RNDN);
  const pr::num back(d);
  REQUIRE(pr::cmp(v, back) == 0);
  return d;
}

std::uint32_t negate(int n, std::uint64_t c) { return static_cast<std::uint32_t>(pr::of_signed(n, -pr::as_signed(n, c))); }

/// The reference's code for |x| in (lo, hi) or at lo, the positive neighbours c and c + 1,
/// with mid the (n+1)-bit posit between them, in deterministic mode r, x's sign `neg`.
std::uint32_t expect(int n, rounding r, double ax, bool neg, std::uint32_t c, double lo, double mid) {
  std::uint32_t m = c;
  if (ax != lo) {
    const bool up_nearest = ax > mid || (ax == mid && (c & 1) != 0);
    switch (r) {
      case rounding::nearest_even: m = c + (up_nearest ? 1 : 0); break;
      case rounding::nearest_away: m = c + (ax >= mid ? 1 : 0); break;
      case rounding::nearest_zero: m = c + (ax > mid ? 1 : 0); break;
      case rounding::toward_zero: break;
      case rounding::upward: m = c + (neg ? 0 : 1); break;
      case rounding::downward: m = c + (neg ? 1 : 0); break;
      case rounding::odd: m = (c & 1) != 0 ? c : c + 1; break;
      case rounding::stochastic: FAIL("no stochastic here"); break;
    }
  }
  return neg ? negate(n, m) : m;
}

/// The inputs around lo, mid and hi (strictly below hi, at least lo) in T.
template <class T>
std::vector<T> inputs_between(double lo, double mid, double hi) {
  std::vector<T> out;
  const T inf = std::numeric_limits<T>::infinity();
  for (double v : {lo, mid, hi}) {
    const T t = static_cast<T>(v);
    if (static_cast<double>(t) != v || std::isinf(t) || t == 0) continue;  // not a T
    for (T y : {std::nextafter(t, T(0)), t, std::nextafter(t, inf)})
      if (static_cast<double>(y) >= lo && static_cast<double>(y) < hi) out.push_back(y);
  }
  return out;
}

/// Every deterministic mode on x = +-y for y in [lo, hi) of positive code c.
template <class T>
void check_pair(const cpd::posit_format& p, std::uint32_t c, double lo, double mid, double hi, int& bad) {
  const int n = p.bits();
  for (T y : inputs_between<T>(lo, mid, hi))
    for (bool neg : {false, true})
      for (rounding r : deterministic) {
        const T x = neg ? -y : y;
        const std::uint32_t want = expect(n, r, static_cast<double>(y), neg, c, lo, mid);
        const std::uint32_t got = cpd::posit_encode(p, r, x);
        if (got != want && ++bad <= 10)
          FAIL_CHECK(p.name() << " " << cpd::to_string(r) << " x=" << static_cast<double>(x) << " (float: "
                              << (sizeof(T) == 4) << "): got 0x" << std::hex << got << ", want 0x" << want);
      }
}

/// floor(2^k (ax - lo) / (hi - lo)), exactly.
std::uint64_t stochastic_threshold(double ax, double lo, double hi, int k) {
  pr::num d(ax), g(hi), l(lo), q;
  mpfr_sub(d.v, d.v, l.v, MPFR_RNDN);  // exact at 256 bits
  mpfr_sub(g.v, g.v, l.v, MPFR_RNDN);
  mpfr_div(q.v, d.v, g.v, MPFR_RNDZ);  // below the quotient, and exact when it is short
  mpfr_mul_2si(q.v, q.v, k, MPFR_RNDN);
  mpfr_floor(q.v, q.v);
  return mpfr_get_uj(q.v, MPFR_RNDN);
}

/// Stochastic rounding of x = +-y, y in (lo, hi): with random bits that put the threshold
/// at floor(2^k p) it stays at c, one below it goes to c + 1.
template <class T>
void check_stochastic(const cpd::posit_format& p, std::uint32_t c, double lo, double mid, double hi, int& bad) {
  const int n = p.bits();
  for (T y : inputs_between<T>(lo, mid, hi)) {
    if (static_cast<double>(y) == lo) continue;
    for (int k : {1, 7, 32}) {
      const std::uint64_t t = stochastic_threshold(static_cast<double>(y), lo, hi, k);
      const std::uint32_t kmask = k == 32 ? 0xFFFFFFFFu : (1u << k) - 1;
      for (bool neg : {false, true}) {
        const T x = neg ? -y : y;
        const std::uint32_t stay = cpd::posit_encode<rounding::stochastic>(p, x, kmask ^ std::uint32_t(t), k);
        if (stay != (neg ? negate(n, c) : c) && ++bad <= 10)
          FAIL_CHECK(p.name() << " stochastic k=" << k << " x=" << static_cast<double>(x) << " went up at threshold "
                              << t);
        if (t == 0) continue;
        const std::uint32_t up = cpd::posit_encode<rounding::stochastic>(p, x, kmask ^ std::uint32_t(t - 1), k);
        if (up != (neg ? negate(n, c + 1) : c + 1) && ++bad <= 10)
          FAIL_CHECK(p.name() << " stochastic k=" << k << " x=" << static_cast<double>(x) << " stayed below "
                              << t);
      }
    }
  }
}

/// Every code of posit<n, es> decodes as the reference says; every pair of neighbours
/// rounds as it says.
void exhaustive(int n, int es, bool stochastic) {
  const cpd::posit_format p(n, es);
  int bad = 0;
  const std::uint32_t count = n == 32 ? 0 : (1u << n);
  for (std::uint32_t c = 0; c < count; ++c) {
    bool nar = false;
    const pr::num v = pr::value(n, es, c, &nar);
    const double d = cpd::posit_decode(p, c);
    const double want = nar ? std::nan("") : mpfr_get_d(v.v, MPFR_RNDN);
    const float f = cpd::posit_decode<float>(p, c);
    const float want_f = nar ? std::nanf("") : mpfr_get_flt(v.v, MPFR_RNDN);
    if (!(d == want || (std::isnan(d) && nar)) || !(f == want_f || (std::isnan(f) && nar)) ||
        std::signbit(d) != std::signbit(want))
      if (++bad <= 10) FAIL_CHECK(p.name() << " code 0x" << std::hex << c << " decodes to " << d << ", want " << want);
  }
  for (std::uint32_t c = 1; c + 1 <= p.spec().max_code(); ++c) {
    const double lo = ref_double(n, es, c), hi = ref_double(n, es, c + 1);
    const double mid = ref_double(n + 1, es, 2 * std::uint64_t(c) + 1);
    check_pair<double>(p, c, lo, mid, hi, bad);
    check_pair<float>(p, c, lo, mid, hi, bad);
    if (stochastic) {
      check_stochastic<double>(p, c, lo, mid, hi, bad);
      check_stochastic<float>(p, c, lo, mid, hi, bad);
    }
  }
  CHECK_MESSAGE(bad == 0, p.name() << ": " << bad << " mismatches");
}

/// Beyond maxpos and below minpos, zeros and non-finite inputs, in every mode.
template <class T>
void check_edges(const cpd::posit_format& p) {
  using L = std::numeric_limits<T>;
  const std::uint32_t maxc = p.spec().max_code(), nar = p.spec().nar_code();
  const int n = p.bits();
  for (rounding r : cpd::all_roundings) {
    const std::string ctx = p.name() + " " + cpd::to_string(r);
    CAPTURE(ctx);
    for (T x : {L::quiet_NaN(), -L::quiet_NaN(), L::infinity(), -L::infinity()})
      CHECK(cpd::posit_encode(p, r, x, 0x12345678u) == nar);
    CHECK(cpd::posit_encode(p, r, T(0)) == 0);
    CHECK(cpd::posit_encode(p, r, -T(0)) == 0);
    for (T x : {L::max(), static_cast<T>(p.maxpos() * 1.5), std::nextafter(static_cast<T>(p.maxpos()), L::max())})
      if (!std::isinf(x) && static_cast<double>(x) > p.maxpos()) {
        CHECK(cpd::posit_encode(p, r, x, 0xFFFFFFFFu) == maxc);
        CHECK(cpd::posit_encode(p, r, -x, 0xFFFFFFFFu) == negate(n, maxc));
      }
    for (T x : {L::denorm_min(), L::min(), static_cast<T>(p.minpos() / 3)})
      if (x > 0 && static_cast<double>(x) < p.minpos()) {
        CHECK(cpd::posit_encode(p, r, x, 0u) == 1u);
        CHECK(cpd::posit_encode(p, r, -x, 0u) == negate(n, 1));
      }
  }
}

}  // namespace

TEST_CASE("posit: every code and every midpoint of posit<n, es>, n <= 12, es 0..4, every mode") {
  for (int n = 2; n <= 12; ++n)
    for (int es = 0; es <= 4; ++es) exhaustive(n, es, true);
}

TEST_CASE("posit: every code and every midpoint of posit<n, es>, n = 13..16, es 0..4 (stochastic: n = 16)") {
  for (int n = 13; n <= 16; ++n)
    for (int es = 0; es <= 4; ++es) exhaustive(n, es, n == 16);
}

TEST_CASE("posit: zeros, NaN, inf, beyond maxpos and below minpos in every mode, float and double") {
  for (int n : {2, 3, 8, 16, 24, 32})
    for (int es = 0; es <= 4; ++es) {
      check_edges<double>(cpd::posit_format(n, es));
      check_edges<float>(cpd::posit_format(n, es));
    }
}

TEST_CASE("posit: posit<32, es> around random midpoints and at random doubles, against MPFR") {
  std::mt19937_64 gen(2022);
  for (int es = 0; es <= 4; ++es) {
    const int n = 32;
    const cpd::posit_format p(n, es);
    int bad = 0;
    for (int i = 0; i < 3000; ++i) {
      const std::uint32_t c = 1 + static_cast<std::uint32_t>(gen() % (p.spec().max_code() - 1));
      const double lo = ref_double(n, es, c), hi = ref_double(n, es, c + 1);
      const double mid = ref_double(n + 1, es, 2 * std::uint64_t(c) + 1);
      CHECK(cpd::posit_decode(p, c) == lo);
      check_pair<double>(p, c, lo, mid, hi, bad);
      check_pair<float>(p, c, lo, mid, hi, bad);
      check_stochastic<double>(p, c, lo, mid, hi, bad);
    }
    for (int i = 0; i < 3000; ++i) {  // random doubles across the whole range
      const double y = std::ldexp(1.0 + std::ldexp(static_cast<double>(gen() >> 12), -52),
                                  static_cast<int>(gen() % (2 * p.spec().max_exponent() + 1)) - p.spec().max_exponent());
      if (y >= p.maxpos() || y <= p.minpos()) continue;
      const std::uint32_t c = static_cast<std::uint32_t>(pr::floor_code(n, es, pr::num(y)));
      const double lo = ref_double(n, es, c);
      const double mid = ref_double(n + 1, es, 2 * std::uint64_t(c) + 1);
      for (rounding r : deterministic)
        for (bool neg : {false, true}) {
          const std::uint32_t want = expect(n, r, y, neg, c, lo, mid);
          const std::uint32_t got = cpd::posit_encode(p, r, neg ? -y : y);
          if (got != want && ++bad <= 10)
            FAIL_CHECK(p.name() << " " << cpd::to_string(r) << " x=" << y << " got " << got << " want " << want);
        }
    }
    CHECK_MESSAGE(bad == 0, p.name() << ": " << bad << " mismatches");
  }
}

TEST_CASE("posit: quantize is decode of encode; float needs every value to be a float") {
  const double xs[] = {0.1, -3.7, 1e-5, 12345.678, 1e30};
  for (const cpd::posit_format& p : {cpd::posit8es0, cpd::posit8es2, cpd::posit16es1, cpd::posit16es2})
    for (double x : xs) {
      CHECK(cpd::posit_quantize(p, x) == cpd::posit_decode(p, cpd::posit_encode(p, x)));
      const float xf = static_cast<float>(x);
      CHECK(cpd::posit_quantize(p, rounding::upward, xf) == cpd::posit_decode<float>(p, cpd::posit_encode<rounding::upward>(p, xf)));
    }
  CHECK(cpd::posit_quantize(cpd::posit32es2, 1.0 + 0x1p-27) == 1.0 + 0x1p-27);
  CHECK_THROWS_WITH_AS((void)cpd::posit_quantize(cpd::posit32es2, 1.0f),
                       "cpd::posit_quantize: posit32es2 has values that are not floats; use double",
                       std::invalid_argument);
  // decode to float rounds where the posit has more bits than a float: 1 + 2^-27 -> 1
  CHECK(cpd::posit_decode<float>(cpd::posit32es2, cpd::posit_encode(cpd::posit32es2, 1.0 + 0x1p-27)) == 1.0f);
}

TEST_CASE("posit_format: names, facts and errors that name the field") {
  CHECK(cpd::posit_format::parse("posit16es1") == cpd::posit16es1);
  CHECK(cpd::posit16es1.name() == "posit16es1");
  for (int n = 2; n <= 32; ++n)
    for (int es = 0; es <= 4; ++es) CHECK(cpd::posit_format::parse(cpd::posit_format(n, es).name()) == cpd::posit_format(n, es));
  CHECK(cpd::posit8es0.maxpos() == 64.0);
  CHECK(cpd::posit8es2.maxpos() == 0x1p24);
  CHECK(cpd::posit16es1.minpos() == 0x1p-28);
  CHECK(cpd::posit32es2.maxpos() == 0x1p120);
  CHECK(cpd::posit16es1.eps() == 0x1p-12);
  CHECK(cpd::posit32es2.eps() == 0x1p-27);
  CHECK(cpd::posit16es2.fits_float());
  CHECK_FALSE(cpd::posit32es2.fits_float());
  CHECK_THROWS_WITH_AS(cpd::posit_format(33, 2),
                       "cpd::posit_format: n (the bits of a code) must be in [2, 32] (got n = 33, es = 2)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cpd::posit_format(16, 5),
                       "cpd::posit_format: es (the exponent bits) must be in [0, 4] (got n = 16, es = 5)",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)cpd::posit_format::parse("posit16"),
                       "cpd::posit_format: 'posit16': say the exponent bits: posit16es2 is the Posit Standard "
                       "2022's posit16 (SoftPosit's posit8 is posit8es0, its posit16 posit16es1)",
                       std::invalid_argument);
  CHECK_THROWS_AS((void)cpd::posit_format::parse("posit16es"), std::invalid_argument);
  CHECK_THROWS_AS((void)cpd::posit_format::parse("posit40es2"), std::invalid_argument);
  CHECK_THROWS_AS((void)cpd::posit_format::parse("e4m3"), std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)cpd::posit_decode(cpd::posit8es0, 0x100),
                       "cpd::posit_decode: code 256 has bits set above the 8 bits of posit8es0: it is no code of "
                       "the format",
                       std::invalid_argument);
  CHECK_THROWS_AS((void)cpd::posit_encode(cpd::posit8es0, static_cast<rounding>(42), 1.0), std::invalid_argument);
  CHECK_THROWS_AS((void)cpd::posit_encode(cpd::posit8es0, rounding::stochastic, 1.0, 0, 33), std::invalid_argument);
}
