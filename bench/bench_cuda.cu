// SPDX-License-Identifier: MIT
// Device quantize/encode/decode bandwidth against cudaMemcpy device-to-device of
// the same bytes, in the same run (Google Benchmark, manual time from CUDA events).
//   build/<preset>/bench/bench_cuda --benchmark_counters_tabular=true
// Bytes processed = bytes read + bytes written, for memcpy too (n floats in, n out).
// Without a GPU it prints why and exits 0: there is nothing to measure.

#include <cpd/cuda.cuh>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>

namespace {

using cpd::overflow;
using cpd::rounding;

/// Times `launch` on the default stream with CUDA events; bytes = bytes moved per iteration.
template <class Launch>
void run(benchmark::State& state, std::size_t bytes, Launch launch) {
  cudaEvent_t start, stop;
  cpd::cuda::check(cudaEventCreate(&start), "cudaEventCreate");
  cpd::cuda::check(cudaEventCreate(&stop), "cudaEventCreate");
  cpd::cuda::check(launch(), "warm-up");
  for (auto _ : state) {
    cpd::cuda::check(cudaEventRecord(start), "cudaEventRecord");
    cpd::cuda::check(launch(), "launch");
    cpd::cuda::check(cudaEventRecord(stop), "cudaEventRecord");
    cpd::cuda::check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cpd::cuda::check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    state.SetIterationTime(ms / 1000.0);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(bytes));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

struct buffers {
  float* in = nullptr;
  float* out = nullptr;
  std::uint8_t* codes = nullptr;
  std::size_t n = 0;
  explicit buffers(std::size_t count) : n(count) {
    cpd::cuda::check(cudaMalloc(&in, n * sizeof(float)), "cudaMalloc");
    cpd::cuda::check(cudaMalloc(&out, n * sizeof(float)), "cudaMalloc");
    cpd::cuda::check(cudaMalloc(&codes, n * 2), "cudaMalloc");
    cpd::cuda::check(cudaMemset(in, 0x3F, n * sizeof(float)), "cudaMemset");
  }
  ~buffers() {
    cudaFree(in);
    cudaFree(out);
    cudaFree(codes);
  }
};

void memcpy_d2d(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, 2 * b.n * sizeof(float),
      [&] { return cudaMemcpyAsync(b.out, b.in, b.n * sizeof(float), cudaMemcpyDeviceToDevice); });
}

template <class F, rounding R, overflow O = overflow::infinity>
void quantize(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, 2 * b.n * sizeof(float), [&] { return cpd::cuda::quantize<F, R, O>(b.in, b.out, b.n); });
}

template <class F, rounding R, overflow O = overflow::infinity>
void quantize_fast(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, 2 * b.n * sizeof(float), [&] { return cpd::cuda::quantize_fast<F, R, O>(b.in, b.out, b.n); });
}

void quantize_stochastic_e4m3(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  const cpd::stochastic_quantizer<cpd::float8_e4m3fn> q{1, 2};
  run(state, 2 * b.n * sizeof(float), [&] { return cpd::cuda::quantize_stochastic(b.in, b.out, b.n, q); });
}

void encode_e4m3(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, b.n * (sizeof(float) + 1),
      [&] { return cpd::cuda::encode<cpd::float8_e4m3fn, rounding::nearest_even>(b.in, b.codes, b.n); });
}

void decode_e4m3(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, b.n * (sizeof(float) + 1), [&] { return cpd::cuda::decode<cpd::float8_e4m3fn>(b.codes, b.out, b.n); });
}

constexpr std::int64_t small = 1 << 16, large = 1 << 26;  // 256 KiB .. 256 MiB of floats

}  // namespace

BENCHMARK(memcpy_d2d)->RangeMultiplier(16)->Range(small, large)->UseManualTime();
BENCHMARK(quantize<cpd::float8_e4m3fn, rounding::nearest_even>)->RangeMultiplier(16)->Range(small, large)->UseManualTime();
BENCHMARK(quantize<cpd::float8_e5m2, rounding::nearest_even>)->RangeMultiplier(16)->Range(small, large)->UseManualTime();
BENCHMARK(quantize<cpd::bfloat16, rounding::nearest_even>)->RangeMultiplier(16)->Range(small, large)->UseManualTime();
BENCHMARK(quantize<cpd::float8_e4m3fn, rounding::toward_zero>)->RangeMultiplier(16)->Range(small, large)->UseManualTime();
BENCHMARK(quantize_fast<cpd::float8_e4m3fn, rounding::nearest_even, overflow::saturate>)
    ->RangeMultiplier(16)->Range(small, large)->UseManualTime();
BENCHMARK(quantize_fast<cpd::bfloat16, rounding::nearest_even>)->RangeMultiplier(16)->Range(small, large)->UseManualTime();
BENCHMARK(quantize_stochastic_e4m3)->RangeMultiplier(16)->Range(small, large)->UseManualTime();
BENCHMARK(encode_e4m3)->RangeMultiplier(16)->Range(small, large)->UseManualTime();
BENCHMARK(decode_e4m3)->RangeMultiplier(16)->Range(small, large)->UseManualTime();

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("bench_cuda: no CUDA device (%s); nothing to measure\n", cudaGetErrorString(e));
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
