// SPDX-License-Identifier: MIT
// The counter-based generators of stochastic rounding (cpd/core/random.hpp), v1 and v2:
// their definitions (key per 2^32 counters), known answers, and a battery of statistical tests over
// consecutive counters (what one bulk call draws), streams and seeds. Each test
// has a threshold far in the tail (|z| > 5, p < 1e-6) and a negative control: the
// same battery rejects a Weyl sequence and a single weak round, so it can fail.

#include <cpd/host/bulk.hpp>
#include <cpd/core/random.hpp>
#include <cpd/host/detail/avx2_random.hpp>
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

TEST_CASE("random_bits: definition and keys, both generators") {
  for (cpd::random_generator g : {cpd::random_generator::v1, cpd::random_generator::v2}) {
    CAPTURE(std::string(cpd::to_string(g)));
    for (std::uint64_t c : {std::uint64_t(0), std::uint64_t(12345), (std::uint64_t(3) << 32) + 7, ~std::uint64_t(0)}) {
      const cpd::random_key k = cpd::make_random_key(9, 4, static_cast<std::uint32_t>(c >> 32), g);
      CHECK(cpd::random_bits(9, 4, c, g) == cpd::random_bits(k, static_cast<std::uint32_t>(c)));
      CHECK(cpd::random_stream{9, 4, g}(c) == cpd::random_bits(9, 4, c, g));
      CHECK(cpd::random_stream{9, 4, g}.key(static_cast<std::uint32_t>(c >> 32)).k0 == k.k0);
    }
    CHECK(cpd::random_bits(1, 2, 3, g) != cpd::random_bits(1, 2, 4, g));
    CHECK(cpd::random_bits(1, 2, 3, g) != cpd::random_bits(1, 3, 3, g));
    CHECK(cpd::random_bits(1, 2, 3, g) != cpd::random_bits(2, 2, 3, g));
    CHECK(cpd::random_bits(5, 0, 0, g) != cpd::random_bits(5, 0, std::uint64_t(1) << 32, g));
    CHECK(cpd::random_stream{1, 2, g}.with_stream(7)(3) == cpd::random_bits(1, 7, 3, g));
    CHECK(cpd::random_stream{1, 2, g}.bits(5, 3) == cpd::random_bits(1, 7, 3, g));
  }
  static_assert(cpd::random_bits(1, 2, 3) == cpd::random_bits(1, 2, 3), "constexpr");
  CHECK(cpd::random_bits(1, 2, 3) == cpd::random_bits(1, 2, 3, cpd::default_generator));
  CHECK(cpd::random_stream{}.generator == cpd::default_generator);
  static_assert(cpd::default_generator == cpd::random_generator::v2, "v2 is the default (issue 34)");
  CHECK(cpd::bulk_options{}.generator == cpd::random_generator::v2);
}

TEST_CASE("random_bits: known answers of v1 (cpd 1.x's bits) and v2") {
  struct known {
    std::uint64_t seed, stream, counter;
    std::uint32_t v1, v2;
  };
  // v1: the words every result before generator v2 drew. v2: computed outside cpd (Python,
  // the definition in docs/random.md).
  const known table[] = {
      {0u, 0u, 0x0u, 0x00000000u, 0x7B1DCDAFu},
      {0u, 0u, 0x1u, 0xCAFEBA47u, 0xE220A839u},
      {1u, 2u, 0x3u, 0x0B1CB866u, 0x5079D542u},
      {42u, 7u, 0x3E8u, 0x7404A46Fu, 0xC0A087F5u},
      {0xDEADBEEF12345678u, 5u, 0x300000007u, 0x98541789u, 0x1514CCF6u},
      {9u, 4u, 0xFFFFFFFFFFFFFFFFu, 0x20937796u, 0x79D91C39u},
  };
  for (const known& k : table) {
    CAPTURE(k.counter);
    CHECK(cpd::random_bits(k.seed, k.stream, k.counter, cpd::random_generator::v1) == k.v1);
    CHECK(cpd::random_bits(k.seed, k.stream, k.counter, cpd::random_generator::v2) == k.v2);
  }
}

TEST_CASE("v2 is SplitMix64: seed 0, stream 0 draws splitmix64.c's sequence seeded with 0, halves low first") {
  // Vigna's reference (prng.di.unimi.it/splitmix64.c), written out here: x += gamma, then mix.
  std::uint64_t x = 0;
  const auto next = [&x] {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
    z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
    return z ^ (z >> 31);
  };
  const std::uint64_t first = next();
  CHECK(first == 0xe220a8397b1dcdafu);  // the published first output of seed 0
  long bad = static_cast<long>(cpd::random_bits(0, 0, 0, cpd::random_generator::v2) != 0x7b1dcdafu) +
             static_cast<long>(cpd::random_bits(0, 0, 1, cpd::random_generator::v2) != 0xe220a839u);
  for (std::uint64_t p = 1; p < 4096; ++p) {
    const std::uint64_t z = next();
    bad += cpd::random_bits(0, 0, 2 * p, cpd::random_generator::v2) != static_cast<std::uint32_t>(z);
    bad += cpd::random_bits(0, 0, 2 * p + 1, cpd::random_generator::v2) != static_cast<std::uint32_t>(z >> 32);
  }
  CHECK(bad == 0);
}

TEST_CASE("fill_random_bits and random_bits4 draw random_bits' words, any start and length") {
  std::uint32_t got[300];
  long bad = 0;
  for (cpd::random_generator g : {cpd::random_generator::v1, cpd::random_generator::v2}) {
    const cpd::random_key key = cpd::make_random_key(11, 3, 5, g);
    for (std::uint32_t lo : {0u, 1u, 2u, 7u, 0xFFFFFED0u, 0xFFFFFED7u, 0xFFFFFFD0u, 0xFFFFFFD7u}) {
      // (v2 hashes 64 pairs at a time on little-endian hosts: lengths across 128 words too)
      for (std::uint32_t n : {0u, 1u, 2u, 3u, 16u, 39u, 40u, 128u, 129u, 130u, 257u, 300u}) {
        if (std::uint64_t(lo) + n > (std::uint64_t(1) << 32)) continue;
        if (g == cpd::random_generator::v1) cpd::detail::fill_random_bits<cpd::random_generator::v1>(key, lo, n, got);
        else cpd::detail::fill_random_bits<cpd::random_generator::v2>(key, lo, n, got);
        for (std::uint32_t j = 0; j < n; ++j) bad += got[j] != cpd::random_bits(key, lo + j);
      }
    }
    for (std::uint32_t lo : {0u, 1u, 2u, 3u, 1001u, 0xFFFFFFFCu}) {  // a GPU thread's four
      std::uint32_t four[4];
      cpd::detail::random_bits4(key, lo, four);
      for (std::uint32_t j = 0; j < 4; ++j) bad += four[j] != cpd::random_bits(key, lo + j);
    }
  }
  CHECK(bad == 0);
}

#if CPD_FAST_KERNELS
namespace {
// 16 lanes of the fast kernels' generators, stored (functions of their own: the intrinsics
// need the AVX-512 target; called only where the CPU has it): at(lo), and `runs` vectors of
// from(lo) then next().
template <cpd::random_generator G>
CPD_TARGET_AVX512 void vector_bits(cpd::random_key key, std::uint32_t lo, std::uint32_t* out, int runs) {
  cpd::detail::fast::vrandom<G> gen(key);
  _mm512_storeu_si512(out, gen.at(lo));
  gen.from(lo);
  for (int r = 0; r < runs; ++r) _mm512_storeu_si512(out + 16 * (r + 1), gen.next());
}

// The vector generators' lanes against random_bits: L lanes drawn by draw(key, lo, out, runs)
// (vector_bits or vector_bits8): every lane of at() and of `runs` next() (64 words), from
// even and odd counters; v1 also where the counters wrap past 2^32 - 1 within one vector
// (v2's lanes are the scalar words within the key's block only, all that a kernel draws).
template <cpd::random_generator G, std::uint32_t L, class Draw>
long vector_mismatches(Draw draw) {
  constexpr int runs = 64 / L;
  std::uint32_t lanes[L + 64];
  long bad = 0;
  for (std::uint64_t seed : {std::uint64_t(0), std::uint64_t(1), std::uint64_t(0xDEADBEEF12345678)}) {
    for (std::uint32_t hi : {0u, 1u, 77u}) {
      const cpd::random_key key = cpd::make_random_key(seed, 3, hi, G);
      for (std::uint32_t lo : {0u, 1u, L - 1, 1000u, 0x7FFFFFF8u, 0xFFFFFFA0u, 0xFFFFFFBFu - L}) {
        draw(key, lo, lanes, runs);
        for (std::uint32_t j = 0; j < L; ++j) bad += lanes[j] != cpd::random_bits(key, lo + j);
        for (std::uint32_t j = 0; j < 64; ++j) bad += lanes[L + j] != cpd::random_bits(key, lo + j);
      }
      if (G == cpd::random_generator::v1) {
        for (std::uint32_t lo : {0u - L, 0xFFFFFFF9u, 0xFFFFFFFFu}) {
          draw(key, lo, lanes, 0);
          for (std::uint32_t j = 0; j < L; ++j) bad += lanes[j] != cpd::random_bits(key, lo + j);
        }
      }
    }
  }
  return bad;
}

// 8 lanes of the AVX2 generators (cpd/host/detail/avx2_random.hpp), as vector_bits.
template <cpd::random_generator G>
CPD_TARGET_AVX2 void vector_bits8(cpd::random_key key, std::uint32_t lo, std::uint32_t* out, int runs) {
  cpd::detail::fast::vrandom8<G> gen(key);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), gen.at(lo));
  gen.from(lo);
  for (int r = 0; r < runs; ++r) _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8 * (r + 1)), gen.next());
}
}  // namespace

TEST_CASE("the fast kernels' 16-lane generators draw random_bits' words") {
  if (cpd::detail::cpu_isa() != cpd::detail::isa::avx512) {
    MESSAGE("no AVX-512 on this CPU: the 16-lane generators are not run here");
    return;
  }
  using cpd::random_generator;
  CHECK(vector_mismatches<random_generator::v1, 16>(vector_bits<random_generator::v1>) == 0);
  CHECK(vector_mismatches<random_generator::v2, 16>(vector_bits<random_generator::v2>) == 0);
}

TEST_CASE("the AVX2 kernels' 8-lane generators draw random_bits' words") {
  if (cpd::detail::cpu_isa() == cpd::detail::isa::baseline) {
    MESSAGE("no AVX2 on this CPU: the 8-lane generators are not run here");
    return;
  }
  using cpd::random_generator;
  CHECK(vector_mismatches<random_generator::v1, 8>(vector_bits8<random_generator::v1>) == 0);
  CHECK(vector_mismatches<random_generator::v2, 8>(vector_bits8<random_generator::v2>) == 0);
}
#endif

TEST_CASE("random_bits passes the battery: consecutive counters, other blocks, streams, seeds") {
  for (cpd::random_generator g : {cpd::random_generator::v1, cpd::random_generator::v2}) {
    CAPTURE(std::string(cpd::to_string(g)));
    MESSAGE("generator " << cpd::to_string(g) << ", seed 0, stream 0:");
    CHECK(failures(battery([g](std::uint64_t c) { return cpd::random_bits(0, 0, c, g); }), true) == 0);
    CHECK(failures(battery([g](std::uint64_t c) { return cpd::random_bits(0x1234, 5, c, g); },
                           (std::uint64_t(1) << 32) - 500000),
                   false) == 0);
    // Neighbouring streams and seeds, interleaved: stream s at counter i, s + 1 at i...
    CHECK(failures(battery([g](std::uint64_t c) { return cpd::random_bits(7, c & 1, c >> 1, g); }), false) == 0);
    CHECK(failures(battery([g](std::uint64_t c) { return cpd::random_bits(c & 1, 3, c >> 1, g); }), false) == 0);
    CHECK(failures(battery([g](std::uint64_t c) { return cpd::random_bits(c & 0xFF, 0, c >> 8, g); }), false) == 0);
  }
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
