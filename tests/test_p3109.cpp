// SPDX-License-Identifier: MIT
// IEEE P3109 binary{K}p{P} (cpd::p3109_sf, p3109_se, p3109_uf, p3109_ue) against a reference
// written here from the interim report (v3.2.2: Decode, RoundToPrecision, Saturate, Encode,
// Project), sharing no code with the library: every code of every format with K <= 8 (and of
// the K = 16 formats whose exponent fits double) decodes to the reference's value; every value,
// every midpoint, one double ulp either side of them, values beyond the largest and below the
// smallest, +-inf and NaN round as Project says, in every rounding mode and saturation mode,
// from double and from float, by the scalar, the runtime and the bulk calls; and stochastic
// rounding in the variants A, B and C with every random number of up to 3 bits and random
// ones of up to 32 bits.

#include <cpd/cpd.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

using cpd::overflow;
using cpd::rounding;
using cpd::stochastic_variant;

/// A P3109 format as the report names it.
struct p3109_format {
  int k, p;
  bool is_signed, extended;
  [[nodiscard]] std::string name() const {
    return "binary" + std::to_string(k) + "p" + std::to_string(p) + (is_signed ? "s" : "u") + (extended ? "e" : "f");
  }
  [[nodiscard]] long long bias() const { return is_signed ? (1LL << (k - p - 1)) : (1LL << (k - p)); }
  [[nodiscard]] std::uint64_t codes() const { return std::uint64_t(1) << k; }
  [[nodiscard]] std::uint64_t nan_code() const { return is_signed ? std::uint64_t(1) << (k - 1) : codes() - 1; }
  [[nodiscard]] std::uint64_t max_code() const {
    return is_signed ? (std::uint64_t(1) << (k - 1)) - (extended ? 2 : 1) : codes() - (extended ? 3 : 2);
  }
};

/// Report 4.7.2 (Decode): the value of a code (NaN, +-inf, or a finite value).
double ref_decode(const p3109_format& f, std::uint64_t c) {
  const double inf = std::numeric_limits<double>::infinity();
  if (c == f.nan_code()) return std::numeric_limits<double>::quiet_NaN();
  std::uint64_t mag = c;
  double sign = 1;
  if (f.is_signed) {
    const std::uint64_t half = std::uint64_t(1) << (f.k - 1);
    if (f.extended && c == half - 1) return inf;
    if (f.extended && c == f.codes() - 1) return -inf;
    if (c >= half) {
      mag = c - half;
      sign = -1;
    }
  } else if (f.extended && c == f.codes() - 2) {
    return inf;
  }
  const int t = f.p - 1;
  const std::uint64_t e = mag >> t, frac = mag & ((std::uint64_t(1) << t) - 1);
  if (e == 0) return sign * std::ldexp(static_cast<double>(frac), static_cast<int>(1 - f.bias() - t));
  return sign * std::ldexp(static_cast<double>((std::uint64_t(1) << t) + frac),
                           static_cast<int>(static_cast<long long>(e) - f.bias() - t));
}

/// Report 4.7.4 (RoundToPrecision) for a finite non-zero x.
double ref_round(const p3109_format& f, double x, rounding r, std::uint32_t rnd, int n, stochastic_variant v) {
  const double ax = std::fabs(x);
  int e2 = 0;
  std::frexp(ax, &e2);  // ax in [2^(e2-1), 2^e2)
  const long long q = std::max<long long>(e2 - 1, 1 - f.bias()) - f.p + 1;
  const double s = std::ldexp(ax, static_cast<int>(-q));  // exact
  const double fl = std::floor(s);
  const double nu = s - fl;
  const bool code_even = f.p > 1 ? std::fmod(fl, 2) == 0 : (fl == 0 || ((q + f.bias()) & 1) == 0);
  bool away = false;
  switch (r) {
    case rounding::toward_zero: away = false; break;
    case rounding::upward: away = nu > 0 && x > 0; break;
    case rounding::downward: away = nu > 0 && x < 0; break;
    case rounding::nearest_away: away = nu >= 0.5; break;
    case rounding::nearest_zero: away = nu > 0.5; break;
    case rounding::nearest_even: away = nu > 0.5 || (nu == 0.5 && !code_even); break;
    case rounding::odd: away = nu > 0 && code_even; break;
    case rounding::stochastic: {
      const double two_n = std::ldexp(1.0, n), two_n1 = std::ldexp(1.0, n + 1);
      const double rr = static_cast<double>(rnd);
      if (v == stochastic_variant::a) away = std::floor(nu * two_n) + rr >= two_n;
      if (v == stochastic_variant::b) away = std::floor(nu * two_n1) + (2 * rr + 1) >= two_n1;
      if (v == stochastic_variant::c) {
        const double y = nu * two_n, fy = std::floor(y);
        const double rnite = (y < fy + 0.5 || (y == fy + 0.5 && std::fmod(fy, 2) == 0)) ? fy : fy + 1;
        away = rnite + rr >= two_n;
      }
      break;
    }
  }
  return std::copysign(std::ldexp(fl + (away ? 1 : 0), static_cast<int>(q)), x);
}

/// Report 4.7.5 (Saturate) of a rounded value z (SatFinite = saturate, SatPropagate =
/// propagate, SatNone = infinity).
double ref_saturate(const p3109_format& f, double z, overflow o, rounding r) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const double hi = ref_decode(f, f.max_code()), lo = f.is_signed ? -hi : 0.0;
  if (std::isnan(z) || (lo <= z && z <= hi)) return z;
  const bool pinf = z == inf, ninf = z == -inf;
  if (o == overflow::saturate) return z > hi ? hi : lo;
  if (o == overflow::propagate) {
    if (pinf) return f.extended ? inf : hi;
    if (ninf) return f.is_signed && f.extended ? -inf : lo;
    return z > hi ? hi : lo;
  }
  if (pinf) return f.extended ? inf : hi;
  if (ninf) return f.is_signed && f.extended ? -inf : (!f.is_signed ? nan : lo);
  if (z > hi) {
    if (r == rounding::odd && !f.is_signed && f.extended) return hi;
    if (r == rounding::toward_zero || r == rounding::downward) return hi;
    return f.extended ? inf : hi;
  }
  if (r == rounding::toward_zero || r == rounding::upward) return lo;
  if (f.is_signed && f.extended) return -inf;
  if (!f.is_signed) return nan;
  return lo;
}

/// The codes of f by value (report 4.7.6, Encode, as the inverse of Decode).
struct code_table {
  p3109_format f;
  std::map<double, std::uint64_t> by_value;
  std::vector<double> finite;  // the finite values, ascending
  explicit code_table(const p3109_format& g) : f(g) {
    for (std::uint64_t c = 0; c < f.codes(); ++c) {
      const double v = ref_decode(f, c);
      if (std::isnan(v)) continue;
      by_value[v] = c;
      if (std::isfinite(v)) finite.push_back(v);
    }
    std::sort(finite.begin(), finite.end());
  }
  /// Project: the code of x.
  [[nodiscard]] std::uint64_t project(double x, rounding r, overflow o, std::uint32_t rnd = 0, int n = 32,
                                      stochastic_variant v = stochastic_variant::a) const {
    if (std::isnan(x)) return f.nan_code();
    const double z = (x == 0 || std::isinf(x)) ? x : ref_round(f, x, r, rnd, n, v);
    const double s = ref_saturate(f, z, o, r);
    if (std::isnan(s)) return f.nan_code();
    const auto it = by_value.find(s == 0 ? 0.0 : s);
    REQUIRE_MESSAGE(it != by_value.end(), f.name() << ": " << s << " is no value");
    return it->second;
  }
};

/// Every P3109 format with K in [2, kmax] whose exponent field fits 11 bits.
std::vector<p3109_format> formats(int kmin, int kmax) {
  std::vector<p3109_format> out;
  for (int k = kmin; k <= kmax; ++k)
    for (int sgn = 0; sgn < 2; ++sgn)
      for (int p = 1; p <= (sgn ? k - 1 : k); ++p)
        for (int x = 0; x < 2; ++x) {
          const p3109_format f{k, p, sgn == 1, x == 1};
          if ((sgn ? k - p : k - p + 1) > 11) continue;
          if (f.extended && f.is_signed && k < 3) continue;  // no finite value beside 0 and inf
          out.push_back(f);
        }
  return out;
}

constexpr rounding deterministic[] = {rounding::nearest_even, rounding::nearest_away, rounding::toward_zero,
                                      rounding::upward,       rounding::downward,     rounding::odd};
constexpr overflow saturations[] = {overflow::infinity, overflow::saturate, overflow::propagate};

/// The inputs: every value, every midpoint, a double ulp either side, beyond max, tiny, special.
std::vector<double> inputs(const code_table& t) {
  std::vector<double> xs;
  const auto& v = t.finite;
  auto around = [&](double x) {
    xs.push_back(x);
    xs.push_back(std::nextafter(x, -INFINITY));
    xs.push_back(std::nextafter(x, INFINITY));
  };
  for (std::size_t i = 0; i < v.size(); ++i) {
    around(v[i]);
    if (i + 1 < v.size()) {
      around((v[i] + v[i + 1]) / 2);
      around(v[i] + (v[i + 1] - v[i]) * 0.25);
      around(v[i] + (v[i + 1] - v[i]) * 0.75);
    }
  }
  const double hi = v.back();
  const double ulp = hi - v[v.size() - 2];
  for (double x : {hi + ulp / 2, hi + ulp, hi + 1.5 * ulp, hi * 2, hi * 4, 1e300, v[1] / 2, v[1] / 4, 1e-300})
    around(x);
  xs.push_back(INFINITY);
  xs.push_back(std::numeric_limits<double>::quiet_NaN());
  const std::size_t n = xs.size();
  for (std::size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
  return xs;
}

std::string hex(std::uint64_t c) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llX", static_cast<unsigned long long>(c));
  return b;
}

}  // namespace

TEST_CASE("p3109: the runtime formats have the report's facts and names") {
  for (const p3109_format& f : formats(2, 16)) {
    CAPTURE(f.name());
    const cpd::format g = cpd::format::parse(f.name());
    CHECK(g.name() == f.name());
    CHECK(g.bits() == f.k);
    CHECK(g.mantissa_bits() == f.p - 1);
    CHECK(g.bias() == f.bias());
    CHECK(g.spec().nan_code == f.nan_code());
    CHECK(g.spec().max_code == (f.max_code() & g.spec().mag_mask));
    CHECK(g.max() == ref_decode(f, f.max_code()));
    CHECK(g.denorm_min() == ref_decode(f, 1));
    CHECK(cpd::format::parse("p3109_k" + f.name().substr(6)) == g);  // gfloat's spelling
  }
  CHECK(cpd::format::parse("Binary8p3se") == cpd::format::parse("binary8p3se"));  // the report's
  CHECK(cpd::format::parse("binary8p4sf").spec().max_value == cpd::float8_e4m3fnuz::spec.max_value);
  CHECK_THROWS_AS((void)cpd::format::parse("binary8p8se"), std::invalid_argument);  // P <= K - 1 signed
  CHECK_THROWS_AS((void)cpd::format::parse("binary8p9ue"), std::invalid_argument);
  CHECK_THROWS_AS((void)cpd::format::parse("binary16p1se"), std::invalid_argument);  // exponent of 15 bits
  CHECK_THROWS_AS((void)cpd::format::parse("binary8p3sx"), std::invalid_argument);
  CHECK_THROWS_AS((void)cpd::format::parse("binary2p1se"), std::invalid_argument);
}

TEST_CASE("p3109: every code decodes to the report's value (K <= 8, and K = 16)") {
  std::size_t codes = 0;
  std::vector<p3109_format> fs = formats(2, 8);
  for (const p3109_format& f : formats(16, 16)) fs.push_back(f);
  for (const p3109_format& f : fs) {
    const cpd::format g = cpd::format::parse(f.name());
    for (std::uint64_t c = 0; c < f.codes(); ++c, ++codes) {
      const double want = ref_decode(f, c), got = cpd::decode(g, c);
      if (std::isnan(want) ? !std::isnan(got) : !(got == want && std::signbit(got) == std::signbit(want)))
        FAIL(f.name() << " code " << hex(c) << ": " << got << ", want " << want);
    }
  }
  MESSAGE(codes << " codes of " << fs.size() << " formats");
}

TEST_CASE("p3109: rounding as Project says, every mode and saturation, K <= 8") {
  std::size_t checks = 0;
  for (const p3109_format& f : formats(2, 8)) {
    const code_table t(f);
    const cpd::format g = cpd::format::parse(f.name());
    const bool fl = g.spec().fits_float;
    const std::vector<double> xs = inputs(t);
    for (rounding r : deterministic)
      for (overflow o : saturations)
        for (double x : xs) {
          const std::uint64_t want = t.project(x, r, o);
          const std::uint64_t got = cpd::encode(g, r, o, x);
          ++checks;
          if (got != want)
            FAIL(f.name() << " " << cpd::to_string(r) << " " << cpd::to_string(o) << " x=" << x << ": " << hex(got)
                          << ", want " << hex(want));
          const double q = cpd::quantize(g, r, o, x), qv = ref_decode(f, want);
          if (std::isnan(qv) ? !std::isnan(q) : q != qv)
            FAIL(f.name() << " quantize " << cpd::to_string(r) << " " << cpd::to_string(o) << " x=" << x << ": " << q
                          << ", want " << qv);
          const float xf = static_cast<float>(x);
          if (fl && static_cast<double>(xf) == x) {
            CHECK(cpd::encode(g, r, o, xf) == want);
            const float qf = cpd::quantize(g, r, o, xf);
            CHECK((std::isnan(qv) ? std::isnan(qf) : static_cast<double>(qf) == qv));
          }
        }
  }
  MESSAGE(checks << " roundings");
}

TEST_CASE("p3109: the bulk calls give the scalar bits") {
  for (const p3109_format& f : formats(3, 8)) {
    const code_table t(f);
    const cpd::format g = cpd::format::parse(f.name());
    if (!g.spec().fits_float) continue;
    std::vector<float> xs;
    for (double x : inputs(t))
      if (static_cast<double>(static_cast<float>(x)) == x || std::isnan(x)) xs.push_back(static_cast<float>(x));
    for (rounding r : cpd::all_roundings)
      for (overflow o : saturations)
        for (stochastic_variant v : {stochastic_variant::a, stochastic_variant::b, stochastic_variant::c}) {
          if (r != rounding::stochastic && v != stochastic_variant::a) continue;
          cpd::bulk_options opt;
          opt.seed = 7;
          opt.random_bits = 5;
          opt.variant = v;
          std::vector<std::uint8_t> codes(xs.size());
          std::vector<float> q(xs.size());
          cpd::encode(g, r, o, xs.data(), codes.data(), xs.size(), opt);
          cpd::quantize(g, r, o, xs.data(), q.data(), xs.size(), opt);
          for (std::size_t i = 0; i < xs.size(); ++i) {
            const std::uint32_t rnd = cpd::random_bits(opt.seed, opt.stream, i);
            const std::uint64_t want = t.project(xs[i], r, o, rnd & 31u, 5, v);
            if (codes[i] != want)
              FAIL(f.name() << " bulk " << cpd::to_string(r) << " " << cpd::to_string(o) << " " << cpd::to_string(v)
                            << " x=" << xs[i] << ": " << hex(codes[i]) << ", want " << hex(want));
            const double qv = ref_decode(f, want);
            CHECK((std::isnan(qv) ? std::isnan(q[i]) : static_cast<double>(q[i]) == qv));
          }
        }
  }
}

TEST_CASE("p3109: stochastic rounding, variants A, B and C") {
  std::mt19937_64 gen(3109);
  std::size_t checks = 0;
  for (const p3109_format& f : formats(3, 8)) {
    const code_table t(f);
    const cpd::format g = cpd::format::parse(f.name());
    const auto& v = t.finite;
    std::vector<double> xs;
    for (std::size_t i = 0; i + 1 < v.size(); ++i)  // fractions of 1/64 and random ones, between neighbours
      for (int j = 1; j < 64; j += 13) xs.push_back(v[i] + (v[i + 1] - v[i]) * j / 64);
    std::uniform_real_distribution<double> u(0, 1);
    for (int i = 0; i < 100; ++i) {
      const std::size_t a = gen() % (v.size() - 1);
      xs.push_back(v[a] + (v[a + 1] - v[a]) * u(gen));
    }
    xs.push_back(v.back() * 1.1);
    const std::size_t n = xs.size();
    for (std::size_t i = 0; i < n; ++i) xs.push_back(-xs[i]);
    for (stochastic_variant sv : {stochastic_variant::a, stochastic_variant::b, stochastic_variant::c})
      for (int bits : {1, 2, 3, 4, 7, 13, 24, 31, 32}) {
        if (sv == stochastic_variant::b && bits == 32) continue;
        for (overflow o : saturations)
          for (double x : xs) {
            const std::uint32_t mask = bits == 32 ? 0xFFFFFFFFu : (1u << bits) - 1;
            std::vector<std::uint32_t> rs;
            if (bits <= 3)
              for (std::uint32_t r = 0; r <= mask; ++r) rs.push_back(r);
            else
              for (int k = 0; k < 4; ++k) rs.push_back(static_cast<std::uint32_t>(gen()) & mask);
            for (std::uint32_t r : rs) {
              const std::uint64_t want = t.project(x, rounding::stochastic, o, r, bits, sv);
              const std::uint64_t got = cpd::encode(g, rounding::stochastic, o, x, r | ~mask, bits, sv);
              ++checks;
              if (got != want)
                FAIL(f.name() << " stochastic " << cpd::to_string(sv) << " N=" << bits << " R=" << r << " "
                              << cpd::to_string(o) << " x=" << x << ": " << hex(got) << ", want " << hex(want));
            }
          }
      }
  }
  MESSAGE(checks << " stochastic roundings");
  CHECK_THROWS_AS((void)cpd::encode(cpd::format::parse("binary8p3se"), rounding::stochastic, overflow::infinity,
                                    1.0, 0, 32, stochastic_variant::b),
                  std::invalid_argument);
}

TEST_CASE("p3109: compile-time formats, numeric_limits") {
  using se = cpd::float_t<5, 2, cpd::p3109_se>;  // binary8p3se
  using ue = cpd::float_t<6, 2, cpd::p3109_ue>;  // binary8p3ue
  static_assert(sizeof(se::storage_type) == 1 && sizeof(ue::storage_type) == 1);
  CHECK(cpd::format::of<se>() == cpd::format::parse("binary8p3se"));
  CHECK(cpd::format::of<ue>() == cpd::format::parse("binary8p3ue"));
  CHECK(static_cast<float>(std::numeric_limits<se>::max()) == 49152.0f);
  CHECK(std::numeric_limits<se>::infinity().bits() == 0x7F);
  CHECK((-std::numeric_limits<se>::infinity()).bits() == 0xFF);
  CHECK(std::numeric_limits<se>::quiet_NaN().bits() == 0x80);
  CHECK(std::numeric_limits<ue>::lowest().bits() == 0);
  CHECK(std::numeric_limits<ue>::infinity().bits() == 0xFE);
  CHECK(cpd::isnan(ue::from_bits(0xFF)));
  CHECK(cpd::isinf(ue::from_bits(0xFE)));
  CHECK(cpd::isnan(-ue(1.0f)));
  CHECK((-ue(0.0f)).bits() == 0);
  CHECK(cpd::convert<se, rounding::nearest_even, overflow::propagate>(1e6f).bits() == 0x7E);
  CHECK(cpd::convert<se, rounding::nearest_even, overflow::propagate>(-INFINITY).bits() == 0xFF);
  CHECK(cpd::convert<ue, rounding::nearest_even>(-1.0f).bits() == 0xFF);  // SatNone: NaN
  CHECK(cpd::convert<ue, rounding::toward_zero>(-1.0f).bits() == 0);
  CHECK(cpd::convert<ue, rounding::nearest_even, overflow::saturate>(-1.0f).bits() == 0);
  // P = 1: ties to the even code (the exponent field), not up as MPFR's precision 1 does
  const cpd::format p1 = cpd::format::parse("binary8p1se");
  CHECK(cpd::encode(p1, rounding::nearest_even, overflow::infinity, 1.5) == 0x40);
  CHECK(cpd::encode(p1, rounding::nearest_even, overflow::infinity, 3.0) == 0x42);
  CHECK(cpd::encode(cpd::format(7, 0, cpd::encoding_kind::fnuz), rounding::nearest_even, overflow::infinity, 1.5) ==
        0x41);
}
