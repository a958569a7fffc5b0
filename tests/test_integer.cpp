// SPDX-License-Identifier: MIT
// Integer quantization (cpd/host/integer.hpp) against torch.ao's formulas written here with
// the C library (nearbyint, trunc, ceil, floor, round under the default rounding mode): the
// scale and zero point of MinMaxObserver, the fake quantization of fake_quantize_per_*_affine.
// Python's test_bulk compares with torch itself.

#include <cpd/host/integer.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

using cpd::rounding;

/// torch's fake quantization of x, with round() in mode r (not stochastic).
float reference(float x, const cpd::int_format& f, const cpd::int_params& p, rounding r) {
  if (std::isnan(x)) return x;
  const float y = x * (1.0f / p.scale);
  double k;
  switch (r) {
    case rounding::toward_zero: k = std::trunc(y); break;
    case rounding::upward: k = std::ceil(y); break;
    case rounding::downward: k = std::floor(y); break;
    case rounding::nearest_away: k = std::round(y); break;
    case rounding::odd: k = std::trunc(y); if (k != y && std::fmod(k, 2.0) == 0) k += y > 0 ? 1 : -1; break;
    default: k = std::nearbyint(y);
  }
  double q = k + p.zero_point;
  q = std::fmin(std::fmax(q, f.qmin()), f.qmax());
  return static_cast<float>(q - p.zero_point) * p.scale;
}

bool same(float a, float b) { return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, 4) == 0; }

}  // namespace

TEST_CASE("int_params_for: torch.ao's MinMaxObserver, symmetric and affine") {
  const cpd::int_format s8{8, true}, u8{8, false}, s4{4, true};
  CHECK(s8.qmin() == -128);
  CHECK(s8.qmax() == 127);
  CHECK(u8.qmax() == 255);
  CHECK(s4.name() == "int4");
  CHECK(u8.name() == "uint8");
  auto p = cpd::int_params_for(s8, -2.0f, 1.0f);
  CHECK(p.scale == 2.0f / 127.5f);
  CHECK(p.zero_point == 0);
  p = cpd::int_params_for(s4, -0.5f, 3.0f);
  CHECK(p.scale == 3.0f / 7.5f);
  p = cpd::int_params_for(u8, -1.0f, 3.0f);  // scale 4/255, zero point 0 - round(-1 / (4/255)) = 64 (63.75)
  CHECK(p.scale == 4.0f / 255.0f);
  CHECK(p.zero_point == 64);
  p = cpd::int_params_for(u8, 1.0f, 3.0f);  // the range holds 0
  CHECK(p.scale == 3.0f / 255.0f);
  CHECK(p.zero_point == 0);
  p = cpd::int_params_for(u8, 0.0f, 0.0f);  // scale at least float's epsilon
  CHECK(p.scale == std::numeric_limits<float>::epsilon());
  CHECK_THROWS_AS(cpd::int_params_for(cpd::int_format{1, true}, 0, 1), std::invalid_argument);
  CHECK_THROWS_AS(cpd::int_params_for(s8, 1.0f, -1.0f), std::invalid_argument);
}

TEST_CASE("int_fake_quantize: every deterministic mode against the formulas, int2..int16") {
  std::mt19937 g(3);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int bits : {2, 3, 4, 8, 12, 16}) {
    for (bool symmetric : {true, false}) {
      const cpd::int_format f{bits, symmetric};
      const cpd::int_params p = cpd::int_params_for(f, -1.3f, 2.1f);
      std::vector<float> in{0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), 1e30f};
      for (int k = -70000; k <= 70000; k += 37) in.push_back((static_cast<float>(k) + 0.5f) * p.scale / 64.0f);
      for (int k = -300; k <= 300; ++k) in.push_back((static_cast<float>(k) + 0.5f) * p.scale);  // ties of x / scale
      for (int i = 0; i < 2000; ++i) in.push_back(u(g));
      std::vector<float> out(in.size());
      for (rounding r : {rounding::nearest_even, rounding::nearest_away, rounding::toward_zero, rounding::upward,
                         rounding::downward, rounding::odd}) {
        cpd::int_fake_quantize(cpd::execution::seq, f, p, r, in.data(), out.data(), in.size());
        for (std::size_t i = 0; i < in.size(); ++i) {
          const float want = reference(in[i], f, p, r);
          if (!same(out[i], want)) {
            CAPTURE(bits);
            CAPTURE(symmetric);
            CAPTURE(static_cast<int>(r));
            CAPTURE(in[i]);
            CAPTURE(out[i]);
            CAPTURE(want);
            FAIL("differs from torch's formula");
          }
        }
      }
    }
  }
}

TEST_CASE("int_fake_quantize, nearest_even: the one-pass path at its edges, its counts, any thread count") {
  // x / scale near and beyond 2^22 .. 2^25 (where the rounding trick stops being exact and the
  // clamp must take over), subnormal x, ties, both zeros, inf and NaN; counts from the formula
  const float big[] = {4194303.5f, 4194304.5f, 8388607.5f, 8388609.0f, 16777215.0f, 33554436.0f, 1e30f, 3.4e38f};
  for (int bits : {2, 8, 16}) {
    for (bool symmetric : {true, false}) {
      const cpd::int_format f{bits, symmetric};
      for (const cpd::int_params p : {cpd::int_params{1.0f, 0}, cpd::int_params{0.01f, f.qmin()},
                                      cpd::int_params{3.0f, f.qmax()}, cpd::int_params{1e-3f, (f.qmin() + f.qmax()) / 2}}) {
        std::vector<float> in{0.0f, -0.0f, 1e-40f, -1e-45f, std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
        for (float b : big) {
          in.push_back(b * p.scale);
          in.push_back(-b * p.scale);
        }
        for (int k = -40; k <= 40; ++k) in.push_back((static_cast<float>(k) + 0.5f) * p.scale);
        for (int k = -40; k <= 40; ++k) in.push_back(static_cast<float>(k) * 0.37f * p.scale);
        std::vector<float> out(in.size()), par(in.size());
        cpd::value_stats st, st_par;
        cpd::bulk_options o;
        o.stats = &st;
        cpd::int_fake_quantize(cpd::execution::seq, f, p, rounding::nearest_even, in.data(), out.data(), in.size(), o);
        o.stats = &st_par;
        cpd::execution::parallel_policy three{3, 1};
        cpd::int_fake_quantize(three, f, p, rounding::nearest_even, in.data(), par.data(), in.size(), o);
        cpd::value_stats want;
        for (std::size_t i = 0; i < in.size(); ++i) {
          CAPTURE(bits);
          CAPTURE(symmetric);
          CAPTURE(p.scale);
          CAPTURE(p.zero_point);
          CAPTURE(in[i]);
          CHECK(same(out[i], reference(in[i], f, p, rounding::nearest_even)));
          CHECK(same(par[i], out[i]));
          const float x = in[i];
          const double k = std::nearbyint(x * (1.0f / p.scale)) + p.zero_point;
          want.count += 1;
          want.zeros += x == 0.0f;
          want.nan_inputs += std::isnan(x);
          want.inf_inputs += std::isinf(x);
          want.underflow += std::isfinite(x) && x != 0.0f && k == p.zero_point;
          const bool clamped = !std::isnan(x) && (k < f.qmin() || k > f.qmax());
          want.saturated += clamped;
          want.overflow += clamped && std::isfinite(x);
        }
        for (const auto& field : cpd::value_stats_fields) {
          CAPTURE(field.name);
          CHECK(st.*field.member == want.*field.member);
          CHECK(st_par.*field.member == want.*field.member);
        }
      }
    }
  }
}

TEST_CASE("int_quantize: groups, statistics, stochastic rounding, in place, errors") {
  const cpd::int_format f{4, true};
  std::vector<float> x{1.0f, -3.0f, 0.2f, 7.5f,                          // group 0: amax 7.5, scale 1
                       0.25f, std::numeric_limits<float>::infinity(), -0.3f, std::numeric_limits<float>::quiet_NaN()};
  std::vector<cpd::int_params> p(2);
  cpd::value_stats st;
  cpd::bulk_options o;
  o.stats = &st;
  std::vector<float> y(x.size());
  cpd::int_quantize(cpd::execution::seq, f, rounding::nearest_even, x.data(), y.data(), x.size(), 4, p.data(), o);
  CHECK(p[0].scale == 1.0f);
  CHECK(p[1].scale == 0.3f / 7.5f);  // the finite values: amax 0.3 (-0.3 rounds to -7 or -8, in range)
  CHECK(y[0] == 1.0f);
  CHECK(y[1] == -3.0f);
  CHECK(y[2] == 0.0f);
  CHECK(y[3] == 7.0f);  // 7.5 rounds to the even 8, beyond qmax 7
  CHECK(y[5] == 7.0f * p[1].scale);
  CHECK(std::isnan(y[7]));
  CHECK(st.count == 8);
  CHECK(st.overflow == 1);
  CHECK(st.saturated == 2);
  CHECK(st.underflow == 1);
  CHECK(st.inf_inputs == 1);
  CHECK(st.nan_inputs == 1);
  // stochastic: a neighbour, with the frequency of the distance; the groups draw what one call does
  std::vector<float> s(40000, 0.3f);
  s[0] = 7.0f;  // scale 7 / 7.5 for every group of 40000
  std::vector<float> whole(s.size()), parts(s.size()), inplace = s;
  o.stats = nullptr;
  o.seed = 11;
  cpd::int_params q;
  cpd::int_quantize(cpd::execution::par(3), f, rounding::stochastic, s.data(), whole.data(), s.size(), s.size(), &q, o);
  cpd::int_fake_quantize(cpd::execution::seq, f, q, rounding::stochastic, s.data(), parts.data(), 20000, o);
  o.offset = 20000;
  cpd::int_fake_quantize(cpd::execution::seq, f, q, rounding::stochastic, s.data() + 20000, parts.data() + 20000,
                         20000, o);
  o.offset = 0;
  cpd::int_quantize(cpd::execution::seq, f, rounding::stochastic, inplace.data(), inplace.data(), s.size(), s.size(),
                    nullptr, o);
  CHECK(std::memcmp(whole.data(), parts.data(), s.size() * 4) == 0);
  CHECK(std::memcmp(whole.data(), inplace.data(), s.size() * 4) == 0);
  std::size_t up = 0;
  for (std::size_t i = 1; i < s.size(); ++i) {
    REQUIRE((whole[i] == 0.0f || whole[i] == q.scale));
    up += whole[i] > 0;
  }
  const double want = 0.3 / q.scale;  // 0.3 / (7 / 7.5) = 0.32...
  CHECK(static_cast<double>(up) / (s.size() - 1) == doctest::Approx(want).epsilon(0.05));
  CHECK_THROWS_AS(cpd::int_quantize(cpd::execution::seq, f, rounding::nearest_even, x.data(), y.data(), 8, 0),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::int_fake_quantize(cpd::execution::seq, f, cpd::int_params{0.0f, 0}, rounding::nearest_even,
                                         x.data(), y.data(), 8),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::int_fake_quantize(cpd::execution::seq, f, cpd::int_params{1.0f, 9}, rounding::nearest_even,
                                         x.data(), y.data(), 8),
                  std::invalid_argument);
}
