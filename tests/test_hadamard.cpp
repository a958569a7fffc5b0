// SPDX-License-Identifier: MIT
// Random Hadamard rotations (cpd/host/hadamard.hpp) against the definition: the matrix
// product with Sylvester's H_b written entry by entry, H[i][j] = (-1)^popcount(i & j), in long
// double, not through butterflies; round trips, the tail, non-finite blocks, threads, the
// floating-point environment and bad input.

#include <cpd/host/hadamard.hpp>

#include <doctest/doctest.h>

#include <bitset>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

template <class T>
std::vector<T> heavy_tailed(std::size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<T> x(n);
  for (T& v : x) v = static_cast<T>(d(g) * std::exp(2.0 * d(g)));
  return x;
}

int sign_of(const cpd::hadamard_options& o, std::size_t j) { return (o.key(j) >> 31) != 0 ? -1 : 1; }

/// The rotation by its definition, in long double: y = H (s . x) / sqrt(b), or its inverse
/// x = s . (H y / sqrt(b)), per block; the tail copied.
template <class T>
std::vector<long double> reference(const std::vector<T>& x, const cpd::hadamard_options& o) {
  const std::size_t b = o.block, blocks = x.size() / b;
  std::vector<long double> y(x.begin(), x.end());
  const long double c = 1.0L / std::sqrt(static_cast<long double>(b));
  for (std::size_t k = 0; k < blocks; ++k) {
    for (std::size_t i = 0; i < b; ++i) {
      long double s = 0;
      for (std::size_t j = 0; j < b; ++j) {
        const int h = (std::bitset<32>(i & j).count() % 2) != 0 ? -1 : 1;
        const long double xj = static_cast<long double>(x[k * b + j]) * (o.inverse ? 1 : sign_of(o, j));
        s += h * xj;
      }
      y[k * b + i] = s * c * (o.inverse ? sign_of(o, i) : 1);
    }
  }
  return y;
}

template <class T>
std::uint64_t bits(T v) {
  if constexpr (sizeof(T) == 4) {
    std::uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
  } else {
    std::uint64_t u;
    std::memcpy(&u, &v, 8);
    return u;
  }
}

/// Every value within the butterflies' error bound of the definition: log2(b) additions
/// each off by at most half an ulp of a partial sum (no partial exceeds the block's sum of
/// magnitudes), then the scale's two roundings.
template <class T>
void check_against_reference(std::size_t n, const cpd::hadamard_options& o, unsigned seed) {
  const std::vector<T> x = heavy_tailed<T>(n, seed);
  std::vector<T> y(n);
  const cpd::hadamard_stats st = cpd::hadamard_rotate(x.data(), y.data(), n, o);
  CHECK(st.blocks == n / o.block);
  CHECK(st.nonfinite_blocks == 0);
  const std::vector<long double> ref = reference(x, o);
  const long double u = std::numeric_limits<T>::epsilon() / 2;
  const std::size_t b = o.block;
  const int stages = static_cast<int>(std::log2(static_cast<double>(b)));
  for (std::size_t k = 0; k < n / b; ++k) {
    long double sum = 0;
    for (std::size_t j = 0; j < b; ++j) sum += std::fabs(static_cast<long double>(x[k * b + j]));
    const long double bound = (stages + 3) * u * sum / std::sqrt(static_cast<long double>(b)) * 1.01L;
    for (std::size_t j = 0; j < b; ++j) {
      const long double e = std::fabs(static_cast<long double>(y[k * b + j]) - ref[k * b + j]);
      if (e > bound) {
        FAIL_CHECK("block " << k << " value " << j << ": " << y[k * b + j] << " vs " << static_cast<double>(ref[k * b + j]));
        return;
      }
    }
  }
  for (std::size_t i = n / b * b; i < n; ++i) CHECK(bits(y[i]) == bits(x[i]));
}

}  // namespace

TEST_CASE("hadamard: every block size 2 .. 1024 against the matrix product, float and double, both directions") {
  for (std::size_t b = 2; b <= 1024; b *= 2) {
    for (bool inverse : {false, true}) {
      cpd::hadamard_options o;
      o.block = b;
      o.key = {static_cast<std::uint64_t>(b) * 7 + 1, 3};
      o.inverse = inverse;
      CAPTURE(b);
      CAPTURE(inverse);
      check_against_reference<float>(3 * b + b / 2 + 1, o, static_cast<unsigned>(b));
      check_against_reference<double>(2 * b + 1, o, static_cast<unsigned>(b) + 1);
    }
  }
  // b = 16 runs eight blocks at a time, then one by one: 21 blocks and a tail
  for (bool inverse : {false, true}) {
    cpd::hadamard_options o;
    o.key = {5, 6};
    o.inverse = inverse;
    check_against_reference<float>(16 * 21 + 5, o, 21);
    check_against_reference<double>(16 * 21 + 5, o, 22);
  }
}

TEST_CASE("hadamard: a unit vector becomes a column of H, exactly where log2 b is even") {
  for (std::size_t b : {4u, 16u, 64u, 256u}) {
    cpd::hadamard_options o;
    o.block = b;
    o.key = {42, 0};
    for (std::size_t k : {std::size_t(0), std::size_t(1), b / 2 + 1, b - 1}) {
      std::vector<float> x(b, 0.0f), y(b);
      x[k] = 1.0f;
      cpd::hadamard_rotate(x.data(), y.data(), b, o);
      const float c = std::ldexp(1.0f, -static_cast<int>(std::log2(static_cast<double>(b))) / 2);
      for (std::size_t i = 0; i < b; ++i) {
        const int h = (std::bitset<32>(i & k).count() % 2) != 0 ? -1 : 1;
        CHECK(y[i] == static_cast<float>(h * sign_of(o, k)) * c);
      }
    }
  }
}

TEST_CASE("hadamard: the inverse undoes the rotation; exactly for small integers where log2 b is even") {
  for (std::size_t b : {16u, 64u, 256u}) {
    cpd::hadamard_options o;
    o.block = b;
    o.key = {9, 1};
    std::mt19937 g(5);
    std::uniform_int_distribution<int> d(-1000, 1000);
    std::vector<float> x(4 * b), y(4 * b), z(4 * b);
    for (float& v : x) v = static_cast<float>(d(g));
    cpd::hadamard_rotate(x.data(), y.data(), x.size(), o);
    o.inverse = true;
    cpd::hadamard_rotate(y.data(), z.data(), y.size(), o);
    for (std::size_t i = 0; i < x.size(); ++i) CHECK(z[i] == x[i]);
  }
  // any input, any b: within a few ulps of the block's largest magnitude
  for (std::size_t b : {32u, 128u, 512u}) {
    cpd::hadamard_options o;
    o.block = b;
    const std::vector<double> x = heavy_tailed<double>(3 * b, 11);
    std::vector<double> y(x.size()), z(x.size());
    cpd::hadamard_rotate(x.data(), y.data(), x.size(), o);
    o.inverse = true;
    cpd::hadamard_rotate(y.data(), z.data(), y.size(), o);
    for (std::size_t k = 0; k < 3; ++k) {
      double m = 0;
      for (std::size_t j = 0; j < b; ++j) m = std::max(m, std::fabs(x[k * b + j]));
      for (std::size_t j = 0; j < b; ++j) CHECK(std::fabs(z[k * b + j] - x[k * b + j]) <= 64 * m * 0x1p-52 * std::sqrt(b));
    }
  }
}

TEST_CASE("hadamard: the norm of every block is kept, and a sum of rotations is the rotation of the sum") {
  cpd::hadamard_options o;
  o.block = 64;
  o.key = {3, 4};
  const std::vector<double> a = heavy_tailed<double>(640, 1), c = heavy_tailed<double>(640, 2);
  std::vector<double> ra(640), rc(640), s(640), rs(640);
  cpd::hadamard_rotate(a.data(), ra.data(), 640, o);
  cpd::hadamard_rotate(c.data(), rc.data(), 640, o);
  for (std::size_t i = 0; i < 640; ++i) s[i] = a[i] + c[i];
  cpd::hadamard_rotate(s.data(), rs.data(), 640, o);
  for (std::size_t k = 0; k < 10; ++k) {
    long double nx = 0, ny = 0;
    for (std::size_t j = 0; j < 64; ++j) {
      nx += static_cast<long double>(a[k * 64 + j]) * a[k * 64 + j];
      ny += static_cast<long double>(ra[k * 64 + j]) * ra[k * 64 + j];
    }
    CHECK(std::fabs(static_cast<double>(ny / nx) - 1) < 1e-14);
  }
  double m = 0;
  for (double v : s) m = std::max(m, std::fabs(v));
  for (std::size_t i = 0; i < 640; ++i) CHECK(std::fabs(ra[i] + rc[i] - rs[i]) <= 1e-13 * m);
}

TEST_CASE("hadamard: the signs come from the key, and another seed rotates differently") {
  cpd::hadamard_options o;
  o.block = 2;
  o.key = {1, 0};
  const float x[2] = {3.0f, 5.0f};
  float y[2];
  cpd::hadamard_rotate(x, y, 2, o);
  const float c = static_cast<float>(1 / std::sqrt(2.0));
  const float a = static_cast<float>(sign_of(o, 0)) * 3.0f, b = static_cast<float>(sign_of(o, 1)) * 5.0f;
  CHECK(y[0] == (a + b) * c);
  CHECK(y[1] == (a - b) * c);
  std::vector<float> u = heavy_tailed<float>(256, 3), v1(256), v2(256);
  o.block = 256;
  cpd::hadamard_rotate(u.data(), v1.data(), 256, o);
  o.key.seed = 2;
  cpd::hadamard_rotate(u.data(), v2.data(), 256, o);
  CHECK(v1 != v2);
  int negative = 0;
  for (std::size_t j = 0; j < 4096; ++j) negative += sign_of(o, j) < 0;
  CHECK(negative > 1900);
  CHECK(negative < 2200);
}

TEST_CASE("hadamard: in place, threads and the floating-point environment give the same bits") {
  cpd::hadamard_options o;
  o.block = 128;
  o.key = {77, 5};
  const std::vector<float> x = heavy_tailed<float>(128 * 100 + 17, 9);
  std::vector<float> y(x.size()), z = x, w(x.size());
  cpd::hadamard_rotate(x.data(), y.data(), x.size(), o);
  cpd::hadamard_rotate(z.data(), z.data(), z.size(), o);
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(bits(z[i]) == bits(y[i]));
  for (unsigned t : {2u, 3u, 7u}) {
    cpd::execution::parallel_policy p;
    p.threads = t;
    p.min_chunk = 1;
    const cpd::hadamard_stats st = cpd::hadamard_rotate(p, x.data(), w.data(), x.size(), o);
    CHECK(st.blocks == 100);
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(bits(w[i]) == bits(y[i]));
  }
  for (int mode : {FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO}) {
    std::fesetround(mode);
    cpd::hadamard_rotate(x.data(), w.data(), x.size(), o);
    std::fesetround(FE_TONEAREST);
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(bits(w[i]) == bits(y[i]));
  }
}

TEST_CASE("hadamard: an inf or NaN spreads over its own block only, and is counted; the tail passes as it is") {
  cpd::hadamard_options o;
  o.block = 16;
  std::vector<float> x = heavy_tailed<float>(16 * 9 + 3, 4), y(x.size());
  x[5] = std::numeric_limits<float>::infinity();
  x[40] = std::numeric_limits<float>::quiet_NaN();
  std::uint32_t payload = 0x7FA00001u;  // a signalling-looking NaN in the tail keeps its bits
  std::memcpy(&x[145], &payload, 4);
  const cpd::hadamard_stats st = cpd::hadamard_rotate(x.data(), y.data(), x.size(), o);
  CHECK(st.blocks == 9);
  CHECK(st.nonfinite_blocks == 2);
  for (std::size_t i = 0; i < 16; ++i) CHECK(!std::isfinite(y[i]));
  for (std::size_t i = 32; i < 48; ++i) CHECK(std::isnan(y[i]));
  for (std::size_t i = 16; i < 32; ++i) CHECK(std::isfinite(y[i]));
  for (std::size_t i = 48; i < 144; ++i) CHECK(std::isfinite(y[i]));
  for (std::size_t i = 144; i < 147; ++i) CHECK(bits(y[i]) == bits(x[i]));
  // finite inputs whose sum passes float's range: the block holds an inf, and is counted
  std::vector<float> big(16, 3e38f), r(16);
  CHECK(cpd::hadamard_rotate(big.data(), r.data(), 16, o).nonfinite_blocks == 1);
  bool any_inf = false;
  for (float v : r) any_inf = any_inf || std::isinf(v);
  CHECK(any_inf);
}

TEST_CASE("hadamard: bad input is refused with a message") {
  std::vector<float> x(64), y(64);
  for (std::size_t b : {0u, 1u, 3u, 24u, 131072u}) {
    cpd::hadamard_options o;
    o.block = b;
    CHECK_THROWS_AS(cpd::hadamard_rotate(x.data(), y.data(), 64, o), std::invalid_argument);
  }
  cpd::hadamard_options o;
  CHECK_THROWS_AS(cpd::hadamard_rotate<float>(nullptr, y.data(), 64, o), std::invalid_argument);
  CHECK_THROWS_AS(cpd::hadamard_rotate(x.data(), x.data() + 1, 32, o), std::invalid_argument);
  CHECK(cpd::hadamard_rotate<float>(nullptr, nullptr, 0, o).blocks == 0);
  CHECK(cpd::hadamard_rotate(x.data(), y.data(), 15, o).blocks == 0);  // all tail
}
