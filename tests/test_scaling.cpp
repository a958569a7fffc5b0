// SPDX-License-Identifier: MIT
// Scale selection: APS properties, and each scaler against hand-worked cases and
// the formulas of Transformer Engine and PyTorch's GradScaler.

#include <cpd/exchange/simulate.hpp>
#include <cpd/host/hadamard.hpp>
#include <cpd/scaling/diagnostics.hpp>
#include <cpd/scaling/scaling.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

const float pinf = std::numeric_limits<float>::infinity();
const float qnan = std::numeric_limits<float>::quiet_NaN();

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// ceil(log2(v)) by a loop over powers of two (shares nothing with the library).
int ceil_log2_ref(double v) {
  int k = 0;
  double p = 1.0;
  while (p < v) p *= 2, ++k;
  while (p / 2 >= v) p /= 2, --k;
  return k;
}

}  // namespace

TEST_CASE("aps: hand-worked statistics and shifts") {
  using F = cpd::float8_e5m2;  // emax 15
  cpd::aps<F> a1(1), a3(3), a8(8);
  const float one[] = {0.25f, -1.0f, 0.5f};
  CHECK(a1.statistic(one, 3) == 0);          // ceil(log2(1 * 1)) = 0
  CHECK(a1.select(0).exponent == 15);         // 1 * 2^15 = 2^emax
  CHECK(a3.statistic(one, 3) == 2);          // ceil(log2(3)) = 2
  CHECK(a3.select(2).exponent == 13);
  const float tenth[] = {0.1f, -0.05f};
  CHECK(a8.statistic(tenth, 2) == 0);        // 0.8 -> 0
  CHECK(a8.select(a8.statistic(tenth, 2)).exponent == 15);
  const float quarter[] = {0.25f};
  CHECK(a8.statistic(quarter, 1) == 1);      // 2 = 2^1 exactly: no rounding up
  CHECK(a8.statistic(quarter, 1) == ceil_log2_ref(0.25 * 8));

  // e4m3fn: emax 8 (max 448); margin takes binades away.
  cpd::aps<cpd::float8_e4m3fn> m(4, 2);
  const float g[] = {3.0f};
  CHECK(m.statistic(g, 1) == 4);  // 12 -> 16
  CHECK(m.select(4).exponent == 8 - 4 - 2);
  CHECK(cpd::float8_e4m3fn::spec.emax == 8);
}

TEST_CASE("aps: zero, empty and non-finite tensors give a finite, harmless scale") {
  using F = cpd::float8_e4m3fn;
  cpd::aps<F> a(16);
  const float zeros[] = {0.0f, -0.0f, 0.0f};
  CHECK(a.statistic(zeros, 3) == cpd::aps<F>::zero_statistic);
  CHECK(a.statistic(nullptr, 0) == cpd::aps<F>::zero_statistic);
  CHECK(a.select(a.statistic(zeros, 3)).exponent == 0);
  const float withinf[] = {1.0f, -pinf};
  const float withnan[] = {qnan, 1.0f};
  CHECK(a.statistic(withinf, 2) == cpd::aps<F>::nonfinite_statistic);
  CHECK(a.statistic(withnan, 2) == cpd::aps<F>::nonfinite_statistic);
  CHECK(a.select(cpd::aps<F>::nonfinite_statistic).exponent == 0);
  // zero is the identity of combine; non-finite absorbs.
  CHECK(cpd::aps<F>::combine(cpd::aps<F>::zero_statistic, -7) == -7);
  CHECK(cpd::aps<F>::combine(cpd::aps<F>::nonfinite_statistic, 100) == cpd::aps<F>::nonfinite_statistic);
  // The smallest float subnormal still gives a finite exponent.
  const float tiny[] = {std::numeric_limits<float>::denorm_min()};
  const int st = a.statistic(tiny, 1);
  CHECK(st == -149 + 4);
  CHECK(a.select(st).exponent == 8 + 145);
  CHECK(std::isfinite(a.select(st).factor()));
  CHECK_THROWS_AS(cpd::aps<F>(0), std::invalid_argument);
  CHECK_THROWS_AS(cpd::aps<F>(2, -1), std::invalid_argument);
}

TEST_CASE("aps: multi-tensor statistics and combine over workers") {
  using F = cpd::float8_e5m2;
  cpd::aps<F> a(2);
  std::vector<float> t0 = {1.0f, 2.0f}, t1 = {0.0f}, t2 = {0.001f, -0.002f, 0.0f};
  const float* ptrs[] = {t0.data(), t1.data(), t2.data()};
  const std::size_t ns[] = {t0.size(), t1.size(), t2.size()};
  std::int32_t st[3], other[3] = {1, -20, -30};
  a.statistics(ptrs, ns, 3, st);
  CHECK(st[0] == 2);
  CHECK(st[1] == cpd::aps<F>::zero_statistic);
  CHECK(st[2] == ceil_log2_ref(0.002f * 2.0));
  cpd::combine_into<cpd::aps<F>>(st, other, 3);
  CHECK(st[0] == 2);
  CHECK(st[1] == -20);
  CHECK(st[2] == std::max(ceil_log2_ref(0.002f * 2.0), -30));
  const std::int32_t all[] = {3, cpd::aps<F>::zero_statistic, -5};
  CHECK(cpd::combine_all<cpd::aps<F>>(all, 3) == 3);
}

// For W workers whose largest magnitude is amax, APS's shift puts the largest
// possible W-way sum, W * amax * 2^shift, in (2^(emax-1), 2^emax]: no overflow,
// at most one binade wasted. Checked exactly in double over W in [1, 1024] and
// amax from 1e-30 to 1e30 (with random significands).
TEST_CASE_TEMPLATE("aps: property: no overflow, at most one binade wasted", F, cpd::float8_e5m2,
                   cpd::float8_e4m3fn, cpd::float6_e3m2fn, cpd::float4_e2m1fn, cpd::float16, cpd::bfloat16,
                   cpd::float_t<3, 0, cpd::fn>) {
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> expo(std::log(1e-30), std::log(1e30));
  const int emax = F::spec.emax;
  int checked = 0;
  for (int w : {1, 2, 3, 5, 7, 8, 12, 31, 64, 100, 255, 256, 257, 512, 1000, 1023, 1024}) {
    cpd::aps<F> a(w);
    for (int t = 0; t < 400; ++t) {
      const float amax = static_cast<float>(std::exp(expo(rng)));
      const int st = a.statistic_of_amax(amax);
      const int shift = a.select(st).exponent;
      const double top = static_cast<double>(amax) * w * std::ldexp(1.0, shift);
      REQUIRE(top <= std::ldexp(1.0, emax));
      REQUIRE(top > std::ldexp(1.0, emax - 1));
      REQUIRE(top <= F::spec.max_value);
      ++checked;
    }
  }
  CHECK(checked == 17 * 400);
}

// The same property end to end: W workers all holding +amax (the worst case for
// overflow) and random values below it, summed in F in every order with rounding
// after every addition; the sum stays finite and within max(F).
TEST_CASE_TEMPLATE("aps: property: rounded W-way sums never overflow", F, cpd::float8_e5m2, cpd::float8_e4m3fn,
                   cpd::float6_e3m2fn, cpd::float4_e2m1fn, cpd::float16, cpd::bfloat16,
                   cpd::float_t<3, 0, cpd::fn>) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> expo(std::log(1e-30), std::log(1e30));
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int w : {1, 2, 3, 5, 8, 13, 64, 100, 256, 1000, 1024}) {
    for (int t = 0; t < 6; ++t) {
      const float amax = static_cast<float>(std::exp(expo(rng)));
      const std::size_t n = 8;
      std::vector<std::vector<float>> g(static_cast<std::size_t>(w), std::vector<float>(n));
      for (auto& v : g) {
        v[0] = amax;  // element 0: every worker at +amax
        v[1] = -amax;
        for (std::size_t i = 2; i < n; ++i) v[i] = amax * unit(rng);
      }
      std::vector<const float*> p;
      for (auto& v : g) p.push_back(v.data());
      std::vector<float> out(n);
      for (auto alg : {cpd::allreduce_algorithm::sequential, cpd::allreduce_algorithm::ring,
                       cpd::allreduce_algorithm::halving_doubling}) {
        cpd::allreduce_options o;
        o.algorithm = alg;
        o.threads = 1;
        // With M = 0 rounding can raise a value by 4/3 and ties go up: one binade of margin.
        const int margin = F::mantissa_bits == 0 ? 1 : 0;
        auto r = cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, cpd::aps<F>(w, margin), o);
        CHECK(r.nonfinite_out == 0);
        for (std::size_t i = 0; i < n; ++i) {
          const double scaled = static_cast<double>(out[i]) * r.scale.factor();
          REQUIRE(std::fabs(scaled) <= F::spec.max_value);
        }
        // Values survive when the format spans the log2(W) binades APS leaves below the top.
        if (std::ldexp(1.0, F::spec.emax) / w >= F::spec.min_positive) CHECK(out[0] > 0.0f);
        if (r.nonfinite_out != 0) MESSAGE(w, " ", amax, " ", cpd::to_string(alg));
      }
    }
  }
}

// Why M = 0 formats need a margin: 5 workers at 1.53 (APS shift 0, 5 * 1.53 <= 8 = max):
// each value rounds up to 2; halving-doubling sums (2 + 2) + 2 = 6, a tie that goes to 8,
// then 8 + (2 + 2) = 12, a tie that goes to 16 > max(F).
TEST_CASE("aps: with M = 0 a rounded sum can pass 2^emax without a margin") {
  using F = cpd::float_t<3, 0, cpd::fn>;  // powers of two up to 8 = 2^emax
  const int w = 5;
  std::vector<float> v(w, 1.52952f);
  std::vector<const float*> p;
  for (auto& x : v) p.push_back(&x);
  float out = 0;
  cpd::allreduce_options o;
  o.algorithm = cpd::allreduce_algorithm::halving_doubling;
  auto r0 = cpd::simulate_allreduce<F>(p.data(), &out, 1, w, cpd::aps<F>(w), o);
  CHECK(r0.nonfinite_out == 1);
  auto r1 = cpd::simulate_allreduce<F>(p.data(), &out, 1, w, cpd::aps<F>(w, 1), o);
  CHECK(r1.nonfinite_out == 0);
}

TEST_CASE("current scaling: Transformer Engine's formula") {
  using F = cpd::float8_e4m3fn;  // max 448
  cpd::current_scaling<F> cs;
  const float g[] = {1.0f, -2.0f, 0.5f};
  const float amax = cs.statistic(g, 3);
  CHECK(amax == 2.0f);
  CHECK(cs.select(amax).value == 224.0f);
  CHECK(cs.select(amax).inverse == 1.0f / 224.0f);
  CHECK(cs.select(3.0f).value == 448.0f / 3.0f);  // float division, rounded once
  // amax 0, pinf, NaN: scale 1
  CHECK(cs.select(0.0f).value == 1.0f);
  CHECK(cs.select(pinf).value == 1.0f);
  CHECK(cs.select(qnan).value == 1.0f);
  // a quotient beyond float: float max
  CHECK(cs.select(std::numeric_limits<float>::denorm_min()).value == std::numeric_limits<float>::max());
  // epsilon: amax is at least epsilon
  cpd::current_scaling<F> ce({0, 1e-3f, false});
  CHECK(ce.select(0.0f).value == 448.0f / 1e-3f);
  CHECK(ce.select(1e-6f).value == 448.0f / 1e-3f);
  CHECK(ce.select(1.0f).value == 448.0f);
  // power of two: truncate the mantissa (448 / 3 = 149.33 -> 128)
  cpd::current_scaling<F> cp({0, 0.0f, true});
  CHECK(cp.select(3.0f).value == 128.0f);
  CHECK(cp.select(0.5f).value == 512.0f);  // 896 -> 512
  // margin: divided by 2^margin
  cpd::current_scaling<F> cm({1, 0.0f, false});
  CHECK(cm.select(2.0f).value == 112.0f);
  // e5m2: max 57344
  cpd::current_scaling<cpd::float8_e5m2> c5;
  CHECK(c5.select(1.0f).value == 57344.0f);
  // NaN propagates through combine; its bits order above pinf as int32.
  const float withnan[] = {1.0f, qnan};
  CHECK(std::isnan(cs.statistic(withnan, 2)));
  CHECK(std::isnan(cpd::current_scaling<F>::combine(2.0f, cs.statistic(withnan, 2))));
  CHECK(cpd::current_scaling<F>::combine(2.0f, 3.0f) == 3.0f);
  CHECK(static_cast<std::int32_t>(bits_of(qnan)) > static_cast<std::int32_t>(bits_of(pinf)));
}

TEST_CASE("delayed scaling: history window, max and most_recent, non-finite amax") {
  using F = cpd::float8_e4m3fn;
  cpd::delayed_scaling<F> d({3, cpd::amax_algorithm::max, 0});
  CHECK(d.scale().value == 1.0f);  // before any history
  // select returns the scale from earlier steps, then records this step's amax.
  CHECK(d.select(2.0f).value == 1.0f);
  CHECK(d.scale().value == 224.0f);
  CHECK(d.select(1.0f).value == 224.0f);   // history {2, 1}: max 2
  CHECK(d.scale().value == 224.0f);
  d.update(4.0f);                          // {2, 1, 4}
  CHECK(d.scale().value == 112.0f);
  d.update(1.0f);                          // {1, 4, 1}: 2 dropped
  CHECK(d.scale().value == 112.0f);
  d.update(1.0f);                          // {4, 1, 1}
  CHECK(d.scale().value == 112.0f);
  d.update(1.0f);                          // {1, 1, 1}
  CHECK(d.scale().value == 448.0f);
  // A non-finite amax keeps the scale while it is in the window.
  d.update(pinf);
  CHECK(d.scale().value == 448.0f);
  d.update(qnan);
  CHECK(d.scale().value == 448.0f);
  d.update(8.0f);
  CHECK(d.scale().value == 448.0f);  // {pinf, qnan, 8}
  d.update(8.0f);
  d.update(8.0f);                    // {8, 8, 8}
  CHECK(d.scale().value == 56.0f);
  // zero amax keeps the scale
  cpd::delayed_scaling<F> z({1, cpd::amax_algorithm::max, 0});
  z.update(0.0f);
  CHECK(z.scale().value == 1.0f);

  cpd::delayed_scaling<F> r({4, cpd::amax_algorithm::most_recent, 1});
  r.update(4.0f);
  CHECK(r.scale().value == 56.0f);  // 448 / 4 / 2^1
  r.update(1.0f);
  CHECK(r.scale().value == 224.0f);
  CHECK(r.history_amax() == 1.0f);
  CHECK_THROWS_AS(cpd::delayed_scaling<F>({0, cpd::amax_algorithm::max, 0}), std::invalid_argument);
}

TEST_CASE("dynamic loss scaling: GradScaler semantics") {
  cpd::dynamic_loss_scaling s;
  CHECK(s.scale() == 65536.0f);
  CHECK(s.opts().growth_interval == 2000);
  CHECK(s.inverse_scale() == static_cast<float>(1.0 / 65536.0));
  const float bad[] = {1.0f, pinf};
  const float good[] = {1.0f, 2.0f};
  CHECK(s.statistic(bad, 2) == 1);
  CHECK(s.statistic(good, 2) == 0);
  // overflow: backoff, tracker reset, step skipped
  CHECK(s.select(1).value == 32768.0f);
  CHECK(s.skipped());
  CHECK(s.growth_tracker() == 0);
  // growth after growth_interval clean steps in a row
  cpd::dynamic_loss_scaling g({8.0f, 2.0f, 0.5f, 3});
  g.update(0);
  g.update(0);
  CHECK(g.scale() == 8.0f);
  CHECK(g.growth_tracker() == 2);
  g.update(0);
  CHECK(g.scale() == 16.0f);
  CHECK(g.growth_tracker() == 0);
  CHECK_FALSE(g.skipped());
  g.update(0);
  g.update(1);  // an overflow resets the count
  CHECK(g.scale() == 8.0f);
  g.update(0);
  g.update(0);
  CHECK(g.scale() == 8.0f);
  g.update(0);
  CHECK(g.scale() == 16.0f);
  // no growth to pinf
  cpd::dynamic_loss_scaling h({std::ldexp(1.0f, 127), 2.0f, 0.5f, 1});
  h.update(0);
  CHECK(h.scale() == std::ldexp(1.0f, 127));
  // unscale: multiply by the inverse in float, report non-finite values
  cpd::dynamic_loss_scaling u({4.0f, 2.0f, 0.5f, 10});
  float grads[] = {8.0f, -2.0f, 1.0f};
  CHECK(u.unscale(grads, 3) == 0);
  CHECK(grads[0] == 2.0f);
  CHECK(grads[1] == -0.5f);
  // combine is max: one worker's overflow skips everyone's step
  CHECK(cpd::dynamic_loss_scaling::combine(0, 1) == 1);
  CHECK_THROWS_AS(cpd::dynamic_loss_scaling({1.0f, 1.0f, 0.5f, 1}), std::invalid_argument);
}

TEST_CASE("fixed scaling") {
  cpd::fixed_scaling none;
  cpd::fixed_scaling f(cpd::pow2_scale{5});
  const float g[] = {1e30f};
  CHECK(none.select(none.statistic(g, 1)).exponent == 0);
  CHECK(f.select(f.statistic(g, 1)).exponent == 5);
  CHECK(cpd::pow2_scale{5}.factor() == 32.0);
  CHECK(cpd::pow2_scale{-3}.factor() == 0.125);
  CHECK(cpd::pow2_scale{200}.inverse() == std::ldexp(1.0, -200));
}

TEST_CASE("MS-AMP's amax / sqrt(W) scaling") {
  using F = cpd::float8_e4m3fn;
  const float g[] = {0.5f, -3.0f, 1e-4f};
  cpd::amax_sqrtw_scaling<F> s(4);
  CHECK(s.statistic(g, 3) == 3.0f);
  CHECK(cpd::amax_sqrtw_scaling<F>::combine(3.0f, 7.0f) == 7.0f);
  // 448 / sqrt(4) / 7 = 32, in float
  const cpd::float_scale sc = s.select(7.0f);
  CHECK(sc.value == 32.0f);
  CHECK(sc.inverse == 1.0f / 32.0f);
  CHECK_FALSE(sc.nonfinite);
  // W = 3: max / sqrt(3) rounded to float once, then divided by the amax in float
  cpd::amax_sqrtw_scaling<F> s3(3);
  const float target = static_cast<float>(448.0 / std::sqrt(3.0));
  CHECK(s3.select(5.0f).value == target / 5.0f);
  // a power of two at or below it
  cpd::amax_sqrtw_scaling<F> p(3, {0, true});
  CHECK(p.select(5.0f).value == 32.0f);  // 448 / 1.732 / 5 = 51.7 -> 32
  CHECK(cpd::amax_sqrtw_scaling<F>(3, {1, false}).select(5.0f).value == target / 5.0f / 2.0f);
  // zero: 1; inf and NaN: 1, marked
  CHECK(s.select(0.0f).value == 1.0f);
  CHECK(s.select(pinf).nonfinite);
  CHECK(s.select(s.combine(1.0f, qnan)).nonfinite);
  CHECK_THROWS_AS(cpd::amax_sqrtw_scaling<F>(0), std::invalid_argument);
  // the exchange: W scaled values summed in F; the largest scaled value is max / sqrt(W)
  std::vector<float> a(64), b(64), out(64);
  for (std::size_t i = 0; i < 64; ++i) {
    a[i] = 0.01f * static_cast<float>(i) - 0.3f;
    b[i] = -0.002f * static_cast<float>(i);
  }
  const float* x[] = {a.data(), b.data()};
  float amax = 0.0f;
  for (std::size_t i = 0; i < 64; ++i) amax = std::max({amax, std::fabs(a[i]), std::fabs(b[i])});
  const auto r = cpd::simulate_allreduce<F>(x, out.data(), 64, 2, cpd::amax_sqrtw_scaling<F>(2));
  CHECK(r.scale.value == static_cast<float>(448.0 / std::sqrt(2.0)) / amax);
  CHECK(r.nonfinite_out == 0);
}

TEST_CASE("PyTorch's pre-division by W") {
  cpd::predivide_scaling s(3);
  const float g[] = {1.0f, 2.0f};
  const float bad[] = {1.0f, qnan};
  const cpd::float_scale sc = s.select(s.statistic(g, 2));
  CHECK(sc.value == 1.0f / 3.0f);
  CHECK(sc.inverse == 3.0f);
  CHECK_FALSE(sc.nonfinite);
  CHECK(s.select(cpd::predivide_scaling::combine(0, s.statistic(bad, 2))).nonfinite);
  CHECK_THROWS_AS(cpd::predivide_scaling(0), std::invalid_argument);
  // the exchange's mean is the sum of Q(g / W) (fp16_compress_hook's result): checked
  // against the values rounded here through the scalar core
  using F = cpd::float16;
  std::vector<float> a = {1.0f, 70000.0f, 1e-7f, -3.3f}, b = {2.0f, 70000.0f, 0.0f, 1.1f}, c = {0.5f, 1.0f, 0.0f, 2.2f};
  std::vector<float> out(4);
  const float* x[] = {a.data(), b.data(), c.data()};
  cpd::allreduce_options opt;
  opt.algorithm = cpd::allreduce_algorithm::sequential;
  opt.mean = true;
  cpd::simulate_allreduce<F>(x, out.data(), 4, 3, cpd::predivide_scaling(3), opt);
  const float third = 1.0f / 3.0f;
  for (std::size_t i = 0; i < 4; ++i) {
    float sum = cpd::quantize<F, cpd::rounding::nearest_even>(a[i] * third);
    sum = cpd::quantize<F, cpd::rounding::nearest_even>(sum + cpd::quantize<F, cpd::rounding::nearest_even>(b[i] * third));
    sum = cpd::quantize<F, cpd::rounding::nearest_even>(sum + cpd::quantize<F, cpd::rounding::nearest_even>(c[i] * third));
    CHECK(bits_of(out[i]) == bits_of(sum * 3.0f / 3.0f));
  }
  CHECK(std::isfinite(out[1]));  // 70000 / 3 fits fp16 where 70000 does not
}

namespace {

// floor(log2(v)) by a loop over powers of two (shares nothing with the library).
int floor_log2_ref(double v) {
  int k = 0;
  double p = 1.0;
  while (p > v) p /= 2, --k;
  while (p * 2 <= v) p *= 2, ++k;
  return k;
}

}  // namespace

TEST_CASE("MX block scaling of an exchange: the blocks' codes") {
  using F = cpd::float8_e4m3;  // IEEE-like: emax 7, max 240
  cpd::mx_block_scaling<F> s(4, {4, cpd::mx_scale_rule::floor, true});
  CHECK(s.blocks(0) == 0);
  CHECK(s.blocks(9) == 3);
  //                 amax 1: bound 4       all zero                 inf        amax 3 (partial)
  const float g[] = {0.5f, -1.0f, 0.25f, 0.0f, 0.0f, -0.0f, 0.0f, 0.0f, 1.0f, pinf, 2.0f, 0.0f, -3.0f};
  std::uint8_t c[4] = {};
  s.statistics(g, 13, c);
  CHECK(c[0] == 127 + (2 - 7));  // floor(log2(4)) - emax
  CHECK(c[1] == 0);              // all zero: 2^-127
  CHECK(c[2] == 0xFF);           // inf: NaN scale
  CHECK(c[3] == 127 + (floor_log2_ref(12.0) - 7));
  CHECK(s.select(c[0]).exponent == 5);  // 4 * 2^5 = 128 <= 240
  CHECK_FALSE(s.select(c[0]).nonfinite);
  CHECK(s.select(0xFF).exponent == 0);
  CHECK(s.select(0xFF).nonfinite);
  // combine: the larger code, block by block (0 is the identity)
  std::uint8_t acc[4] = {0, 0, 0, 0};
  const std::uint8_t other[4] = {120, 0, 0xFF, 3};
  cpd::mx_block_scaling<F>::combine(acc, c, 4);
  cpd::mx_block_scaling<F>::combine(acc, other, 4);
  CHECK(acc[0] == std::max<int>(c[0], 120));
  CHECK(acc[2] == 0xFF);
  CHECK(acc[3] == std::max<int>(c[3], 3));
  // no headroom: the cast's rule (bound = amax); rceil: the smallest e with max * 2^e >= bound
  cpd::mx_block_scaling<F> cast(4, {4, cpd::mx_scale_rule::floor, false});
  cast.statistics(g, 4, c);
  CHECK(c[0] == 127 - 7);
  cpd::mx_block_scaling<F> r(3, {2, cpd::mx_scale_rule::rceil, true});
  const float h[] = {80.0f, 1.0f, 80.5f, 0.0f};  // bounds 240 (= max) and 241.5
  r.statistics(h, 4, c);
  CHECK(c[0] == 127);
  CHECK(c[1] == 128);
  // bad options
  CHECK_THROWS_AS(cpd::mx_block_scaling<F>(0), std::invalid_argument);
  CHECK_THROWS_AS(cpd::mx_block_scaling<F>(2, {0, cpd::mx_scale_rule::floor, true}), std::invalid_argument);
  CHECK_THROWS_AS(cpd::mx_block_scaling<F>(2, {32, static_cast<cpd::mx_scale_rule>(7), true}), std::invalid_argument);
}

TEST_CASE("MX block scaling of an exchange: the ring's sums against a reference written here") {
  using F = cpd::float8_e4m3;
  const int W = 3;
  const std::size_t n = 100, k = 32;  // 4 blocks, the last of 4 values; the ring's 3 chunks cut across them
  std::mt19937 rng(7);
  std::vector<std::vector<float>> g(W, std::vector<float>(n));
  for (int r = 0; r < W; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      // each block its own magnitude (2^-20 .. 2^10): one scale per tensor could not serve them all
      const int mag = static_cast<int>(i / k) * 10 - 20;
      g[r][i] = std::ldexp(std::uniform_real_distribution<float>(-1.0f, 1.0f)(rng), mag);
    }
  const float* x[] = {g[0].data(), g[1].data(), g[2].data()};
  const auto q = [](float v) { return cpd::quantize<F, cpd::rounding::nearest_even>(v); };
  for (auto alg : {cpd::allreduce_algorithm::ring, cpd::allreduce_algorithm::sequential}) {
    CAPTURE(cpd::to_string(alg));
    cpd::allreduce_options opt;
    opt.algorithm = alg;
    opt.mean = true;
    opt.diagnostics = true;
    std::vector<float> out(n);
    const auto res = cpd::simulate_block_scaled_allreduce<F>(x, out.data(), n, W, cpd::mx_block_scaling<F>(W), opt);
    CHECK_FALSE(res.nonfinite);
    CHECK(res.nonfinite_out == 0);
    CHECK(res.scaled.count == W * n);
    CHECK(res.scaled.underflow < res.unscaled.underflow);  // the small blocks no longer flush
    REQUIRE(res.codes.size() == 4);
    for (std::size_t i = 0; i < n; ++i) {
      CAPTURE(i);
      const std::size_t b = i / k;
      double amax = 0;
      for (std::size_t j = b * k; j < std::min(n, b * k + k); ++j)
        for (int r = 0; r < W; ++r) amax = std::max(amax, std::fabs(double(g[r][j])));
      const int e = floor_log2_ref(amax * W) - 7;  // OCP's floor rule on the bound W * amax
      CHECK(res.codes[b] == 127 + e);
      // the ring's chunk c = the part of i in an even split (the first n % W parts one longer)
      std::size_t c = 0;
      if (alg == cpd::allreduce_algorithm::ring) {
        std::size_t begin = 0;
        while (begin + n / W + (c < n % W ? 1 : 0) <= i) begin += n / W + (c < n % W ? 1 : 0), ++c;
      }
      const auto y = [&](std::size_t r) { return q(static_cast<float>(std::ldexp(double(g[r][i]), -e))); };
      float sum = y(c);
      for (int j = 1; j < W; ++j) sum = q(sum + y((c + static_cast<std::size_t>(j)) % W));  // exact in float, rounded once
      const float expect = static_cast<float>(std::ldexp(double(sum), e)) / static_cast<float>(W);
      CHECK(bits_of(out[i]) == bits_of(expect));
    }
  }
}

TEST_CASE("MX block scaling of an exchange: inf and NaN, and bad input") {
  using F = cpd::float8_e5m2;
  std::vector<float> a(64, 1.0f), b(64, -0.5f);
  b[40] = qnan;
  const float* x[] = {a.data(), b.data()};
  std::vector<float> out(64);
  cpd::allreduce_options opt;
  const auto res = cpd::simulate_block_scaled_allreduce<F>(x, out.data(), 64, 2, cpd::mx_block_scaling<F>(2), opt);
  CHECK(res.nonfinite);
  CHECK(res.codes[0] != 0xFF);
  CHECK(res.codes[1] == 0xFF);
  CHECK(res.nonfinite_out == 1);
  CHECK(std::isnan(out[40]));
  CHECK(out[0] == 0.5f);   // 1 - 0.5, scaled and back
  CHECK(out[63] == 0.5f);  // the NaN block's other values at scale 1
  // bad input
  std::vector<float> res0(64, 0.0f);
  float* r[] = {res0.data(), res0.data()};
  cpd::allreduce_options fb;
  fb.residuals = r;
  CHECK_THROWS_AS(cpd::simulate_block_scaled_allreduce<F>(x, out.data(), 64, 2, cpd::mx_block_scaling<F>(2), fb),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::simulate_block_scaled_allreduce<F>(x, out.data(), 64, 2, cpd::mx_block_scaling<F>(3), opt),
                  std::invalid_argument);
  const float* none[] = {a.data(), nullptr};
  CHECK_THROWS_AS(cpd::simulate_block_scaled_allreduce<F>(none, out.data(), 64, 2, cpd::mx_block_scaling<F>(2), opt),
                  std::invalid_argument);
}

namespace {

// measure_quantization (bisections and a vector loop, nothing written) against the
// statistics of the bulk call, which come from the rounding core's events per value.
template <class F, cpd::rounding R, cpd::overflow O>
void check_measure_vs_bulk(const std::vector<float>& x) {
  CAPTURE(cpd::format::of<F>().name());
  CAPTURE(cpd::to_string(R));
  CAPTURE(cpd::to_string(O));
  // scales within float's reach and beyond it (|k| > 600: the double path), through the
  // bulk call's scale_exponent, which rounds x * 2^k exactly
  for (int k : {0, 7, -20, 131, -150, 280, -600, 700}) {
    CAPTURE(k);
    cpd::value_stats bulk;
    cpd::bulk_options o;
    o.stats = &bulk;
    o.scale_exponent = k;
    std::vector<float> out(x.size());
    cpd::quantize<F, R, O>(x.data(), out.data(), x.size(), o);
    const cpd::value_stats m = cpd::measure_quantization<F, R, O>(x.data(), x.size(), cpd::pow2_scale{k});
    CHECK(m.count == bulk.count);
    CHECK(m.zeros == bulk.zeros);
    CHECK(m.underflow == bulk.underflow);
    CHECK(m.overflow == bulk.overflow);
    CHECK(m.nan == bulk.nan);
    CHECK(m.saturated == bulk.saturated);
    CHECK(m.nan_inputs == bulk.nan_inputs);
    CHECK(m.inf_inputs == bulk.inf_inputs);
  }
}

template <class F>
void check_measure_vs_bulk_modes(const std::vector<float>& x) {
  using cpd::overflow;
  using cpd::rounding;
  check_measure_vs_bulk<F, rounding::nearest_even, overflow::infinity>(x);
  check_measure_vs_bulk<F, rounding::nearest_even, overflow::saturate>(x);
  check_measure_vs_bulk<F, rounding::toward_zero, overflow::infinity>(x);
  check_measure_vs_bulk<F, rounding::upward, overflow::infinity>(x);
  check_measure_vs_bulk<F, rounding::downward, overflow::saturate>(x);
  check_measure_vs_bulk<F, rounding::nearest_away, overflow::infinity>(x);
  check_measure_vs_bulk<F, rounding::odd, overflow::infinity>(x);
}

}  // namespace

TEST_CASE("diagnostics count what the bulk call's statistics count, for every encoding") {
  // Every binade of float with random significands and both signs, the boundaries of
  // each format and their neighbours, zeros, infinities and NaNs.
  std::mt19937 gen(7);
  std::vector<float> x;
  for (int e = -150; e <= 128; ++e)
    for (int k = 0; k < 6; ++k) {
      const float v = std::ldexp(std::uniform_real_distribution<float>(1.0f, 2.0f)(gen), e);
      x.push_back(k % 2 ? -v : v);
    }
  const float specials[] = {0.0f, -0.0f, pinf, -pinf, qnan, -qnan, 448.0f, 464.0f, 465.0f, 480.0f, 57344.0f,
                            61440.0f, 65504.0f, 65520.0f, 6.0f, 7.0f, 7.5f, 0x1p-9f, 0x1p-10f, 0x1.8p-10f,
                            0x1p-17f, 0x1.000002p-17f, 0x1p-25f, std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min()};
  for (float v : specials) {
    x.push_back(v);
    x.push_back(-v);
  }
  check_measure_vs_bulk_modes<cpd::float8_e4m3fn>(x);
  check_measure_vs_bulk_modes<cpd::float8_e5m2>(x);
  check_measure_vs_bulk_modes<cpd::float8_e4m3fnuz>(x);
  check_measure_vs_bulk_modes<cpd::float16>(x);
  check_measure_vs_bulk_modes<cpd::bfloat16>(x);
  check_measure_vs_bulk_modes<cpd::float4_e2m1fn>(x);
  check_measure_vs_bulk_modes<cpd::float6_e3m2fn>(x);
  check_measure_vs_bulk_modes<cpd::float_t<3, 0, cpd::fn>>(x);
  check_measure_vs_bulk_modes<cpd::float8_e8m0fnu>(x);
}

TEST_CASE("diagnostics: underflow, saturated, overflow, before and after scaling") {
  using F = cpd::float8_e5m2;  // max 57344, min subnormal 2^-16
  const float x[] = {0.0f, 1e-9f, 1.0f, 1e5f, pinf, qnan, -1e-9f};
  auto s = cpd::measure_quantization<F>(x, 7);
  CHECK(s.count == 7);
  CHECK(s.zeros == 1);
  CHECK(s.underflow == 2);
  CHECK(s.overflow == 1);  // 1e5 -> pinf
  CHECK(s.saturated == 0);
  CHECK(s.nonfinite_inputs() == 2);
  auto sat = cpd::measure_quantization<F, cpd::rounding::nearest_even, cpd::overflow::saturate>(x, 7);
  CHECK(sat.saturated == 2);  // 1e5 (overflowed) and +inf (an infinite input) -> max
  CHECK(sat.overflow == 1);    // 1e5 -> max, not inf
  CHECK(sat.nan == 0);
  // with a scale of 2^20, 1e-9 survives and 1.0 and 1e5 overflow
  auto sc = cpd::measure_quantization<F>(x, 7, cpd::pow2_scale{20});
  CHECK(sc.underflow == 0);
  CHECK(sc.overflow == 2);
  CHECK(sc.saturated == 0);
  CHECK(sc.underflow_fraction() == 0.0);
  CHECK(sc.overflow_fraction() == doctest::Approx(2.0 / 7.0));
  auto fs = cpd::measure_quantization<F>(x, 7, cpd::float_scale::of(1.0f));
  CHECK(fs.underflow == 2);
}

TEST_CASE("rotation around the exchange: small integers sum exactly in the rotated domain and come back") {
  using F = cpd::float_t<8, 23>;  // float32 itself: only the rotation could change a value
  const int W = 3;
  const std::size_t n = 64 + 5;  // four blocks of 16 and a tail that passes unrotated
  std::vector<std::vector<float>> g(W, std::vector<float>(n));
  std::vector<float> sum(n, 0.0f);
  for (int r = 0; r < W; ++r)
    for (std::size_t i = 0; i < n; ++i) {
      g[r][i] = static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(r) * 13) % 41) - 20);
      sum[i] += g[r][i];
    }
  const float* x[] = {g[0].data(), g[1].data(), g[2].data()};
  for (auto alg : {cpd::allreduce_algorithm::ring, cpd::allreduce_algorithm::two_step}) {
    cpd::allreduce_options opt;
    opt.algorithm = alg;
    opt.rotation = {16, {5, 9}, false};  // b = 16: H / 4 of integers gives quarters, exact in float
    std::vector<float> out(n);
    const auto res = cpd::simulate_allreduce<F>(x, out.data(), n, W, opt);
    CHECK(res.nonfinite_out == 0);
    CHECK(out == sum);
  }
}

TEST_CASE("rotation around the exchange: the exchange of the rotated values, rotated back, for every rule") {
  using F = cpd::float4_e2m1fn;
  const int W = 4;
  const std::size_t n = 16 * 40 + 3;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<float>> g(W, std::vector<float>(n)), rotated(W, std::vector<float>(n));
  for (auto& v : g)
    for (float& y : v) y = normal(rng) * std::exp(normal(rng));  // heavy tails (N e^N)
  cpd::hadamard_options rot{32, {1, 2}, false}, back = rot;
  back.inverse = true;
  for (int r = 0; r < W; ++r) cpd::hadamard_rotate(g[r].data(), rotated[r].data(), n, rot);
  const float* x[] = {g[0].data(), g[1].data(), g[2].data(), g[3].data()};
  const float* y[] = {rotated[0].data(), rotated[1].data(), rotated[2].data(), rotated[3].data()};
  cpd::allreduce_options plain;
  plain.mean = true;
  cpd::allreduce_options opt = plain;
  opt.rotation = rot;
  std::vector<float> got(n), expect(n);
  const auto same_bits = [&] {
    std::size_t diff = 0;
    for (std::size_t i = 0; i < n; ++i) diff += bits_of(got[i]) != bits_of(expect[i]);
    return diff;
  };
  // a per-tensor rule (APS), MX-32 and NVFP4: the exchange of y, then the inverse rotation
  cpd::simulate_allreduce<F>(x, got.data(), n, W, cpd::aps<F>(W), opt);
  cpd::simulate_allreduce<F>(y, expect.data(), n, W, cpd::aps<F>(W), plain);
  cpd::hadamard_rotate(expect.data(), expect.data(), n, back);
  CHECK(same_bits() == 0);
  constexpr auto S = cpd::overflow::saturate;
  const auto mx = cpd::simulate_block_scaled_allreduce<F, cpd::rounding::nearest_even, S>(
      x, got.data(), n, W, cpd::mx_block_scaling<F>(W), opt);
  cpd::simulate_block_scaled_allreduce<F, cpd::rounding::nearest_even, S>(y, expect.data(), n, W,
                                                                          cpd::mx_block_scaling<F>(W), plain);
  cpd::hadamard_rotate(expect.data(), expect.data(), n, back);
  CHECK(same_bits() == 0);
  CHECK(mx.nonfinite_out == 0);
  cpd::simulate_block_scaled_allreduce<F, cpd::rounding::nearest_even, S>(x, got.data(), n, W,
                                                                          cpd::nvfp4_block_scaling<F>(W), opt);
  cpd::simulate_block_scaled_allreduce<F, cpd::rounding::nearest_even, S>(y, expect.data(), n, W,
                                                                          cpd::nvfp4_block_scaling<F>(W), plain);
  cpd::hadamard_rotate(expect.data(), expect.data(), n, back);
  CHECK(same_bits() == 0);
  // on heavy tails, MX's power-of-two block scales gain from the rotation (docs/scaling.md)
  std::vector<float> exact(n, 0.0f), unrotated(n);
  for (std::size_t i = 0; i < n; ++i) {
    double s = 0;
    for (int r = 0; r < W; ++r) s += g[r][i];
    exact[i] = static_cast<float>(s / W);
  }
  cpd::simulate_block_scaled_allreduce<F, cpd::rounding::nearest_even, S>(x, unrotated.data(), n, W,
                                                                          cpd::mx_block_scaling<F>(W), plain);
  cpd::simulate_block_scaled_allreduce<F, cpd::rounding::nearest_even, S>(x, got.data(), n, W,
                                                                          cpd::mx_block_scaling<F>(W), opt);
  const auto error = [&](const std::vector<float>& v) {
    double e = 0, norm = 0;
    for (std::size_t i = 0; i < n; ++i) {
      e += (double(v[i]) - exact[i]) * (double(v[i]) - exact[i]);
      norm += double(exact[i]) * exact[i];
    }
    return std::sqrt(e / norm);
  };
  CAPTURE(error(unrotated));
  CAPTURE(error(got));
  CHECK(error(got) < 0.9 * error(unrotated));
}

TEST_CASE("rotation around the exchange: a NaN reaches its own rotation block only; bad rotations are refused") {
  using F = cpd::float8_e4m3fn;
  std::vector<float> a(48, 1.0f), b(48, 0.5f);
  b[20] = qnan;
  const float* x[] = {a.data(), b.data()};
  std::vector<float> out(48);
  cpd::allreduce_options opt;
  opt.rotation.block = 16;
  const auto res = cpd::simulate_allreduce<F>(x, out.data(), 48, 2, cpd::aps<F>(2), opt);
  CHECK(res.scale.nonfinite);
  CHECK(res.nonfinite_out == 16);
  for (std::size_t i = 0; i < 48; ++i) CHECK(std::isnan(out[i]) == (i >= 16 && i < 32));
  CHECK(std::fabs(out[0] - 1.5f) < 0.25f);  // (the rotated sums round in e4m3)
  cpd::allreduce_options bad;
  bad.rotation.block = 12;
  CHECK_THROWS_AS(cpd::simulate_allreduce<F>(x, out.data(), 48, 2, bad), std::invalid_argument);
  bad.rotation = {16, {}, true};
  CHECK_THROWS_AS(cpd::simulate_allreduce<F>(x, out.data(), 48, 2, bad), std::invalid_argument);
  CHECK_THROWS_AS(cpd::simulate_block_scaled_allreduce<F>(x, out.data(), 48, 2, cpd::mx_block_scaling<F>(2), bad),
                  std::invalid_argument);
}
