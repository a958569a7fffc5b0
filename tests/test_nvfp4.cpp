// SPDX-License-Identifier: MIT
// NVFP4 against torchao's reference formulas (nvfp4_quantize with a per-tensor scale),
// written here from its definition with tables of the E2M1 and E4M3 values: no code shared
// with cpd's rounding core.

#include <cpd/exchange/simulate.hpp>
#include <cpd/host/nvfp4.hpp>
#include <cpd/scaling/nvfp4.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <random>
#include <vector>

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

// The eight magnitudes of E2M1 (code = index) and the 127 finite magnitudes of E4M3 (code = index).
const float e2m1_mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
std::vector<float> e4m3_mags() {
  std::vector<float> v;
  for (int c = 0; c < 127; ++c) {
    const int e = c >> 3, m = c & 7;
    v.push_back(e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7));
  }
  return v;
}
const std::vector<float> e4m3_mag = e4m3_mags();

// Index of the nearest entry of a sorted table to a (>= 0, within the table), ties to the even index.
template <class T>
int nearest_even(const T& table, int size, float a) {
  int lo = 0;
  while (lo + 1 < size && table[lo + 1] <= a) ++lo;
  if (table[lo] == a || lo + 1 == size) return lo;
  const double dl = static_cast<double>(a) - table[lo], du = static_cast<double>(table[lo + 1]) - a;
  if (dl < du) return lo;
  if (du < dl) return lo + 1;
  return lo % 2 == 0 ? lo : lo + 1;
}

// torchao's two-level NVFP4 in float32: s = amax / (448 * 6); per block
// b = e4m3(clamp((bamax / 6) / s, E4M3 tiny, 448)); q = e2m1(clamp(x / (s * b), -6, 6)).
struct ref_result {
  float s;
  std::vector<std::uint8_t> scales, codes;
  std::vector<float> values;
};
ref_result torchao_reference(const std::vector<float>& x) {
  ref_result r;
  float amax = 0.0f;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  r.s = amax / (448.0f * 6.0f);
  for (std::size_t lo = 0; lo < x.size(); lo += 16) {
    const std::size_t hi = std::min(x.size(), lo + 16);
    float bamax = 0.0f;
    for (std::size_t i = lo; i < hi; ++i) bamax = std::max(bamax, std::fabs(x[i]));
    const float block_scale = bamax / 6.0f;
    float scaled = block_scale / r.s;
    scaled = std::min(std::max(scaled, 0.015625f), 448.0f);
    const int bc = nearest_even(e4m3_mag, 127, scaled);
    r.scales.push_back(static_cast<std::uint8_t>(bc));
    const float total = r.s * e4m3_mag[bc];
    for (std::size_t i = lo; i < hi; ++i) {
      float d = x[i] / total;
      d = std::min(std::max(d, -6.0f), 6.0f);
      const int q = nearest_even(e2m1_mag, 8, std::fabs(d));
      const bool neg = std::signbit(d);
      r.codes.push_back(static_cast<std::uint8_t>(q | (neg ? 8 : 0)));
      r.values.push_back((neg ? -e2m1_mag[q] : e2m1_mag[q]) * total);
    }
  }
  return r;
}

std::uint8_t nibble(const std::vector<std::uint8_t>& packed, std::size_t i) {
  return static_cast<std::uint8_t>((packed[i / 2] >> (i % 2 ? 4 : 0)) & 0xF);
}

// Encodes, decodes and quantizes x and checks every byte against the reference.
void check_against_reference(const std::vector<float>& x) {
  const ref_result r = torchao_reference(x);
  const std::size_t n = x.size();
  std::vector<std::uint8_t> packed(cpd::nvfp4_packed_size(n)), scales(cpd::nvfp4_scale_count(n));
  float s = -1.0f;
  cpd::nvfp4_encode(x.data(), n, packed.data(), scales.data(), &s);
  REQUIRE(bits_of(s) == bits_of(r.s));
  CHECK(scales == r.scales);
  for (std::size_t i = 0; i < n; ++i) {
    // torchao keeps the sign of a value that rounds to zero (-0 is code 8): so do we.
    if (nibble(packed, i) != r.codes[i]) {
      INFO("i = " << i << " x = " << x[i]);
      REQUIRE(nibble(packed, i) == r.codes[i]);
    }
  }
  std::vector<float> dec(n), q(n);
  cpd::nvfp4_decode(packed.data(), scales.data(), s, n, dec.data());
  cpd::nvfp4_quantize(x.data(), q.data(), n);
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(bits_of(dec[i]) == bits_of(r.values[i]));
    REQUIRE(bits_of(q[i]) == bits_of(r.values[i]));
  }
}

}  // namespace

TEST_CASE("nvfp4: the per-tensor scale is amax / 2688 in float32") {
  CHECK(cpd::nvfp4_tensor_scale(2688.0f) == 1.0f);
  CHECK(bits_of(cpd::nvfp4_tensor_scale(1.0f)) == bits_of(1.0f / 2688.0f));
  CHECK(cpd::nvfp4_tensor_scale(0.0f) == std::ldexp(1.0f, -126));  // all-zero tensor: no 0 / 0
  CHECK(cpd::nvfp4_tensor_scale(1e-36f) == std::ldexp(1.0f, -126));
}

TEST_CASE("nvfp4: a worked example") {
  // amax 10.5 gives s = 10.5 / 2688 = 2^-8; the block's scale (10.5 / 6) / s = 448 (code 0x7E),
  // so its factor is s * 448 = 1.75 and x / 1.75 rounds on E2M1's grid.
  std::vector<float> x = {10.5f, 2.1875f, -0.35f, 4.55f, 0.0f, -10.5f, 1.3125f, 8.75f};
  std::vector<std::uint8_t> packed(4), scales(1);
  float s = 0.0f;
  const cpd::value_stats st = cpd::nvfp4_encode(x.data(), x.size(), packed.data(), scales.data(), &s);
  CHECK(s == std::ldexp(1.0f, -8));
  CHECK(scales[0] == 0x7E);
  // x / 1.75 = 6, 1.25 (tie: 1, the even code), -0.2 (-0), 2.6 (3), 0, -6, 0.75 (tie: 1), 5 (tie: 4)
  const std::uint8_t want[8] = {0x7, 0x2, 0x8, 0x5, 0x0, 0xF, 0x2, 0x6};
  for (std::size_t i = 0; i < 8; ++i) CHECK(nibble(packed, i) == want[i]);
  CHECK(packed[0] == 0x27);
  CHECK(st.count == 8);
  CHECK(st.zeros == 1);
  CHECK(st.underflow == 1);  // -0.2 became -0
  check_against_reference(x);
}

TEST_CASE("nvfp4: x is divided by s * b, as torchao's reference, not multiplied by its reciprocal") {
  // docs/scaling.md: amax 1, a block whose scale clamps to 2^-6; x / (s * b) = 1.25 exactly.
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;
  x[16] = 0x1.e79e7cp-18f;
  const float f = (1.0f / 2688.0f) * 0.015625f;
  REQUIRE(x[16] / f == 1.25f);
  REQUIRE(x[16] * (1.0f / f) > 1.25f);  // the reciprocal's product is past the tie
  std::vector<std::uint8_t> packed(16), scales(2);
  float s = 0.0f;
  cpd::nvfp4_encode(x.data(), 32, packed.data(), scales.data(), &s);
  CHECK(scales[1] == 0x08);
  CHECK(nibble(packed, 16) == 2);  // 1.25 ties to 1 (code 2); the reciprocal would give 1.5 (code 3)
  check_against_reference(x);
}

TEST_CASE("nvfp4: every E2M1 code and its midpoints under every block scale") {
  // Blocks of all 16 codes times a factor s * b, and the midpoints of neighbours +- 1 ulp,
  // for every E4M3 block code the clamp allows and a few tensor scales.
  for (float amax_tensor : {2688.0f, 1.0f, 3.7e-3f, 123456.0f, 1e-30f, 3e38f}) {
    const float s = amax_tensor / 2688.0f;
    for (int bc = 0x08; bc <= 0x7E; ++bc) {
      const float factor = s * e4m3_mag[bc];
      std::vector<float> x;
      x.push_back(amax_tensor);  // fixes the tensor's amax (its own block)
      for (int k = 1; k < 16; ++k) x.push_back(0.0f);
      for (int c = 0; c < 16; ++c) x.push_back((c & 8 ? -e2m1_mag[c & 7] : e2m1_mag[c & 7]) * factor);
      for (int c = 0; c + 1 < 8; ++c) {
        const float mid = (e2m1_mag[c] + e2m1_mag[c + 1]) / 2 * factor;
        for (float m : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e30f)}) {
          x.push_back(m);
          x.push_back(-m);
        }
      }
      x.push_back(7.0f * factor);  // beyond 6: saturates
      x.push_back(-1e30f * factor > -3e38f ? -1e30f * factor : -3e38f);
      while (x.size() % 16) x.push_back(0.0f);
      for (float& v : x) v = std::min(std::max(v, -amax_tensor), amax_tensor);
      check_against_reference(x);
    }
  }
}

TEST_CASE("nvfp4: random inputs match the reference, and every mode rounds through the core") {
  std::mt19937 gen(33);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + gen() % 300;
    std::lognormal_distribution<float> mag(0.0f, 1.0f + trial % 7);
    std::vector<float> x(n);
    for (float& v : x) v = (gen() & 1 ? -1.0f : 1.0f) * mag(gen) * std::ldexp(1.0f, static_cast<int>(gen() % 40) - 20);
    if (trial % 5 == 0) x[gen() % n] = 0.0f;
    check_against_reference(x);
  }
}

TEST_CASE_TEMPLATE_DEFINE("nvfp4: each mode gives the E2M1 neighbours of x / factor", Mode, nvfp4_modes) {
  constexpr cpd::rounding R = Mode::value;
  std::mt19937 gen(7);
  std::vector<float> x(1000);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (float& v : x) v = dist(gen);
  const std::size_t n = x.size();
  const ref_result r = torchao_reference(x);  // the scales do not depend on the mode
  std::vector<std::uint8_t> packed(cpd::nvfp4_packed_size(n)), scales(cpd::nvfp4_scale_count(n));
  float s = 0.0f;
  cpd::nvfp4_options opt;
  opt.key = {5, 9};
  cpd::nvfp4_encode<R>(x.data(), n, packed.data(), scales.data(), &s, opt);
  CHECK(scales == r.scales);
  std::vector<float> q(n);
  cpd::nvfp4_quantize<R>(x.data(), q.data(), n, opt);
  for (std::size_t i = 0; i < n; ++i) {
    const float total = s * e4m3_mag[scales[i / 16]];
    const float d = std::min(std::max(x[i] / total, -6.0f), 6.0f);
    const std::uint8_t c = nibble(packed, i);
    const float got = (c & 8 ? -e2m1_mag[c & 7] : e2m1_mag[c & 7]);
    REQUIRE(bits_of(q[i]) == bits_of(got * total));
    // got is d itself or one of its two E2M1 neighbours, on the side the mode allows.
    int lo = 0;
    while (lo + 1 < 8 && e2m1_mag[lo + 1] <= std::fabs(d)) ++lo;
    const float down = e2m1_mag[lo], up = lo + 1 < 8 ? e2m1_mag[lo + 1] : e2m1_mag[7];
    const float a = std::fabs(got);
    INFO("x / factor = " << d << " got " << got);
    REQUIRE((a == down || a == up));
    if (down == std::fabs(d)) REQUIRE(a == down);
    if (R == cpd::rounding::toward_zero) CHECK(a == down);
    if (R == cpd::rounding::upward) CHECK(got >= d);
    if (R == cpd::rounding::downward) CHECK(got <= d);
    if (R == cpd::rounding::nearest_even) CHECK(bits_of(q[i]) == bits_of(r.values[i]));
  }
}
template <cpd::rounding R>
using mode = std::integral_constant<cpd::rounding, R>;
TEST_CASE_TEMPLATE_APPLY(nvfp4_modes,
                         std::tuple<mode<cpd::rounding::nearest_even>, mode<cpd::rounding::nearest_away>,
                                    mode<cpd::rounding::toward_zero>, mode<cpd::rounding::upward>,
                                    mode<cpd::rounding::downward>, mode<cpd::rounding::stochastic>,
                                    mode<cpd::rounding::odd>>);

TEST_CASE("nvfp4: stochastic rounding is unbiased, keyed by element index, and pieces give the whole's bits") {
  const std::size_t n = 16 * 4000;
  std::vector<float> x(n);
  // Every block: a 6 that fixes the factor at 1, then values between E2M1 neighbours.
  for (std::size_t i = 0; i < n; ++i) x[i] = i % 16 == 0 ? 6.0f : 1.0f + 0.3f * static_cast<float>(i % 3);
  cpd::nvfp4_options opt;
  opt.key = {2024, 1};
  std::vector<float> q(n);
  cpd::nvfp4_quantize<cpd::rounding::stochastic>(x.data(), q.data(), n, opt);
  double sum[3] = {0, 0, 0};
  std::size_t cnt[3] = {0, 0, 0};
  for (std::size_t i = 0; i < n; ++i)
    if (i % 16 != 0) {
      sum[i % 3] += q[i];
      ++cnt[i % 3];
    }
  for (int k = 0; k < 3; ++k) {
    const double mean = sum[k] / static_cast<double>(cnt[k]);
    const double want = 1.0 + 0.3 * k;  // up with probability 0.6 (1.3 in [1, 1.5]), 0.2 (1.6 in [1.5, 2])
    CHECK(std::fabs(mean - static_cast<double>(static_cast<float>(want))) < 0.01);
  }
  // The same key gives the same bits; another key other bits.
  std::vector<float> q2(n), q3(n);
  cpd::nvfp4_quantize<cpd::rounding::stochastic>(x.data(), q2.data(), n, opt);
  CHECK(q2 == q);
  cpd::nvfp4_options other = opt;
  other.key.seed = 2025;
  cpd::nvfp4_quantize<cpd::rounding::stochastic>(x.data(), q3.data(), n, other);
  CHECK(q3 != q);
  // Pieces at block boundaries with the whole tensor's scale and first_index.
  std::vector<std::uint8_t> packed(n / 2), scales(n / 16), pp(n / 2), ps(n / 16);
  float s = 0.0f;
  cpd::nvfp4_encode<cpd::rounding::stochastic>(x.data(), n, packed.data(), scales.data(), &s, opt);
  for (std::size_t lo = 0; lo < n;) {
    const std::size_t len = std::min<std::size_t>(n - lo, 16 * (1 + lo % 7));
    cpd::nvfp4_options piece = opt;
    piece.tensor_scale = s;
    piece.first_index = lo;
    float ps_s = 0.0f;
    cpd::nvfp4_encode<cpd::rounding::stochastic>(x.data() + lo, len, pp.data() + lo / 2, ps.data() + lo / 16, &ps_s,
                                                 piece);
    CHECK(ps_s == s);
    std::vector<float> pq(len);
    cpd::nvfp4_quantize<cpd::rounding::stochastic>(x.data() + lo, pq.data(), len, piece);
    CHECK(std::equal(pq.begin(), pq.end(), q.begin() + static_cast<std::ptrdiff_t>(lo)));
    lo += len;
  }
  CHECK(pp == packed);
  CHECK(ps == scales);
}

TEST_CASE("nvfp4: inf and NaN make their block NaN, are counted, and leave the other blocks alone") {
  std::vector<float> x(48, 1.0f);
  x[3] = std::numeric_limits<float>::infinity();
  x[20] = std::nanf("");
  x[40] = 12.0f;
  std::vector<std::uint8_t> packed(24), scales(3);
  float s = 0.0f;
  const cpd::value_stats st = cpd::nvfp4_encode(x.data(), 48, packed.data(), scales.data(), &s);
  CHECK(s == 12.0f / 2688.0f);  // the finite amax
  CHECK(scales[0] == cpd::nvfp4_nan_scale);
  CHECK(scales[1] == cpd::nvfp4_nan_scale);
  CHECK(scales[2] != cpd::nvfp4_nan_scale);
  CHECK(st.count == 48);
  CHECK(st.inf_inputs == 1);
  CHECK(st.nan_inputs == 1);
  CHECK(st.nan == 30);  // the finite values of the two NaN blocks
  for (std::size_t i = 0; i < 16; ++i) CHECK(nibble(packed, i) == 0);
  std::vector<float> d(48), q(48);
  cpd::nvfp4_decode(packed.data(), scales.data(), s, 48, d.data());
  const cpd::value_stats qs = cpd::nvfp4_quantize(x.data(), q.data(), 48);
  CHECK(qs == st);
  for (std::size_t i = 0; i < 48; ++i) {
    CHECK(bits_of(d[i]) == bits_of(q[i]));
    CHECK(std::isnan(d[i]) == (i < 32));
    if (i < 32) CHECK(bits_of(d[i]) == 0x7FC00000u);  // the one NaN of host and device (nvfp4_decoded)
  }
  CHECK(d[40] == 12.0f);
  CHECK(d[41] == 1.0f);  // 1 / (12 / 6) = 0.5, exact in E2M1
}

TEST_CASE("nvfp4: an all-zero tensor encodes to zeros, and odd lengths pad with a zero nibble") {
  std::vector<float> x(17, 0.0f);
  x[5] = -0.0f;
  std::vector<std::uint8_t> packed(9, 0xAA), scales(2);
  float s = 0.0f;
  const cpd::value_stats st = cpd::nvfp4_encode(x.data(), 17, packed.data(), scales.data(), &s);
  CHECK(s > 0.0f);
  CHECK(st.zeros == 17);
  CHECK(scales[0] == 0x08);  // clamped to E4M3's smallest normal, as torchao
  for (std::size_t i = 0; i < 9; ++i) CHECK(packed[i] == (i == 2 ? 0x80 : 0x00));
  std::vector<float> d(17);
  cpd::nvfp4_decode(packed.data(), scales.data(), s, 17, d.data());
  for (std::size_t i = 0; i < 17; ++i) CHECK(bits_of(d[i]) == bits_of(x[i]));
}

TEST_CASE("nvfp4: bad arguments are rejected") {
  std::vector<float> x(32, 1.0f), y(32);
  std::vector<std::uint8_t> p(16), sc(2);
  float s = 0.0f;
  cpd::nvfp4_options bad;
  bad.tensor_scale = -1.0f;
  CHECK_THROWS_AS(cpd::nvfp4_quantize(x.data(), y.data(), 32, bad), std::invalid_argument);
  bad.tensor_scale = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(cpd::nvfp4_quantize(x.data(), y.data(), 32, bad), std::invalid_argument);
  CHECK_THROWS_AS(cpd::nvfp4_encode(x.data(), 32, p.data(), sc.data(), nullptr), std::invalid_argument);
  CHECK_THROWS_AS(cpd::nvfp4_encode(x.data(), 32, nullptr, sc.data(), &s), std::invalid_argument);
  CHECK_THROWS_AS(cpd::nvfp4_quantize(x.data(), x.data() + 1, 16), std::invalid_argument);
  cpd::nvfp4_quantize(x.data(), x.data(), 32);  // in == out is allowed
  CHECK(x[0] == 1.0f);
  cpd::nvfp4_quantize(nullptr, nullptr, 0);
}

TEST_CASE("nvfp4: the exchange rule with one worker and no headroom is nvfp4_quantize") {
  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (std::size_t n : {std::size_t{1}, std::size_t{16}, std::size_t{100}, std::size_t{1000}}) {
    std::vector<float> x(n), want(n), got(n);
    for (float& v : x) v = dist(gen) * std::exp(2.0f * dist(gen));
    cpd::nvfp4_quantize(x.data(), want.data(), n);
    const float* g[] = {x.data()};
    const cpd::nvfp4_block_scaling<> rule(1, {false});
    const cpd::block_allreduce_result r =
        cpd::simulate_block_scaled_allreduce<cpd::float4_e2m1fn, cpd::rounding::nearest_even, cpd::overflow::saturate>(
            g, got.data(), n, 1, rule);
    CHECK_FALSE(r.nonfinite);
    CHECK(r.codes.size() == cpd::nvfp4_scale_count(n));
    for (std::size_t i = 0; i < n; ++i) REQUIRE(bits_of(got[i]) == bits_of(want[i]));
  }
}

TEST_CASE("nvfp4: the exchange rule shares the scales of the largest worker and marks inf/NaN blocks") {
  const std::size_t n = 48;
  std::vector<float> a(n, 1.0f), b(n, -0.5f), out(n);
  b[20] = 12.0f;  // worker 1's block 1 is larger: the shared scale follows it
  a[40] = std::numeric_limits<float>::quiet_NaN();
  const float* g[] = {a.data(), b.data()};
  const cpd::nvfp4_block_scaling<> rule(2);  // headroom x 2
  cpd::allreduce_options opt;
  opt.mean = true;
  const cpd::block_allreduce_result r =
      cpd::simulate_block_scaled_allreduce<cpd::float4_e2m1fn, cpd::rounding::nearest_even, cpd::overflow::saturate>(
          g, out.data(), n, 2, rule, opt);
  // A = 12, s = 24 / 2688; block 1's bound 24 gives (24 / 6) / s = 448; block 0's bound 2 gives 37.33 -> 36 (0x61)
  CHECK(r.tensor_scale == 24.0f / 2688.0f);
  CHECK(r.codes[1] == 0x7E);
  CHECK(r.codes[0] == 0x61);
  CHECK(r.codes[2] == cpd::nvfp4_nan_scale);
  CHECK(r.nonfinite);
  CHECK(r.nonfinite_out == 16);
  // block 0, factor f = s * 36: 1 / f = 3.11 -> 3 and -0.5 / f = -1.56 -> -1.5; their sum 1.5 in E2M1
  const float f0 = r.tensor_scale * 36.0f;
  CHECK(out[0] == 1.5f * f0 / 2.0f);
  CHECK(std::isnan(out[47]));
  CHECK(std::fabs(out[20] - 6.5f) <= 0.75f);  // (1 + 12) / 2, block factor 4/7 * 7 = 4: 12 -> 3 * 4
}

namespace {

std::vector<cpd::detail::isa> every_isa() {
  std::vector<cpd::detail::isa> v{cpd::detail::isa::baseline};
  if (cpd::detail::cpu_isa() >= cpd::detail::isa::avx2) v.push_back(cpd::detail::isa::avx2);
  if (cpd::detail::cpu_isa() >= cpd::detail::isa::avx512) v.push_back(cpd::detail::isa::avx512);
  return v;
}

// nvfp4_count's rules, restated: the class of x, and what it became (y).
void count_element(cpd::value_stats& st, float x, float y) {
  ++st.count;
  if (std::isnan(x)) ++st.nan_inputs;
  else if (std::isinf(x)) ++st.inf_inputs;
  else if (x == 0.0f) ++st.zeros;
  else if (std::isnan(y)) ++st.nan;
  else if (y == 0.0f) ++st.underflow;
}

}  // namespace

namespace {

// The chunked vector calls (host/nvfp4.hpp) against the format's scalar functions
// (core/nvfp4.hpp: nvfp4_scale_code, nvfp4_block_factor, nvfp4_element_code through the
// rounding core), on every instruction set: codes, scales, values and counts, quantize in
// and out of place, decode.
template <cpd::rounding R>
void check_array_calls(const std::vector<float>& x, const cpd::nvfp4_options& opt) {
  const std::size_t n = x.size();
  // the definition, element by element
  const float s = opt.tensor_scale != 0.0f ? opt.tensor_scale : cpd::nvfp4_tensor_scale([&] {
    float a = 0.0f;
    for (float v : x)
      if (std::isfinite(v)) a = std::max(a, std::fabs(v));
    return a;
  }());
  std::vector<std::uint8_t> want_scales(cpd::nvfp4_scale_count(n)), want_codes(n);
  std::vector<float> want_q(n);
  cpd::value_stats want_st, want_enc_st;
  for (std::size_t b = 0; b * 16 < n; ++b) {
    const std::size_t lo = b * 16, hi = std::min(n, lo + 16);
    float amax = 0.0f;
    bool nonfinite = false;
    for (std::size_t i = lo; i < hi; ++i) {
      nonfinite |= !std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    const std::uint8_t code = cpd::nvfp4_scale_code(nonfinite ? std::numeric_limits<float>::quiet_NaN() : amax, s);
    want_scales[b] = code;
    const float factor = cpd::nvfp4_block_factor(code, s);
    for (std::size_t i = lo; i < hi; ++i) {
      const std::uint32_t rnd = R == cpd::rounding::stochastic ? opt.key.bits(0, opt.first_index + i) : 0u;
      const std::uint8_t q = code == cpd::nvfp4_nan_scale ? 0 : cpd::nvfp4_element_code<R>(x[i], factor, rnd);
      want_codes[i] = q;
      const float v = (q & 8 ? -e2m1_mag[q & 7] : e2m1_mag[q & 7]);
      want_q[i] = code == cpd::nvfp4_nan_scale ? std::numeric_limits<float>::quiet_NaN() : v * factor;
      count_element(want_st, x[i], want_q[i]);
      count_element(want_enc_st, x[i], code == cpd::nvfp4_nan_scale ? std::numeric_limits<float>::quiet_NaN() : v);
    }
  }
  for (cpd::detail::isa where : every_isa()) {
    cpd::detail::set_isa_override(where);
    // (16 guard bytes or floats after each output: nothing is written past its end)
    const std::size_t guard = 16;
    std::vector<std::uint8_t> packed(cpd::nvfp4_packed_size(n) + guard, 0xAB),
        scales(cpd::nvfp4_scale_count(n) + guard, 0xAB);
    std::vector<float> q(n + guard, 7.0f), dec(n + guard, 7.0f), inplace = x;
    inplace.resize(n + guard, 7.0f);
    float got_s = 0.0f;
    const cpd::value_stats enc_st =
        cpd::nvfp4_encode<R>(x.data(), n, packed.data(), scales.data(), &got_s, opt);
    const cpd::value_stats q_st = cpd::nvfp4_quantize<R>(x.data(), q.data(), n, opt);
    cpd::nvfp4_quantize<R>(inplace.data(), inplace.data(), n, opt);
    cpd::nvfp4_decode(packed.data(), scales.data(), got_s, n, dec.data());
    cpd::detail::set_isa_override(-1);
    CAPTURE(std::string(cpd::detail::to_string(where)));
    CAPTURE(n);
    const auto untouched = [&](const auto& v, auto sentinel) {
      return std::all_of(v.end() - guard, v.end(), [&](auto e) { return e == sentinel; });
    };
    CHECK(untouched(packed, std::uint8_t(0xAB)));
    CHECK(untouched(scales, std::uint8_t(0xAB)));
    CHECK(untouched(q, 7.0f));
    CHECK(untouched(dec, 7.0f));
    CHECK(untouched(inplace, 7.0f));
    packed.resize(packed.size() - guard);
    scales.resize(scales.size() - guard);
    REQUIRE(bits_of(got_s) == bits_of(s));
    CHECK(scales == want_scales);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const bool ok = nibble(packed, i) == want_codes[i] &&
                      (std::isnan(want_q[i]) ? bits_of(q[i]) == 0x7FC00000u && bits_of(dec[i]) == 0x7FC00000u
                                             : bits_of(q[i]) == bits_of(want_q[i]) &&
                                                   bits_of(dec[i]) == bits_of(want_q[i])) &&
                      bits_of(inplace[i]) == bits_of(q[i]);
      if (!ok && wrong++ < 4) {
        CAPTURE(i);
        CAPTURE(x[i]);
        CHECK(int(nibble(packed, i)) == int(want_codes[i]));
        CHECK(q[i] == want_q[i]);
        CHECK(dec[i] == want_q[i]);
      }
    }
    CHECK(wrong == 0);
    if (n % 2) CHECK((packed.back() >> 4) == 0);  // (a last odd byte's high nibble)
    for (const auto& field : cpd::value_stats_fields) {
      CAPTURE(std::string(field.name));
      CHECK(q_st.*field.member == want_st.*field.member);
      CHECK(enc_st.*field.member == want_enc_st.*field.member);
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("nvfp4: the array calls are the scalar functions element by element, on every instruction set",
                          Mode, nvfp4_array_modes) {
  // NaN and inf blocks, subnormals, zeros of both signs, lengths around the chunk and the
  // block, a first_index.
  std::mt19937 gen(77);
  for (std::size_t n : {std::size_t(1), std::size_t(15), std::size_t(17), std::size_t(2047), std::size_t(2048),
                        std::size_t(2049), std::size_t(5003)}) {
    std::vector<float> x(n);
    std::lognormal_distribution<float> mag(0.0f, 3.0f);
    for (float& v : x) v = (gen() & 1 ? -1.0f : 1.0f) * mag(gen);
    for (std::size_t i = 0; i < n; i += 97) x[i] = (i / 97) % 2 ? -0.0f : 1e-42f;
    if (n > 40) {
      x[33] = std::numeric_limits<float>::infinity();
      x[n - 2] = std::numeric_limits<float>::quiet_NaN();
    }
    cpd::nvfp4_options opt;
    opt.key = {11, 4};
    opt.first_index = 1000;
    check_array_calls<Mode::value>(x, opt);
  }
}
TEST_CASE_TEMPLATE_APPLY(nvfp4_array_modes,
                         std::tuple<mode<cpd::rounding::nearest_even>, mode<cpd::rounding::stochastic>,
                                    mode<cpd::rounding::toward_zero>, mode<cpd::rounding::odd>>);

TEST_CASE("nvfp4: quotients far beyond 6 (a given tensor scale too small) saturate, on every instruction set") {
  // With s = 2^-126 or 1e-20 the block scale clamps at 448 and x / factor reaches 2^100 and
  // overflows to inf: every mode saturates to +-6.
  std::mt19937 gen(5);
  std::vector<float> x(3000);
  std::lognormal_distribution<float> mag(0.0f, 20.0f);
  for (float& v : x) v = std::min((gen() & 1 ? -1.0f : 1.0f) * mag(gen), 3e38f);
  x[17] = 3e38f;
  x[18] = -3e38f;
  x[40] = 1e-40f;
  for (float s : {cpd::nvfp4_min_tensor_scale, 1e-20f}) {
    CAPTURE(s);
    cpd::nvfp4_options opt;
    opt.tensor_scale = s;
    opt.key = {3, 1};
    check_array_calls<cpd::rounding::nearest_even>(x, opt);
    check_array_calls<cpd::rounding::stochastic>(x, opt);
    check_array_calls<cpd::rounding::toward_zero>(x, opt);
  }
}

TEST_CASE("nvfp4: stochastic rounding where the dropped fraction meets the random word, on every instruction set") {
  // Factor 1 (a 6 first in each block, tensor scale 1), then quotients 0.5 * D / 2^32 with D
  // the random word's complement ~r truncated to 24 bits, and D + 256: the core rounds up
  // exactly when D > ~r, so D == ~r (~r's low 8 bits 0, about one element in 256) stays
  // down and the others go down and up. Counters from 0, across a block of 2^32 and odd,
  // with both generators.
  const std::size_t n = 16 * 8192;
  for (cpd::random_generator g : {cpd::random_generator::v1, cpd::random_generator::v2}) {
    for (std::uint64_t first : {std::uint64_t(0), (std::uint64_t(1) << 32) - 3000, (std::uint64_t(5) << 32) + 7}) {
      CAPTURE(cpd::to_string(g));
      CAPTURE(first);
      cpd::nvfp4_options opt;
      opt.key = {2026, 12, g};
      opt.first_index = first;
      opt.tensor_scale = 1.0f;
      std::vector<float> x(n);
      std::size_t equal = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint32_t not_r = ~opt.key.bits(0, first + i);
        const std::uint64_t d = (not_r & 0xFFFFFF00u) + ((i / 16) % 2 ? 256u : 0u);
        equal += d == not_r;
        x[i] = i % 16 == 0 ? 6.0f : 0.5f * std::ldexp(static_cast<float>(d), -32);
      }
      CHECK(equal > 100);
      check_array_calls<cpd::rounding::stochastic>(x, opt);
    }
  }
}

TEST_CASE("nvfp4: every block scale code, ties and clamps, on every instruction set") {
  // the block codes of the vector loop (the integer method on b's bits) against
  // nvfp4_scale_code (the rounding core): every E4M3 value, the midpoints between neighbours
  // and their float neighbours, the clamps at 2^-6 and 448, and random amaxes, with s = 1
  std::vector<float> b;
  for (std::size_t c = 1; c + 1 < e4m3_mag.size(); ++c) {
    const float mid = (e4m3_mag[c] + e4m3_mag[c + 1]) / 2.0f;
    for (float v : {e4m3_mag[c], mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) b.push_back(v);
  }
  for (float v : {0.0f, 1e-45f, 1e-40f, 0.0078125f, 0.015625f, 447.9f, 448.0f, 464.0f, 480.0f, 1e30f, 3.4e38f})
    b.push_back(v);
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> e(-10.0f, 10.0f);
  while (b.size() < 20000) b.push_back(std::exp2(e(gen)));
  std::vector<float> x(16 * b.size(), 0.0f);
  for (std::size_t k = 0; k < b.size(); ++k) x[16 * k + k % 16] = (k % 3 ? 6.0f : -6.0f) * b[k];  // amax = 6 b
  cpd::nvfp4_options opt;
  opt.tensor_scale = 1.0f;
  for (cpd::detail::isa where : every_isa()) {
    cpd::detail::set_isa_override(where);
    std::vector<std::uint8_t> packed(x.size() / 2), scales(b.size());
    float s = 0.0f;
    cpd::nvfp4_encode(x.data(), x.size(), packed.data(), scales.data(), &s, opt);
    cpd::detail::set_isa_override(-1);
    std::size_t wrong = 0;
    for (std::size_t k = 0; k < b.size(); ++k) {
      const std::uint8_t want = cpd::nvfp4_scale_code(std::fabs(x[16 * k + k % 16]), 1.0f);
      if (scales[k] != want && wrong++ < 4) {
        CAPTURE(std::string(cpd::detail::to_string(where)));
        CAPTURE(b[k]);
        CHECK(int(scales[k]) == int(want));
      }
    }
    CHECK(wrong == 0);
  }
}

TEST_CASE("nvfp4: decode reads every byte under every scale code, on every instruction set") {
  // all 256 code pairs in blocks of 8 bytes, under each of the 128 scale codes (0x7F: NaN) and
  // two tensor scales, against nvfp4_decoded of the table's values
  std::vector<std::uint8_t> packed(256), scales(256 / 8 * 128);
  for (std::size_t j = 0; j < packed.size(); ++j) packed[j] = static_cast<std::uint8_t>(j);
  std::vector<std::uint8_t> all(packed.size() * 128);
  for (std::size_t c = 0; c < 128; ++c) {
    std::copy(packed.begin(), packed.end(), all.begin() + static_cast<std::ptrdiff_t>(c * 256));
    for (std::size_t k = 0; k < 32; ++k) scales[c * 32 + k] = static_cast<std::uint8_t>(c);
  }
  const std::size_t n = all.size() * 2 - 1;  // (an odd length: the last high nibble is not read)
  for (float s : {1.0f, 3.0e36f}) {
    for (cpd::detail::isa where : every_isa()) {
      cpd::detail::set_isa_override(where);
      std::vector<float> out(n);
      cpd::nvfp4_decode(all.data(), scales.data(), s, n, out.data());
      cpd::detail::set_isa_override(-1);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint8_t q = static_cast<std::uint8_t>((all[i / 2] >> (i % 2 ? 4 : 0)) & 0xF);
        const float v = q & 8 ? -e2m1_mag[q & 7] : e2m1_mag[q & 7];
        const float want = cpd::nvfp4_decoded(v, cpd::nvfp4_block_factor(scales[i / 16], s));
        if (bits_of(out[i]) != bits_of(want) && wrong++ < 4) {
          CAPTURE(std::string(cpd::detail::to_string(where)));
          CAPTURE(i);
          CHECK(out[i] == want);
        }
      }
      CHECK(wrong == 0);
    }
  }
}
