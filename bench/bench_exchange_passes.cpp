// SPDX-License-Identifier: MIT
// The exchange codec's passes, one thread, per value: what the performance model
// (<cpd/perf_model.hpp>, cpd-model) takes as the codec's cost of each format. Each pass
// is the protocol's own (cpd/exchange/protocol.hpp), on codes, as the MPI algorithms run
// it (APS scale, nearest-even, 4M values in blocks of 64 Ki, the wire's order):
//
//   encode      APS's statistic (max|g|) and the load: x * 2^k rounded to codes
//   add         one rounded addition of codes (the ring's reduce-scatter step)
//   accumulate  two_step: codes decoded and added to the float accumulator
//   finish      codes decoded, unscaled, divided by W
//   float_add   the fp32 baseline's reduction: s[j] += q[j] in float
//
// and memcpy of the same float32 bytes as the yardstick. items_per_second is values.
//
//   bench_exchange_passes --benchmark_min_time=0.3 --benchmark_repetitions=5
//     --benchmark_report_aggregates_only=true   (one line)

#include <cpd/exchange/protocol.hpp>
#include <cpd/scaling/scaling.hpp>

#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr std::size_t n = std::size_t(1) << 22;  // 16 MiB of float32
constexpr std::size_t block = std::size_t(1) << 16;
constexpr int workers = 2;

const std::vector<float>& gradient(std::uint32_t seed) {
  static std::vector<float> g[2];
  std::vector<float>& v = g[seed & 1];
  if (v.empty()) {
    v.resize(n);
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1e-3f);
    for (float& x : v) x = d(rng);
  }
  return v;
}

template <class F>
struct passes {
  using sum = cpd::detail::summation<F, cpd::rounding::nearest_even, cpd::overflow::infinity, cpd::pow2_scale>;
  using storage = typename sum::storage;
  cpd::aps<F> scaler{workers};
  sum p;
  std::vector<storage> a, b;
  std::vector<float> s, q, out;

  passes()
      : p(scaler.select(scaler.statistic(gradient(1).data(), n)), workers, false, true, {}),
        a(n), b(n), s(n), q(n), out(n) {
    p.load(0, gradient(1).data(), 0, n, a.data());
    p.load(1, gradient(2).data(), 0, n, b.data());
  }
};

void values(benchmark::State& st) { st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * n); }

template <class F>
void encode(benchmark::State& st) {
  passes<F> t;
  const float* g = gradient(1).data();
  for (auto _ : st) {
    for (std::size_t lo = 0; lo < n; lo += block) {
      benchmark::DoNotOptimize(cpd::detail::exchange_statistic(t.scaler, g + lo, block));
      t.p.load(0, g + lo, lo, block, t.a.data() + lo);
    }
    benchmark::DoNotOptimize(t.a.data());
  }
  values(st);
}

template <class F>
void add(benchmark::State& st) {
  passes<F> t;
  // Adds b and -b in turn, so that the sums stay the size of one gradient (repeated adds of
  // b would overflow and leave the fast path).
  using codes = typename passes<F>::sum::codes;
  std::vector<typename passes<F>::storage> nb(n);
  for (std::size_t j = 0; j < n; ++j) nb[j] = codes::code_of(-codes::value_of(t.b[j]));
  bool negative = false;
  for (auto _ : st) {
    const auto* q = negative ? nb.data() : t.b.data();
    for (std::size_t lo = 0; lo < n; lo += block) t.p.add(t.a.data() + lo, nullptr, q + lo, lo, block, 0, 1);
    negative = !negative;
    benchmark::DoNotOptimize(t.a.data());
  }
  values(st);
}

template <class F>
void accumulate(benchmark::State& st) {
  passes<F> t;
  const cpd::format acc = cpd::format::of<cpd::float_t<8, 23>>();
  for (auto _ : st) {
    for (std::size_t lo = 0; lo < n; lo += block) {
      passes<F>::sum::codes::decode(t.b.data() + lo, block, t.q.data() + lo);
      t.p.accumulate(t.s.data() + lo, t.q.data() + lo, block, acc);
    }
    benchmark::DoNotOptimize(t.s.data());
  }
  values(st);
}

template <class F>
void finish(benchmark::State& st) {
  passes<F> t;
  for (auto _ : st) {
    t.p.finish(t.a.data(), n, t.out.data());
    benchmark::DoNotOptimize(t.out.data());
  }
  values(st);
}

void float_add(benchmark::State& st) {
  std::vector<float> s(gradient(1)), q(gradient(2));
  for (auto _ : st) {
    for (std::size_t j = 0; j < n; ++j) s[j] += q[j];
    benchmark::DoNotOptimize(s.data());
  }
  values(st);
}

void memcpy_floats(benchmark::State& st) {
  std::vector<float> s(gradient(1)), d(n);
  for (auto _ : st) {
    std::memcpy(d.data(), s.data(), n * sizeof(float));
    benchmark::DoNotOptimize(d.data());
  }
  values(st);
}

#define CPD_PASSES(F, name)                                          \
  BENCHMARK(encode<F>)->Name("encode/" name)->Unit(benchmark::kMillisecond);         \
  BENCHMARK(add<F>)->Name("add/" name)->Unit(benchmark::kMillisecond);               \
  BENCHMARK(accumulate<F>)->Name("accumulate/" name)->Unit(benchmark::kMillisecond); \
  BENCHMARK(finish<F>)->Name("finish/" name)->Unit(benchmark::kMillisecond);

BENCHMARK(memcpy_floats)->Name("memcpy")->Unit(benchmark::kMillisecond);
BENCHMARK(float_add)->Name("float_add")->Unit(benchmark::kMillisecond);
CPD_PASSES(cpd::float8_e4m3fn, "e4m3fn")
CPD_PASSES(cpd::float8_e5m2, "e5m2")
CPD_PASSES(cpd::float8_e3m4, "e3m4")
CPD_PASSES(cpd::float16, "fp16")
CPD_PASSES(cpd::bfloat16, "bf16")

}  // namespace

BENCHMARK_MAIN();
