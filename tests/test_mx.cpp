// SPDX-License-Identifier: MIT
// OCP MX block scaling against the spec's rules, hand-worked blocks and a
// reference written here with frexp.

#include <cpd/host/mx.hpp>
#include <cpd/scaling/mx.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

// floor(log2(a)) and ceil(log2(a)) through frexp: a = f * 2^x, f in [0.5, 1).
int floor_log2_ref(double a) {
  int x;
  std::frexp(a, &x);
  return x - 1;
}
int ceil_log2_ref(double a) {
  int x;
  const double f = std::frexp(a, &x);
  return f == 0.5 ? x - 1 : x;
}

template <class Elem>
int ref_exponent(float amax, cpd::mx_scale_rule rule) {
  const int emax = Elem::spec.emax;
  int e = 0;
  if (rule == cpd::mx_scale_rule::floor) e = floor_log2_ref(amax) - emax;
  if (rule == cpd::mx_scale_rule::ceil) e = ceil_log2_ref(amax) - emax;
  if (rule == cpd::mx_scale_rule::even) {
    // amax = f * 2^x, f in [0.5, 1): f rounded to M + 1 bits, halves up, is 1 from 1 - 2^-(M + 2) on
    int x;
    const double f = std::frexp(static_cast<double>(amax), &x);
    const double r = std::floor(std::ldexp(f, Elem::spec.M + 1) + 0.5);
    e = (r == std::ldexp(1.0, Elem::spec.M + 1) ? x : x - 1) - emax;
  }
  if (rule == cpd::mx_scale_rule::rceil) {
    e = -200;
    while (std::ldexp(Elem::spec.max_value, e) < amax) ++e;  // the smallest e with max * 2^e >= amax
  }
  return std::max(-127, std::min(127, e));
}

}  // namespace

TEST_CASE("mx: element formats have the OCP emax and max") {
  CHECK(cpd::float8_e4m3fn::spec.emax == 8);
  CHECK(cpd::float8_e5m2::spec.emax == 15);
  CHECK(cpd::float6_e3m2fn::spec.emax == 4);
  CHECK(cpd::float6_e2m3fn::spec.emax == 2);
  CHECK(cpd::float4_e2m1fn::spec.emax == 2);
  CHECK(cpd::mx_int8::spec.emax == 0);
  CHECK(cpd::mx_int8::spec.max_value == 127.0 / 64.0);
  CHECK(cpd::float8_e8m0fnu::spec.emax == 127);
  // mx_int8 is the uniform grid k / 64, rounded to nearest even like nearbyint.
  for (int k = -127 * 4; k <= 127 * 4; ++k) {
    const float v = static_cast<float>(k) / 256.0f;
    const float want = static_cast<float>(std::nearbyint(v * 64.0f) / 64.0f);
    REQUIRE(static_cast<float>(cpd::mx_int8(v)) == want);
  }
  CHECK(static_cast<float>(cpd::convert<cpd::mx_int8, cpd::rounding::nearest_even, cpd::overflow::saturate>(5.0f)) ==
        127.0f / 64.0f);
  CHECK(cpd::mx_int8_to_twos(cpd::mx_int8(-0.5f).bits()) == -32);
  CHECK(cpd::mx_int8_from_twos(-32) == cpd::mx_int8(-0.5f).bits());
  CHECK(cpd::mx_int8_from_twos(-128) == cpd::mx_int8_from_twos(-127));
  // MXINT4 and MXINT2: k / 4 for |k| <= 7 and k for |k| <= 1, nearest even like nearbyint, saturating
  CHECK(cpd::mx_int4::spec.emax == 0);
  CHECK(cpd::mx_int4::spec.max_value == 1.75);
  CHECK(cpd::mx_int2::spec.emax == 0);
  CHECK(cpd::mx_int2::spec.max_value == 1.0);
  for (int k = -64; k <= 64; ++k) {
    const float v = static_cast<float>(k) / 16.0f;
    const float w4 = static_cast<float>(std::max(-7.0f, std::min(7.0f, std::nearbyint(v * 4.0f))) / 4.0f);
    const float w2 = std::max(-1.0f, std::min(1.0f, std::nearbyint(v)));
    REQUIRE(static_cast<float>(cpd::convert<cpd::mx_int4, cpd::rounding::nearest_even, cpd::overflow::saturate>(v)) ==
            w4);
    REQUIRE(static_cast<float>(cpd::convert<cpd::mx_int2, cpd::rounding::nearest_even, cpd::overflow::saturate>(v)) ==
            w2);
  }
}

TEST_CASE("mx: hand-worked scales") {
  using E = cpd::float8_e4m3fn;
  // amax 32 = 2^5: floor and ceil give 5 - 8 = -3; rceil: 448 * 2^-3 = 56 >= 32, 28 < 32
  CHECK(cpd::mx_scale_code<E>(32.0f, cpd::mx_scale_rule::floor) == 127 - 3);
  CHECK(cpd::mx_scale_code<E>(32.0f, cpd::mx_scale_rule::ceil) == 127 - 3);
  CHECK(cpd::mx_scale_code<E>(32.0f, cpd::mx_scale_rule::rceil) == 127 - 3);
  // amax 500: floor 8 - 8 = 0 (500 saturates to 448), ceil 9 - 8 = 1, rceil 1 (448 * 2 >= 500)
  CHECK(cpd::mx_scale_code<E>(500.0f, cpd::mx_scale_rule::floor) == 127);
  CHECK(cpd::mx_scale_code<E>(500.0f, cpd::mx_scale_rule::ceil) == 128);
  CHECK(cpd::mx_scale_code<E>(500.0f, cpd::mx_scale_rule::rceil) == 128);
  // amax 400: rceil 0 (fits under 448) while ceil wastes a binade
  CHECK(cpd::mx_scale_code<E>(400.0f, cpd::mx_scale_rule::rceil) == 127);
  CHECK(cpd::mx_scale_code<E>(400.0f, cpd::mx_scale_rule::ceil) == 128);
  // all zeros: the smallest scale, 2^-127; inf/NaN: the NaN scale; clamping
  CHECK(cpd::mx_scale_code<E>(0.0f, cpd::mx_scale_rule::floor) == 0);
  CHECK(cpd::mx_scale_code<E>(std::numeric_limits<float>::infinity(), cpd::mx_scale_rule::floor) == 0xFF);
  CHECK(cpd::mx_scale_code<E>(std::numeric_limits<float>::quiet_NaN(), cpd::mx_scale_rule::ceil) == 0xFF);
  CHECK(cpd::mx_scale_code<E>(1e-40f, cpd::mx_scale_rule::floor) == 0);
  CHECK(cpd::mx_scale_code<cpd::mx_int8>(3.0e38f, cpd::mx_scale_rule::ceil) == 254);  // 128 clamps to 127
  // even rounds amax to M + 1 = 4 significant bits (halves up) before the floor: 31 = 1.9375 * 2^4 is
  // at the half-way point 2 - 2^-4, so it goes to 32 (e = 5 - 8); the float below it stays in 2^4
  CHECK(cpd::mx_scale_code<E>(31.0f, cpd::mx_scale_rule::even) == 127 - 3);
  CHECK(cpd::mx_scale_code<E>(std::nextafter(31.0f, 0.0f), cpd::mx_scale_rule::even) == 127 - 4);
  CHECK(cpd::mx_scale_code<E>(31.0f, cpd::mx_scale_rule::floor) == 127 - 4);
  // torchao's EVEN adds the half to the float32 bits, which overflows to inf (a NaN scale) for
  // amax >= 1.9375 * 2^127; cpd gives the finite block e = 128 - 8
  CHECK(cpd::mx_scale_code<E>(std::numeric_limits<float>::max(), cpd::mx_scale_rule::even) == 127 + 120);
  CHECK(cpd::mx_scale_code<cpd::mx_int8>(std::numeric_limits<float>::max(), cpd::mx_scale_rule::even) == 254);
}

TEST_CASE_TEMPLATE("mx: scales follow the rule formulas; elements are V / 2^e rounded, saturating", Elem,
                   cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::float6_e3m2fn, cpd::float6_e2m3fn, cpd::float4_e2m1fn,
                   cpd::mx_int8, cpd::mx_int4, cpd::mx_int2) {
  std::mt19937 rng(17);
  std::uniform_real_distribution<double> ex(-140.0, 118.0);  // with the +-8 spread: finite floats
  std::uniform_real_distribution<double> m(-1.0, 1.0);
  for (auto rule : {cpd::mx_scale_rule::floor, cpd::mx_scale_rule::ceil, cpd::mx_scale_rule::rceil,
                    cpd::mx_scale_rule::even}) {
    for (std::size_t k : {std::size_t(32), std::size_t(16), std::size_t(7)}) {
      const std::size_t n = 5 * k + 3;  // a partial last block
      std::vector<float> v(n);
      const double base = ex(rng);
      for (auto& x : v) x = static_cast<float>(m(rng) * std::exp2(base + 8 * m(rng)));
      std::vector<std::uint8_t> scales(cpd::mx_scale_count(n, k));
      std::vector<typename Elem::storage_type> codes(n);
      cpd::mx_options opt{k, rule, {}};
      cpd::mx_encode<Elem>(v.data(), n, scales.data(), codes.data(), opt);
      std::vector<float> dec(n), fq(n);
      cpd::mx_decode<Elem>(scales.data(), codes.data(), n, dec.data(), opt);
      cpd::mx_quantize<Elem>(v.data(), fq.data(), n, opt);
      for (std::size_t b = 0; b < scales.size(); ++b) {
        float amax = 0;
        for (std::size_t i = b * k; i < std::min(n, (b + 1) * k); ++i) amax = std::max(amax, std::fabs(v[i]));
        const int e = amax == 0 ? -127 : ref_exponent<Elem>(amax, rule);
        REQUIRE(static_cast<int>(scales[b]) == e + 127);
        for (std::size_t i = b * k; i < std::min(n, (b + 1) * k); ++i) {
          const double scaled = std::ldexp(static_cast<double>(v[i]), -e);
          const Elem want = cpd::convert<Elem, cpd::rounding::nearest_even, cpd::overflow::saturate>(scaled);
          REQUIRE(codes[i] == want.bits());
          REQUIRE(dec[i] == static_cast<float>(std::ldexp(static_cast<double>(want), e)));
          REQUIRE(fq[i] == dec[i]);
        }
      }
    }
  }
}

TEST_CASE("mx: special blocks") {
  using E = cpd::float6_e3m2fn;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {1.0f, 2.0f, nan, 3.0f, 0.0f, 0.0f, -0.0f, 0.0f, 1.0f, 4.0f, 0.5f, 0.25f};
  std::vector<std::uint8_t> s(3);
  std::vector<std::uint8_t> c(v.size());
  cpd::mx_options opt{4, cpd::mx_scale_rule::floor, {}};
  cpd::mx_encode<E>(v.data(), v.size(), s.data(), c.data(), opt);
  CHECK(s[0] == 0xFF);
  CHECK(s[1] == 0);
  CHECK(s[2] == 127 + 2 - 4);  // amax 4 = 2^2, emax(e3m2) = 4
  std::vector<float> d(v.size());
  cpd::mx_decode<E>(s.data(), c.data(), v.size(), d.data(), opt);
  for (int i = 0; i < 4; ++i) CHECK(std::isnan(d[i]));
  for (int i = 4; i < 8; ++i) CHECK(d[i] == 0.0f);
  CHECK(d[8] == 1.0f);
  CHECK(d[9] == 4.0f);
  CHECK(d[11] == 0.25f);
  // in place
  cpd::mx_quantize<E>(v.data(), v.data(), v.size(), opt);
  CHECK(v[9] == 4.0f);
  CHECK_THROWS_AS(cpd::mx_quantize<E>(v.data(), v.data(), v.size(), cpd::mx_options{0, cpd::mx_scale_rule::floor, {}}),
                  std::invalid_argument);
}

TEST_CASE("mx: stochastic rounding of elements is unbiased and keyed by element index") {
  using E = cpd::float4_e2m1fn;
  const std::size_t n = 32 * 2000;
  std::vector<float> v(n), q(n), q2(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (i % 32 == 0) ? 6.0f : 1.25f;  // 1.25: between 1 and 1.5
  cpd::mx_options opt{32, cpd::mx_scale_rule::floor, {9, 1}};
  cpd::mx_quantize<E, cpd::rounding::stochastic>(v.data(), q.data(), n, opt);
  cpd::mx_quantize<E, cpd::rounding::stochastic>(v.data(), q2.data(), n, opt);
  double mean = 0;
  std::size_t cnt = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (i % 32 != 0) {
      REQUIRE((q[i] == 1.0f || q[i] == 1.5f));
      REQUIRE(q[i] == q2[i]);
      mean += q[i];
      ++cnt;
    }
  CHECK(mean / cnt == doctest::Approx(1.25).epsilon(0.01));
}

namespace {

std::vector<cpd::detail::isa> every_isa() {
  std::vector<cpd::detail::isa> v{cpd::detail::isa::baseline};
  if (cpd::detail::cpu_isa() >= cpd::detail::isa::avx2) v.push_back(cpd::detail::isa::avx2);
  if (cpd::detail::cpu_isa() >= cpd::detail::isa::avx512) v.push_back(cpd::detail::isa::avx512);
  return v;
}

std::uint32_t bits32(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

}  // namespace

TEST_CASE_TEMPLATE("mx: the array calls are the definition element by element, on every instruction set", Elem,
                   cpd::float8_e4m3fn, cpd::float4_e2m1fn, cpd::mx_int8) {
  // The chunked calls (host/mx.hpp: a vector scale loop, the bulk kernels, a vector unscale)
  // against the definition: each block's mx_scale_code, each element the double V * 2^-e
  // rounded by cpd::convert, times 2^e. Blocks shorter and longer than a chunk, a partial last
  // block, NaN/inf blocks, subnormals, and blocks spanning 2^130 (where x * 2^-e is inexact
  // in float: rounded from double), in four modes and four rules.
  std::mt19937 gen(9);
  std::lognormal_distribution<float> mag(0.0f, 2.0f);
  for (std::size_t k : {std::size_t(1), std::size_t(17), std::size_t(32), std::size_t(3000)}) {
    const std::size_t n = k == 3000 ? 7001 : 4099;
    std::vector<float> x(n);
    for (float& v : x) v = (gen() & 1 ? -1.0f : 1.0f) * mag(gen);
    for (std::size_t i = 5; i < n; i += 211) x[i] = i % 2 ? 1e-40f : -0.0f;
    for (std::size_t i = 7; i < n; i += 509) x[i] = (i % 3 ? 0x1p100f : -0x1p110f);  // (next to 2^-20 values below)
    for (std::size_t i = 8; i < n; i += 509) x[i] = 0x1p-25f * x[i];
    x[n / 2] = std::numeric_limits<float>::infinity();
    x[n / 3] = std::numeric_limits<float>::quiet_NaN();
    for (cpd::mx_scale_rule rule : {cpd::mx_scale_rule::floor, cpd::mx_scale_rule::ceil, cpd::mx_scale_rule::rceil,
                                    cpd::mx_scale_rule::even}) {
      cpd::mx_options opt;
      opt.block_size = k;
      opt.rule = rule;
      opt.key = {3, 8};
      const auto check = [&](auto mode) {
        constexpr cpd::rounding R = decltype(mode)::value;
        std::vector<std::uint8_t> want_sc(cpd::mx_scale_count(n, k));
        std::vector<std::uint8_t> want_codes(n);
        std::vector<float> want(n);
        for (std::size_t b = 0; b * k < n; ++b) {
          const std::size_t lo = b * k, hi = std::min(n, lo + k);
          float amax = 0.0f;
          for (std::size_t i = lo; i < hi; ++i) amax = std::isnan(x[i]) || std::isnan(amax) ? NAN : std::max(amax, std::fabs(x[i]));
          const std::uint8_t sc = cpd::mx_scale_code<Elem>(amax, rule);
          want_sc[b] = sc;
          for (std::size_t i = lo; i < hi; ++i) {
            if (sc == cpd::mx_nan_scale) {
              want_codes[i] = 0;
              want[i] = std::numeric_limits<float>::quiet_NaN();
              continue;
            }
            const std::uint32_t rnd = R == cpd::rounding::stochastic ? opt.key.bits(0, i) : 0u;
            const Elem q = cpd::convert<Elem, R, cpd::overflow::saturate>(
                static_cast<double>(x[i]) * std::ldexp(1.0, 127 - sc), rnd);
            want_codes[i] = q.bits();
            want[i] = static_cast<float>(static_cast<double>(q) * std::ldexp(1.0, sc - 127));
          }
        }
        for (cpd::detail::isa where : every_isa()) {
          cpd::detail::set_isa_override(where);
          std::vector<std::uint8_t> sc(want_sc.size());
          std::vector<typename Elem::storage_type> codes(n);
          std::vector<float> q(n), dec(n), inplace = x;
          cpd::mx_encode<Elem, R>(x.data(), n, sc.data(), codes.data(), opt);
          cpd::mx_quantize<Elem, R>(x.data(), q.data(), n, opt);
          cpd::mx_quantize<Elem, R>(inplace.data(), inplace.data(), n, opt);
          cpd::mx_decode<Elem>(sc.data(), codes.data(), n, dec.data(), opt);
          cpd::detail::set_isa_override(-1);
          CAPTURE(std::string(cpd::detail::to_string(where)));
          CAPTURE(k);
          CAPTURE(std::string(cpd::to_string(rule)));
          CAPTURE(std::string(cpd::to_string(R)));
          CHECK(sc == want_sc);
          std::size_t wrong = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const bool ok = codes[i] == want_codes[i] &&
                            (std::isnan(want[i]) ? bits32(q[i]) == 0x7FC00000u && bits32(inplace[i]) == 0x7FC00000u
                                                 : bits32(q[i]) == bits32(want[i]) && bits32(inplace[i]) == bits32(want[i]) &&
                                                       bits32(dec[i]) == bits32(want[i]));
            if (!ok && wrong++ < 4) {
              CAPTURE(i);
              CAPTURE(x[i]);
              CHECK(int(codes[i]) == int(want_codes[i]));
              CHECK(q[i] == want[i]);
            }
          }
          CHECK(wrong == 0);
        }
      };
      check(std::integral_constant<cpd::rounding, cpd::rounding::nearest_even>{});
      check(std::integral_constant<cpd::rounding, cpd::rounding::stochastic>{});
      check(std::integral_constant<cpd::rounding, cpd::rounding::upward>{});
      check(std::integral_constant<cpd::rounding, cpd::rounding::odd>{});
    }
  }
}
