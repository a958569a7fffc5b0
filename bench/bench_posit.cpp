// SPDX-License-Identifier: MIT
// The bulk posit calls (cpd/host/posit_bulk.hpp) against memcpy of the same float32 bytes
// and against the bulk calls of their float neighbours (bfloat16 and e4m3fn), in the same
// run (docs/performance.md, "Posits"). Each instruction set's loop by its cap
// (Arg isa: -1 the CPU's best, 0 baseline, 1 AVX2); n is fixed (64 MiB of float32), so
// the ratio is each line's bytes_per_second over BM_memcpy's.

#include <cpd/cpd.hpp>
#include <cpd/host/posit_bulk.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>

namespace {

constexpr std::size_t n = std::size_t(1) << 24;  // 64 MiB of float32, far beyond the last-level cache

struct buffers {
  std::unique_ptr<float[]> in{new float[n]}, out{new float[n]};
  std::unique_ptr<std::uint16_t[]> codes{new std::uint16_t[n]};
  buffers() {
    std::mt19937 g(42);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (std::size_t i = 0; i < n; ++i) in[i] = nd(g) * 8.0f;
    std::memset(out.get(), 0, n * sizeof(float));
    cpd::posit_encode(cpd::posit16es1, cpd::rounding::nearest_even, in.get(), codes.get(), n);
  }
};

buffers& get() {
  static buffers b;
  return b;
}

struct isa_scope {
  explicit isa_scope(int cap) { cpd::detail::set_isa_override(cap); }
  ~isa_scope() { cpd::detail::set_isa_override(-1); }
};

void rates(benchmark::State& st, std::size_t bytes_per_element) {
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * bytes_per_element));
}

void BM_memcpy(benchmark::State& st) {
  auto& b = get();
  for (auto _ : st) {
    std::memcpy(b.out.get(), b.in.get(), n * sizeof(float));
    benchmark::ClobberMemory();
  }
  rates(st, 8);
}

template <int N, int ES, cpd::rounding R>
void BM_posit_quantize(benchmark::State& st) {
  const isa_scope isa(static_cast<int>(st.range(0)));
  auto& b = get();
  cpd::bulk_options o;
  o.seed = 1;
  for (auto _ : st) {
    cpd::posit_quantize(cpd::posit_format::of<N, ES>(), R, b.in.get(), b.out.get(), n, o);
    benchmark::ClobberMemory();
  }
  rates(st, 8);
}

void BM_posit16es1_encode(benchmark::State& st) {
  const isa_scope isa(static_cast<int>(st.range(0)));
  auto& b = get();
  for (auto _ : st) {
    cpd::posit_encode(cpd::posit16es1, cpd::rounding::nearest_even, b.in.get(), b.codes.get(), n);
    benchmark::ClobberMemory();
  }
  rates(st, 6);
}

void BM_posit16es1_decode(benchmark::State& st) {
  const isa_scope isa(static_cast<int>(st.range(0)));
  auto& b = get();
  for (auto _ : st) {
    cpd::posit_decode(cpd::posit16es1, b.codes.get(), b.out.get(), n);
    benchmark::ClobberMemory();
  }
  rates(st, 6);
}

template <class F, cpd::rounding R>
void BM_float_quantize(benchmark::State& st) {
  auto& b = get();
  cpd::bulk_options o;
  o.seed = 1;
  for (auto _ : st) {
    cpd::quantize<F, R>(b.in.get(), b.out.get(), n, o);
    benchmark::ClobberMemory();
  }
  rates(st, 8);
}

using cpd::rounding;
constexpr std::int64_t best = -1;

BENCHMARK(BM_memcpy);
BENCHMARK_TEMPLATE(BM_float_quantize, cpd::bfloat16, rounding::nearest_even);
BENCHMARK_TEMPLATE(BM_float_quantize, cpd::float8_e4m3fn, rounding::nearest_even);
BENCHMARK_TEMPLATE(BM_posit_quantize, 8, 0, rounding::nearest_even)->Arg(best)->Arg(1);
BENCHMARK_TEMPLATE(BM_posit_quantize, 8, 2, rounding::nearest_even)->Arg(best)->Arg(1);
BENCHMARK_TEMPLATE(BM_posit_quantize, 16, 1, rounding::nearest_even)->Arg(best)->Arg(1)->Arg(0);
BENCHMARK_TEMPLATE(BM_posit_quantize, 16, 1, rounding::stochastic)->Arg(best)->Arg(1);
BENCHMARK_TEMPLATE(BM_posit_quantize, 8, 0, rounding::stochastic)->Arg(best);
BENCHMARK_TEMPLATE(BM_posit_quantize, 8, 2, rounding::stochastic)->Arg(best)->Arg(1);
BENCHMARK(BM_posit16es1_encode)->Arg(best)->Arg(1);
BENCHMARK(BM_posit16es1_decode)->Arg(best)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
