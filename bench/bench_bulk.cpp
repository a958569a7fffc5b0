// SPDX-License-Identifier: MIT
// Host bulk kernels (cpd/host/bulk.hpp) against memcpy of the same bytes, in the same
// binary, and against the CPU's own float16 conversion (F16C) and the best
// bfloat16 intrinsic sequence (this CPU has no AVX512-BF16).
//
// Yardstick: BM_memcpy/<n> copies n floats (reads 4n bytes, writes 4n bytes).
// quantize moves the same 8n bytes; encode to 8-bit codes moves 5n, decode 5n.
// Every benchmark reports bytes_per_second as the bytes it moves and
// items_per_second as elements, so quantize/memcpy is the bytes ratio and
// encode/memcpy the element-rate ratio (bench/bulk_ratios.py prints both).
//
//   bench_bulk --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//              --benchmark_out=bulk.json --benchmark_out_format=json
//   python3 bench/bulk_ratios.py bulk.json
// The two generators of stochastic rounding side by side (docs/random.md):
//   bench_bulk --benchmark_filter='BM_memcpy/(262144|16777216)$|_sr<' ...

#include <cpd/host/bulk.hpp>
#include <cpd/host/hadamard.hpp>
#include <cpd/host/integer.hpp>
#include <cpd/host/pack.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define CPD_BENCH_X86 1
#endif

namespace {

constexpr std::size_t mib = std::size_t(1) << 20;
constexpr std::size_t n64 = 64 * mib / sizeof(float);  // 64 MiB of float32

/// Page-aligned buffers, one set per size, filled once (first touch here).
struct buffers {
  std::unique_ptr<float[]> in, out;
  std::unique_ptr<std::uint8_t[]> codes;
  std::unique_ptr<std::uint16_t[]> codes16;
};

buffers& get(std::size_t n) {
  static std::map<std::size_t, buffers> all;
  auto it = all.find(n);
  if (it != all.end()) return it->second;
  buffers b;
  b.in.reset(new float[n]);
  b.out.reset(new float[n]);
  b.codes.reset(new std::uint8_t[n]);
  b.codes16.reset(new std::uint16_t[n]);
  std::mt19937 g(42);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (std::size_t i = 0; i < n; ++i) b.in[i] = nd(g) * 8.0f;  // gradients around the fp8 range
  std::memset(b.out.get(), 0, n * sizeof(float));
  std::memset(b.codes.get(), 0, n);
  std::memset(b.codes16.get(), 0, n * 2);
  cpd::encode<cpd::float8_e4m3fn>(b.in.get(), b.codes.get(), n);
  return all.emplace(n, std::move(b)).first->second;
}

void set_rates(benchmark::State& st, std::size_t n, std::size_t bytes_per_element) {
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(n));
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations()) * static_cast<std::int64_t>(n * bytes_per_element));
}

/// The instruction-set cap of a benchmark: -1 none (the CPU's best).
struct isa_scope {
  explicit isa_scope(int cap) { cpd::detail::set_isa_override(cap); }
  ~isa_scope() { cpd::detail::set_isa_override(-1); }
};

// --- the yardstick -----------------------------------------------------------

void BM_memcpy(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  for (auto _ : st) {
    std::memcpy(b.out.get(), b.in.get(), n * sizeof(float));
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 8);
}

/// memcpy split over two threads (the yardstick of the 2-thread runs).
void BM_memcpy_2threads(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  for (auto _ : st) {
    std::thread t([&] { std::memcpy(b.out.get() + n / 2, b.in.get() + n / 2, (n - n / 2) * sizeof(float)); });
    std::memcpy(b.out.get(), b.in.get(), n / 2 * sizeof(float));
    t.join();
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 8);
}

// --- random Hadamard rotations (docs/scaling.md) ---------------------------------

/// cpd::hadamard_rotate in blocks of range(1) values (float in, float out).
void BM_hadamard(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  cpd::hadamard_options o;
  o.block = static_cast<std::size_t>(st.range(1));
  for (auto _ : st) {
    cpd::hadamard_rotate(b.in.get(), b.out.get(), n, o);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 8);
}

// --- integers with a float scale (docs/formats.md, "Integers") -----------------------

/// cpd::int_fake_quantize, int8 symmetric, nearest_even (range(1) = 1) or stochastic (0), one
/// scale for the whole array.
void BM_int_fake_quantize(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  const cpd::int_format f{8, true};
  const cpd::int_params p = cpd::int_params_for(f, -32.0f, 32.0f);
  const cpd::rounding r = st.range(1) != 0 ? cpd::rounding::nearest_even : cpd::rounding::stochastic;
  for (auto _ : st) {
    cpd::int_fake_quantize(cpd::execution::seq, f, p, r, b.in.get(), b.out.get(), n);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 8);
}

/// cpd::int_quantize in groups of range(1) values (each its own scale), int4 symmetric,
/// nearest_even (range(2) = 1) or stochastic (0).
void BM_int_quantize(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  const auto group = static_cast<std::size_t>(st.range(1));
  const cpd::rounding r = st.range(2) != 0 ? cpd::rounding::nearest_even : cpd::rounding::stochastic;
  for (auto _ : st) {
    cpd::int_quantize(cpd::execution::seq, cpd::int_format{4, true}, r, b.in.get(), b.out.get(), n, group);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 8);
}

// --- quantize, encode, decode --------------------------------------------------

template <class F, cpd::rounding R>
void BM_quantize(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  isa_scope isa(static_cast<int>(st.range(1)));
  auto& b = get(n);
  cpd::bulk_options o;
  o.seed = 1;
  for (auto _ : st) {
    cpd::quantize<F, R>(b.in.get(), b.out.get(), n, o);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 8);
}

template <class F, cpd::rounding R>
void BM_quantize_2threads(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  cpd::bulk_options o;
  o.seed = 1;
  for (auto _ : st) {
    cpd::quantize<F, R>(cpd::execution::par(2), b.in.get(), b.out.get(), n, o);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 8);
}

template <class F>
void BM_quantize_stats(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  cpd::value_stats stats;
  cpd::bulk_options o;
  o.stats = &stats;
  for (auto _ : st) {
    cpd::quantize<F>(b.in.get(), b.out.get(), n, o);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 8);
}

void BM_quantize_runtime_format(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  const cpd::format f = cpd::format::parse("e4m3fn");
  for (auto _ : st) {
    cpd::quantize(f, cpd::rounding::nearest_even, cpd::overflow::infinity, b.in.get(), b.out.get(), n);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 8);
}

template <class F, cpd::rounding R>
void BM_encode(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  isa_scope isa(static_cast<int>(st.range(1)));
  auto& b = get(n);
  for (auto _ : st) {
    cpd::encode<F, R>(b.in.get(), b.codes.get(), n);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 5);
}

/// Stochastic quantize with generator G (args: n, ISA cap), one thread.
template <class F, cpd::random_generator G>
void BM_quantize_sr(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  isa_scope isa(static_cast<int>(st.range(1)));
  auto& b = get(n);
  cpd::bulk_options o;
  o.seed = 1;
  o.generator = G;
  for (auto _ : st) {
    cpd::quantize<F, cpd::rounding::stochastic>(b.in.get(), b.out.get(), n, o);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 8);
}

/// Stochastic encode with generator G to F's codes (1 or 2 bytes): ratio in elements.
template <class F, cpd::random_generator G>
void BM_encode_sr(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  isa_scope isa(static_cast<int>(st.range(1)));
  auto& b = get(n);
  cpd::bulk_options o;
  o.seed = 1;
  o.generator = G;
  using code = typename F::storage_type;
  code* out = nullptr;
  if constexpr (sizeof(code) == 1) out = b.codes.get();
  else out = b.codes16.get();
  for (auto _ : st) {
    cpd::encode<F, cpd::rounding::stochastic>(b.in.get(), out, n, o);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 4 + sizeof(code));
}

template <class F>
void BM_decode(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  isa_scope isa(static_cast<int>(st.range(1)));
  auto& b = get(n);
  for (auto _ : st) {
    cpd::decode<F>(b.codes.get(), b.out.get(), n);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 5);
}

template <class F>
void BM_encode16(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  for (auto _ : st) {
    cpd::encode<F>(b.in.get(), b.codes16.get(), n);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 6);
}

void BM_encode_packed_fp4(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  for (auto _ : st) {
    cpd::encode_packed<cpd::float4_e2m1fn>(b.in.get(), b.codes.get(), n);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 4);  // 4 bytes in, half a byte out
}

void BM_decode_packed_fp4(benchmark::State& st) {
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  for (auto _ : st) {
    cpd::decode_packed<cpd::float4_e2m1fn>(b.codes.get(), b.out.get(), n);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 4);
}

// --- the CPU's own conversions ---------------------------------------------------

#if CPD_BENCH_X86
// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined_*) as maybe uninitialized.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

/// float -> float16 -> float with F16C (vcvtps2ph round-to-nearest-even, vcvtph2ps).
__attribute__((target("avx2,f16c"))) void f16c_quantize(const float* in, float* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = cpd::quantize<cpd::float16>(in[i]);
}

/// float -> float16 codes with F16C.
__attribute__((target("avx2,f16c"))) void f16c_encode(const float* in, std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) out[i] = cpd::float16(in[i]).bits();
}

/// The same F16C conversion with AVX-512 (16 lanes).
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void f16c512_quantize(const float* in, float* out,
                                                                              std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = cpd::quantize<cpd::float16>(in[i]);
}

/// The 512-bit F16C round trip with streaming stores: what cpd's kernels do for
/// outputs of 4 MiB or more, so the CPU's conversion gets the same stores.
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void f16c512_quantize_nt(const float* in, float* out,
                                                                                 std::size_t n) {
  std::size_t i = 0;
  for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % 64 != 0; ++i) out[i] = cpd::quantize<cpd::float16>(in[i]);
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_stream_ps(out + i, _mm512_cvtph_ps(h));
  }
  _mm_sfence();
  for (; i < n; ++i) out[i] = cpd::quantize<cpd::float16>(in[i]);
}

/// float16 codes with the 512-bit F16C conversion and streaming stores.
__attribute__((target("avx512f,avx512bw,avx512vl,f16c"))) void f16c512_encode_nt(const float* in, std::uint16_t* out,
                                                                               std::size_t n) {
  std::size_t i = 0;
  for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % 32 != 0; ++i) out[i] = cpd::float16(in[i]).bits();
  for (; i + 16 <= n; i += 16)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  _mm_sfence();
  for (; i < n; ++i) out[i] = cpd::float16(in[i]).bits();
}

/// A copy with streaming stores (no conversion): the fastest copy loop here, to
/// show how far the memcpy yardstick is from what streaming stores allow.
__attribute__((target("avx512f"))) void copy_nt(const float* in, float* out, std::size_t n) {
  std::size_t i = 0;
  for (; i < n && reinterpret_cast<std::uintptr_t>(out + i) % 64 != 0; ++i) out[i] = in[i];
  for (; i + 16 <= n; i += 16) _mm512_stream_ps(out + i, _mm512_loadu_ps(in + i));
  _mm_sfence();
  for (; i < n; ++i) out[i] = in[i];
}

/// bfloat16 round-to-nearest-even without AVX512-BF16: the usual integer sequence
/// x + 0x7FFF + ((x >> 16) & 1), high half kept, NaN made quiet (AVX-512).
__attribute__((target("avx512f,avx512bw,avx512vl"))) void bf16_quantize(const float* in, float* out, std::size_t n) {
  const __m512i one = _mm512_set1_epi32(1), round = _mm512_set1_epi32(0x7FFF);
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)), abs = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i inf = _mm512_set1_epi32(0x7F800000), quiet = _mm512_set1_epi32(0x00400000);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(in + i);
    const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(0xFFFF, x, 16), one);
    __m512i r = _mm512_and_si512(_mm512_add_epi32(x, _mm512_add_epi32(round, lsb)), high);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs), inf);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_and_si512(_mm512_or_si512(x, quiet), high));
    _mm512_storeu_si512(out + i, r);
  }
  for (; i < n; ++i) out[i] = cpd::quantize<cpd::bfloat16>(in[i]);
}

/// bfloat16 codes with the same sequence, narrowed with vpmovdw.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void bf16_encode(const float* in, std::uint16_t* out,
                                                                    std::size_t n) {
  const __m512i one = _mm512_set1_epi32(1), round = _mm512_set1_epi32(0x7FFF);
  const __m512i abs = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(in + i);
    const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(0xFFFF, x, 16), one);
    __m512i r = _mm512_add_epi32(x, _mm512_add_epi32(round, lsb));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs), inf);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(x, quiet));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(_mm512_maskz_srli_epi32(0xFFFF, r, 16)));
  }
  for (; i < n; ++i) out[i] = cpd::bfloat16(in[i]).bits();
}

bool has_f16c() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"); }
bool has_avx512() { return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }

template <void (*Fn)(const float*, float*, std::size_t), bool (*Has)()>
void BM_intrinsic_quantize(benchmark::State& st) {
  if (!Has()) {
    st.SkipWithError("instruction set not available");
    return;
  }
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  for (auto _ : st) {
    Fn(b.in.get(), b.out.get(), n);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 8);
}

template <void (*Fn)(const float*, std::uint16_t*, std::size_t), bool (*Has)()>
void BM_intrinsic_encode16(benchmark::State& st) {
  if (!Has()) {
    st.SkipWithError("instruction set not available");
    return;
  }
  const auto n = static_cast<std::size_t>(st.range(0));
  auto& b = get(n);
  for (auto _ : st) {
    Fn(b.in.get(), b.codes16.get(), n);
    benchmark::ClobberMemory();
  }
  set_rates(st, n, 6);
}
#endif

using cpd::rounding;
using e4m3 = cpd::float8_e4m3fn;
using e5m2 = cpd::float8_e5m2;
using bf16 = cpd::bfloat16;
using fp16 = cpd::float16;

const auto n = static_cast<std::int64_t>(n64);
constexpr std::int64_t best = -1;  // no ISA cap

// Yardstick and the main table: 64 MiB, one thread, the CPU's best path.
BENCHMARK(BM_memcpy)->Arg(n);
BENCHMARK_TEMPLATE(BM_quantize, e4m3, rounding::nearest_even)->Args({n, best});
BENCHMARK(BM_hadamard)->Args({n, 16})->Args({n, 64})->Args({n, 256});
BENCHMARK(BM_int_fake_quantize)->Args({n, 1})->Args({n, 0});
BENCHMARK(BM_int_quantize)->Args({n, n, 1})->Args({n, 4096, 1})->Args({n, 32, 1})->Args({n, 32, 0});
BENCHMARK_TEMPLATE(BM_quantize, e5m2, rounding::nearest_even)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, bf16, rounding::nearest_even)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, fp16, rounding::nearest_even)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, e4m3, rounding::nearest_away)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, e4m3, rounding::toward_zero)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, e4m3, rounding::upward)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, e4m3, rounding::downward)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, e4m3, rounding::odd)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, bf16, rounding::toward_zero)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, e4m3, rounding::stochastic)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, e5m2, rounding::stochastic)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, bf16, rounding::stochastic)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize, fp16, rounding::stochastic)->Args({n, best});
BENCHMARK_TEMPLATE(BM_quantize_stats, e4m3)->Arg(n);
BENCHMARK(BM_quantize_runtime_format)->Arg(n);
BENCHMARK_TEMPLATE(BM_encode, e4m3, rounding::nearest_even)->Args({n, best});
BENCHMARK_TEMPLATE(BM_encode, e5m2, rounding::nearest_even)->Args({n, best});
BENCHMARK_TEMPLATE(BM_encode, e4m3, rounding::stochastic)->Args({n, best});
BENCHMARK_TEMPLATE(BM_decode, e4m3)->Args({n, best});
BENCHMARK_TEMPLATE(BM_decode, e5m2)->Args({n, best});
BENCHMARK(BM_encode_packed_fp4)->Arg(n);
BENCHMARK(BM_decode_packed_fp4)->Arg(n);

// float16 / bfloat16 against the CPU's conversions.
#if CPD_BENCH_X86
BENCHMARK_TEMPLATE(BM_intrinsic_quantize, f16c_quantize, has_f16c)->Arg(n);
BENCHMARK_TEMPLATE(BM_intrinsic_quantize, f16c512_quantize, has_avx512)->Arg(n);
BENCHMARK_TEMPLATE(BM_intrinsic_quantize, bf16_quantize, has_avx512)->Arg(n);
BENCHMARK_TEMPLATE(BM_intrinsic_quantize, f16c512_quantize_nt, has_avx512)->Arg(n);
BENCHMARK_TEMPLATE(BM_intrinsic_encode16, f16c512_encode_nt, has_avx512)->Arg(n);
BENCHMARK_TEMPLATE(BM_intrinsic_quantize, copy_nt, has_avx512)->Arg(n);
BENCHMARK_TEMPLATE(BM_intrinsic_encode16, f16c_encode, has_f16c)->Arg(n);
BENCHMARK_TEMPLATE(BM_intrinsic_encode16, bf16_encode, has_avx512)->Arg(n);
#endif
BENCHMARK_TEMPLATE(BM_encode16, fp16)->Arg(n);
BENCHMARK_TEMPLATE(BM_encode16, bf16)->Arg(n);

// Every instruction-set path (0 baseline, 1 AVX2, 2 AVX-512).
BENCHMARK_TEMPLATE(BM_quantize, e4m3, rounding::nearest_even)->Args({n, 0})->Args({n, 1})->Args({n, 2});
BENCHMARK_TEMPLATE(BM_quantize, e4m3, rounding::stochastic)->Args({n, 0})->Args({n, 1})->Args({n, 2});
BENCHMARK_TEMPLATE(BM_encode, e4m3, rounding::nearest_even)->Args({n, 0})->Args({n, 1})->Args({n, 2});
BENCHMARK_TEMPLATE(BM_decode, e4m3)->Args({n, 0})->Args({n, 1})->Args({n, 2});

// Sizes from in-cache to 256 MiB.
// Elements: 1Ki (4 KiB of float32), 16Ki, 256Ki, 4Mi (16 MiB), and 64Mi (256 MiB);
// 16Mi (64 MiB) is above.
const std::vector<std::int64_t> sizes = {1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 26};
BENCHMARK(BM_memcpy)->ArgsProduct({sizes});
BENCHMARK_TEMPLATE(BM_quantize, e4m3, rounding::nearest_even)->ArgsProduct({sizes, {best}});
BENCHMARK_TEMPLATE(BM_quantize, e4m3, rounding::stochastic)->ArgsProduct({sizes, {best}});

// Stochastic rounding with each generator (docs/random.md), 64 MiB, one thread; e4m3fn also
// under the ISA caps (0 baseline, 1 AVX2) and in cache (1 MiB of float32).
using cpd::random_generator;
#define CPD_BENCH_SR(F)                                                         \
  BENCHMARK_TEMPLATE(BM_quantize_sr, F, random_generator::v1)->Args({n, best}); \
  BENCHMARK_TEMPLATE(BM_quantize_sr, F, random_generator::v2)->Args({n, best}); \
  BENCHMARK_TEMPLATE(BM_encode_sr, F, random_generator::v1)->Args({n, best});   \
  BENCHMARK_TEMPLATE(BM_encode_sr, F, random_generator::v2)->Args({n, best})
CPD_BENCH_SR(e4m3);
CPD_BENCH_SR(e5m2);
CPD_BENCH_SR(bf16);
CPD_BENCH_SR(fp16);
#undef CPD_BENCH_SR
BENCHMARK_TEMPLATE(BM_quantize_sr, e4m3, random_generator::v1)->Args({n, 0})->Args({n, 1})->Args({1 << 18, best});
BENCHMARK_TEMPLATE(BM_quantize_sr, e4m3, random_generator::v2)->Args({n, 0})->Args({n, 1})->Args({1 << 18, best});
BENCHMARK_TEMPLATE(BM_encode_sr, e4m3, random_generator::v1)->Args({1 << 18, best});
BENCHMARK_TEMPLATE(BM_encode_sr, e4m3, random_generator::v2)->Args({1 << 18, best});

// Two threads against one.
BENCHMARK(BM_memcpy_2threads)->Arg(n)->UseRealTime();
BENCHMARK_TEMPLATE(BM_quantize_2threads, e4m3, rounding::nearest_even)->Arg(n)->UseRealTime();
BENCHMARK_TEMPLATE(BM_quantize_2threads, e4m3, rounding::stochastic)->Arg(n)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
