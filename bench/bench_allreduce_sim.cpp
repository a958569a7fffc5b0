// SPDX-License-Identifier: MIT
// simulate_allreduce against memcpy of the same bytes (the W workers' float32
// gradients), for sizes from in-cache to far beyond the last-level cache.
//
//   bench_allreduce_sim --benchmark_filter=ring

#include <cpd/exchange/simulate.hpp>

#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

namespace {

constexpr int workers = 8;

struct data {
  std::vector<std::vector<float>> g;
  std::vector<const float*> p;
  std::vector<float> out;
  explicit data(std::size_t n) : g(workers, std::vector<float>(n)), out(n) {
    std::mt19937 rng(1);
    std::normal_distribution<float> d(0.0f, 1e-3f);
    for (auto& v : g) {
      for (auto& x : v) x = d(rng);
      p.push_back(v.data());
    }
  }
};

void bytes(benchmark::State& state, std::size_t n) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * workers * static_cast<std::int64_t>(n) * 4);
}

// The yardstick: copying every worker's gradients once.
void bm_memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  data d(n);
  std::vector<float> dst(n * workers);
  for (auto _ : state) {
    for (int r = 0; r < workers; ++r) std::memcpy(dst.data() + r * n, d.p[r], n * 4);
    benchmark::DoNotOptimize(dst.data());
  }
  bytes(state, n);
}

template <class F, cpd::rounding R, cpd::allreduce_algorithm A, bool Kahan>
void bm_allreduce(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  data d(n);
  cpd::allreduce_options o;
  o.algorithm = A;
  o.kahan = Kahan;
  o.threads = static_cast<unsigned>(state.range(1));
  for (auto _ : state) {
    auto r = cpd::simulate_allreduce<F, R>(d.p.data(), d.out.data(), n, workers, cpd::aps<F>(workers), o);
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(d.out.data());
  }
  bytes(state, n);
}

void sizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t n : {std::int64_t(1) << 12, std::int64_t(1) << 16, std::int64_t(1) << 20, std::int64_t(1) << 21,
                         std::int64_t(1) << 23})
    for (std::int64_t t : {1, 2}) b->Args({n, t});
  b->ArgNames({"n", "threads"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

using cpd::allreduce_algorithm;
using cpd::rounding;

BENCHMARK(bm_memcpy)->Arg(1 << 12)->Arg(1 << 16)->Arg(1 << 20)->Arg(1 << 21)->Arg(1 << 23)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(bm_allreduce<cpd::float8_e5m2, rounding::nearest_even, allreduce_algorithm::ring, false>)
    ->Name("ring/e5m2/nearest_even")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::float8_e4m3fn, rounding::nearest_even, allreduce_algorithm::ring, false>)
    ->Name("ring/e4m3fn/nearest_even")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::bfloat16, rounding::nearest_even, allreduce_algorithm::ring, false>)
    ->Name("ring/bf16/nearest_even")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::float16, rounding::nearest_even, allreduce_algorithm::ring, false>)
    ->Name("ring/fp16/nearest_even")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::float_t<3, 4>, rounding::nearest_even, allreduce_algorithm::ring, false>)
    ->Name("ring/e3m4/nearest_even")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::float8_e5m2, rounding::nearest_even, allreduce_algorithm::halving_doubling, false>)
    ->Name("halving_doubling/e5m2/nearest_even")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::float8_e5m2, rounding::nearest_even, allreduce_algorithm::ring, true>)
    ->Name("ring/e5m2/kahan")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::float8_e5m2, rounding::stochastic, allreduce_algorithm::ring, false>)
    ->Name("ring/e5m2/stochastic")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::float8_e4m3fn, rounding::stochastic, allreduce_algorithm::ring, false>)
    ->Name("ring/e4m3fn/stochastic")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::float16, rounding::stochastic, allreduce_algorithm::ring, false>)
    ->Name("ring/fp16/stochastic")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::bfloat16, rounding::stochastic, allreduce_algorithm::ring, false>)
    ->Name("ring/bf16/stochastic")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::float8_e5m2, rounding::stochastic, allreduce_algorithm::ring, true>)
    ->Name("ring/e5m2/kahan_stochastic")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::float8_e4m3fn, rounding::stochastic, allreduce_algorithm::ring, true>)
    ->Name("ring/e4m3fn/kahan_stochastic")->Apply(sizes);
BENCHMARK(bm_allreduce<cpd::bfloat16, rounding::stochastic, allreduce_algorithm::ring, true>)
    ->Name("ring/bf16/kahan_stochastic")->Apply(sizes);

}  // namespace

BENCHMARK_MAIN();
