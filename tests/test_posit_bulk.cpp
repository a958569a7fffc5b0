// SPDX-License-Identifier: MIT
// The bulk posit calls (cpd/host/posit_bulk.hpp) give the scalar calls' bits (held to
// the reference by test_posit) on every instruction set: ctest runs this under
// CPD_ISA=baseline, avx2 and avx512. Also: every mode, float and double, in place,
// threads, statistics, stochastic bits drawn from (seed, stream, offset + i), errors.

#include <cpd/core/random.hpp>
#include <cpd/host/posit_bulk.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

using cpd::rounding;

/// Inputs of every kind: random magnitudes across every posit's range, the specials,
/// subnormals, and values near maxpos and minpos of p.
template <class T>
std::vector<T> inputs(const cpd::posit_format& p, std::size_t n) {
  using L = std::numeric_limits<T>;
  std::mt19937_64 gen(7);
  std::vector<T> v = {T(0), -T(0), L::infinity(), -L::infinity(), L::quiet_NaN(), L::denorm_min(), L::max(),
                      -L::max(), L::min()};
  for (double s : {p.maxpos(), p.minpos()})
    if (static_cast<double>(static_cast<T>(s)) == s) v.push_back(static_cast<T>(s * 1.25));
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  const int range = sizeof(T) == 4 ? 140 : 500;
  while (v.size() < n) {
    const T x = static_cast<T>(std::ldexp(mant(gen), static_cast<int>(gen() % (2 * range + 1)) - range));
    v.push_back(gen() & 1 ? -x : x);
  }
  return v;
}

template <class T, class Code>
void check_against_scalar(const cpd::posit_format& p) {
  const std::vector<T> in = inputs<T>(p, 20011);
  const std::size_t n = in.size();
  cpd::bulk_options o;
  o.seed = 99;
  o.stream = 3;
  o.offset = 5;
  for (rounding r : cpd::all_roundings) {
    CAPTURE(p.name());
    CAPTURE(cpd::to_string(r));
    std::vector<Code> codes(n), codes_par(n);
    cpd::posit_encode(p, r, in.data(), codes.data(), n, o);
    cpd::posit_encode(cpd::execution::par(3), p, r, in.data(), codes_par.data(), n, o);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t rnd = cpd::random_bits(o.seed, o.stream, o.offset + i);
      bad += codes[i] != cpd::posit_encode(p, r, in[i], rnd, 32);
    }
    CHECK(bad == 0);
    CHECK(codes == codes_par);
    std::vector<T> values(n);
    cpd::posit_decode(cpd::execution::par(2), p, codes.data(), values.data(), n);
    bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const T want = cpd::posit_decode<T>(p, codes[i]);
      bad += std::memcmp(&values[i], &want, sizeof(T)) != 0;
    }
    CHECK(bad == 0);
    if (std::is_same_v<T, double> || p.fits_float()) {
      std::vector<T> q = in;
      cpd::posit_quantize(p, r, q.data(), q.data(), n, o);  // in place
      CHECK(std::memcmp(q.data(), values.data(), n * sizeof(T)) == 0);
    }
  }
}

/// Floats at and around every rounding boundary of posit p, sorted by magnitude (so that
/// 16 neighbouring lanes share a binade, as data does): for every positive code c (every
/// one for n <= 10, 400 random ones beyond: the sanitizer build runs this at -O0), its
/// value, the tie between c and c + 1 (the
/// (n+1)-bit posit between them: code 2c + 1 of posit<n + 1, es>), the floats next to
/// both, and the negatives of all; then zeros, infinities, NaN and float subnormals.
std::vector<float> boundaries(const cpd::posit_format& p) {
  std::vector<float> v;
  const std::uint32_t top = p.spec().max_code();
  std::mt19937 gen(11);
  const auto add = [&v](double x) {
    const float f = static_cast<float>(x);
    if (!std::isfinite(f)) return;
    for (float y : {f, std::nextafter(f, 0.0f), std::nextafter(f, 2.0f * f + 1.0f)}) {
      v.push_back(y);
      v.push_back(-y);
    }
  };
  const bool all = p.bits() <= 10;
  for (std::uint32_t i = 0; i < (all ? top : 400u); ++i) {
    const std::uint32_t c = all ? i + 1 : 1 + static_cast<std::uint32_t>(gen() % top);
    add(cpd::posit_decode<double>(p, c));
    if (p.bits() < 32 && c < top)
      add(cpd::posit_decode<double>(cpd::posit_format(p.bits() + 1, p.exponent_bits()), 2 * std::uint64_t(c) + 1));
  }
  std::sort(v.begin(), v.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); });
  using L = std::numeric_limits<float>;
  for (float x : {0.0f, -0.0f, L::infinity(), -L::infinity(), L::quiet_NaN(), L::denorm_min(), -L::min() / 3})
    v.push_back(x);
  return v;
}

/// The bulk calls on boundaries(p) against the scalar calls, every mode, in place too.
void check_boundaries(const cpd::posit_format& p) {
  CAPTURE(p.name());
  const std::vector<float> in = boundaries(p);
  const std::size_t n = in.size();
  cpd::bulk_options o;
  o.seed = 5;
  o.stream = 2;
  o.offset = 3;
  for (rounding r : cpd::all_roundings) {
    CAPTURE(cpd::to_string(r));
    std::vector<std::uint32_t> codes(n);
    cpd::posit_encode(p, r, in.data(), codes.data(), n, o);
    std::size_t bad = 0;
    for (std::size_t i = 0; i < n; ++i)
      bad += codes[i] != cpd::posit_encode(p, r, in[i], cpd::random_bits(o.seed, o.stream, o.offset + i), 32);
    CHECK(bad == 0);
    if (!p.fits_float()) continue;
    std::vector<float> q = in, values(n);
    cpd::posit_quantize(p, r, q.data(), q.data(), n, o);  // in place
    cpd::posit_decode(p, codes.data(), values.data(), n);
    bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float want = cpd::posit_decode<float>(p, codes[i]);
      bad += (std::memcmp(&values[i], &want, 4) != 0) + (std::memcmp(&q[i], &want, 4) != 0);
    }
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("posit bulk: every n and es, at every rounding boundary, every mode, this ISA") {
  // The AVX-512 and AVX2 kernels (cpd/host/detail/avx512_posit.hpp, avx2_posit.hpp) take n <= 31: their shift
  // counts, the quantize shortcut's binades, the stochastic lanes the core redoes.
  for (int n = 2; n <= 32; ++n)
    for (int es = 0; es <= 4; ++es) check_boundaries(cpd::posit_format(n, es));
}

TEST_CASE("posit bulk: encode, decode and quantize give the scalar bits, every mode, this ISA") {
  for (int es = 0; es <= 4; ++es) {
    check_against_scalar<float, std::uint8_t>(cpd::posit_format(8, es));
    check_against_scalar<double, std::uint8_t>(cpd::posit_format(8, es));
    check_against_scalar<float, std::uint16_t>(cpd::posit_format(16, es));
    check_against_scalar<double, std::uint16_t>(cpd::posit_format(12, es));
    check_against_scalar<float, std::uint32_t>(cpd::posit_format(32, es));
    check_against_scalar<double, std::uint32_t>(cpd::posit_format(32, es));
    check_against_scalar<double, std::uint32_t>(cpd::posit_format(20, es));
  }
}

TEST_CASE("posit bulk: in-place encode and decode of a narrower code, and statistics") {
  const cpd::posit_format p = cpd::posit16es1;
  std::vector<float> v = {0.0f, 1.0f, -3.0f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), 1e-30f};
  const std::vector<float> in = v;
  cpd::value_stats st;
  cpd::bulk_options o;
  o.stats = &st;
  std::vector<std::uint16_t> codes(v.size());
  cpd::posit_encode(p, rounding::nearest_even, in.data(), codes.data(), in.size(), o);
  CHECK(st.count == 8);
  CHECK(st.zeros == 1);
  CHECK(st.overflow == 2);
  CHECK(st.saturated == 2);
  CHECK(st.nan == 1);
  CHECK(st.nan_inputs == 1);
  CHECK(st.inf_inputs == 1);
  CHECK(st.underflow == 0);
  CHECK(codes[3] == 0x7FFF);
  CHECK(codes[4] == 0x8001);
  CHECK(codes[7] == 0x0001);  // 1e-30 is below minpos = 2^-28: minpos, never 0
  // in place from float to uint16 codes and back
  cpd::posit_encode(p, rounding::nearest_even, v.data(), reinterpret_cast<std::uint16_t*>(v.data()), v.size());
  CHECK(std::memcmp(v.data(), codes.data(), codes.size() * 2) == 0);
  std::vector<std::uint16_t> c2 = codes;
  c2.resize(2 * c2.size());  // room for the floats
  cpd::posit_decode(p, c2.data(), reinterpret_cast<float*>(c2.data()), codes.size(), o);
  CHECK(st.zeros == 1);
  CHECK(st.nan_inputs == 2);  // NaN and inf became NaR
  const float* back = reinterpret_cast<const float*>(c2.data());
  CHECK(back[1] == 1.0f);
  CHECK(back[2] == -3.0f);
  CHECK(back[3] == static_cast<float>(p.maxpos()));
}

TEST_CASE("posit bulk: errors name the argument") {
  std::vector<float> x(4, 1.0f);
  std::vector<std::uint8_t> c8(4);
  std::vector<std::uint16_t> c16 = {1, 2, 0x100, 3};
  CHECK_THROWS_WITH_AS(cpd::posit_encode(cpd::posit16es1, rounding::nearest_even, x.data(), c8.data(), 4),
                       "cpd::posit_encode: codes of posit16es1 have 16 bits; the output type has 8",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cpd::posit_quantize(cpd::posit32es2, rounding::nearest_even, x.data(), x.data(), 4),
                       "cpd::posit_quantize: posit32es2 has values that are not floats; use double",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(cpd::posit_decode(cpd::posit8es0, c16.data(), x.data(), 4),
                       "cpd::posit_decode: code 256 at index 2 has bits set above the 8 bits of posit8es0: it is no "
                       "code of the format",
                       std::invalid_argument);
  cpd::bulk_options o;
  o.scale_exponent = 3;
  CHECK_THROWS_WITH_AS(cpd::posit_quantize(cpd::posit8es0, rounding::nearest_even, x.data(), x.data(), 4, o),
                       "cpd::posit_quantize: bulk_options::scale_exponent 3 is not yet supported for posits (use "
                       "bulk_options::scale)",
                       std::invalid_argument);
  o = {};
  o.random_bits = 0;
  CHECK_THROWS_AS(cpd::posit_quantize(cpd::posit8es0, rounding::stochastic, x.data(), x.data(), 4, o),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::posit_quantize(cpd::posit8es0, static_cast<rounding>(9), x.data(), x.data(), 4),
                  std::invalid_argument);
  CHECK_THROWS_AS(cpd::posit_quantize(cpd::posit8es0, rounding::nearest_even, x.data(), x.data() + 1, 3),
                  std::invalid_argument);
}

TEST_CASE("posit bulk: a float scale rounds x * scale and multiplies the result by its inverse") {
  std::vector<double> x = {0.3, -7.0, 1e-3};
  std::vector<double> q(3);
  cpd::bulk_options o;
  o.scale = 8.0f;
  cpd::posit_quantize(cpd::posit8es0, rounding::nearest_even, x.data(), q.data(), 3, o);
  for (std::size_t i = 0; i < 3; ++i) CHECK(q[i] == cpd::posit_quantize(cpd::posit8es0, x[i] * 8.0) / 8.0);
}
