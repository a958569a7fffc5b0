// SPDX-License-Identifier: MIT
// Device quantize/encode/decode bandwidth against cudaMemcpy device-to-device and the
// CUDA toolkit's own conversions, in the same run (Google Benchmark, manual time from
// CUDA events):
//   build/<preset>/bench/bench_cuda --benchmark_counters_tabular=true
// Bytes = bytes read + bytes written (memcpy of n floats: 8n). Counters: GB_s, x_copy
// (this bandwidth over memcpy's at the same n, measured first in the same run) and
// x_peak (over the device's theoretical bandwidth, 2 x memory clock x bus width).
// The input is random (every sign, exponents 2^-24 .. 2^24), never zeros. Before the
// benchmarks it checks that the toolkit's conversions give cpd's bits where their
// conventions agree and prints the count of differences. Without a GPU it prints why
// and exits 0: there is nothing to measure.

#include <cpd/cuda.cuh>

#include <benchmark/benchmark.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp4.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <vector>

namespace {

using cpd::overflow;
using cpd::rounding;

std::map<std::int64_t, double> copy_bandwidth;  // bytes/s of memcpy_d2d at n floats
double peak_bandwidth = 0;                      // bytes/s, from the device's attributes

/// Times `launch` on the default stream with CUDA events; bytes = bytes moved per iteration.
template <class Launch>
void run(benchmark::State& state, std::size_t bytes, Launch launch, bool is_copy = false) {
  cudaEvent_t start, stop;
  cpd::cuda::check(cudaEventCreate(&start), "cudaEventCreate");
  cpd::cuda::check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) cpd::cuda::check(launch(), "warm-up");
  cpd::cuda::check(cudaDeviceSynchronize(), "warm-up");
  double seconds = 0;
  for (auto _ : state) {
    cpd::cuda::check(cudaEventRecord(start), "cudaEventRecord");
    cpd::cuda::check(launch(), "launch");
    cpd::cuda::check(cudaEventRecord(stop), "cudaEventRecord");
    cpd::cuda::check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cpd::cuda::check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    state.SetIterationTime(ms / 1000.0);
    seconds += ms / 1000.0;
  }
  cpd::cuda::check(cudaGetLastError(), "after the loop");
  const double total = static_cast<double>(state.iterations()) * static_cast<double>(bytes);
  state.SetBytesProcessed(static_cast<std::int64_t>(total));
  const double bw = seconds > 0 ? total / seconds : 0;
  state.counters["GB_s"] = bw / 1e9;
  if (is_copy) copy_bandwidth[state.range(0)] = bw;
  if (auto it = copy_bandwidth.find(state.range(0)); it != copy_bandwidth.end()) state.counters["x_copy"] = bw / it->second;
  if (peak_bandwidth > 0) state.counters["x_peak"] = bw / peak_bandwidth;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

/// Random floats of every sign, exponents -24 .. 24 (a hash of the index; no zeros).
__global__ void fill_kernel(float* x, std::size_t n) {
  for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
    const std::uint32_t sign = std::uint32_t(h >> 63) << 31;
    const std::uint32_t exponent = 127u - 24u + std::uint32_t((h >> 32) % 49u);
    const std::uint32_t mantissa = std::uint32_t(h) & 0x7FFFFFu;
    x[i] = __uint_as_float(sign | (exponent << 23) | mantissa);
  }
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
    fill_kernel<<<4096, 256>>>(in, n);
    cpd::cuda::check(cudaGetLastError(), "fill_kernel");
    cpd::cuda::check(cudaMemset(codes, 0x5A, n * 2), "cudaMemset");  // codes of non-zero values in every format
    cpd::cuda::check(cudaDeviceSynchronize(), "fill");
  }
  buffers(const buffers&) = delete;
  buffers& operator=(const buffers&) = delete;
  ~buffers() {
    cudaFree(in);
    cudaFree(out);
    cudaFree(codes);
  }
  template <class F>
  typename F::storage_type* codes_of() {
    return reinterpret_cast<typename F::storage_type*>(codes);
  }
};

// --- the CUDA toolkit's own conversions, two values per call (the yardstick) -----------

template <class F>
__device__ std::uint16_t toolkit_encode2(float2 v);
template <>
__device__ std::uint16_t toolkit_encode2<cpd::float8_e4m3fn>(float2 v) {
  return __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E4M3);
}
template <>
__device__ std::uint16_t toolkit_encode2<cpd::float8_e5m2>(float2 v) {
  return __nv_cvt_float2_to_fp8x2(v, __NV_SATFINITE, __NV_E5M2);
}
template <class F>
__device__ float2 toolkit_decode2(std::uint16_t c) {
  const __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2(c, std::is_same_v<F, cpd::float8_e4m3fn> ? __NV_E4M3 : __NV_E5M2));
  return __half22float2(h);
}

/// Codes of in[0, n) by the toolkit (n even, 16-byte aligned): 8-bit formats two per
/// __nv_cvt_float2_to_fp8x2, bf16/fp16 two per __float22bfloat162_rn / __float22half2_rn.
template <class F>
__global__ void toolkit_encode_kernel(const float* in, typename F::storage_type* out, std::size_t n) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const auto* v = reinterpret_cast<const float4*>(in);
  for (std::size_t g = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < n / 4; g += stride) {
    const float4 a = v[g];
    if constexpr (sizeof(typename F::storage_type) == 1) {
      const std::uint32_t lo = toolkit_encode2<F>(make_float2(a.x, a.y)), hi = toolkit_encode2<F>(make_float2(a.z, a.w));
      reinterpret_cast<std::uint32_t*>(out)[g] = lo | (hi << 16);
    } else if constexpr (std::is_same_v<F, cpd::bfloat16>) {
      const __nv_bfloat162 lo = __float22bfloat162_rn(make_float2(a.x, a.y)), hi = __float22bfloat162_rn(make_float2(a.z, a.w));
      uint2 w;
      w.x = *reinterpret_cast<const std::uint32_t*>(&lo);
      w.y = *reinterpret_cast<const std::uint32_t*>(&hi);
      reinterpret_cast<uint2*>(out)[g] = w;
    } else {
      const __half2 lo = __float22half2_rn(make_float2(a.x, a.y)), hi = __float22half2_rn(make_float2(a.z, a.w));
      uint2 w;
      w.x = *reinterpret_cast<const std::uint32_t*>(&lo);
      w.y = *reinterpret_cast<const std::uint32_t*>(&hi);
      reinterpret_cast<uint2*>(out)[g] = w;
    }
  }
}

template <class F>
__global__ void toolkit_decode_kernel(const typename F::storage_type* in, float* out, std::size_t n) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  auto* v = reinterpret_cast<float4*>(out);
  for (std::size_t g = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < n / 4; g += stride) {
    float2 lo, hi;
    if constexpr (sizeof(typename F::storage_type) == 1) {
      const std::uint32_t w = reinterpret_cast<const std::uint32_t*>(in)[g];
      lo = toolkit_decode2<F>(static_cast<std::uint16_t>(w));
      hi = toolkit_decode2<F>(static_cast<std::uint16_t>(w >> 16));
    } else {
      const uint2 w = reinterpret_cast<const uint2*>(in)[g];
      if constexpr (std::is_same_v<F, cpd::bfloat16>) {
        lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.x));
        hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.y));
      } else {
        lo = __half22float2(*reinterpret_cast<const __half2*>(&w.x));
        hi = __half22float2(*reinterpret_cast<const __half2*>(&w.y));
      }
    }
    v[g] = make_float4(lo.x, lo.y, hi.x, hi.y);
  }
}

/// FP4 E2M1 by the toolkit: 8 floats -> 4 bytes (__nv_cvt_float2_to_fp4x2, round to nearest, satfinite).
__global__ void toolkit_encode_fp4_kernel(const float* in, std::uint8_t* out, std::size_t n) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  const auto* v = reinterpret_cast<const float4*>(in);
  for (std::size_t g = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < n / 8; g += stride) {
    const float4 a = v[2 * g], b = v[2 * g + 1];
    const std::uint32_t w = std::uint32_t(__nv_cvt_float2_to_fp4x2(make_float2(a.x, a.y), __NV_E2M1, cudaRoundNearest)) |
                            std::uint32_t(__nv_cvt_float2_to_fp4x2(make_float2(a.z, a.w), __NV_E2M1, cudaRoundNearest)) << 8 |
                            std::uint32_t(__nv_cvt_float2_to_fp4x2(make_float2(b.x, b.y), __NV_E2M1, cudaRoundNearest)) << 16 |
                            std::uint32_t(__nv_cvt_float2_to_fp4x2(make_float2(b.z, b.w), __NV_E2M1, cudaRoundNearest)) << 24;
    reinterpret_cast<std::uint32_t*>(out)[g] = w;
  }
}

__global__ void toolkit_decode_fp4_kernel(const std::uint8_t* in, float* out, std::size_t n) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  auto* v = reinterpret_cast<float4*>(out);
  for (std::size_t g = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < n / 8; g += stride) {
    const std::uint32_t w = reinterpret_cast<const std::uint32_t*>(in)[g];
    float2 f[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      f[k] = __half22float2(__half2(__nv_cvt_fp4x2_to_halfraw2(static_cast<__nv_fp4x2_storage_t>(w >> (8 * k)), __NV_E2M1)));
    v[2 * g] = make_float4(f[0].x, f[0].y, f[1].x, f[1].y);
    v[2 * g + 1] = make_float4(f[2].x, f[2].y, f[3].x, f[3].y);
  }
}

constexpr unsigned grid = 8192, block = 256;

// --- benchmarks -----------------------------------------------------------------------

void memcpy_d2d(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, 2 * b.n * sizeof(float),
      [&] { return cudaMemcpyAsync(b.out, b.in, b.n * sizeof(float), cudaMemcpyDeviceToDevice); }, true);
}

template <class F, rounding R, overflow O = overflow::infinity>
void quantize(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, 2 * b.n * sizeof(float), [&] {
    if constexpr (R == rounding::stochastic) {
      return cpd::cuda::quantize_stochastic(b.in, b.out, b.n, cpd::stochastic_quantizer<F, O>{1, 2});
    } else {
      return cpd::cuda::quantize<F, R, O>(b.in, b.out, b.n);
    }
  });
}

template <class F, overflow O>
void quantize_fast(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, 2 * b.n * sizeof(float), [&] { return cpd::cuda::quantize_fast<F, rounding::nearest_even, O>(b.in, b.out, b.n); });
}

template <class F, rounding R, overflow O = overflow::infinity>
void encode(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, b.n * (sizeof(float) + sizeof(typename F::storage_type)), [&] {
    if constexpr (R == rounding::stochastic) {
      return cpd::cuda::encode_stochastic(b.in, b.codes_of<F>(), b.n, cpd::stochastic_encoder<F, O>{1, 2});
    } else {
      return cpd::cuda::encode<F, R, O>(b.in, b.codes_of<F>(), b.n);
    }
  });
}

using cpd::random_generator;

/// Stochastic quantize with generator G (the rows without a generator draw the default's).
template <class F, random_generator G>
void quantize_sr(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  const cpd::stochastic_quantizer<F> q{1, 2, 0, 32, G};
  run(state, 2 * b.n * sizeof(float), [&] { return cpd::cuda::quantize_stochastic(b.in, b.out, b.n, q); });
}

/// Stochastic encode with generator G.
template <class F, random_generator G>
void encode_sr(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  const cpd::stochastic_encoder<F> e{1, 2, 0, 32, G};
  run(state, b.n * (sizeof(float) + sizeof(typename F::storage_type)),
      [&] { return cpd::cuda::encode_stochastic(b.in, b.codes_of<F>(), b.n, e); });
}

/// The generator alone: words[i] = the word of counter i under key, four per thread (v2: two
/// pair hashes), a grid-stride loop of 16-byte stores.
__global__ void words_kernel(std::uint32_t* words, std::size_t n, cpd::random_key key) {
  const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
  for (std::size_t g = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < n / 4; g += stride) {
    std::uint32_t w[4];
    cpd::detail::random_bits4(key, static_cast<std::uint32_t>(4 * g), w);
    reinterpret_cast<uint4*>(words)[g] = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

/// The words of n counters with generator G (bytes: the 4n written; x_copy against the copy's
/// 8n bytes moved).
template <random_generator G>
void words(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  const cpd::random_key key = cpd::make_random_key(1, 2, 0, G);
  run(state, b.n * sizeof(std::uint32_t), [&] {
    words_kernel<<<grid, block>>>(reinterpret_cast<std::uint32_t*>(b.out), b.n, key);
    return cudaGetLastError();
  });
}

template <class F, overflow O>
void encode_fast(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, b.n * (sizeof(float) + sizeof(typename F::storage_type)),
      [&] { return cpd::cuda::encode_fast<F, rounding::nearest_even, O>(b.in, b.codes_of<F>(), b.n); });
}

template <class F>
void decode(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, b.n * (sizeof(float) + sizeof(typename F::storage_type)),
      [&] { return cpd::cuda::decode<F>(b.codes_of<F>(), b.out, b.n); });
}

template <class F>
void toolkit_encode(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, b.n * (sizeof(float) + sizeof(typename F::storage_type)), [&] {
    toolkit_encode_kernel<F><<<grid, block>>>(b.in, b.codes_of<F>(), b.n);
    return cudaGetLastError();
  });
}

template <class F>
void toolkit_decode(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, b.n * (sizeof(float) + sizeof(typename F::storage_type)), [&] {
    toolkit_decode_kernel<F><<<grid, block>>>(b.codes_of<F>(), b.out, b.n);
    return cudaGetLastError();
  });
}

using fp4 = cpd::float4_e2m1fn;

template <rounding R>
void encode_packed_e2m1(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, b.n * sizeof(float) + b.n / 2, [&] {
    if constexpr (R == rounding::stochastic) {
      return cpd::cuda::encode_packed_stochastic(b.in, b.codes, b.n, cpd::stochastic_encoder<fp4>{1, 2});
    } else {
      return cpd::cuda::encode_packed<fp4, R>(b.in, b.codes, b.n);
    }
  });
}

void decode_packed_e2m1(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, b.n * sizeof(float) + b.n / 2, [&] { return cpd::cuda::decode_packed<fp4>(b.codes, b.out, b.n); });
}

void toolkit_encode_e2m1(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, b.n * sizeof(float) + b.n / 2, [&] {
    toolkit_encode_fp4_kernel<<<grid, block>>>(b.in, b.codes, b.n);
    return cudaGetLastError();
  });
}

void toolkit_decode_e2m1(benchmark::State& state) {
  buffers b(static_cast<std::size_t>(state.range(0)));
  run(state, b.n * sizeof(float) + b.n / 2, [&] {
    toolkit_decode_fp4_kernel<<<grid, block>>>(b.codes, b.out, b.n);
    return cudaGetLastError();
  });
}

// --- the toolkit's codes against cpd's, once, before timing ------------------------------

template <class F, overflow O>
std::size_t toolkit_differences(std::size_t n) {
  buffers b(n);
  using code = typename F::storage_type;
  toolkit_encode_kernel<F><<<grid, block>>>(b.in, b.codes_of<F>(), n);
  std::vector<code> theirs(n), ours(n);
  cpd::cuda::check(cudaMemcpy(theirs.data(), b.codes, n * sizeof(code), cudaMemcpyDeviceToHost), "download");
  cpd::cuda::check(cpd::cuda::encode<F, rounding::nearest_even, O>(b.in, b.codes_of<F>(), n), "encode");
  cpd::cuda::check(cudaMemcpy(ours.data(), b.codes, n * sizeof(code), cudaMemcpyDeviceToHost), "download");
  std::size_t d = 0;
  for (std::size_t i = 0; i < n; ++i) d += theirs[i] != ours[i];
  return d;
}

std::size_t toolkit_differences_fp4(std::size_t n) {
  buffers b(n);
  toolkit_encode_fp4_kernel<<<grid, block>>>(b.in, b.codes, n);
  std::vector<std::uint8_t> theirs(n / 2), ours(n / 2);
  cpd::cuda::check(cudaMemcpy(theirs.data(), b.codes, n / 2, cudaMemcpyDeviceToHost), "download");
  cpd::cuda::check(cpd::cuda::encode_packed<fp4, rounding::nearest_even, overflow::saturate>(b.in, b.codes, n), "encode");
  cpd::cuda::check(cudaMemcpy(ours.data(), b.codes, n / 2, cudaMemcpyDeviceToHost), "download");
  std::size_t d = 0;
  for (std::size_t i = 0; i < n / 2; ++i) d += theirs[i] != ours[i];
  return d;
}

constexpr std::int64_t small = 1 << 22, large = 1 << 26;  // 16 MiB and 256 MiB of floats

#define CPD_BENCH(...) BENCHMARK(__VA_ARGS__)->RangeMultiplier(16)->Range(small, large)->UseManualTime()

}  // namespace

CPD_BENCH(memcpy_d2d);
// 8-bit: generic nearest-even and stochastic, the hardware path (satfinite), the toolkit.
CPD_BENCH(quantize<cpd::float8_e4m3fn, rounding::nearest_even>);
CPD_BENCH(quantize_fast<cpd::float8_e4m3fn, overflow::saturate>);
CPD_BENCH(quantize<cpd::float8_e4m3fn, rounding::stochastic>);
CPD_BENCH(encode<cpd::float8_e4m3fn, rounding::nearest_even>);
CPD_BENCH(encode<cpd::float8_e4m3fn, rounding::nearest_even, overflow::saturate>);
CPD_BENCH(encode_fast<cpd::float8_e4m3fn, overflow::saturate>);
CPD_BENCH(toolkit_encode<cpd::float8_e4m3fn>);
CPD_BENCH(encode<cpd::float8_e4m3fn, rounding::stochastic>);
CPD_BENCH(decode<cpd::float8_e4m3fn>);
CPD_BENCH(toolkit_decode<cpd::float8_e4m3fn>);
CPD_BENCH(quantize<cpd::float8_e5m2, rounding::nearest_even>);
CPD_BENCH(quantize_fast<cpd::float8_e5m2, overflow::saturate>);
CPD_BENCH(quantize<cpd::float8_e5m2, rounding::stochastic>);
CPD_BENCH(encode<cpd::float8_e5m2, rounding::nearest_even>);
CPD_BENCH(encode<cpd::float8_e5m2, rounding::nearest_even, overflow::saturate>);
CPD_BENCH(encode_fast<cpd::float8_e5m2, overflow::saturate>);
CPD_BENCH(toolkit_encode<cpd::float8_e5m2>);
CPD_BENCH(encode<cpd::float8_e5m2, rounding::stochastic>);
CPD_BENCH(decode<cpd::float8_e5m2>);
CPD_BENCH(toolkit_decode<cpd::float8_e5m2>);
// 16-bit: the hardware path rounds to nearest-even with infinity.
CPD_BENCH(quantize<cpd::bfloat16, rounding::nearest_even>);
CPD_BENCH(quantize_fast<cpd::bfloat16, overflow::infinity>);
CPD_BENCH(quantize<cpd::bfloat16, rounding::stochastic>);
CPD_BENCH(encode<cpd::bfloat16, rounding::nearest_even>);
CPD_BENCH(encode_fast<cpd::bfloat16, overflow::infinity>);
CPD_BENCH(toolkit_encode<cpd::bfloat16>);
CPD_BENCH(encode<cpd::bfloat16, rounding::stochastic>);
CPD_BENCH(decode<cpd::bfloat16>);
CPD_BENCH(toolkit_decode<cpd::bfloat16>);
CPD_BENCH(quantize<cpd::float16, rounding::nearest_even>);
CPD_BENCH(quantize_fast<cpd::float16, overflow::infinity>);
CPD_BENCH(quantize<cpd::float16, rounding::stochastic>);
CPD_BENCH(encode<cpd::float16, rounding::nearest_even>);
CPD_BENCH(encode_fast<cpd::float16, overflow::infinity>);
CPD_BENCH(toolkit_encode<cpd::float16>);
CPD_BENCH(encode<cpd::float16, rounding::stochastic>);
CPD_BENCH(decode<cpd::float16>);
CPD_BENCH(toolkit_decode<cpd::float16>);
// Packed FP4 E2M1, two codes per byte.
CPD_BENCH(encode_packed_e2m1<rounding::nearest_even>);
CPD_BENCH(encode_packed_e2m1<rounding::stochastic>);
CPD_BENCH(toolkit_encode_e2m1);
CPD_BENCH(decode_packed_e2m1);
CPD_BENCH(toolkit_decode_e2m1);
// The generators of stochastic rounding (docs/random.md): each alone, and stochastic quantize
// and encode of the four formats with each (issue 34's targets: 0.8x the copy at 256 MiB).
//   bench_cuda --benchmark_filter='memcpy_d2d|words<|_sr<' --benchmark_counters_tabular=true
CPD_BENCH(words<random_generator::v1>);
CPD_BENCH(words<random_generator::v2>);
CPD_BENCH(quantize_sr<cpd::float8_e4m3fn, random_generator::v1>);
CPD_BENCH(quantize_sr<cpd::float8_e4m3fn, random_generator::v2>);
CPD_BENCH(encode_sr<cpd::float8_e4m3fn, random_generator::v1>);
CPD_BENCH(encode_sr<cpd::float8_e4m3fn, random_generator::v2>);
CPD_BENCH(quantize_sr<cpd::float8_e5m2, random_generator::v1>);
CPD_BENCH(quantize_sr<cpd::float8_e5m2, random_generator::v2>);
CPD_BENCH(encode_sr<cpd::float8_e5m2, random_generator::v1>);
CPD_BENCH(encode_sr<cpd::float8_e5m2, random_generator::v2>);
CPD_BENCH(quantize_sr<cpd::bfloat16, random_generator::v1>);
CPD_BENCH(quantize_sr<cpd::bfloat16, random_generator::v2>);
CPD_BENCH(encode_sr<cpd::bfloat16, random_generator::v1>);
CPD_BENCH(encode_sr<cpd::bfloat16, random_generator::v2>);
CPD_BENCH(quantize_sr<cpd::float16, random_generator::v1>);
CPD_BENCH(quantize_sr<cpd::float16, random_generator::v2>);
CPD_BENCH(encode_sr<cpd::float16, random_generator::v1>);
CPD_BENCH(encode_sr<cpd::float16, random_generator::v2>);

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("bench_cuda: no CUDA device (%s); nothing to measure\n", cudaGetErrorString(e));
    return 0;
  }
  cudaDeviceProp prop{};
  cpd::cuda::check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int clock_khz = 0, bus_bits = 0;
  cpd::cuda::check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0), "memory clock");
  cpd::cuda::check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0), "bus width");
  peak_bandwidth = 2.0 * clock_khz * 1e3 * bus_bits / 8;
  std::printf("device 0: %s (sm_%d%d, %d SMs), memory clock %d MHz, bus %d bits: peak %.0f GB/s\n", prop.name,
              prop.major, prop.minor, prop.multiProcessorCount, clock_khz / 1000, bus_bits, peak_bandwidth / 1e9);
  const std::size_t check_n = std::size_t(1) << 24;
  std::printf("toolkit codes that differ from cpd's on %zu random inputs (16M): e4m3fn satfinite %zu, e5m2 satfinite %zu, "
              "bf16 %zu, fp16 %zu, e2m1 satfinite %zu\n",
              check_n, toolkit_differences<cpd::float8_e4m3fn, overflow::saturate>(check_n),
              toolkit_differences<cpd::float8_e5m2, overflow::saturate>(check_n),
              toolkit_differences<cpd::bfloat16, overflow::infinity>(check_n),
              toolkit_differences<cpd::float16, overflow::infinity>(check_n), toolkit_differences_fp4(check_n));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
