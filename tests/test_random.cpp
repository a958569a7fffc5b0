// SPDX-License-Identifier: MIT
// The counter-based generator of stochastic rounding (cpd/core/random.hpp): its
// definition (key per 2^32 counters), and a battery of statistical tests over
// consecutive counters (what one bulk call draws), streams and seeds. Each test
// has a threshold far in the tail (|z| > 5, p < 1e-6) and a negative control: the
// same battery rejects a Weyl sequence and a single weak round, so it can fail.

#include <cpd/host/bulk.hpp>
#include <cpd/core/random.hpp>
#include <cpd/host/detail/avx512.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace {

using gen_t = std::function<std::uint32_t(std::uint64_t)>;

/// z-score of a chi-square statistic with k degrees of freedom (Wilson-Hilferty).
double chi2_z(double chi2, double k) {
  const double a = 2.0 / (9.0 * k);
  return (std::cbrt(chi2 / k) - (1.0 - a)) / std::sqrt(a);
}

double chi2_uniform(const std::vector<double>& counts) {
  double total = 0;
  for (double c : counts) total += c;
  const double expect = total / static_cast<double>(counts.size());
  double chi2 = 0;
  for (double c : counts) chi2 += (c - expect) * (c - expect) / expect;
  return chi2;
}

struct result {
  std::string name;
  double z;             ///< the statistic as a z-score (the worst one for a family of tests)
  double limit = 5.0;   ///< |z| beyond this fails: p < 1e-6 per test (Bonferroni for families)
};

/// The battery, on counters base + [0, n).
std::vector<result> battery(const gen_t& gen, std::uint64_t base = 0) {
  constexpr std::size_t n = std::size_t(1) << 20;
  std::vector<std::uint32_t> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = gen(base + i);
  std::vector<result> out;

  // 1. Bytes: chi-square over 256 bins.
  std::vector<double> bytes(256), low(256), pairs(256);
  for (std::uint32_t v : x)
    for (int b = 0; b < 4; ++b) bytes[(v >> (8 * b)) & 0xFF] += 1;
  out.push_back({"bytes chi-square", chi2_z(chi2_uniform(bytes), 255)});

  // 2. The low 8 bits alone (stochastic rounding with k = 8 uses just these).
  for (std::uint32_t v : x) low[v & 0xFF] += 1;
  out.push_back({"low byte chi-square", chi2_z(chi2_uniform(low), 255)});

  // 3. Pairs of consecutive outputs: top nibbles, 256 bins.
  for (std::size_t i = 0; i + 1 < n; i += 2) pairs[((x[i] >> 28) << 4) | (x[i + 1] >> 28)] += 1;
  out.push_back({"pairs chi-square", chi2_z(chi2_uniform(pairs), 255)});

  // 4. Balance of every bit.
  double worst = 0;
  for (int b = 0; b < 32; ++b) {
    double ones = 0;
    for (std::uint32_t v : x) ones += (v >> b) & 1;
    worst = std::max(worst, std::abs(ones - n / 2.0) / std::sqrt(n / 4.0));
  }
  out.push_back({"bit balance (worst of 32)", worst, 5.5});

  // 5. Serial correlation at lags 1, 2 and 1024 of u = x / 2^32.
  for (std::size_t lag : {std::size_t(1), std::size_t(2), std::size_t(1024)}) {
    double s = 0;
    for (std::size_t i = 0; i + lag < n; ++i)
      s += (x[i] * 0x1p-32 - 0.5) * (x[i + lag] * 0x1p-32 - 0.5);
    const double r = s / static_cast<double>(n - lag) * 12.0;
    out.push_back({"serial correlation lag " + std::to_string(lag), r * std::sqrt(static_cast<double>(n - lag))});
  }

  // 6. Birthday spacings (Marsaglia): 256 trials of m = 4096 birthdays in 2^32 days;
  //    the number of repeated spacings is Poisson with mean m^3 / (4 * 2^32) = 4 per trial.
  double dups = 0;
  for (std::size_t t = 0; t < 256; ++t) {
    std::vector<std::uint32_t> d(x.begin() + static_cast<std::ptrdiff_t>(t * 4096),
                                 x.begin() + static_cast<std::ptrdiff_t>((t + 1) * 4096));
    std::sort(d.begin(), d.end());
    std::vector<std::uint32_t> sp(4096);
    sp[0] = d[0];
    for (std::size_t i = 1; i < 4096; ++i) sp[i] = d[i] - d[i - 1];
    std::sort(sp.begin(), sp.end());
    for (std::size_t i = 1; i < 4096; ++i) dups += sp[i] == sp[i - 1];
  }
  out.push_back({"birthday spacings", (dups - 1024.0) / std::sqrt(1024.0)});

  // 7. Avalanche over the counter: flipping counter bit j flips each output bit
  //    with probability 1/2 (4096 counters per bit; worst of 32 x 32 cells).
  double worst_av = 0;
  for (int j = 0; j < 32; ++j) {
    std::vector<double> flips(32);
    for (std::size_t i = 0; i < 4096; ++i) {
      const std::uint64_t c = base + x[i];  // spread-out counters
      const std::uint32_t d = gen(c) ^ gen(c ^ (std::uint64_t(1) << j));
      for (int b = 0; b < 32; ++b) flips[b] += (d >> b) & 1;
    }
    for (double f : flips) worst_av = std::max(worst_av, std::abs(f - 2048.0) / 32.0);
  }
  out.push_back({"avalanche (worst of 1024)", worst_av, 6.0});
  return out;
}

int failures(const std::vector<result>& rs, bool report) {
  int bad = 0;
  for (const auto& r : rs) {
    const bool fail = !(std::abs(r.z) <= r.limit);
    bad += fail;
    if (report) {
      const std::string line = r.name + ": z = " + std::to_string(r.z) + " (limit " + std::to_string(r.limit) + ")" +
                               (fail ? "  FAIL" : "");
      MESSAGE(line);
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("random_bits: definition and keys") {
  for (std::uint64_t c : {std::uint64_t(0), std::uint64_t(12345), (std::uint64_t(3) << 32) + 7, ~std::uint64_t(0)}) {
    const cpd::random_key k = cpd::make_random_key(9, 4, static_cast<std::uint32_t>(c >> 32));
    CHECK(cpd::random_bits(9, 4, c) == cpd::random_bits(k, static_cast<std::uint32_t>(c)));
    CHECK(cpd::random_stream{9, 4}(c) == cpd::random_bits(9, 4, c));
  }
  static_assert(cpd::random_bits(1, 2, 3) == cpd::random_bits(1, 2, 3), "constexpr");
  CHECK(cpd::random_bits(1, 2, 3) != cpd::random_bits(1, 2, 4));
  CHECK(cpd::random_bits(1, 2, 3) != cpd::random_bits(1, 3, 3));
  CHECK(cpd::random_bits(1, 2, 3) != cpd::random_bits(2, 2, 3));
  CHECK(cpd::random_bits(0, 0, 0) != cpd::random_bits(0, 0, std::uint64_t(1) << 32));
}

#if CPD_FAST_KERNELS
namespace {
// 16 lanes of the fast kernels' generator, stored (a function of its own: the
// intrinsics need the AVX-512 target; called only where the CPU has it).
CPD_TARGET_AVX512 void vector_bits(cpd::random_key key, std::uint32_t lo, std::uint32_t* out) {
  _mm512_storeu_si512(out, cpd::detail::fast::vrandom(key)(lo));
}
}  // namespace

TEST_CASE("the fast kernels' 16-lane generator draws random_bits' words") {
  if (cpd::detail::cpu_isa() != cpd::detail::isa::avx512) {
    MESSAGE("no AVX-512 on this CPU: the 16-lane generator is not run here");
    return;
  }
  std::uint32_t lanes[16];
  long bad = 0;
  for (std::uint64_t seed : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(0xDEADBEEF12345678)}) {
    for (std::uint32_t hi : {0u, 1u, 77u}) {
      const cpd::random_key key = cpd::make_random_key(seed, 3, hi);
      // every lane, including counters that wrap past 2^32 - 1 within one vector
      for (std::uint32_t lo : {0u, 1u, 15u, 1000u, 0x7FFFFFF8u, 0xFFFFFFF0u, 0xFFFFFFF9u, 0xFFFFFFFFu}) {
        vector_bits(key, lo, lanes);
        for (std::uint32_t j = 0; j < 16; ++j) bad += lanes[j] != cpd::random_bits(key, lo + j);
      }
    }
  }
  CHECK(bad == 0);
}
#endif

TEST_CASE("random_bits passes the battery: consecutive counters, other blocks, streams, seeds") {
  CHECK(failures(battery([](std::uint64_t c) { return cpd::random_bits(0, 0, c); }), true) == 0);
  CHECK(failures(battery([](std::uint64_t c) { return cpd::random_bits(0x1234, 5, c); }, (std::uint64_t(1) << 32) - 500000), false) == 0);
  // Neighbouring streams and seeds, interleaved: stream s at counter i, s + 1 at i...
  CHECK(failures(battery([](std::uint64_t c) { return cpd::random_bits(7, c & 1, c >> 1); }), false) == 0);
  CHECK(failures(battery([](std::uint64_t c) { return cpd::random_bits(c & 1, 3, c >> 1); }), false) == 0);
  CHECK(failures(battery([](std::uint64_t c) { return cpd::random_bits(c & 0xFF, 0, c >> 8); }), false) == 0);
}

TEST_CASE("the battery can fail: it rejects a Weyl sequence and one weak round") {
  CHECK(failures(battery([](std::uint64_t c) { return static_cast<std::uint32_t>(c * 0x9E3779B9u); }), false) > 0);
  CHECK(failures(battery([](std::uint64_t c) {
          auto v = static_cast<std::uint32_t>(c);
          v ^= v >> 16;
          return v * 0x21F0AAADu;
        }),
                 false) > 0);
  CHECK(failures(battery([](std::uint64_t c) { return static_cast<std::uint32_t>(c); }), false) > 0);
}

TEST_CASE("bulk stochastic rounding is unbiased on average") {
  using F = cpd::float8_e4m3fn;
  const std::size_t n = 1 << 18;
  for (float x : {1.03f, 1.0625f + 0.0625f * 0.3f, -3.3f, 0.0009f}) {
    std::vector<float> in(n, x), out(n);
    cpd::bulk_options o;
    o.seed = 2024;
    cpd::quantize<F, cpd::rounding::stochastic>(in.data(), out.data(), n, o);
    double mean = 0;
    for (float v : out) mean += v;
    mean /= n;
    const float lo = cpd::quantize<F, cpd::rounding::toward_zero>(x);
    const float hi = cpd::quantize<F, cpd::rounding::upward>(std::abs(x)) * (x < 0 ? -1.0f : 1.0f);
    const double p = (static_cast<double>(x) - lo) / (static_cast<double>(hi) - lo);
    const double sd = std::abs(hi - lo) * std::sqrt(p * (1 - p) / n);
    CAPTURE(x);
    CHECK(std::abs(mean - x) < 5 * sd + 1e-12);
  }
}
