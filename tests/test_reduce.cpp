// SPDX-License-Identifier: MIT
// Low-precision reduction: rounded addition, Kahan, GEMM, error feedback, and
// simulate_allreduce in every order against plain loops written here, which
// pass messages between per-rank buffers the way a real MPI ring would.

#include <cpd/exchange/simulate.hpp>
#include <cpd/reduce/reduce.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace {

using R = cpd::rounding;

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (bits_of(a[i]) != bits_of(b[i])) {
      MESSAGE("first difference at ", i, ": ", a[i], " (", bits_of(a[i]), ") vs ", b[i], " (", bits_of(b[i]), ")");
      return false;
    }
  return true;
}

// The reference rounded addition: the double sum of two values of a narrow
// format is exact, so one quantize of it is the correctly rounded sum; a NaN
// sum is the canonical +qNaN.
template <class F, R Mode = R::nearest_even>
float ref_add(float a, float b, std::uint32_t rnd = 0) {
  const float r = cpd::quantize<F, Mode>(static_cast<double>(a) + static_cast<double>(b), rnd);
  return std::isnan(r) ? std::numeric_limits<float>::quiet_NaN() : r;
}

// Worker r's value i, scaled by 2^k and rounded to F; with stochastic rounding the
// random bits of the input quantization (step -1, rank r, k = 0: stream (0*W + r)*8).
template <class F, R Mode = R::nearest_even>
float ref_load(const std::vector<std::vector<float>>& x, int r, std::size_t i, int k, cpd::random_stream key, int w) {
  const std::uint32_t rnd =
      Mode == R::stochastic
          ? cpd::detail::reduce_random_bits(key.seed, key.stream + (static_cast<std::uint64_t>(r)) * 8u, i,
                                            key.generator)
          : 0u;
  return cpd::quantize<F, Mode>(static_cast<double>(x[static_cast<std::size_t>(r)][i]) * std::ldexp(1.0, k), rnd);
  (void)w;
}

template <R Mode>
std::uint32_t ref_bits(cpd::random_stream key, int step, int rank, int sub, int w, std::size_t i) {
  if (Mode != R::stochastic) return 0;
  const std::uint64_t s = key.stream + ((static_cast<std::uint64_t>(step + 1) * w + rank) * 8u + sub);
  return cpd::detail::reduce_random_bits(key.seed, s, i, key.generator);
}

std::vector<std::vector<float>> random_workers(int w, std::size_t n, unsigned seed, double spread = 8.0) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> e(0.0, spread);
  std::uniform_real_distribution<double> m(-1.0, 1.0);
  std::vector<std::vector<float>> x(static_cast<std::size_t>(w), std::vector<float>(n));
  for (auto& v : x)
    for (auto& y : v) y = static_cast<float>(m(rng) * std::exp2(std::round(e(rng))) * 1e-3);
  return x;
}

std::vector<const float*> ptrs(const std::vector<std::vector<float>>& x) {
  std::vector<const float*> p;
  for (auto& v : x) p.push_back(v.data());
  return p;
}

// --- hand-written orders ---------------------------------------------------

// Sequential: rank 0 adds ranks 1..W-1 in order; addition r-1 is performed by rank 0.
template <class F, R Mode = R::nearest_even>
std::vector<float> hand_sequential(const std::vector<std::vector<float>>& x, std::size_t n, int k,
                                   cpd::random_stream key = {}) {
  const int w = static_cast<int>(x.size());
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    float s = ref_load<F, Mode>(x, 0, i, k, key, w);
    for (int r = 1; r < w; ++r)
      s = ref_add<F, Mode>(s, ref_load<F, Mode>(x, r, i, k, key, w), ref_bits<Mode>(key, r - 1, 0, 0, w, i));
    out[i] = static_cast<float>(static_cast<double>(s) * std::ldexp(1.0, -k));
  }
  return out;
}

// A ring of W ranks, each with its own buffer. Reduce-scatter: at step t = 0..W-2
// rank r sends chunk (r - t) mod W to rank r + 1, which replaces its own values of
// that chunk by Q(received + own). Rank r then holds chunk (r + 1) mod W complete;
// all-gather copies it to everyone.
template <class F, R Mode = R::nearest_even>
std::vector<float> hand_ring(const std::vector<std::vector<float>>& x, std::size_t n, int k, cpd::random_stream key = {}) {
  const int w = static_cast<int>(x.size());
  auto chunk_begin = [&](int c) {  // the first n % w chunks hold one more element
    const std::size_t base = n / w, extra = n % w;
    return static_cast<std::size_t>(c) * base + std::min<std::size_t>(static_cast<std::size_t>(c), extra);
  };
  std::vector<std::vector<float>> buf(static_cast<std::size_t>(w), std::vector<float>(n));
  for (int r = 0; r < w; ++r)
    for (std::size_t i = 0; i < n; ++i) buf[r][i] = ref_load<F, Mode>(x, r, i, k, key, w);
  for (int t = 0; t < w - 1; ++t) {
    std::vector<std::vector<float>> msg(static_cast<std::size_t>(w));
    for (int r = 0; r < w; ++r) {
      const int c = ((r - t) % w + w) % w;
      msg[r].assign(buf[r].begin() + static_cast<std::ptrdiff_t>(chunk_begin(c)),
                    buf[r].begin() + static_cast<std::ptrdiff_t>(chunk_begin(c + 1)));
    }
    for (int r = 0; r < w; ++r) {
      const int from = (r - 1 + w) % w;
      const int c = ((from - t) % w + w) % w;
      for (std::size_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i)
        buf[r][i] = ref_add<F, Mode>(msg[from][i - chunk_begin(c)], buf[r][i], ref_bits<Mode>(key, t, r, 0, w, i));
    }
  }
  std::vector<float> out(n);
  for (int c = 0; c < w; ++c) {
    const int holder = (c - 1 + w) % w;
    for (std::size_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i)
      out[i] = static_cast<float>(static_cast<double>(buf[holder][i]) * std::ldexp(1.0, -k));
  }
  return out;
}

// Two steps: chunk c's owner (rank c) receives every rank's quantized values and adds
// them in rank order in the accumulator A (float32: float additions; another format:
// the exact double sum rounded to A, nearest-even, for one addition of two values of A
// is exact in double), then rounds the sum to F once (step 0, rank c, k = 0).
template <class F, R Mode = R::nearest_even, class A = cpd::float_t<8, 23>>
std::vector<float> hand_two_step(const std::vector<std::vector<float>>& x, std::size_t n, int k,
                                 cpd::random_stream key = {}) {
  const int w = static_cast<int>(x.size());
  std::vector<float> out(n);
  for (int c = 0; c < w; ++c) {
    const std::size_t base = n / w, extra = n % w;
    const std::size_t b = c * base + std::min<std::size_t>(c, extra), e = b + base + (std::size_t(c) < extra);
    for (std::size_t i = b; i < e; ++i) {
      float s = ref_load<F, Mode>(x, 0, i, k, key, w);
      for (int r = 1; r < w; ++r) {
        const float q = ref_load<F, Mode>(x, r, i, k, key, w);
        if constexpr (std::is_same_v<A, cpd::float_t<8, 23>>) s = s + q;
        else s = cpd::quantize<A>(static_cast<double>(s) + static_cast<double>(q));
      }
      s = cpd::quantize<F, Mode>(static_cast<double>(s), ref_bits<Mode>(key, 0, c, 0, w, i));
      if (std::isnan(s)) s = std::numeric_limits<float>::quiet_NaN();
      out[i] = static_cast<float>(static_cast<double>(s) * std::ldexp(1.0, -k));
    }
  }
  return out;
}

// The ring with Kahan: each message carries the partial sum and its compensation.
template <class F>
std::vector<float> hand_ring_kahan(const std::vector<std::vector<float>>& x, std::size_t n) {
  const int w = static_cast<int>(x.size());
  auto begin = [&](int c) {
    return static_cast<std::size_t>(c) * (n / w) + std::min<std::size_t>(static_cast<std::size_t>(c), n % w);
  };
  std::vector<std::vector<float>> s(x.size(), std::vector<float>(n)), comp(x.size(), std::vector<float>(n, 0.0f));
  for (int r = 0; r < w; ++r)
    for (std::size_t i = 0; i < n; ++i) s[r][i] = cpd::quantize<F>(x[r][i]);
  for (int t = 0; t < w - 1; ++t) {
    auto s_old = s;
    auto c_old = comp;
    for (int r = 0; r < w; ++r) {
      const int from = (r - 1 + w) % w;
      const int c = ((from - t) % w + w) % w;
      for (std::size_t i = begin(c); i < begin(c + 1); ++i) {
        const float sum = s_old[from][i], cc = c_old[from][i], q = s_old[r][i];
        const float y = ref_add<F>(q, -cc);
        const float tt = ref_add<F>(sum, y);
        comp[r][i] = ref_add<F>(ref_add<F>(tt, -sum), -y);
        s[r][i] = tt;
      }
    }
  }
  std::vector<float> out(n);
  for (int c = 0; c < w; ++c)
    for (std::size_t i = begin(c); i < begin(c + 1); ++i) out[i] = s[(c - 1 + w) % w][i];
  return out;
}

// Recursive halving/doubling as MPICH's Rabenseifner allreduce: with P the largest
// power of two <= W and rem = W - P, even rank 2j (j < rem) first sends everything
// to rank 2j + 1, which adds; the P remaining ranks get new ranks. Then for mask =
// 1, 2, ..., P/2, new ranks x and x ^ mask split their current range of the P blocks;
// the lower keeps the lower half, and each adds the partner's values for its half:
// Q(lower new rank's partial + upper new rank's partial).
template <class F>
std::vector<float> hand_halving_doubling(const std::vector<std::vector<float>>& x, std::size_t n) {
  const int w = static_cast<int>(x.size());
  int p = 1;
  while (p * 2 <= w) p *= 2;
  const int rem = w - p;
  auto begin = [&](int b) {
    return static_cast<std::size_t>(b) * (n / p) + std::min<std::size_t>(static_cast<std::size_t>(b), n % p);
  };
  std::vector<std::vector<float>> buf(x.size(), std::vector<float>(n));
  for (int r = 0; r < w; ++r)
    for (std::size_t i = 0; i < n; ++i) buf[r][i] = cpd::quantize<F>(x[r][i]);
  std::vector<int> rank_of(static_cast<std::size_t>(p));
  for (int j = 0; j < p; ++j) {
    if (j < rem) {
      for (std::size_t i = 0; i < n; ++i) buf[2 * j + 1][i] = ref_add<F>(buf[2 * j][i], buf[2 * j + 1][i]);
      rank_of[j] = 2 * j + 1;
    } else {
      rank_of[j] = j + rem;
    }
  }
  std::vector<int> lo(static_cast<std::size_t>(p), 0), hi(static_cast<std::size_t>(p), p);
  for (int mask = 1; mask < p; mask <<= 1) {
    auto old = buf;
    for (int a = 0; a < p; ++a) {
      const int b = a ^ mask;
      const int mid = (lo[a] + hi[a]) / 2;
      const bool lower = a < b;
      const int klo = lower ? lo[a] : mid, khi = lower ? mid : hi[a];
      const auto& mine = old[rank_of[a]];
      const auto& theirs = old[rank_of[b]];
      for (std::size_t i = begin(klo); i < begin(khi); ++i)
        buf[rank_of[a]][i] = lower ? ref_add<F>(mine[i], theirs[i]) : ref_add<F>(theirs[i], mine[i]);
      lo[a] = klo;
      hi[a] = khi;
    }
  }
  std::vector<float> out(n);
  for (int a = 0; a < p; ++a)
    for (std::size_t i = begin(lo[a]); i < begin(hi[a]); ++i) out[i] = buf[rank_of[a]][i];
  return out;
}

}  // namespace

TEST_CASE("partition: the first n % parts parts hold one more") {
  CHECK(cpd::partition(10, 4, 0).begin == 0);
  CHECK(cpd::partition(10, 4, 0).end == 3);
  CHECK(cpd::partition(10, 4, 1).begin == 3);
  CHECK(cpd::partition(10, 4, 1).end == 6);
  CHECK(cpd::partition(10, 4, 2).begin == 6);
  CHECK(cpd::partition(10, 4, 2).end == 8);
  CHECK(cpd::partition(10, 4, 3).end == 10);
  CHECK(cpd::partition(2, 4, 3).size() == 0);
  CHECK(cpd::partition(2, 4, 1).size() == 1);
  CHECK(cpd::floor_pow2(1) == 1);
  CHECK(cpd::floor_pow2(7) == 4);
  CHECK(cpd::floor_pow2(8) == 8);
}

TEST_CASE("rounded_add: every pair of e4m3fn and e5m2 values against the exact double sum") {
  for (std::uint32_t a = 0; a < 256; ++a)
    for (std::uint32_t b = 0; b < 256; ++b) {
      const float x = static_cast<float>(cpd::float8_e4m3fn::from_bits(static_cast<std::uint8_t>(a)));
      const float y = static_cast<float>(cpd::float8_e4m3fn::from_bits(static_cast<std::uint8_t>(b)));
      const float got = cpd::rounded_add<cpd::float8_e4m3fn>(x, y);
      const float want = cpd::quantize<cpd::float8_e4m3fn>(static_cast<double>(x) + static_cast<double>(y));
      REQUIRE((bits_of(got) == bits_of(want) || (std::isnan(got) && std::isnan(want))));
      const float u = static_cast<float>(static_cast<double>(cpd::float8_e5m2::from_bits(static_cast<std::uint8_t>(a))));
      const float v = static_cast<float>(static_cast<double>(cpd::float8_e5m2::from_bits(static_cast<std::uint8_t>(b))));
      const float g2 = cpd::rounded_add<cpd::float8_e5m2, R::toward_zero>(u, v);
      const float w2 = cpd::quantize<cpd::float8_e5m2, R::toward_zero>(static_cast<double>(u) + static_cast<double>(v));
      REQUIRE((bits_of(g2) == bits_of(w2) || (std::isnan(g2) && std::isnan(w2))));
    }
}

TEST_CASE_TEMPLATE("rounded_add: random floats, every deterministic mode, float path == exact", F, cpd::float16,
                   cpd::bfloat16, cpd::float8_e5m2, cpd::float6_e2m3fn) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> ex(-20, 20);
  std::uniform_real_distribution<float> m(-2.0f, 2.0f);
  for (int t = 0; t < 20000; ++t) {
    // Arbitrary floats (not values of F) whose double sum is exact.
    const float a = std::ldexp(m(rng), ex(rng)), b = std::ldexp(m(rng), ex(rng));
    const double exact = static_cast<double>(a) + static_cast<double>(b);
    REQUIRE(bits_of(cpd::rounded_add<F>(a, b)) == bits_of(cpd::quantize<F>(exact)));
    REQUIRE(bits_of(cpd::rounded_add<F, R::upward>(a, b)) == bits_of(cpd::quantize<F, R::upward>(exact)));
    REQUIRE(bits_of(cpd::rounded_add<F, R::downward>(a, b)) == bits_of(cpd::quantize<F, R::downward>(exact)));
    REQUIRE(bits_of(cpd::rounded_add<F, R::nearest_away>(a, b)) == bits_of(cpd::quantize<F, R::nearest_away>(exact)));
    REQUIRE(bits_of(cpd::rounded_add<F, R::odd>(a, b)) == bits_of(cpd::quantize<F, R::odd>(exact)));
    REQUIRE(bits_of(cpd::rounded_sub<F>(a, b)) ==
            bits_of(cpd::quantize<F>(static_cast<double>(a) - static_cast<double>(b))));
    REQUIRE(bits_of(cpd::rounded_mul<F>(a, b)) ==
            bits_of(cpd::quantize<F>(static_cast<double>(a) * static_cast<double>(b))));
  }
  // A float sum that overflows float itself still rounds from the exact value.
  const float big = 3.0e38f;
  CHECK(bits_of(cpd::rounded_add<cpd::bfloat16, R::toward_zero>(big, big)) ==
        bits_of(cpd::quantize<cpd::bfloat16, R::toward_zero>(6.0e38)));
}

TEST_CASE("sum and kahan_sum: a plain loop, and Kahan measurably closer to the exact sum") {
  using F = cpd::bfloat16;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  double err_plain = 0, err_kahan = 0;
  for (int t = 0; t < 50; ++t) {
    std::vector<float> x(2000);
    for (auto& v : x) v = cpd::quantize<F>(u(rng));
    float s = 0;
    double exact = 0;
    for (float v : x) {
      s = ref_add<F>(s, v);
      exact += v;
    }
    const float got = cpd::sum<F>(x.data(), x.size());
    REQUIRE(bits_of(got) == bits_of(s));
    err_plain += std::fabs(got - exact) / exact;
    err_kahan += std::fabs(cpd::kahan_sum<F>(x.data(), x.size()) - exact) / exact;
  }
  MESSAGE("bfloat16 sums of 2000 values in [0,1): mean relative error plain ", err_plain / 50, ", Kahan ",
          err_kahan / 50);
  CHECK(err_kahan * 20 < err_plain);  // plain stagnates (~75 %), Kahan stays near 0.1 %
}

TEST_CASE("accumulate and kahan_accumulate: element-wise, as the scalar loop") {
  using F = cpd::float8_e5m2;
  std::vector<float> acc = {1.0f, 0.5f, 100.0f, -3.0f}, x = {0.125f, 0.0625f, 3.0f, 3.0f};
  auto want = acc;
  for (std::size_t i = 0; i < acc.size(); ++i) want[i] = ref_add<F>(acc[i], x[i]);
  cpd::accumulate<F>(acc.data(), x.data(), acc.size());
  CHECK(same_bits(acc, want));
  // Kahan: adding 1/8 to 1 sixteen times in e5m2 (ulp(1) = 1/4, ties to even)
  float s = 1.0f, c = 0.0f;
  const float eighth = 0.125f;
  float plain = 1.0f;
  for (int i = 0; i < 16; ++i) {
    cpd::kahan_accumulate<F>(&s, &c, &eighth, 1);
    cpd::accumulate<F>(&plain, &eighth, 1);
  }
  CHECK(plain == 1.0f);  // 1 + 1/8 is a tie that goes back to 1: stagnation
  CHECK(s == 3.0f);      // the compensation carries the lost eighths
}

TEST_CASE("gemm: every product and partial sum rounded, against a plain loop; Kahan closer") {
  using F = cpd::float16;
  const std::size_t m = 5, n = 7, k = 300;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> a(m * k), b(k * n), c(m * n), ck(m * n);
  for (auto& v : a) v = cpd::quantize<F>(u(rng));
  for (auto& v : b) v = cpd::quantize<F>(u(rng));
  cpd::gemm<F>(m, n, k, a.data(), k, b.data(), n, c.data(), n);
  cpd::gemm<F>(m, n, k, a.data(), k, b.data(), n, ck.data(), n, {true, {}});
  double ep = 0, ek = 0;
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      float s = 0;
      double exact = 0;
      for (std::size_t p = 0; p < k; ++p) {
        s = ref_add<F>(s, cpd::quantize<F>(static_cast<double>(a[i * k + p]) * b[p * n + j]));
        exact += static_cast<double>(a[i * k + p]) * b[p * n + j];
      }
      REQUIRE(bits_of(c[i * n + j]) == bits_of(s));
      ep += std::fabs(c[i * n + j] - exact);
      ek += std::fabs(ck[i * n + j] - exact);
    }
  CHECK(ek * 4 < ep);
}

TEST_CASE_TEMPLATE("simulate_allreduce: each order equals its hand-written loop, bit for bit", F, cpd::float8_e5m2,
                   cpd::float8_e4m3fn, cpd::bfloat16, cpd::float16) {
  for (int w : {1, 2, 3, 4, 5, 7, 8, 9, 16}) {
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(w + 1), std::size_t(97)}) {
      const auto x = random_workers(w, n, static_cast<unsigned>(w * 1000 + n));
      const auto p = ptrs(x);
      std::vector<float> out(n);
      cpd::allreduce_options o;
      for (unsigned threads : {1u, 3u}) {
        o.threads = threads;
        o.algorithm = cpd::allreduce_algorithm::sequential;
        cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, o);
        REQUIRE(same_bits(out, hand_sequential<F>(x, n, 0)));
        o.algorithm = cpd::allreduce_algorithm::ring;
        cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, o);
        REQUIRE(same_bits(out, hand_ring<F>(x, n, 0)));
        o.algorithm = cpd::allreduce_algorithm::halving_doubling;
        cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, o);
        REQUIRE(same_bits(out, hand_halving_doubling<F>(x, n)));
      }
      // With APS: the scale is applied before rounding and removed after summing.
      o.threads = 1;
      o.algorithm = cpd::allreduce_algorithm::ring;
      auto res = cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, cpd::aps<F>(w), o);
      REQUIRE(same_bits(out, hand_ring<F>(x, n, res.scale.exponent)));
      o.algorithm = cpd::allreduce_algorithm::sequential;
      res = cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, cpd::aps<F>(w), o);
      REQUIRE(same_bits(out, hand_sequential<F>(x, n, res.scale.exponent)));
      // Kahan in the ring: the compensation travels with the partial sum.
      o.kahan = true;
      o.algorithm = cpd::allreduce_algorithm::ring;
      cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, o);
      REQUIRE(same_bits(out, hand_ring_kahan<F>(x, n)));
    }
  }
}

TEST_CASE_TEMPLATE("simulate_allreduce: pipelined_ring, two_step and all_gather, bit for bit", F, cpd::float8_e5m2,
                   cpd::float8_e4m3fn, cpd::bfloat16, cpd::float16) {
  for (int w : {1, 2, 3, 4, 7, 8}) {
    for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(w + 1), std::size_t(1000)}) {
      const auto x = random_workers(w, n, static_cast<unsigned>(w * 7 + n));
      const auto p = ptrs(x);
      std::vector<float> out(n);
      cpd::allreduce_options o;
      for (unsigned threads : {1u, 3u}) {
        o.threads = threads;
        o.algorithm = cpd::allreduce_algorithm::pipelined_ring;
        auto res = cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, cpd::aps<F>(w), o);
        REQUIRE(same_bits(out, hand_ring<F>(x, n, res.scale.exponent)));
        o.algorithm = cpd::allreduce_algorithm::all_gather;
        res = cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, cpd::aps<F>(w), o);
        REQUIRE(same_bits(out, hand_sequential<F>(x, n, res.scale.exponent)));
        o.algorithm = cpd::allreduce_algorithm::two_step;
        res = cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, cpd::aps<F>(w), o);
        REQUIRE(same_bits(out, hand_two_step<F>(x, n, res.scale.exponent)));
        o.accumulator = cpd::format::of<cpd::float16>();
        res = cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, cpd::aps<F>(w), o);
        REQUIRE(same_bits(out, hand_two_step<F, R::nearest_even, cpd::float16>(x, n, res.scale.exponent)));
        o.accumulator = cpd::format::of<cpd::float_t<8, 23>>();
      }
      o.key = {99, 3};
      o.algorithm = cpd::allreduce_algorithm::two_step;
      const auto res = cpd::simulate_allreduce<F, R::stochastic>(p.data(), out.data(), n, w, cpd::aps<F>(w), o);
      REQUIRE(same_bits(out, hand_two_step<F, R::stochastic>(x, n, res.scale.exponent, o.key)));
    }
  }
}

TEST_CASE("simulate_allreduce: two_step sums in the wide accumulator, far closer than the ring") {
  // 64 workers of values near 1 in e5m2 (2 significand bits): every hop of the ring rounds
  // a growing sum; two_step rounds once.
  using F = cpd::float8_e5m2;
  const int w = 64;
  const std::size_t n = 4096;
  const auto x = random_workers(w, n, 3, 0.5);
  const auto p = ptrs(x);
  std::vector<double> exact(n, 0.0);
  for (const auto& v : x)
    for (std::size_t i = 0; i < n; ++i) exact[i] += v[i];
  auto error = [&](cpd::allreduce_algorithm a) {
    cpd::allreduce_options o;
    o.algorithm = a;
    std::vector<float> out(n);
    cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, cpd::aps<F>(w), o);
    double e = 0;
    for (std::size_t i = 0; i < n; ++i) e += std::fabs(out[i] - exact[i]);
    return e;
  };
  const double ring = error(cpd::allreduce_algorithm::ring), two = error(cpd::allreduce_algorithm::two_step);
  MESSAGE("mean |error|: ring ", ring / n, ", two_step ", two / n);
  CHECK(two < 0.5 * ring);
}

TEST_CASE("simulate_allreduce: two_step rejects Kahan and an accumulator it cannot round to") {
  const float a[] = {1.0f};
  const float* p[] = {a};
  float out[1];
  cpd::allreduce_options o;
  o.algorithm = cpd::allreduce_algorithm::two_step;
  o.kahan = true;
  CHECK_THROWS_WITH_AS(cpd::simulate_allreduce<cpd::float8_e5m2>(p, out, 1, 1, o),
                       doctest::Contains("takes no Kahan"), std::invalid_argument);
  o.kahan = false;
  o.accumulator = cpd::format::parse("e11m52");
  CHECK_THROWS_WITH_AS(cpd::simulate_allreduce<cpd::float8_e5m2>(p, out, 1, 1, o),
                       doctest::Contains("accumulator"), std::invalid_argument);
}

TEST_CASE("simulate_allreduce: stochastic rounding keyed as documented, the same for every thread count") {
  using F = cpd::float8_e5m2;
  const int w = 6;
  const std::size_t n = 50;
  const auto x = random_workers(w, n, 99);
  const auto p = ptrs(x);
  std::vector<float> by_generator[2];
  for (cpd::random_generator g : {cpd::random_generator::v1, cpd::random_generator::v2}) {
    CAPTURE(std::string(cpd::to_string(g)));
    cpd::allreduce_options o;
    o.key = {1234, 77, g};
    o.algorithm = cpd::allreduce_algorithm::ring;
    std::vector<float> out(n);
    auto res = cpd::simulate_allreduce<F, R::stochastic>(p.data(), out.data(), n, w, cpd::aps<F>(w), o);
    CHECK(same_bits(out, hand_ring<F, R::stochastic>(x, n, res.scale.exponent, o.key)));
    by_generator[static_cast<int>(g)] = out;
    o.algorithm = cpd::allreduce_algorithm::sequential;
    res = cpd::simulate_allreduce<F, R::stochastic>(p.data(), out.data(), n, w, cpd::aps<F>(w), o);
    CHECK(same_bits(out, hand_sequential<F, R::stochastic>(x, n, res.scale.exponent, o.key)));
  }
  CHECK(by_generator[0] != by_generator[1]);  // (the generator reaches every rounding)

  // Large n: one thread and four threads give the same bits, in every order.
  const std::size_t big = 60000;
  const auto y = random_workers(5, big, 5);
  const auto q = ptrs(y);
  for (auto alg : {cpd::allreduce_algorithm::sequential, cpd::allreduce_algorithm::ring,
                   cpd::allreduce_algorithm::halving_doubling}) {
    for (bool kahan : {false, true}) {
      std::vector<float> o1(big), o4(big);
      cpd::allreduce_options a;
      a.algorithm = alg;
      a.kahan = kahan;
      a.key = {7, 0};
      a.threads = 1;
      cpd::simulate_allreduce<F, R::stochastic>(q.data(), o1.data(), big, 5, cpd::aps<F>(5), a);
      a.threads = 4;
      cpd::simulate_allreduce<F, R::stochastic>(q.data(), o4.data(), big, 5, cpd::aps<F>(5), a);
      CHECK(same_bits(o1, o4));
    }
  }
}

TEST_CASE("simulate_allreduce: APS rescues small gradients; mean divides by W") {
  using F = cpd::float16;
  const int w = 8;
  const std::size_t n = 1000;
  auto x = random_workers(w, n, 1, 2.0);
  for (auto& v : x)
    for (auto& y : v) y *= 1e-6f;  // ~1e-9: below float16's smallest subnormal (2^-24)
  const auto p = ptrs(x);
  std::vector<float> plain(n), scaled(n), mean(n);
  cpd::allreduce_options o;
  o.diagnostics = true;
  auto r0 = cpd::simulate_allreduce<F>(p.data(), plain.data(), n, w, o);
  auto r1 = cpd::simulate_allreduce<F>(p.data(), scaled.data(), n, w, cpd::aps<F>(w), o);
  CHECK(r0.scaled.underflow_fraction() > 0.9);
  CHECK(r1.scaled.underflow_fraction() < 0.01);
  CHECK(r1.unscaled.underflow_fraction() > 0.9);  // the same tensors quantized without the scale
  double e0 = 0, e1 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double exact = 0;
    for (int r = 0; r < w; ++r) exact += x[r][i];
    e0 += std::fabs(plain[i] - exact);
    e1 += std::fabs(scaled[i] - exact);
  }
  CHECK(e1 * 10 < e0);
  o.mean = true;
  cpd::simulate_allreduce<F>(p.data(), mean.data(), n, w, cpd::aps<F>(w), o);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(mean[i] == scaled[i] / 8.0f);
}

TEST_CASE("simulate_allreduce: error feedback carries what rounding lost into the next step") {
  using F = cpd::float8_e4m3fn;
  const int w = 4;
  const std::size_t n = 16;
  // A constant gradient of 0.3 is not a value of e4m3fn (0.3125 is): without error
  // feedback every step sums the same rounded value and the bias accumulates.
  std::vector<std::vector<float>> g(w, std::vector<float>(n, 0.3f));
  const auto p = ptrs(g);
  std::vector<std::vector<float>> res(w, std::vector<float>(n, 0.0f));
  std::vector<float*> rp;
  for (auto& v : res) rp.push_back(v.data());
  std::vector<float> out(n);
  double with_ef = 0, without = 0;
  const int steps = 100;
  for (int t = 0; t < steps; ++t) {
    cpd::allreduce_options o;
    o.residuals = rp.data();
    cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, o);
    with_ef += out[0];
    cpd::allreduce_options plain;
    cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, plain);
    without += out[0];
  }
  const double exact = steps * w * 0.3;
  CHECK(std::fabs(with_ef - exact) < 1.0);    // bounded by one step's rounding
  CHECK(std::fabs(without - exact) > 4.0);    // 100 * 4 * (0.3125 - 0.3) = 5
  for (auto& v : res)
    for (float e : v) CHECK(std::fabs(e) <= 0.03125f);  // half an ulp of e4m3fn at 0.3
}

TEST_CASE("simulate_allreduce: scalers with float scales (Transformer Engine, GradScaler)") {
  using F = cpd::float8_e4m3fn;
  const int w = 3;
  const std::size_t n = 10;
  const auto x = random_workers(w, n, 21);
  const auto p = ptrs(x);
  std::vector<float> out(n);
  cpd::allreduce_options o;
  o.algorithm = cpd::allreduce_algorithm::sequential;
  auto r = cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, cpd::current_scaling<F>{}, o);
  float amax = 0;
  for (auto& v : x)
    for (float y : v) amax = std::max(amax, std::fabs(y));
  CHECK(r.scale.value == 448.0f / amax);
  for (std::size_t i = 0; i < n; ++i) {
    float s = cpd::quantize<F>(x[0][i] * r.scale.value);
    for (int k = 1; k < w; ++k) s = ref_add<F>(s, cpd::quantize<F>(x[k][i] * r.scale.value));
    REQUIRE(bits_of(out[i]) == bits_of(s * r.scale.inverse));
  }
  cpd::delayed_scaling<F> d;
  auto r1 = cpd::simulate_allreduce<F>(p.data(), out.data(), n, w, d, o);
  CHECK(r1.scale.value == 1.0f);           // the first step uses the initial scale
  CHECK(d.scale().value == 448.0f / amax);  // and the history now holds this step's amax
}

TEST_CASE("simulate_allreduce: scales whose products leave float's normal range are still exact") {
  using F = cpd::bfloat16;  // bfloat16 reaches float's subnormals and its top binade
  std::vector<std::vector<float>> x = {{1e-39f, 3e38f, 1.0f, 0.0f, -2e-45f, 1e-30f},
                                       {2e-39f, 1e38f, 0.5f, -0.0f, 7e-45f, 1e-30f},
                                       {5e-40f, -3e38f, 0.25f, 0.0f, 1e-44f, 1e-30f}};
  const auto p = ptrs(x);
  std::vector<float> out(6);
  for (int k : {-3, 0, 5, 40, 200, -200}) {
    cpd::allreduce_options o;
    o.algorithm = cpd::allreduce_algorithm::sequential;
    cpd::simulate_allreduce_scaled<F>(p.data(), out.data(), 6, 3, cpd::pow2_scale{k}, o);
    REQUIRE(same_bits(out, hand_sequential<F>(x, 6, k)));
  }
}
