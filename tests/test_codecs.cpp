// SPDX-License-Identifier: MIT
// Gradient codecs (cpd/exchange/codec.hpp): the bounds of each codec's paper, exact payload
// sizes, stable round trips, statistics of QSGD, error feedback of 1-bit SGD and
// the reproducibility of the simulated exchange.

#include <cpd/exchange/codec.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

std::vector<float> normal_values(std::size_t n, std::uint32_t seed, float sigma = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

/// Magnitudes spread over 10 decades with random signs, some exact zeros.
std::vector<float> wide_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<double> e(-9.0, 0.0);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double m = std::pow(10.0, e(g));
    v[i] = (g() % 17 == 0) ? 0.0f : static_cast<float>((g() & 1) ? m : -m);
  }
  return v;
}

std::vector<std::uint8_t> encode(const cpd::codec& c, const std::vector<float>& x, cpd::random_stream k = {}) {
  std::vector<std::uint8_t> p(c.payload_size(x.size()));
  c.encode(x.data(), x.size(), p.data(), k);
  return p;
}

std::vector<float> decode(const cpd::codec& c, const std::vector<std::uint8_t>& p, std::size_t n) {
  std::vector<float> y(n);
  c.decode(p.data(), n, y.data());
  return y;
}

/// The largest magnitude of x[lo, hi).
float amax(const std::vector<float>& x, std::size_t lo, std::size_t hi) {
  float m = 0.0f;
  for (std::size_t i = lo; i < hi; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

}  // namespace

TEST_CASE("dynamic tree: the value set is Dettmers' construction (bitsandbytes' create_dynamic_map)") {
  // For i = 0..6: 2^i values 10^(i-6) * the midpoints of linspace(0.1, 1, 2^i + 1), both signs; plus 0 and 1.
  std::vector<double> expected = {0.0, 1.0};
  for (int i = 0; i <= 6; ++i) {
    const int items = 1 << i;
    for (int j = 0; j < items; ++j) {
      const double lo = 0.1 + 0.9 * j / items, hi = 0.1 + 0.9 * (j + 1) / items;
      const double v = std::pow(10.0, i - 6) * (lo + hi) / 2;
      expected.push_back(v);
      expected.push_back(-v);
    }
  }
  std::sort(expected.begin(), expected.end());
  REQUIRE(expected.size() == 256);
  const cpd::dynamic_tree_codec c;
  std::vector<float> got;
  for (unsigned code = 0; code < 256; ++code) {
    std::vector<std::uint8_t> p(4 + 1);
    cpd::detail::store_f32(p.data(), 1.0f);
    p[4] = static_cast<std::uint8_t>(code);
    float y = 0;
    c.decode(p.data(), 1, &y);
    got.push_back(y);
  }
  std::sort(got.begin(), got.end());
  for (std::size_t i = 0; i < 256; ++i) CHECK(got[i] == static_cast<float>(expected[i]));
  // The layout: sign, k zeros, the indicator, 6 - k fraction bits.
  std::vector<std::uint8_t> p = {0, 0, 0x80, 0x3F, 0x40};  // scale 1.0; 0b01000000: k = 0, f = 0
  float y = 0;
  c.decode(p.data(), 1, &y);
  CHECK(y == static_cast<float>(0.1 + 0.9 / 128));
  p[4] = 0x81;  // sign, k = 6: one value, 0.55e-6
  c.decode(p.data(), 1, &y);
  CHECK(y == static_cast<float>(-0.55e-6));
}

TEST_CASE("dynamic tree: nearest value, within half a bin of the value's decade") {
  const std::size_t n = 4099;
  const std::vector<float> x = wide_values(n, 7);
  for (std::size_t block : {std::size_t(0), std::size_t(256), std::size_t(1000)}) {
    CAPTURE(block);
    const cpd::dynamic_tree_codec c(block);
    const std::vector<float> y = decode(c, encode(c, x), n);
    const std::size_t len = block == 0 ? n : block;
    for (std::size_t lo = 0; lo < n; lo += len) {
      const std::size_t hi = std::min(n, lo + len);
      const double m = amax(x, lo, hi);
      // All 256 values of this block, for the nearest-value check: the scale is the first
      // element of largest magnitude, with its sign, so 1.0 (code 0x80) has that sign only.
      double sm = 0;
      for (std::size_t i = lo; i < hi && sm == 0; ++i)
        if (std::fabs(x[i]) == m) sm = x[i];
      std::vector<double> cand;
      for (unsigned code = 0; code < 256; ++code)
        cand.push_back(cpd::detail::dynamic_tree_magnitude(code) * ((code & 0x80) && (code & 0x7F) ? -sm : sm));
      for (std::size_t i = lo; i < hi; ++i) {
        const double a = std::fabs(static_cast<double>(x[i])) / m, err = std::fabs(double(y[i]) - double(x[i]));
        double bound = 1e-7 * m;  // below the last decade: 0
        for (int k = 0; k <= 6; ++k)
          if (a > std::pow(10.0, -(k + 1))) {
            bound = 0.45 * std::pow(10.0, -k) / std::ldexp(1.0, 6 - k) * m;
            break;
          }
        CAPTURE(x[i]);
        CHECK(err <= bound * (1 + 1e-6) + 1e-30);
        CHECK(std::signbit(y[i]) == (y[i] != 0 && std::signbit(x[i])));
        double best = INFINITY;
        for (double v : cand) best = std::min(best, std::fabs(double(x[i]) - v));
        CHECK(err <= best + std::fabs(double(y[i])) * 0x1p-23 + 1e-30);  // + the float rounding of value * scale
      }
    }
  }
}

TEST_CASE("linear 8-bit: |error| <= scale / 2 / 127, the max-abs value exact") {
  const std::size_t n = 3001;
  std::vector<float> x = normal_values(n, 3, 0.01f);
  x[17] = -0.5f;  // a negative maximum
  for (std::size_t block : {std::size_t(0), std::size_t(64), std::size_t(500)}) {
    CAPTURE(block);
    const cpd::linear8_codec c(block);
    const std::vector<std::uint8_t> p = encode(c, x);
    const std::vector<float> y = decode(c, p, n);
    const std::size_t len = block == 0 ? n : block;
    for (std::size_t lo = 0; lo < n; lo += len) {
      const std::size_t hi = std::min(n, lo + len);
      const double m = amax(x, lo, hi);
      for (std::size_t i = lo; i < hi; ++i) {
        CHECK(std::fabs(double(y[i]) - double(x[i])) <= m / 2 / 127 * (1 + 1e-6));
        if (std::fabs(x[i]) == m) CHECK(y[i] == x[i]);
      }
    }
    for (std::size_t i = 0; i < n; ++i) CHECK(p[4 * cpd::detail::block_count(n, block) + i] != 0x80);  // -128 unused
  }
}

TEST_CASE("payload sizes are exact") {
  for (std::size_t n : {0u, 1u, 7u, 8u, 511u, 512u, 513u, 2048u, 5000u}) {
    CAPTURE(n);
    const std::size_t b512 = (n + 511) / 512, one = n ? 1 : 0;
    CHECK(cpd::dynamic_tree_codec().payload_size(n) == 4 * one + n);
    CHECK(cpd::dynamic_tree_codec(512).payload_size(n) == 4 * b512 + n);
    CHECK(cpd::linear8_codec(512).payload_size(n) == 4 * b512 + n);
    CHECK(cpd::qsgd_codec(2, 512).payload_size(n) == 4 * b512 + (2 * n + 7) / 8);
    CHECK(cpd::qsgd_codec(4, 512).payload_size(n) == 4 * b512 + (4 * n + 7) / 8);
    CHECK(cpd::qsgd_codec(8, 512).payload_size(n) == 4 * b512 + n);
    CHECK(cpd::onebit_codec(512).payload_size(n) == 8 * b512 + (n + 7) / 8);
    CHECK(cpd::float_codec<cpd::float8_e4m3fn>().payload_size(n) == 4 + n);
    CHECK(cpd::float_codec<cpd::float4_e2m1fn>().payload_size(n) == 4 + (n + 1) / 2);
    CHECK(cpd::float_codec<cpd::float6_e3m2fn>().payload_size(n) == 4 + (6 * n + 7) / 8);
    CHECK(cpd::float_codec<cpd::bfloat16>().payload_size(n) == 4 + 2 * n);
    CHECK(cpd::int_codec(8).payload_size(n) == 4 * one + n);
    CHECK(cpd::int_codec(4, 512).payload_size(n) == 4 * b512 + (4 * n + 7) / 8);
    CHECK(cpd::int_codec(2, 512).payload_size(n) == 4 * b512 + (2 * n + 7) / 8);
  }
  CHECK(cpd::int_codec(4, 32).bits_per_value(32 * 100) == doctest::Approx(5.0));
  CHECK(cpd::qsgd_codec(4, 512).bits_per_value(512 * 100) == doctest::Approx(4.0625));
  CHECK(cpd::onebit_codec(512).bits_per_value(512 * 100) == doctest::Approx(1.125));
  CHECK(cpd::dynamic_tree_codec(2048).bits_per_value(2048 * 3) == doctest::Approx(8.015625));
}

TEST_CASE("deterministic codecs: encoding the decoded values gives the same payload") {
  const std::size_t n = 2500;
  std::vector<float> x = wide_values(n, 11);
  x[100] = -2.0f;  // a negative maximum: its code is 0x80 (1.0) under a negative scale
  std::vector<std::unique_ptr<cpd::codec>> cs;
  for (const char* s : {"dyntree8", "dyntree8:256", "linear8", "linear8:300", "onebit", "onebit:100", "fp:e4m3fn",
                        "fp:e2m1fn", "fp:e3m2fn", "fp:bf16", "posit:8", "posit:16:1"})
    cs.push_back(cpd::make_codec(s));
  for (const auto& c : cs) {
    CAPTURE(c->name());
    REQUIRE(!c->stochastic());
    const std::vector<std::uint8_t> p = encode(*c, x);
    const std::vector<float> y = decode(*c, p, n);
    const std::vector<std::uint8_t> p2 = encode(*c, y);
    CHECK(p2 == p);
    CHECK(decode(*c, p2, n) == y);
  }
}

TEST_CASE("QSGD: unbiased, with the variance of its definition and within min(d/s^2, sqrt(d)/s) ||v||^2") {
  const std::size_t d = 512, n = 2 * d + 100;  // two full buckets and a short one
  const std::vector<float> v = normal_values(n, 5);
  const int trials = 1500;
  for (int bits : {2, 4, 8}) {
    CAPTURE(bits);
    const cpd::qsgd_codec c(bits, d);
    const double s = c.levels();
    REQUIRE(s == (1 << (bits - 1)) - 1);
    std::vector<double> sum(n, 0.0);
    std::vector<double> sq_err(3, 0.0);
    for (int t = 0; t < trials; ++t) {
      const std::vector<float> q = decode(c, encode(c, v, {99, static_cast<std::uint64_t>(t)}), n);
      for (std::size_t i = 0; i < n; ++i) {
        sum[i] += q[i];
        sq_err[i / d] += (double(q[i]) - v[i]) * (double(q[i]) - v[i]);
      }
    }
    for (std::size_t b = 0; b < 3; ++b) {
      const std::size_t lo = b * d, hi = std::min(n, lo + d), len = hi - lo;
      double norm2 = 0;
      for (std::size_t i = lo; i < hi; ++i) norm2 += double(v[i]) * v[i];
      const double norm = static_cast<float>(std::sqrt(norm2));
      double expected_var = 0;  // sum over the bucket of (norm/s)^2 p (1 - p), p = frac(|v_i| s / norm)
      for (std::size_t i = lo; i < hi; ++i) {
        const double r = std::fabs(v[i]) * s / norm, p = r - std::floor(r);
        const double var_i = (norm / s) * (norm / s) * p * (1 - p);
        expected_var += var_i;
        const double mean = sum[i] / trials;
        CHECK(std::fabs(mean - v[i]) <= 5.5 * std::sqrt(var_i / trials) + 1e-6 * norm);
      }
      const double measured = sq_err[b] / trials;
      CHECK(measured == doctest::Approx(expected_var).epsilon(0.1));
      const double ld = static_cast<double>(len);
      CHECK(measured <= std::min(ld / (s * s), std::sqrt(ld) / s) * norm2);
    }
  }
}

TEST_CASE("QSGD: levels, signs and norm as in the payload; same seed same payload") {
  const std::size_t n = 1000;
  const std::vector<float> v = normal_values(n, 9);
  const cpd::qsgd_codec c(4, 256);
  const std::vector<std::uint8_t> p = encode(c, v, {1, 2});
  CHECK(encode(c, v, {1, 2}) == p);
  CHECK(encode(c, v, {1, 3}) != p);
  CHECK(encode(c, v, {2, 2}) != p);
  const std::vector<float> q = decode(c, p, n);
  for (std::size_t i = 0; i < n; ++i) {
    const float norm = cpd::detail::load_f32(p.data() + 4 * (i / 256));
    const double level = std::fabs(double(q[i])) * 7 / norm;
    CHECK(std::fabs(level - std::round(level)) < 1e-5);
    // The two levels around |v| s / norm, nothing else.
    const double r = std::fabs(double(v[i])) * 7 / norm;
    CHECK(std::round(level) >= std::floor(r) - 1e-9);
    CHECK(std::round(level) <= std::ceil(r) + 1e-9);
    if (q[i] != 0) CHECK(std::signbit(q[i]) == std::signbit(v[i]));
  }
}

TEST_CASE("1-bit SGD: bucket means preserve the bucket sum; error feedback keeps the dropped information") {
  const std::size_t n = 1300, bucket = 256;
  const cpd::onebit_codec c(bucket);
  const std::vector<float> x = normal_values(n, 21);
  const std::vector<float> y = decode(c, encode(c, x), n);
  for (std::size_t lo = 0; lo < n; lo += bucket) {
    double sx = 0, sy = 0, ax = 0;
    for (std::size_t i = lo; i < std::min(n, lo + bucket); ++i) sx += x[i], sy += y[i], ax += std::fabs(x[i]);
    CHECK(std::fabs(sx - sy) <= 1e-6 * ax);
    for (std::size_t i = lo; i < std::min(n, lo + bucket); ++i) CHECK((y[i] < 0) == (x[i] < 0));
  }
  // T steps of one worker with error feedback: sum_t decoded_t + residual_T == sum_t g_t.
  const int steps = 50;
  std::vector<float> residual(n, 0.0f), out(n);
  std::vector<double> sum_g(n, 0.0), sum_out(n, 0.0);
  float* res[1] = {residual.data()};
  cpd::codec_exchange_options opt;
  opt.residuals = res;
  double scale = 0;
  for (int t = 0; t < steps; ++t) {
    const std::vector<float> g = normal_values(n, 100 + static_cast<std::uint32_t>(t));
    const float* gs[1] = {g.data()};
    cpd::simulate_codec_allreduce(c, gs, out.data(), n, 1, opt);
    for (std::size_t i = 0; i < n; ++i) sum_g[i] += g[i], sum_out[i] += out[i], scale += std::fabs(g[i]);
  }
  double worst = 0, worst_residual = 0;
  for (std::size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::fabs(sum_out[i] + residual[i] - sum_g[i]));
    worst_residual = std::max(worst_residual, double(std::fabs(residual[i])));
  }
  // Each step adds two float roundings of values of order 1 (x = g + e, e = x - d): a few ulps each.
  CHECK(worst <= steps * 4 * 0x1p-23 * 8);
  // The residual stays bounded (feedback works), so the decoded sum tracks the true sum.
  CHECK(worst_residual < 10.0);
  // Without feedback the information is lost: the same run drifts.
  std::vector<double> sum_plain(n, 0.0);
  for (int t = 0; t < steps; ++t) {
    const std::vector<float> g = normal_values(n, 100 + static_cast<std::uint32_t>(t));
    const std::vector<float> q = decode(c, encode(c, g), n);
    for (std::size_t i = 0; i < n; ++i) sum_plain[i] += q[i];
  }
  double drift = 0;
  for (std::size_t i = 0; i < n; ++i) drift = std::max(drift, std::fabs(sum_plain[i] - sum_g[i]));
  CHECK(drift > 2 * worst_residual);
}

TEST_CASE("simulate_codec_allreduce: rank-order float sum, the same bits for every thread count") {
  const int w = 5;
  const std::size_t n = 3000;
  std::vector<std::vector<float>> g;
  std::vector<const float*> ptr;
  for (int r = 0; r < w; ++r) g.push_back(normal_values(n, 40 + static_cast<std::uint32_t>(r)));
  for (auto& v : g) ptr.push_back(v.data());
  // fp32 with a power-of-two scale is lossless: the result is the plain rank-order float sum.
  {
    const auto c = cpd::make_codec("fp:e8m23");
    std::vector<float> out(n);
    cpd::codec_exchange_options opt;
    opt.mean = true;
    const auto res = cpd::simulate_codec_allreduce(*c, ptr.data(), out.data(), n, w, opt);
    CHECK(res.payload_bytes == 4 + 4 * n);
    for (std::size_t i = 0; i < n; ++i) {
      float s = g[0][i];
      for (int r = 1; r < w; ++r) s += g[static_cast<std::size_t>(r)][i];
      CHECK(out[i] == s / static_cast<float>(w));
    }
  }
  for (const char* name : {"qsgd:2bit:512", "qsgd:8bit:128", "fp:e4m3fn:sr", "onebit", "dyntree8:2048", "posit:8:2:sr"}) {
    CAPTURE(name);
    const auto c = cpd::make_codec(name);
    std::vector<float> ref(n), out(n);
    cpd::codec_exchange_options opt;
    opt.key = {1234, 7};
    opt.threads = 1;
    cpd::simulate_codec_allreduce(*c, ptr.data(), ref.data(), n, w, opt);
    for (unsigned t : {2u, 3u, 8u}) {
      opt.threads = t;
      cpd::simulate_codec_allreduce(*c, ptr.data(), out.data(), n, w, opt);
      CHECK(out == ref);
    }
    if (c->stochastic()) {
      opt.key = {1235, 7};
      cpd::simulate_codec_allreduce(*c, ptr.data(), out.data(), n, w, opt);
      CHECK(out != ref);
    }
  }
}

TEST_CASE("integer codec: decode(encode(x)) is int_quantize's per-block int8/int4/int2, nearest_even") {
  const std::size_t n = 1000;
  for (const auto& x : {wide_values(n, 5), normal_values(n, 6, 1e-3f)}) {
    for (int bits : {2, 4, 8}) {
      for (std::size_t block : {std::size_t(0), std::size_t(32), std::size_t(100)}) {
        CAPTURE(bits);
        CAPTURE(block);
        const cpd::int_codec c(bits, block);
        const std::vector<float> y = decode(c, encode(c, x), n);
        std::vector<float> want(n);
        std::vector<cpd::int_params> params((n + (block ? block : n) - 1) / (block ? block : n));
        cpd::int_quantize(cpd::execution::seq, cpd::int_format{bits, true}, cpd::rounding::nearest_even, x.data(),
                          want.data(), n, block ? block : n, params.data());
        std::size_t diff = 0;
        for (std::size_t i = 0; i < n; ++i) diff += std::memcmp(&y[i], &want[i], 4) != 0;
        CHECK(diff == 0);
        // the payload leads with those scales
        const std::vector<std::uint8_t> p = encode(c, x);
        float s0;
        std::memcpy(&s0, p.data(), 4);
        CHECK(s0 == params[0].scale);
      }
    }
  }
  // a block holding NaN or inf decodes to NaN everywhere, the others as they are
  std::vector<float> x = normal_values(96, 8);
  x[40] = std::numeric_limits<float>::infinity();
  const cpd::int_codec c(4, 32);
  const std::vector<float> y = decode(c, encode(c, x), 96);
  for (std::size_t i = 0; i < 96; ++i) CHECK(std::isnan(y[i]) == (i >= 32 && i < 64));
  CHECK_THROWS_AS(cpd::int_codec(3), std::invalid_argument);
}

/// log2 of posit<n, es>'s maxpos, from the standard's definition: (n - 2) 2^es.
static int posit_top(int n, int es) { return (n - 2) << es; }

TEST_CASE("posit codec: decode(encode(x)) is posit_quantize of x 2^k, k putting amax in (1/2, 1]") {
  const std::size_t n = 5000;  // (posit16 goes in chunks of 4096)
  // Subnormals beside large values: x 2^k is 0 in float for the smallest (the codec
  // rounds in float), while the posit of the exact product is +-minpos.
  std::vector<float> tiny = normal_values(n, 8, 3e4f);
  for (std::size_t i = 0; i < 40; ++i) tiny[25 * i + 3] = (i % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f, -149 + int(i % 23));
  for (const auto& x : {wide_values(n, 5), normal_values(n, 6, 1e-3f), normal_values(n, 7, 3e4f), tiny}) {
    for (const auto& posit : {std::pair{8, 2}, std::pair{8, 0}, std::pair{16, 1}, std::pair{16, 3}}) {
      const int bits = posit.first, es = posit.second;  // (not a structured binding: CAPTURE's lambda takes it)
      CAPTURE(bits);
      CAPTURE(es);
      const cpd::posit_codec c(bits, es);
      const std::vector<std::uint8_t> p = encode(c, x);
      CHECK(p.size() == 4 + n * static_cast<std::size_t>(bits) / 8);
      const auto k = static_cast<std::int32_t>(cpd::detail::load_le32(p.data()));
      const double m = amax(x, 0, n);
      CHECK(k == c.scale_exponent(static_cast<float>(m)));
      const int top = posit_top(bits, es);  // maxpos = 2^top
      if (k > top - 127 && k < 126 - top) {  // not clamped
        CHECK(std::ldexp(m, k) <= 1.0);
        CHECK(std::ldexp(m, k) > 0.5);
      }
      // posit_quantize (proven against SoftPosit and an MPFR reference) of the scaled values, in double
      std::vector<double> scaled(n), want(n);
      for (std::size_t i = 0; i < n; ++i) scaled[i] = std::ldexp(double(x[i]), k);
      const cpd::posit_format f(bits, es);
      cpd::posit_quantize(f, cpd::rounding::nearest_even, scaled.data(), want.data(), n);
      const std::vector<float> y = decode(c, p, n);
      std::size_t diff = 0, zeros = 0;
      for (std::size_t i = 0; i < n; ++i) {
        diff += double(y[i]) != std::ldexp(want[i], -k);
        zeros += x[i] != 0.0f && y[i] == 0.0f;
      }
      CHECK(diff == 0);
      CHECK(zeros == 0);  // a posit rounds no non-zero value to zero
    }
  }
  // Stochastic posit16 across its chunks: element i draws counter i of the payload's key.
  {
    const std::vector<float> x = normal_values(n, 9, 1e-3f);
    const cpd::random_stream key{11, 4};
    const cpd::posit_codec c16(16, 1, cpd::rounding::stochastic);
    const std::vector<std::uint8_t> p = encode(c16, x, key);
    const auto k = static_cast<std::int32_t>(cpd::detail::load_le32(p.data()));
    REQUIRE(k >= 0);  // (x 2^k exact in float)
    const cpd::posit_format f(16, 1);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t want = cpd::posit_encode(f, cpd::rounding::stochastic, std::ldexp(x[i], k),
                                                   cpd::random_bits(key.seed, key.stream, i, key.generator), 32);
      bad += (p[4 + 2 * i] | (p[5 + 2 * i] << 8)) != static_cast<int>(want);
    }
    CHECK(bad == 0);
  }
  // A power of two scales to 1 exactly; zeros give k = 0; inf or NaN anywhere: NaN everywhere.
  const cpd::posit_codec c(8, 2);
  CHECK(c.scale_exponent(0.25f) == 2);
  CHECK(c.scale_exponent(0.3f) == 1);
  CHECK(c.scale_exponent(0.0f) == 0);
  CHECK(c.scale_exponent(1e-38f) == 126 - 24);  // clamped: minpos 2^-24 times 2^-k stays a normal float
  std::vector<float> x(64, 0.0f);
  CHECK(decode(c, encode(c, x), 64) == x);
  x[7] = std::numeric_limits<float>::quiet_NaN();
  for (float v : decode(c, encode(c, x), 64)) CHECK(std::isnan(v));
  CHECK_THROWS_AS(cpd::posit_codec(12, 2), std::invalid_argument);
  CHECK_THROWS_AS(cpd::posit_codec(8, 4), std::invalid_argument);
  CHECK_THROWS_AS(cpd::posit_codec(8, 2, cpd::rounding::upward), std::invalid_argument);
}

TEST_CASE("make_codec: names round-trip, bad names are rejected") {
  for (const char* s : {"dyntree8", "dyntree8:4096", "linear8", "linear8:64", "qsgd:2bit:512", "qsgd:8bit:2048",
                        "onebit:512", "int:8", "int:4:32", "int:2:16", "fp:e4m3fn", "fp:e5m2", "fp:e4m3fn:sr",
                        "posit:8:2", "posit:16:1", "posit:8:0:sr", "posit:16:3"}) {
    CAPTURE(s);
    CHECK(cpd::make_codec(s)->name() == s);
    CHECK(cpd::make_codec(cpd::make_codec(s)->name())->name() == s);
  }
  CHECK(cpd::make_codec("qsgd")->name() == "qsgd:4bit:512");
  CHECK(cpd::make_codec("qsgd:4bit:512")->bits_per_value(5120) == doctest::Approx(4.0625));
  CHECK(cpd::make_codec("onebit")->name() == "onebit:512");
  CHECK(cpd::make_codec("posit:8")->name() == "posit:8:2");  // the standard's es = 2
  CHECK(cpd::make_codec("posit:16:sr")->name() == "posit:16:2:sr");
  for (const char* s :
       {"qsgd:3bit", "qsgd:4bit:0", "onebit:x", "nope", "fp", "fp:e9m9", "dyntree8:1:2", "fp:e4m3fn:up", "int:3",
        "int:4:x", "int:4:32:1", "posit", "posit:9", "posit:32", "posit:8:4", "posit:8:x", "posit:8:2:up",
        "posit:8:2:sr:1", "posit:99999999999999"}) {
    CAPTURE(s);
    CHECK_THROWS_AS((void)cpd::make_codec(s), std::invalid_argument);
  }
}

TEST_CASE("float codec: the APS scale puts amax in the top binade; half an ulp of F within the normal range") {
  const std::size_t n = 2000;
  const std::vector<float> x = normal_values(n, 31, 1e-3f);
  const auto c = cpd::make_codec("fp:e4m3fn");
  const std::vector<std::uint8_t> p = encode(*c, x);
  const std::vector<float> y = decode(*c, p, n);
  const double m = amax(x, 0, n);
  const auto k = static_cast<std::int32_t>(cpd::detail::load_le32(p.data()));
  // E4M3FN: max 448 = 1.75 * 2^8; the scaled amax lies in [2^7, 2^8] (APS: emax - ceil(log2 amax)).
  CHECK(std::ldexp(m, k) <= 256.0);
  CHECK(std::ldexp(m, k) > 128.0);
  for (std::size_t i = 0; i < n; ++i) {
    const double s = std::fabs(std::ldexp(double(x[i]), k));
    if (s >= 0x1p-6)  // E4M3's smallest normal: relative error <= 2^-4 (3 mantissa bits)
      CHECK(std::fabs(double(y[i]) - x[i]) <= std::fabs(double(x[i])) * 0x1p-4);
    else  // subnormal spacing 2^-9: half of it, unscaled
      CHECK(std::fabs(double(y[i]) - x[i]) <= std::ldexp(0x1p-10, -k));
  }
}

TEST_CASE("float codec: IEEE P3109 binary8p3se and binary8p4se, within half an ulp in the normal range") {
  const std::size_t n = 2000;
  const std::vector<float> x = normal_values(n, 32, 1e-3f);
  for (const std::string name : {"fp:binary8p3se", "fp:binary8p4se"}) {
    CAPTURE(name);
    const auto c = cpd::make_codec(name);
    CHECK(c->name() == name);
    CHECK(c->payload_size(n) == 4 + n);
    const std::vector<std::uint8_t> p = encode(*c, x);
    const std::vector<float> y = decode(*c, p, n);
    const auto k = static_cast<std::int32_t>(cpd::detail::load_le32(p.data()));
    const int m = name[11] == '3' ? 2 : 3;                  // binary8p<P>: P - 1 mantissa bits
    const double smallest_normal = m == 2 ? 0x1p-15 : 0x1p-7;  // 2^(1 - bias), bias 16 and 8
    for (std::size_t i = 0; i < n; ++i) {
      const double s = std::fabs(std::ldexp(double(x[i]), k));
      if (s >= smallest_normal)
        CHECK(std::fabs(double(y[i]) - x[i]) <= std::fabs(double(x[i])) * std::ldexp(1.0, -m - 1));
    }
  }
  std::vector<float> bad = normal_values(8, 3);
  bad[2] = std::numeric_limits<float>::quiet_NaN();
  const auto c = cpd::make_codec("fp:binary8p3se");
  for (float v : decode(*c, encode(*c, bad), 8)) CHECK(std::isnan(v));
}

namespace {

/// bfloat16's nearest-even rounding of a finite float, by its bits: the upper half, ties to even.
float bf16_nearest(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

/// APS with one worker, as the float codec's payload states it: emax - ceil(log2 amax), clamped.
int codec_exponent(float amax, int emax, int lowest, int highest) {
  int e = 0;
  const double m = std::frexp(double(amax), &e);  // amax = m 2^e, m in [1/2, 1)
  const int ceil_log2 = m == 0.5 ? e - 1 : e;
  return std::clamp(emax - ceil_log2, lowest, highest);
}

bool same_bits(float a, float b) {
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}

}  // namespace

TEST_CASE("float codec: bf16 and fp16 words are F's nearest-even rounding of x 2^k (bf16's bit rule, _Float16)") {
  const std::size_t n = 3001;
  for (float s : {1e-30f, 1e-3f, 1.0f, 3e3f, 1e6f}) {
    CAPTURE(s);
    std::vector<float> x = wide_values(n, 5);
    for (float& v : x) v *= s;
    x[17] = amax(x, 0, n) * 0.75f;  // (some ties and exact values)
    const float m = amax(x, 0, n);
    {
      const auto c = cpd::make_codec("fp:bf16");
      const std::vector<std::uint8_t> p = encode(*c, x);
      const auto k = static_cast<std::int32_t>(cpd::detail::load_le32(p.data()));
      CHECK(k == codec_exponent(m, 127, 0, 16));
      const std::vector<float> y = decode(*c, p, n);
      int bad = 0;
      for (std::size_t i = 0; i < n; ++i)
        bad += !same_bits(y[i], static_cast<float>(std::ldexp(double(bf16_nearest(std::ldexp(x[i], k))), -k)));
      CHECK(bad == 0);
    }
#if defined(__FLT16_MAX__)
    {
      const auto c = cpd::make_codec("fp:fp16");
      const std::vector<std::uint8_t> p = encode(*c, x);
      const auto k = static_cast<std::int32_t>(cpd::detail::load_le32(p.data()));
      CHECK(k == codec_exponent(m, 15, -112, 125));
      const std::vector<float> y = decode(*c, p, n);
      int bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const auto h = static_cast<_Float16>(std::ldexp(double(x[i]), k));  // (one rounding, from double)
        bad += !same_bits(y[i], static_cast<float>(std::ldexp(double(h), -k)));
      }
      CHECK(bad == 0);
    }
#endif
  }
}

TEST_CASE("float codec: bf16 stochastic rounding draws the bits of encode on x 2^k with the payload's key") {
  const std::size_t n = 4099;
  const std::vector<float> x = wide_values(n, 8);
  const cpd::random_stream key{7, 3};
  const auto c = cpd::make_codec("fp:bf16:sr");
  const std::vector<std::uint8_t> p = encode(*c, x, key);
  const auto k = static_cast<std::int32_t>(cpd::detail::load_le32(p.data()));
  REQUIRE(k == codec_exponent(amax(x, 0, n), 127, 0, 16));
  std::vector<float> xs(n);
  for (std::size_t i = 0; i < n; ++i) xs[i] = std::ldexp(x[i], k);  // (exact: k >= 0, no overflow)
  std::vector<std::uint16_t> codes(n);
  cpd::bulk_options o;
  o.seed = key.seed;
  o.stream = key.stream;
  o.generator = key.generator;
  cpd::encode<cpd::bfloat16, cpd::rounding::stochastic, cpd::overflow::saturate>(xs.data(), codes.data(), n, o);
  int bad = 0;
  for (std::size_t i = 0; i < n; ++i)
    bad += (p[4 + 2 * i] | (p[5 + 2 * i] << 8)) != codes[i];
  CHECK(bad == 0);
}
