// SPDX-License-Identifier: MIT
// Gradient codecs (cpd/exchange/codec.hpp): encode and decode throughput of one worker's
// tensor, single-threaded, against memcpy of the same float32 bytes in the same
// binary. Every benchmark reports bytes_per_second as the float32 bytes of the
// tensor (4n), so codec/memcpy is the ratio of the rates; the label is the codec's
// bits per value on the wire.
//
//   bench_codecs --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

#include <cpd/exchange/codec.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr std::size_t small_n = std::size_t(1) << 16;  // 256 KiB of float32: in cache
constexpr std::size_t large_n = std::size_t(1) << 24;  // 64 MiB: far beyond the last-level cache

const char* const codec_names[] = {"dyntree8",      "dyntree8:2048", "linear8",       "linear8:2048",
                                   "qsgd:2bit:512", "qsgd:4bit:512", "qsgd:8bit:512", "onebit:512",
                                   "fp:e4m3fn",     "fp:e2m1fn",     "int:4:32",      "int:8",
                                   "posit:8",       "posit:8:2:sr",  "posit:16:1",    "fp:binary8p3se", "fp:bf16"};

/// Gradient-like values (normal, sigma 1e-3), filled once per size.
const std::vector<float>& input(std::size_t n) {
  static std::map<std::size_t, std::vector<float>> all;
  auto it = all.find(n);
  if (it != all.end()) return it->second;
  std::vector<float> v(n);
  std::mt19937 g(42);
  std::normal_distribution<float> d(0.0f, 1e-3f);
  for (float& x : v) x = d(g);
  return all.emplace(n, std::move(v)).first->second;
}

void bm_memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::vector<float>& in = input(n);
  std::vector<float> out(n, 0.0f);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), n * sizeof(float));
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(4 * n));
}

void bm_encode(benchmark::State& state, const std::string& name) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto c = cpd::make_codec(name);
  const std::vector<float>& in = input(n);
  std::vector<std::uint8_t> payload(c->payload_size(n));
  std::uint64_t step = 0;
  for (auto _ : state) {
    c->encode(in.data(), n, payload.data(), {1, step++});
    benchmark::DoNotOptimize(payload.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(4 * n));
  char label[64];
  std::snprintf(label, sizeof label, "%.4f bits/value", c->bits_per_value(n));
  state.SetLabel(label);
}

void bm_decode(benchmark::State& state, const std::string& name) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto c = cpd::make_codec(name);
  const std::vector<float>& in = input(n);
  std::vector<std::uint8_t> payload(c->payload_size(n));
  c->encode(in.data(), n, payload.data(), {1, 0});
  std::vector<float> out(n, 0.0f);
  for (auto _ : state) {
    c->decode(payload.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(4 * n));
  char label[64];
  std::snprintf(label, sizeof label, "%.4f bits/value", c->bits_per_value(n));
  state.SetLabel(label);
}

const bool registered = [] {
  benchmark::RegisterBenchmark("memcpy", bm_memcpy)->Arg(small_n)->Arg(large_n);
  for (const char* name : codec_names) {
    const std::string s = name;
    benchmark::RegisterBenchmark(("encode/" + s).c_str(), [s](benchmark::State& st) { bm_encode(st, s); })
        ->Arg(small_n)
        ->Arg(large_n);
    benchmark::RegisterBenchmark(("decode/" + s).c_str(), [s](benchmark::State& st) { bm_decode(st, s); })
        ->Arg(small_n)
        ->Arg(large_n);
  }
  return true;
}();

}  // namespace

BENCHMARK_MAIN();
