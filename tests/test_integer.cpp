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
#include <string>
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
          const float y = in[i] * (1.0f / p.scale);  // (counted after the scale, as every call)
          const double k = std::nearbyint(y) + p.zero_point;
          want.count += 1;
          want.zeros += y == 0.0f;
          want.nan_inputs += std::isnan(y);
          want.inf_inputs += std::isinf(y);
          want.underflow += std::isfinite(y) && y != 0.0f && k == p.zero_point;
          const bool clamped = !std::isnan(y) && (k < f.qmin() || k > f.qmax());
          want.saturated += clamped;
          want.overflow += clamped && std::isfinite(y);
        }
        for (const auto& field : cpd::value_stats_fields) {
          CAPTURE(std::string(field.name));
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

namespace {

/// Inputs for the one-pass loops: both zeros, subnormals, inf, NaN, ties and near-ties of the
/// integer grid, |x / scale| near 2^22 .. 2^25 and beyond, and random values of many magnitudes.
std::vector<float> edge_inputs(float scale, std::uint32_t seed) {
  std::vector<float> in{0.0f, -0.0f, 1e-40f, -1e-45f, std::numeric_limits<float>::quiet_NaN(),
                        -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max(),
                        -std::numeric_limits<float>::denorm_min()};
  for (float b : {4194303.5f, 4194304.5f, 8388607.5f, 8388609.0f, 16777215.0f, 33554436.0f, 1e30f}) {
    in.push_back(b * scale);
    in.push_back(-b * scale);
  }
  for (int k = -40; k <= 40; ++k) {
    in.push_back((static_cast<float>(k) + 0.5f) * scale);
    in.push_back(std::nextafter((static_cast<float>(k) + 0.5f) * scale, 0.0f));
    in.push_back(static_cast<float>(k) * 0.37f * scale);
  }
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-30, 20);
  while (in.size() < 1237) in.push_back(std::ldexp(mant(gen), ex(gen)) * scale);  // (not a multiple of 16)
  return in;
}

/// The generic path of int_fake_quantize, restated: the rounding core (cpd::quantize, proven
/// against MPFR) on the grid of the integers with the scale 1 / scale, then the clamp and the
/// product; its counts as the generic path makes them.
void generic(const cpd::int_format& f, const cpd::int_params& p, rounding r, const std::vector<float>& in,
             std::vector<float>& out, cpd::value_stats& st, cpd::bulk_options o) {
  const cpd::format grid = cpd::fixed_point_grid<float>(cpd::fixed_point{24, 0, false}, 0, false);
  out.resize(in.size());
  o.scale = 1.0f / p.scale;
  o.scale_inverse = 1.0f;
  o.stats = &st;
  cpd::quantize(cpd::execution::seq, grid, r, cpd::overflow::saturate, in.data(), out.data(), in.size(), o);
  const float lo = static_cast<float>(f.qmin() - p.zero_point), hi = static_cast<float>(f.qmax() - p.zero_point);
  std::uint64_t clamped = 0;
  for (float& k : out) {
    if (k > hi || k < lo) {
      clamped += 1;
      k = k > hi ? hi : lo;
    }
    k = (k + 0.0f) * p.scale;
  }
  st.saturated = clamped;
  st.overflow = clamped - st.inf_inputs;
}

}  // namespace

TEST_CASE("int_fake_quantize: the one-pass loop is the rounding core on the integer grid, every instruction set") {
  // nearest_even and stochastic (32 random bits, variant a) take detail::int_round_loop; each
  // instruction set's loop gives the core's bits and counts, whole or in three threads, and
  // across a 2^32 boundary of the random counters
  std::vector<cpd::detail::isa> isas{cpd::detail::isa::baseline};
  if (cpd::detail::cpu_isa() >= cpd::detail::isa::avx2) isas.push_back(cpd::detail::isa::avx2);
  if (cpd::detail::cpu_isa() >= cpd::detail::isa::avx512) isas.push_back(cpd::detail::isa::avx512);
  std::uint32_t seed = 1;
  for (int bits : {2, 4, 8, 16}) {
    for (bool symmetric : {true, false}) {
      const cpd::int_format f{bits, symmetric};
      for (const cpd::int_params p : {cpd::int_params{1.0f, 0}, cpd::int_params{0.01f, f.qmin()},
                                      cpd::int_params{3.0f, f.qmax()}, cpd::int_params{1e-3f, (f.qmin() + f.qmax()) / 2},
                                      cpd::int_params{1e-30f, 0}}) {
        const std::vector<float> in = edge_inputs(p.scale, seed++);
        for (rounding r : {rounding::nearest_even, rounding::stochastic}) {
          for (std::uint64_t offset : {std::uint64_t(0), (std::uint64_t(1) << 32) - 700}) {
            cpd::bulk_options o;
            o.seed = seed;
            o.stream = 5;
            o.offset = offset;
            std::vector<float> want;
            cpd::value_stats want_st;
            generic(f, p, r, in, want, want_st, o);
            for (cpd::detail::isa i : isas) {
              cpd::detail::set_isa_override(i);
              std::vector<float> out(in.size()), par(in.size()), inplace = in;
              cpd::value_stats st, st_par;
              o.stats = &st;
              cpd::int_fake_quantize(cpd::execution::seq, f, p, r, in.data(), out.data(), in.size(), o);
              o.stats = &st_par;
              cpd::int_fake_quantize(cpd::execution::parallel_policy{3, 1}, f, p, r, in.data(), par.data(),
                                     in.size(), o);
              o.stats = nullptr;
              cpd::int_fake_quantize(cpd::execution::seq, f, p, r, inplace.data(), inplace.data(), in.size(), o);
              cpd::detail::set_isa_override(-1);
              CAPTURE(std::string(cpd::detail::to_string(i)));
              CAPTURE(bits);
              CAPTURE(symmetric);
              CAPTURE(p.scale);
              CAPTURE(p.zero_point);
              CAPTURE(std::string(cpd::to_string(r)));
              CAPTURE(offset);
              std::size_t wrong = 0;
              for (std::size_t j = 0; j < in.size(); ++j) {
                const bool ok = same(out[j], want[j]) && same(par[j], want[j]) && same(inplace[j], want[j]);
                if (!ok && wrong++ < 5) {
                  CAPTURE(j);
                  CAPTURE(in[j]);
                  CHECK(out[j] == want[j]);
                }
              }
              CHECK(wrong == 0);
              for (const auto& field : cpd::value_stats_fields) {
                CAPTURE(std::string(field.name));
                CHECK(st.*field.member == want_st.*field.member);
                CHECK(st_par.*field.member == want_st.*field.member);
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("int_quantize: the groups' ranges and values on every instruction set, stochastic as one call") {
  // each group's scale from its finite values (inf, NaN and both zeros among them), then the
  // group as int_fake_quantize with the counters of one call over the whole array
  std::vector<float> in = edge_inputs(0.25f, 99);
  in[40] = std::numeric_limits<float>::infinity();  // (groups of 33: one with an inf, one all NaN)
  for (std::size_t j = 66; j < 99; ++j) in[j] = std::numeric_limits<float>::quiet_NaN();
  const cpd::int_format f{4, false};
  for (rounding r : {rounding::nearest_even, rounding::stochastic})
  for (std::size_t group : {std::size_t(33), std::size_t(700), std::size_t(2500)}) {  // (2500: a group beyond a block of words)
    cpd::bulk_options o;
    o.seed = 3;
    o.offset = 17;
    const std::size_t groups = (in.size() + group - 1) / group;
    std::vector<float> want(in.size());
    std::vector<cpd::int_params> want_p(groups);
    cpd::value_stats want_st;
    for (std::size_t b = 0; b < groups; ++b) {
      const std::size_t g = b * group, m = std::min(group, in.size() - g);
      float lo = 0.0f, hi = 0.0f;
      for (std::size_t j = g; j < g + m; ++j)
        if (std::isfinite(in[j])) lo = std::min(lo, in[j]), hi = std::max(hi, in[j]);
      want_p[b] = cpd::int_params_for(f, lo, hi);
      std::vector<float> part(in.begin() + static_cast<long>(g), in.begin() + static_cast<long>(g + m)), out;
      cpd::value_stats st;
      cpd::bulk_options og = o;
      og.offset = o.offset + g;
      generic(f, want_p[b], r, part, out, st, og);
      std::copy(out.begin(), out.end(), want.begin() + static_cast<long>(g));
      want_st += st;
    }
    for (int cap : {0, 1, 2}) {
      cpd::detail::set_isa_override(cap);
      std::vector<float> out(in.size());
      std::vector<cpd::int_params> p(groups);
      cpd::value_stats st;
      o.stats = &st;
      cpd::int_quantize(cpd::execution::par(3), f, r, in.data(), out.data(), in.size(), group, p.data(), o);
      cpd::detail::set_isa_override(-1);
      CAPTURE(cap);
      CAPTURE(group);
      CAPTURE(std::string(cpd::to_string(r)));
      for (std::size_t b = 0; b < groups; ++b) {
        CHECK(p[b].scale == want_p[b].scale);
        CHECK(p[b].zero_point == want_p[b].zero_point);
      }
      for (std::size_t j = 0; j < in.size(); ++j) CHECK(same(out[j], want[j]));
      for (const auto& field : cpd::value_stats_fields) {
        CAPTURE(std::string(field.name));
        CHECK(st.*field.member == want_st.*field.member);
      }
    }
  }
}

TEST_CASE("int_quantize_channels: int_quantize of the array with the channel axis moved to the front") {
  // [outer][channels][inner] against the moved copy [channels][outer][inner] through int_quantize
  // with group = outer * inner, moved back: values, params and counts, every mode's path (the
  // one-pass loop: nearest_even, stochastic; the core: toward_zero, stochastic with 8 bits),
  // chunks of a channel crossing rows and the 2048-value buffer, blocks of channels with short
  // runs (64 and 6 at a time, a last partial block), in place, threads.
  struct shape {
    std::size_t outer, channels, inner;
  };
  const cpd::int_format f{4, false}, g{8, true};
  std::mt19937 gen(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const shape sh : {shape{1, 5, 7}, shape{3, 4, 1}, shape{2, 3, 2049}, shape{700, 3, 5}, shape{5, 1, 3},
                         shape{0, 3, 4}, shape{300, 70, 1}, shape{50, 9, 10}, shape{4, 2, 64}}) {  // (blocks of channels)
    const std::size_t per = sh.outer * sh.inner, n = per * sh.channels;
    std::vector<float> in(n);
    for (std::size_t j = 0; j < n; ++j) in[j] = normal(gen) * static_cast<float>(1 + j % 3 * 10);  // channels differ
    if (n > 20) {
      in[7] = std::numeric_limits<float>::infinity();
      in[12] = std::numeric_limits<float>::quiet_NaN();
    }
    auto moved_at = [&](std::size_t o, std::size_t c, std::size_t i) { return (c * sh.outer + o) * sh.inner + i; };
    auto at = [&](std::size_t o, std::size_t c, std::size_t i) { return (o * sh.channels + c) * sh.inner + i; };
    std::vector<float> moved(n);
    for (std::size_t o = 0; o < sh.outer; ++o)
      for (std::size_t c = 0; c < sh.channels; ++c)
        for (std::size_t i = 0; i < sh.inner; ++i) moved[moved_at(o, c, i)] = in[at(o, c, i)];
    for (const cpd::int_format& fmt : {f, g})
    for (rounding r : {rounding::nearest_even, rounding::stochastic, rounding::toward_zero})
    for (int rbits : {32, 8}) {
      if (rbits == 8 && r != rounding::stochastic) continue;
      CAPTURE(sh.outer);
      CAPTURE(sh.channels);
      CAPTURE(sh.inner);
      CAPTURE(std::string(cpd::to_string(r)));
      CAPTURE(rbits);
      cpd::bulk_options o;
      o.seed = 5;
      o.offset = (std::uint64_t(1) << 32) - 1000;  // (across a 2^32 block of counters)
      o.random_bits = rbits;
      cpd::value_stats want_st, st, st2;
      std::vector<float> want_moved(n), want(n), out(n);
      std::vector<cpd::int_params> want_p(sh.channels), p(sh.channels), p2(sh.channels);
      o.stats = &want_st;
      cpd::int_quantize(cpd::execution::seq, fmt, r, moved.data(), want_moved.data(), n, std::max<std::size_t>(per, 1),
                        want_p.data(), o);
      for (std::size_t oo = 0; oo < sh.outer; ++oo)
        for (std::size_t c = 0; c < sh.channels; ++c)
          for (std::size_t i = 0; i < sh.inner; ++i) want[at(oo, c, i)] = want_moved[moved_at(oo, c, i)];
      o.stats = &st;
      cpd::int_quantize_channels(cpd::execution::par(3), fmt, r, in.data(), out.data(), sh.outer, sh.channels,
                                 sh.inner, p.data(), o);
      std::vector<float> inplace = in;
      o.stats = &st2;
      cpd::int_quantize_channels(cpd::execution::seq, fmt, r, inplace.data(), inplace.data(), sh.outer, sh.channels,
                                 sh.inner, p2.data(), o);
      std::size_t bad = 0;
      for (std::size_t j = 0; j < n; ++j) bad += !same(out[j], want[j]) + !same(inplace[j], want[j]);
      CHECK(bad == 0);
      for (std::size_t c = 0; c < sh.channels && n != 0; ++c) {
        CHECK(p[c].scale == want_p[c].scale);
        CHECK(p[c].zero_point == want_p[c].zero_point);
        CHECK(p2[c].scale == want_p[c].scale);
      }
      for (const auto& field : cpd::value_stats_fields) {
        CAPTURE(std::string(field.name));
        CHECK(st.*field.member == want_st.*field.member);
        CHECK(st2.*field.member == want_st.*field.member);
      }
    }
  }
  std::vector<float> x(8), y(9);
  CHECK_THROWS_AS(cpd::int_quantize_channels(cpd::execution::seq, f, rounding::nearest_even, x.data(), y.data(), 2, 0, 4),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::int_quantize_channels(cpd::execution::seq, f, rounding::nearest_even, x.data(), y.data(), 2, 4, 0),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::int_quantize_channels(cpd::execution::seq, f, rounding::nearest_even, x.data(), y.data(),
                                             std::size_t(1) << 40, std::size_t(1) << 30, 1),
                  std::length_error);
  CHECK_THROWS_AS(cpd::int_quantize_channels(cpd::execution::seq, f, rounding::nearest_even, y.data(), y.data() + 1, 2,
                                             2, 2),
                  std::invalid_argument);  // (out overlaps in partly)
}
