// SPDX-License-Identifier: MIT
// Fixed point (cpd/host/fixed_point.hpp) against a reference that shares no code with cpd's
// rounding core: x * 2^f in long double (exact for float and double x), rounded to an integer
// by the C library under fesetround (nearest_even, toward_zero, upward, downward), by
// roundl (nearest_away) and by truncation plus the odd bit (odd), then clamped to
// [-2^(w-1), 2^(w-1) - 1] as integers. Stochastic rounding: one of the two neighbours, with
// the frequency of the distance. Every word length 2..24 and fraction length -8..30 on float
// inputs around the grid's ties and range ends, random doubles, in place, threads, scale_exponent.

#include <cpd/host/fixed_point.hpp>

#include <doctest/doctest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

using cpd::rounding;

/// The reference: x rounded to the grid 2^-f in mode r (not stochastic), clamped when clamp.
template <class T>
T reference(T x, int w, int f, bool symmetric, rounding r, bool clamp) {
  if (std::isnan(x)) return x;
  const long double top = std::ldexp(1.0L, w - 1);  // 2^(w-1)
  long double k;
  if (std::isinf(x)) {
    k = x > 0 ? top : -top;
  } else {
    const long double y = std::ldexp(static_cast<long double>(x), f);  // exact
    switch (r) {
      case rounding::nearest_away: k = std::roundl(y); break;
      case rounding::odd: {
        k = std::truncl(y);
        if (k != y && std::fmod(k, 2.0L) == 0) k += y > 0 ? 1 : -1;
        break;
      }
      default: {
        const int mode = r == rounding::nearest_even  ? FE_TONEAREST
                         : r == rounding::toward_zero ? FE_TOWARDZERO
                         : r == rounding::upward      ? FE_UPWARD
                                                      : FE_DOWNWARD;
        const int saved = std::fegetround();
        std::fesetround(mode);
        k = std::nearbyintl(y);
        std::fesetround(saved);
      }
    }
  }
  if (!clamp) return std::isinf(x) ? x : static_cast<T>(std::ldexp(k, -f));
  const long double hi = top - 1, lo = symmetric ? -hi : -top;
  if (k > hi) k = hi;
  if (k < lo) k = lo;
  // the largest T at most the bound (2^(w-1) - 1 is no float above 24 bits)
  const long double v = std::ldexp(k, -f);
  T t = static_cast<T>(v);
  if (std::fabs(static_cast<long double>(t)) > std::fabs(v)) t = std::nextafter(t, T(0));
  return t;
}

template <class T>
bool same(T a, T b) {
  return std::isnan(a) ? std::isnan(b) : (a == b && std::signbit(a) == std::signbit(b));
}

/// Inputs around the ties, neighbours and range ends of the grid (w, f), plus specials.
std::vector<float> grid_inputs(int w, int f, std::mt19937& g) {
  std::vector<float> v{0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(),
                       std::numeric_limits<float>::max(), -std::numeric_limits<float>::max()};
  const double q = std::ldexp(1.0, -f);
  const long long top = 1LL << (w - 1);
  for (long long k : {0LL, 1LL, 2LL, 3LL, top / 2, top - 3, top - 2, top - 1, top, top + 1, 2 * top, 4 * top}) {
    for (double frac : {0.0, 0.25, 0.5, 0.75}) {
      const float x = static_cast<float>((static_cast<double>(k) + frac) * q);
      for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e30f)}) {
        v.push_back(y);
        v.push_back(-y);
      }
    }
  }
  std::uniform_real_distribution<double> u(-1.5 * static_cast<double>(top), 1.5 * static_cast<double>(top));
  for (int i = 0; i < 200; ++i) v.push_back(static_cast<float>(u(g) * q));
  return v;
}

}  // namespace

TEST_CASE("fixed point: every deterministic mode, word lengths 2..24, fraction lengths -8..30, float") {
  std::mt19937 g(5);
  for (int w = 2; w <= 24; w += (w < 10 ? 1 : 7)) {
    for (int f = -8; f <= 30; f += 2) {
      const auto in = grid_inputs(w, f, g);
      std::vector<float> out(in.size());
      for (bool clamp : {true, false}) {
        for (bool symmetric : {false, true}) {
          for (rounding r : {rounding::nearest_even, rounding::nearest_away, rounding::toward_zero, rounding::upward,
                             rounding::downward, rounding::odd}) {
            cpd::fixed_point_quantize(cpd::fixed_point{w, f, symmetric}, r, clamp, in.data(), out.data(), in.size());
            for (std::size_t i = 0; i < in.size(); ++i) {
              const float want = reference(in[i], w, f, symmetric, r, clamp);
              if (!same(out[i], want)) {
                CAPTURE(w);
                CAPTURE(f);
                CAPTURE(clamp);
                CAPTURE(symmetric);
                CAPTURE(static_cast<int>(r));
                CAPTURE(in[i]);
                CAPTURE(out[i]);
                CAPTURE(want);
                FAIL("fixed point differs from the reference");
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("fixed point: double inputs, word lengths up to 53 and 64, both clamps") {
  std::mt19937_64 g(9);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int w : {8, 16, 32, 53, 64}) {
    for (int f : {0, 7, 40}) {
      std::vector<double> in;
      for (int i = 0; i < 2000; ++i) in.push_back(std::ldexp(u(g), w - 1 - f + (i % 5) - 2));
      in.push_back(std::numeric_limits<double>::max());
      in.push_back(-std::numeric_limits<double>::infinity());
      std::vector<double> out(in.size());
      for (bool clamp : {true, false}) {
        for (rounding r : {rounding::nearest_even, rounding::toward_zero, rounding::upward, rounding::odd}) {
          cpd::fixed_point_quantize(cpd::fixed_point{w, f, false}, r, clamp, in.data(), out.data(), in.size());
          for (std::size_t i = 0; i < in.size(); ++i) {
            CAPTURE(w);
            CAPTURE(f);
            CAPTURE(clamp);
            CAPTURE(in[i]);
            REQUIRE(same(out[i], reference(in[i], w, f, false, r, clamp)));
          }
        }
      }
    }
  }
}

TEST_CASE("fixed point: stochastic rounding picks a neighbour with the frequency of the distance") {
  const cpd::fixed_point fp{8, 4, false};  // spacing 1/16
  const float x = 1.0f + 0.3f / 16;        // 30% of the way from 1 to 1 + 1/16
  std::vector<float> in(100000, x), out(in.size());
  cpd::bulk_options o;
  o.seed = 3;
  cpd::fixed_point_quantize(fp, rounding::stochastic, true, in.data(), out.data(), in.size(), o);
  std::size_t up = 0;
  for (float v : out) {
    REQUIRE((v == 1.0f || v == 1.0f + 1.0f / 16));
    up += v > 1.0f;
  }
  CHECK(static_cast<double>(up) / in.size() == doctest::Approx(0.3).epsilon(0.03));
  // the same key gives the same bits, in place and on threads
  std::vector<float> again = in, par(in.size());
  cpd::fixed_point_quantize(fp, rounding::stochastic, true, again.data(), again.data(), again.size(), o);
  cpd::fixed_point_quantize(cpd::execution::par(3), fp, rounding::stochastic, true, in.data(), par.data(), in.size(), o);
  CHECK(std::memcmp(again.data(), out.data(), out.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(par.data(), out.data(), out.size() * sizeof(float)) == 0);
}

TEST_CASE("fixed point: in place, scale_exponent, statistics, bad arguments") {
  const cpd::fixed_point fp{4, 1, true};  // -3.5 ... 3.5 by 0.5
  CHECK(fp.max() == 3.5);
  CHECK(fp.lowest() == -3.5);
  CHECK(fp.quantum() == 0.5);
  CHECK(fp.name() == "fixed4.1s");
  std::vector<float> x{0.3f, -0.2f, 9.0f, -9.0f, std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), 1.25f, 0.0f};
  cpd::value_stats st;
  cpd::bulk_options o;
  o.stats = &st;
  cpd::fixed_point_quantize(fp, rounding::nearest_even, true, x.data(), x.data(), x.size(), o);
  CHECK(x[0] == 0.5f);
  CHECK(same(x[1], -0.0f));
  CHECK(x[2] == 3.5f);
  CHECK(x[3] == -3.5f);
  CHECK(x[4] == 3.5f);
  CHECK(std::isnan(x[5]));
  CHECK(x[6] == 1.0f);  // the tie 1.25 goes to the even 2 * 0.5
  CHECK(st.count == 8);
  CHECK(st.overflow == 2);
  CHECK(st.saturated == 3);
  CHECK(st.underflow == 1);
  CHECK(st.nan_inputs == 1);
  CHECK(st.inf_inputs == 1);
  CHECK(st.zeros == 1);
  // scale_exponent k: x * 2^k on the grid, times 2^-k (the grid of 1 + k fraction bits)
  std::vector<float> y{0.3f, 100.0f}, z(2);
  o.stats = nullptr;
  o.scale_exponent = 2;
  cpd::fixed_point_quantize(fp, rounding::nearest_even, true, y.data(), z.data(), 2, o);
  CHECK(z[0] == 0.25f);
  CHECK(z[1] == 0.875f);
  o.scale_exponent = 0;
  o.scale = 3.0f;
  CHECK_THROWS_AS(cpd::fixed_point_quantize(fp, rounding::nearest_even, true, y.data(), z.data(), 2, o),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::fixed_point_quantize(cpd::fixed_point{1, 0}, rounding::nearest_even, true, y.data(), z.data(), 2),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::fixed_point_quantize(cpd::fixed_point{8, 150}, rounding::nearest_even, true, y.data(), z.data(), 2),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::fixed_point_quantize(cpd::fixed_point{8, -130}, rounding::nearest_even, true, y.data(), z.data(), 2),
                  std::invalid_argument);
}
