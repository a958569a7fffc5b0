// SPDX-License-Identifier: MIT
// The numerics researchers' rounding options (CPFloat's and chop's) against GNU MPFR.
// - rounding::nearest_zero (ties toward zero) is one of the MPFR oracle's modes, so
//   test_rounding_mpfr (every code and midpoint) and test_random_mpfr cover the scalar
//   calls; here the bulk calls of compile-time and runtime formats, on every instruction
//   set, against the oracle (the AVX-512 fast kernels leave this mode to the vector ones).
// - equal-probability stochastic rounding (stochastic_variant::equal: either neighbour with
//   probability 1/2 where the value is inexact). The expected result is built from MPFR's
// two neighbours of x (toward zero and away from zero) and the top random bit, then the
// overflow rule of the stochastic modes (an overflowing result is +-inf, NaN or +-max as
// the format has them under overflow::infinity, +-max when saturating). Checked for the
// scalar calls with given random bits (every value of 1..3 random bits, random ones
// beyond) and for the bulk calls, on every instruction-set path, whose random bits are
// cpd::random_bits of the key.

#include <cpd/core/format.hpp>
#include <cpd/core/random.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/host/posit_bulk.hpp>

#include "bulk_test_support.hpp"
#include "mpfr_support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace cpd_test;
namespace cd = cpd::detail;
using cpd::overflow;
using cpd::rounding;
using cpd::stochastic_variant;

struct case_format {
  const char* name;  ///< cpd::format::parse's name
  mo::format oracle;
};

std::vector<case_format> formats() {
  return {{"e4m3fn", mo::make_format(4, 3, mo::kind::fn)},
          {"e5m2", mo::make_format(5, 2, mo::kind::ieee)},
          {"e4m3fnuz", mo::make_format(4, 3, mo::kind::fnuz)},
          {"e2m1fn", mo::make_format(2, 1, mo::kind::finite)},
          {"e8m7", mo::make_format(8, 7, mo::kind::ieee)},
          {"e5m10", mo::make_format(5, 10, mo::kind::ieee)},
          {"e3m0fn", mo::make_format(3, 0, mo::kind::fn)}};
}

/// The expected value of equal-probability stochastic rounding of x to f with the top
/// random bit `top`, overflow mode o (x finite).
double want_equal(const mo::format& f, double x, bool top, overflow o) {
  int tz = 0;
  const bool neg = std::signbit(x);
  const double down = mo::detail::round_unbounded(f, x, MPFR_RNDZ, &tz);
  const double up = mo::detail::round_unbounded(f, x, neg ? MPFR_RNDD : MPFR_RNDU);
  double v = tz != 0 && top ? up : down;
  const double maxv = f.max_value();
  if (std::fabs(v) > maxv) {
    const double smax = neg ? -maxv : maxv;
    if (o == overflow::saturate) return smax;
    if (f.k == mo::kind::ieee) return neg ? -std::numeric_limits<double>::infinity()
                                          : std::numeric_limits<double>::infinity();
    return f.k == mo::kind::finite ? smax : std::numeric_limits<double>::quiet_NaN();
  }
  if (f.k == mo::kind::fnuz && v == 0) v = 0.0;
  return v;
}

/// Inputs: values between neighbours of the format (fractions and random ones), the
/// format's own values, and values beyond its largest, both signs, all exact in float.
std::vector<float> inputs(const mo::format& f, std::mt19937_64& gen) {
  std::vector<float> xs;
  const double maxv = f.max_value();
  std::uniform_real_distribution<double> u(0, 1);
  const std::uint64_t top = f.max_mag_code();
  for (std::uint64_t i = 0; i <= top && i < 600; ++i) {  // every code, or 600 codes at random and the ends
    const std::uint64_t c = top < 600 ? i : (i < 2 ? i * top : gen() % top);
    const double a = f.decode(c), b = c < top ? f.decode(c + 1) : 2 * maxv;
    for (double t : {0.0, 0.25, 0.5, 0.75, u(gen)}) xs.push_back(static_cast<float>(a + (b - a) * t));
  }
  for (double big : {maxv * 1.5, maxv * 4, 1e30}) xs.push_back(static_cast<float>(big));
  xs.push_back(static_cast<float>(f.min_positive() / 3));
  const std::size_t n = xs.size();
  for (std::size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
  return xs;
}

bool same(double a, double b) { return mo::same(a, b); }

}  // namespace

TEST_CASE("equal-probability stochastic rounding against MPFR: scalar calls") {
  std::mt19937_64 gen(2023);
  std::size_t checks = 0, ups = 0, inexact = 0;
  for (const case_format& cf : formats()) {
    CAPTURE(cf.name);
    const cpd::format g = cpd::format::parse(cf.name);
    for (float x : inputs(cf.oracle, gen))
      for (int bits : {1, 2, 3, 8, 24, 32})
        for (overflow o : {overflow::infinity, overflow::saturate}) {
          const std::uint32_t mask = bits == 32 ? 0xFFFFFFFFu : (1u << bits) - 1;
          std::vector<std::uint32_t> rs;
          if (bits <= 3)
            for (std::uint32_t r = 0; r <= mask; ++r) rs.push_back(r);
          else
            for (int k = 0; k < 3; ++k) rs.push_back(static_cast<std::uint32_t>(gen()) & mask);
          for (std::uint32_t r : rs) {
            const bool top = ((r >> (bits - 1)) & 1u) != 0;
            const double want = want_equal(cf.oracle, x, top, o);
            // random bits above the count are ignored: set them
            const double q = cpd::quantize(g, rounding::stochastic, o, x, r | ~mask, bits, stochastic_variant::equal);
            const std::uint64_t c = cpd::encode(g, rounding::stochastic, o, static_cast<double>(x), r | ~mask, bits,
                                                stochastic_variant::equal);
            const double cv = cf.oracle.decode(c);
            ++checks;
            if (!same(q, want) || !same(cv, want)) {
              FAIL(cf.name << " x=" << hex(x) << " bits=" << bits << " r=" << r << " " << cpd::to_string(o)
                           << ": quantize " << hex(q) << ", encode " << hex(cv) << ", want " << hex(want));
            }
            int tz = 0;
            (void)mo::detail::round_unbounded(cf.oracle, x, MPFR_RNDZ, &tz);
            inexact += tz != 0;
            ups += tz != 0 && top;
          }
        }
  }
  MESSAGE(checks << " checks, " << ups << " of " << inexact << " inexact results rounded away from zero");
  CHECK(checks > 10000);
  CHECK(inexact > 1000);
  CHECK(ups * 10 > inexact * 4);  // about half (the exhaustive small counts: exactly half)
  CHECK(ups * 10 < inexact * 6);
}

TEST_CASE("equal-probability stochastic rounding: bulk calls on every instruction set, and its frequency") {
  std::mt19937_64 gen(77);
  for (const case_format& cf : formats()) {
    CAPTURE(cf.name);
    const cpd::format g = cpd::format::parse(cf.name);
    std::vector<float> xs = inputs(cf.oracle, gen);
    while (xs.size() < 3000) xs.push_back(xs[gen() % xs.size()]);
    for (int bits : {1, 5, 32}) {
      CAPTURE(bits);
      cpd::bulk_options opt;
      opt.seed = 11;
      opt.stream = 3;
      opt.offset = 5;
      opt.random_bits = bits;
      opt.variant = stochastic_variant::equal;
      bulk_test::on_every_isa([&] {
        std::vector<float> q(xs.size());
        cpd::quantize(g, rounding::stochastic, overflow::infinity, xs.data(), q.data(), xs.size(), opt);
        std::size_t bad = 0;
        for (std::size_t i = 0; i < xs.size(); ++i) {
          const std::uint32_t r = cpd::random_bits(opt.seed, opt.stream, opt.offset + i, opt.generator);
          const std::uint32_t mask = bits == 32 ? 0xFFFFFFFFu : (1u << bits) - 1;
          const bool top = (((r & mask) >> (bits - 1)) & 1u) != 0;
          const double want = want_equal(cf.oracle, xs[i], top, overflow::infinity);
          if (!same(q[i], want) && ++bad <= 3)
            CHECK_MESSAGE(false, "x=" << hex(xs[i]) << " gave " << hex(q[i]) << ", want " << hex(want));
        }
        CHECK(bad == 0);
      });
    }
  }
  // The frequency: one value a tenth of the way between two neighbours goes up about half
  // of the time (variant a: a tenth of the time).
  const cpd::format g = cpd::format::parse("e4m3fn");
  const std::vector<float> x(100000, 1.0125f);  // 1 + 0.1 ulp (ulp 1/8)
  std::vector<float> q(x.size());
  for (stochastic_variant v : {stochastic_variant::equal, stochastic_variant::a}) {
    cpd::bulk_options opt;
    opt.seed = 5;
    opt.variant = v;
    cpd::quantize(g, rounding::stochastic, overflow::infinity, x.data(), q.data(), x.size(), opt);
    std::size_t up = 0;
    for (float y : q) up += y > 1.0f;
    const double p = static_cast<double>(up) / static_cast<double>(q.size());
    CAPTURE(cpd::to_string(v));
    CHECK(p == doctest::Approx(v == stochastic_variant::equal ? 0.5 : 0.1).epsilon(0.05));
  }
}

namespace {

/// Bulk quantize and encode of F in nearest_zero (compile-time and runtime format) against
/// the MPFR oracle, on every instruction set.
template <class F>
void check_nearest_zero_bulk(const char* name, std::mt19937_64& gen) {
  CAPTURE(name);
  const mo::format f = oracle_format<F>();
  std::vector<float> xs = inputs(f, gen);
  while (xs.size() < 5000) xs.push_back(xs[gen() % xs.size()]);  // past the fast kernels' minimum
  const cpd::format g = cpd::format::parse(name);
  for (overflow o : {overflow::infinity, overflow::saturate}) {
    const int oi = o == overflow::saturate ? 1 : 0;
    bulk_test::on_every_isa([&] {
      std::vector<float> q(xs.size()), qr(xs.size());
      std::vector<typename F::storage_type> c(xs.size());
      cd::with_overflow(o, [&](auto oc) {
        cpd::quantize<F, rounding::nearest_zero, decltype(oc)::value>(xs.data(), q.data(), xs.size());
        cpd::encode<F, rounding::nearest_zero, decltype(oc)::value>(xs.data(), c.data(), xs.size());
      });
      cpd::quantize(g, rounding::nearest_zero, o, xs.data(), qr.data(), xs.size());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const double want = mo::round_all(f, xs[i]).value[int(mo::mode::nearest_zero)][oi];
        const double wq = mo::quantized_value(f, xs[i], want);
        if ((!same(q[i], wq) || !same(qr[i], wq) || !same(f.decode(c[i]), want)) && ++bad <= 3)
          CHECK_MESSAGE(false, "x=" << hex(xs[i]) << " " << cpd::to_string(o) << ": quantize " << hex(q[i])
                                    << ", runtime " << hex(qr[i]) << ", code " << hex(f.decode(c[i]))
                                    << ", want " << hex(want));
      }
      CHECK(bad == 0);
    });
  }
}

}  // namespace

TEST_CASE("ties toward zero: bulk calls on every instruction set against MPFR") {
  std::mt19937_64 gen(7);
  check_nearest_zero_bulk<cpd::float8_e4m3fn>("e4m3fn", gen);
  check_nearest_zero_bulk<cpd::float8_e5m2>("e5m2", gen);
  check_nearest_zero_bulk<cpd::bfloat16>("bf16", gen);
  check_nearest_zero_bulk<cpd::float4_e2m1fn>("e2m1fn", gen);
  // a tie: 1.0625 lies halfway between 1 and 1.125 in E4M3
  CHECK(cpd::quantize<cpd::float8_e4m3fn, rounding::nearest_zero>(1.0625f) == 1.0f);
  CHECK(cpd::quantize<cpd::float8_e4m3fn, rounding::nearest_zero>(-1.0625f) == -1.0f);
  CHECK(cpd::quantize<cpd::float8_e4m3fn, rounding::nearest_even>(1.1875f) == 1.25f);
  CHECK(cpd::quantize<cpd::float8_e4m3fn, rounding::nearest_zero>(1.1875f) == 1.125f);
  CHECK(std::string(cpd::to_string(rounding::nearest_zero)) == "nearest_zero");
  CHECK(cpd::from_string<rounding>("nearest_zero") == rounding::nearest_zero);
}

TEST_CASE("equal-probability stochastic rounding: names, checks, and the calls that refuse it") {
  CHECK(std::string(cpd::to_string(stochastic_variant::equal)) == "equal");
  CHECK(cpd::from_string<stochastic_variant>("equal") == stochastic_variant::equal);
  // an exact value never moves
  const cpd::format g = cpd::format::parse("e4m3fn");
  for (std::uint32_t r : {0u, 0xFFFFFFFFu})
    CHECK(cpd::quantize(g, rounding::stochastic, overflow::infinity, 1.125f, r, 32, stochastic_variant::equal) ==
          1.125f);
  // posits take variant a only
  std::vector<float> x(4, 1.0f), y(4);
  cpd::bulk_options opt;
  opt.variant = stochastic_variant::equal;
  CHECK_THROWS_AS(cpd::posit_quantize(cpd::posit_format::of<8, 0>(), rounding::stochastic, x.data(), y.data(), 4, opt),
                  std::invalid_argument);
}

// --- no subnormals (bulk_options::subnormals = flush) ----------------------------------
// The value set is 0 and the normal values (CPFloat's CPFLOAT_SUBN_RND, chop's subnormal = 0).
// The oracle is MPFR with emin at the smallest normal and no mpfr_subnormalize; every mode, both
// overflow modes, the runtime and compile-time calls, quantize and encode, on every instruction
// set, and the count of values that became 0. One convention differs from CPFloat and chop: in
// nearest_even the midpoint of 0 and the smallest normal goes to 0 (MPFR's, and cpd's for M = 0,
// where the same tie occurs), where they give the smallest normal.

namespace {

std::vector<case_format> flush_formats() {
  std::vector<case_format> v = formats();
  v.push_back({"e8m3b140", mo::make_format(8, 3, mo::kind::ieee, 140)});  // below float's normals: rounded in double
  for (case_format& c : v) c.oracle.flush = true;
  return v;
}

/// Inputs of inputs() plus the region below the smallest normal: its old subnormals, their
/// midpoints, the midpoint of 0 and the smallest normal and values next to it, float's subnormals.
std::vector<float> flush_inputs(const mo::format& f, std::mt19937_64& gen) {
  std::vector<float> xs = inputs(f, gen);
  const double xmin = f.min_normal();
  for (int i = 0; i <= 64; ++i) xs.push_back(static_cast<float>(xmin * i / 64));
  const float half = static_cast<float>(xmin / 2);
  for (float h : {half, std::nextafter(half, 0.0f), std::nextafter(half, 1.0f), static_cast<float>(xmin),
                  std::nextafter(static_cast<float>(xmin), 0.0f), std::numeric_limits<float>::denorm_min(),
                  std::ldexp(1.0f, -140), std::ldexp(3.0f, -141)})
    xs.push_back(h);
  const std::size_t n = xs.size();
  for (std::size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
  while (xs.size() < 5000) xs.push_back(xs[gen() % xs.size()]);  // past the fast kernels' minimum
  return xs;
}

/// The oracle's index of a deterministic mode.
int mo_mode(rounding r) {
  for (int i = 0; i < mo::mode_count; ++i)
    if (deterministic_modes[i] == r) return i;
  return -1;
}

/// The expected value of x rounded to f in mode r, overflow o; for stochastic, with the
/// random bits of element i of opt's key.
double want_rounded(const mo::format& f, double x, rounding r, overflow o, const cpd::bulk_options& opt, std::size_t i) {
  if (r != rounding::stochastic) {
    const double v = mo::round_all(f, x).value[mo_mode(r)][o == overflow::saturate ? 1 : 0];
    return mo::quantized_value(f, x, v);
  }
  if (!std::isfinite(x)) return mo::quantized_value(f, x, mo::round_all(f, x).value[0][o == overflow::saturate ? 1 : 0]);
  double lo = 0, hi = 0;
  mo::neighbours(f, x, &lo, &hi);
  const int k = opt.random_bits;
  const std::uint64_t count = lo == hi ? 0 : mo::stochastic_up_count(x, lo, hi, k);
  const std::uint64_t rnd = cpd::random_bits(opt.seed, opt.stream, opt.offset + i, opt.generator) &
                            (k == 32 ? 0xFFFFFFFFull : (1ull << k) - 1);
  const bool up = count != 0 && rnd >= (std::uint64_t(1) << k) - count;
  return want_equal(f, x, up, o);  // (its overflow rule is that of every stochastic mode)
}

}  // namespace

TEST_CASE("no subnormals (flush) against MPFR: every mode, quantize and encode, every instruction set") {
  std::mt19937_64 gen(41);
  std::size_t checks = 0, flushed_to_zero = 0;
  for (const case_format& cf : flush_formats()) {
    const std::string name = cf.name;
    CAPTURE(name);
    const mo::format& f = cf.oracle;
    const cpd::format g = cpd::format::parse(cf.name);
    const std::vector<float> xs = flush_inputs(f, gen);
    for (rounding r : cpd::all_roundings)
      for (overflow o : {overflow::infinity, overflow::saturate}) {
        const std::string mode = std::string(cpd::to_string(r)) + " " + cpd::to_string(o);
        CAPTURE(mode);
        cpd::bulk_options opt;
        opt.subnormals = cpd::subnormal_mode::flush;
        opt.seed = 9;
        opt.random_bits = r == rounding::stochastic ? 7 : 32;
        std::vector<double> want(xs.size());
        std::uint64_t zeros = 0;
        for (std::size_t i = 0; i < xs.size(); ++i) {
          want[i] = want_rounded(f, xs[i], r, o, opt, i);
          zeros += std::isfinite(xs[i]) && xs[i] != 0 && want[i] == 0;
        }
        bulk_test::on_every_isa([&] {
          std::vector<float> q(xs.size());
          std::vector<std::uint16_t> c(xs.size());
          cpd::value_stats st;
          opt.stats = r == rounding::nearest_even ? &st : nullptr;
          cpd::quantize(g, r, o, xs.data(), q.data(), xs.size(), opt);
          opt.stats = nullptr;
          cpd::encode(g, r, o, xs.data(), c.data(), xs.size(), opt);
          std::size_t bad = 0;
          for (std::size_t i = 0; i < xs.size(); ++i) {
            const double code_value = f.decode(c[i]);
            const double wc = std::isnan(xs[i]) && f.k == mo::kind::finite ? std::copysign(f.max_value(), xs[i])
                                                                           : want[i];
            ++checks;
            if ((!same(q[i], want[i]) || !same(code_value, wc)) && ++bad <= 3)
              CHECK_MESSAGE(false, "x=" << hex(xs[i]) << ": quantize " << hex(q[i]) << ", code "
                                        << hex(code_value) << ", want " << hex(want[i]));
          }
          CHECK(bad == 0);
          if (r == rounding::nearest_even) CHECK(st.underflow == zeros);
        });
        if (r == rounding::nearest_even) flushed_to_zero += zeros;
      }
  }
  MESSAGE(checks << " checks, " << flushed_to_zero << " nonzero values flushed to 0 in nearest_even");
  CHECK(checks > 500000);
  CHECK(flushed_to_zero > 1000);
}

TEST_CASE("no subnormals: compile-time calls, double inputs, the tie at half the smallest normal") {
  std::mt19937_64 gen(43);
  cpd::bulk_options opt;
  opt.subnormals = cpd::subnormal_mode::flush;
  mo::format f = oracle_format<cpd::float8_e5m2>();
  f.flush = true;
  const std::vector<float> xs = flush_inputs(f, gen);
  bulk_test::on_every_isa([&] {
    std::vector<float> q(xs.size());
    std::vector<std::uint8_t> c(xs.size());
    cpd::quantize<cpd::float8_e5m2>(xs.data(), q.data(), xs.size(), opt);
    cpd::encode<cpd::float8_e5m2, rounding::upward>(xs.data(), c.data(), xs.size(), opt);
    std::vector<double> xd(xs.begin(), xs.end()), qd(xs.size());
    cpd::quantize(cpd::format::parse("e5m2"), rounding::nearest_even, overflow::infinity, xd.data(), qd.data(),
                  xd.size(), opt);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double want = mo::round_all(f, xs[i]).value[int(mo::mode::nearest_even)][0];
      const double up = mo::round_all(f, xs[i]).value[int(mo::mode::upward)][0];
      if ((!same(q[i], want) || !same(qd[i], want) || !same(f.decode(c[i]), up)) && ++bad <= 3)
        CHECK_MESSAGE(false, "x=" << hex(xs[i]) << ": " << hex(q[i]) << " " << hex(qd[i]) << " "
                                  << hex(f.decode(c[i])) << ", want " << hex(want) << " " << hex(up));
    }
    CHECK(bad == 0);
  });
  // E5M2's smallest normal is 2^-14: half of it is a tie of 0 and 2^-14 (0 in nearest_even, as
  // MPFR), a quarter of it is 0 in every nearest mode, and 2^-14 in upward.
  const float xmin = std::ldexp(1.0f, -14);
  float x[4] = {xmin / 2, -xmin / 2, xmin / 4, xmin * 0.75f}, y[4];
  cpd::quantize<cpd::float8_e5m2>(x, y, 4, opt);
  CHECK(y[0] == 0.0f);
  CHECK((y[1] == 0.0f && std::signbit(y[1])));
  CHECK(y[2] == 0.0f);
  CHECK(y[3] == xmin);
  cpd::quantize<cpd::float8_e5m2, rounding::nearest_away>(x, y, 4, opt);
  CHECK(y[0] == xmin);
  cpd::quantize<cpd::float8_e5m2, rounding::upward>(x, y, 4, opt);
  CHECK((y[0] == xmin && y[2] == xmin && y[1] == 0.0f));
  // keep (the default) is unchanged: 2^-16 is E5M2's smallest subnormal
  cpd::quantize<cpd::float8_e5m2>(x, y, 4);
  CHECK(y[2] == xmin / 4);
}

TEST_CASE("no subnormals: names, checks, and the calls that refuse it") {
  CHECK(std::string(cpd::to_string(cpd::subnormal_mode::flush)) == "flush");
  CHECK(cpd::from_string<cpd::subnormal_mode>("keep") == cpd::subnormal_mode::keep);
  std::vector<float> x(4, 1e-3f), y(4);
  cpd::bulk_options opt;
  opt.subnormals = static_cast<cpd::subnormal_mode>(7);
  CHECK_THROWS_AS(cpd::quantize<cpd::float8_e4m3fn>(x.data(), y.data(), 4, opt), std::invalid_argument);
  opt.subnormals = cpd::subnormal_mode::flush;
  CHECK_THROWS_AS(cpd::posit_quantize(cpd::posit_format::of<8, 0>(), rounding::nearest_even, x.data(), y.data(), 4, opt),
                  std::invalid_argument);
  // decode reads every code: a subnormal code decodes to its value
  const std::uint8_t code = 1;  // E4M3's smallest subnormal, 2^-9
  float v = 0;
  cpd::decode<cpd::float8_e4m3fn>(&code, &v, 1, opt);
  CHECK(v == std::ldexp(1.0f, -9));
  // fnu (E8M0) has no subnormals: flushing changes nothing
  const float s[3] = {0.3f, 5.0f, 1e-30f};
  float a[3], b[3];
  cpd::quantize<cpd::float8_e8m0fnu>(s, a, 3);
  cpd::quantize<cpd::float8_e8m0fnu>(s, b, 3, opt);
  for (int i = 0; i < 3; ++i) CHECK(a[i] == b[i]);
}

// --- an unbounded exponent range (bulk_options::exponents = unbounded) ------------------
// The precision of the format with the exponent range of the input type (CPFloat's explim
// CPFLOAT_EXPRANGE_STOR): the oracle is MPFR's rounding to the IEEE format of T's exponent
// bits and bias and the format's M. Every mode, both overflow modes, float and double inputs
// across their whole range, on every instruction set; with subnormals flushed too.

namespace {

/// Finite values across T's whole range (every exponent, subnormals), the values next to
/// T's largest at precision M and beyond, specials, both signs.
template <class T>
std::vector<T> unbounded_inputs(int m, std::mt19937_64& gen) {
  using U = cd::uint_of<T>;
  std::vector<T> xs;
  while (xs.size() < 6000) {
    const T x = cd::bit_cast<T>(static_cast<U>(gen()));
    if (std::isfinite(x)) xs.push_back(x);
  }
  constexpr int emax = std::numeric_limits<T>::max_exponent - 1;
  const T top = std::ldexp(T(2) - std::ldexp(T(1), -m), emax);  // the largest value at precision m
  const T mid = std::ldexp(T(2) - std::ldexp(T(1), -m - 1), emax);  // the midpoint above it
  for (T v : {top, mid, std::nextafter(mid, T(0)), std::nextafter(mid, std::numeric_limits<T>::infinity()),
              std::numeric_limits<T>::max(), std::numeric_limits<T>::denorm_min(),
              3 * std::numeric_limits<T>::denorm_min(), std::numeric_limits<T>::min(), T(0), T(1),
              std::numeric_limits<T>::infinity(), std::numeric_limits<T>::quiet_NaN()})
    xs.push_back(v);
  const std::size_t n = xs.size();
  for (std::size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
  return xs;
}

template <class T>
void check_unbounded(const char* name, bool flush, std::mt19937_64& gen) {
  const cpd::format g = cpd::format::parse(name);
  constexpr bool is_float = std::is_same_v<T, float>;
  mo::format f = is_float ? mo::make_format(8, g.mantissa_bits(), mo::kind::ieee)
                          : mo::make_format(11, g.mantissa_bits(), mo::kind::ieee);
  f.flush = flush;
  const std::vector<T> xs = unbounded_inputs<T>(g.mantissa_bits(), gen);
  for (rounding r : cpd::all_roundings)
    for (overflow o : {overflow::infinity, overflow::saturate}) {
      const std::string what = std::string(name) + (is_float ? " float " : " double ") + cpd::to_string(r) + " " +
                               cpd::to_string(o) + (flush ? " flush" : "");
      CAPTURE(what);
      cpd::bulk_options opt;
      opt.exponents = cpd::exponent_range::unbounded;
      if (flush) opt.subnormals = cpd::subnormal_mode::flush;
      opt.seed = 4;
      opt.random_bits = r == rounding::stochastic ? 9 : 32;
      std::vector<double> want(xs.size());
      std::vector<bool> checked(xs.size(), true);
      for (std::size_t i = 0; i < xs.size(); ++i) {
        // (the oracle's stochastic neighbours need a finite one above: not next to double's largest)
        if (!is_float && r == rounding::stochastic && std::fabs(double(xs[i])) > 0x1p1000) checked[i] = false;
        else want[i] = want_rounded(f, double(xs[i]), r, o, opt, i);
      }
      bulk_test::on_every_isa([&] {
        std::vector<T> q(xs.size());
        cpd::quantize(g, r, o, xs.data(), q.data(), xs.size(), opt);
        std::size_t bad = 0;
        for (std::size_t i = 0; i < xs.size(); ++i)
          if (checked[i] && !same(double(q[i]), want[i]) && ++bad <= 3)
            CHECK_MESSAGE(false, "x=" << hex(double(xs[i])) << ": " << hex(double(q[i])) << ", want " << hex(want[i]));
        CHECK(bad == 0);
      });
    }
}

}  // namespace

TEST_CASE("an unbounded exponent range against MPFR: every mode, float and double, every instruction set") {
  std::mt19937_64 gen(59);
  for (const char* name : {"e4m3fn", "e5m2", "e2m1fn", "e4m3fnuz", "bf16", "fp16", "binary8p3se"})
    check_unbounded<float>(name, false, gen);
  check_unbounded<float>("e4m3fn", true, gen);
  check_unbounded<double>("e5m2", false, gen);
  check_unbounded<double>("e8m23", false, gen);
  check_unbounded<double>("e4m3fn", true, gen);
  // what it means: E4M3 (max 448) keeps 4 significant bits at any exponent
  cpd::bulk_options opt;
  opt.exponents = cpd::exponent_range::unbounded;
  const float x[3] = {1e6f, 3e-20f, 1e-44f};
  float y[3];
  cpd::quantize(cpd::format::parse("e4m3fn"), rounding::nearest_even, overflow::infinity, x, y, 3, opt);
  CHECK(y[0] == 983040.0f);  // 1e6 to 4 bits: 2^19 * 1.875
  CHECK(y[1] == std::ldexp(1.125f, -65));
  CHECK(y[2] == 0.0f);  // below float's normals the quantum is 2^-126 / 2^3 (CPFloat's STOR): 7 * 2^-149 is 0
}

TEST_CASE("an unbounded exponent range: names, checks, and the calls that refuse it") {
  CHECK(std::string(cpd::to_string(cpd::exponent_range::unbounded)) == "unbounded");
  CHECK(cpd::from_string<cpd::exponent_range>("format") == cpd::exponent_range::format);
  std::vector<float> x(4, 3.0f), y(4);
  std::vector<std::uint8_t> c(4);
  cpd::bulk_options opt;
  opt.exponents = static_cast<cpd::exponent_range>(9);
  CHECK_THROWS_AS(cpd::quantize(cpd::format::parse("e4m3fn"), rounding::nearest_even, overflow::infinity, x.data(),
                                y.data(), 4, opt),
                  std::invalid_argument);
  std::string why;
  try {
    cpd::encode(cpd::format::parse("e4m3fn"), rounding::nearest_even, overflow::infinity, x.data(), c.data(), 4, opt);
  } catch (const std::invalid_argument& e) {
    why = e.what();
  }
  CHECK(why.find("is not a cpd::exponent_range") != std::string::npos);
  opt.exponents = cpd::exponent_range::unbounded;
  const cpd::format g = cpd::format::parse("e4m3fn");
  CHECK_THROWS_AS(cpd::quantize<cpd::float8_e4m3fn>(x.data(), y.data(), 4, opt), std::invalid_argument);
  CHECK_THROWS_AS(cpd::encode(g, rounding::nearest_even, overflow::infinity, x.data(), c.data(), 4, opt),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::decode(g, c.data(), y.data(), 4, opt), std::invalid_argument);
  CHECK_THROWS_AS(cpd::quantize(cpd::format::parse("e3m0fn"), rounding::nearest_even, overflow::infinity, x.data(),
                                y.data(), 4, opt),
                  std::invalid_argument);  // M = 0
  cpd::bulk_options scaled = opt;
  scaled.scale_exponent = 3;
  CHECK_THROWS_AS(cpd::quantize(g, rounding::nearest_even, overflow::infinity, x.data(), y.data(), 4, scaled),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::posit_quantize(cpd::posit_format::of<8, 0>(), rounding::nearest_even, x.data(), y.data(), 4, opt),
                  std::invalid_argument);
  // an unbounded range from float takes a format whose values are not all floats
  cpd::quantize(cpd::format::parse("e11m4"), rounding::nearest_even, overflow::infinity, x.data(), y.data(), 4, opt);
  CHECK(y[0] == 3.0f);
}
