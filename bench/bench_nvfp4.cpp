// SPDX-License-Identifier: MIT
// NVFP4 (cpd/host/nvfp4.hpp) against memcpy of the same float32 bytes and against
// mx_quantize with E2M1 elements, in the same run (docs/performance.md, "NVFP4"). One
// thread; n = 2^22 floats (16 MiB, beyond the last-level cache of a small machine) and
// 2^14 (64 KiB, in cache). The ratio is each line's bytes_per_second over BM_memcpy's.

#include <cpd/host/mx.hpp>
#include <cpd/scaling/mx.hpp>
#include <cpd/host/nvfp4.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace {

struct buffers {
  std::vector<float> in, out;
  std::vector<std::uint8_t> packed, scales, codes, mx_scales, mx_codes;
  float s = 0.0f;
  explicit buffers(std::size_t n)
      : in(n),
        out(n),
        packed(cpd::nvfp4_packed_size(n)),
        scales(cpd::nvfp4_scale_count(n)),
        codes(n),
        mx_scales(cpd::mx_scale_count(n, 32)),
        mx_codes(n) {
    std::mt19937 g(42);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : in) v = nd(g) * 8.0f;
    cpd::nvfp4_encode(in.data(), n, packed.data(), scales.data(), &s);
    cpd::mx_encode<cpd::float4_e2m1fn>(in.data(), n, mx_scales.data(), mx_codes.data());
  }
};

buffers& get(std::size_t n) {
  static buffers big(std::size_t(1) << 22), small(std::size_t(1) << 14);
  return n == big.in.size() ? big : small;
}

void rates(benchmark::State& st, std::size_t n) {
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * 8));  // float32 in and out
}

void BM_memcpy(benchmark::State& st) {
  auto& b = get(static_cast<std::size_t>(st.range(0)));
  for (auto _ : st) {
    std::memcpy(b.out.data(), b.in.data(), b.in.size() * sizeof(float));
    benchmark::ClobberMemory();
  }
  rates(st, b.in.size());
}

template <cpd::rounding R>
void BM_nvfp4_quantize(benchmark::State& st) {
  auto& b = get(static_cast<std::size_t>(st.range(0)));
  cpd::nvfp4_options opt;
  opt.key = {1, 2};
  for (auto _ : st) {
    benchmark::DoNotOptimize(cpd::nvfp4_quantize<R>(b.in.data(), b.out.data(), b.in.size(), opt));
    benchmark::ClobberMemory();
  }
  rates(st, b.in.size());
}

template <cpd::rounding R>
void BM_nvfp4_encode(benchmark::State& st) {
  auto& b = get(static_cast<std::size_t>(st.range(0)));
  cpd::nvfp4_options opt;
  opt.key = {1, 2};
  for (auto _ : st) {
    benchmark::DoNotOptimize(
        cpd::nvfp4_encode<R>(b.in.data(), b.in.size(), b.packed.data(), b.scales.data(), &b.s, opt));
    benchmark::ClobberMemory();
  }
  rates(st, b.in.size());
}

void BM_nvfp4_decode(benchmark::State& st) {
  auto& b = get(static_cast<std::size_t>(st.range(0)));
  for (auto _ : st) {
    cpd::nvfp4_decode(b.packed.data(), b.scales.data(), b.s, b.in.size(), b.out.data());
    benchmark::ClobberMemory();
  }
  rates(st, b.in.size());
}

void BM_mx_quantize_e2m1(benchmark::State& st) {
  auto& b = get(static_cast<std::size_t>(st.range(0)));
  for (auto _ : st) {
    cpd::mx_quantize<cpd::float4_e2m1fn>(b.in.data(), b.out.data(), b.in.size());
    benchmark::ClobberMemory();
  }
  rates(st, b.in.size());
}

// (args: n, block size: the small blocks that a call per block used to dominate)
void BM_mx_quantize_e2m1_blocks(benchmark::State& st) {
  auto& b = get(static_cast<std::size_t>(st.range(0)));
  cpd::mx_options opt;
  opt.block_size = static_cast<std::size_t>(st.range(1));
  for (auto _ : st) {
    cpd::mx_quantize<cpd::float4_e2m1fn>(b.in.data(), b.out.data(), b.in.size(), opt);
    benchmark::ClobberMemory();
  }
  rates(st, b.in.size());
}

void BM_mx_decode_e2m1(benchmark::State& st) {
  auto& b = get(static_cast<std::size_t>(st.range(0)));
  for (auto _ : st) {
    cpd::mx_decode<cpd::float4_e2m1fn>(b.mx_scales.data(), b.mx_codes.data(), b.in.size(), b.out.data());
    benchmark::ClobberMemory();
  }
  rates(st, b.in.size());
}

}  // namespace

BENCHMARK(BM_memcpy)->Arg(1 << 22)->Arg(1 << 14);
BENCHMARK(BM_nvfp4_quantize<cpd::rounding::nearest_even>)->Arg(1 << 22)->Arg(1 << 14);
BENCHMARK(BM_nvfp4_quantize<cpd::rounding::stochastic>)->Arg(1 << 22)->Arg(1 << 14);
BENCHMARK(BM_nvfp4_encode<cpd::rounding::nearest_even>)->Arg(1 << 22)->Arg(1 << 14);
BENCHMARK(BM_nvfp4_encode<cpd::rounding::stochastic>)->Arg(1 << 22)->Arg(1 << 14);
BENCHMARK(BM_nvfp4_decode)->Arg(1 << 22)->Arg(1 << 14);
BENCHMARK(BM_mx_quantize_e2m1)->Arg(1 << 22)->Arg(1 << 14);
BENCHMARK(BM_mx_quantize_e2m1_blocks)->Args({1 << 22, 1})->Args({1 << 22, 8});
BENCHMARK(BM_mx_decode_e2m1)->Arg(1 << 22)->Arg(1 << 14);

BENCHMARK_MAIN();
