// SPDX-License-Identifier: MIT
#pragma once

// Helpers for the exhaustive tests: run a check over all 2^32 float32 bit
// patterns on every hardware thread, count failures per check with the first
// few examples, and report them from the main thread with doctest.
//
// Speed: the scalar cpd::convert / cpd::quantize cost ~10 ns a call compiled for
// baseline x86-64, where the variable shifts of the rounding core do not
// vectorize. The tests therefore compute cpd's results for a block of
// consecutive inputs (for_each_float32_block) in a loop over those same scalar
// calls, compiled (isa_variants) for AVX-512 or AVX2 when the CPU has them, which
// runs the inlined core 6-10x faster (so do references that vectorize); then they
// compare element by element, as before. CPD_EXHAUSTIVE_ISA=baseline|avx2|avx512
// caps the choice (never above the CPU's): baseline checks the calls as a plain
// x86-64 build compiles them, at the old speed (~4x slower).

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace cpd_test {

/// How many examples a tally keeps (the smallest inputs win).
inline constexpr std::size_t max_examples = 8;

/// The bits of a float, and the float with given bits (std::memcpy: no cpd code).
inline std::uint32_t bits_of(float x) noexcept {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float float_of(std::uint32_t u) noexcept {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
inline bool is_nan_bits(std::uint32_t u) noexcept { return (u & 0x7FFFFFFFu) > 0x7F800000u; }
inline bool sign_bit(std::uint32_t u) noexcept { return (u >> 31) != 0; }

/// A count of inputs in one class (mismatches, or a documented difference)
/// with the first few examples, each a line starting with the input's bits.
struct tally {
  std::uint64_t count = 0;
  std::vector<std::string> examples;

#if defined(__GNUC__)
  __attribute__((format(printf, 2, 3)))
#endif
  void add(const char* fmt, ...) {
    ++count;
    if (examples.size() >= max_examples) return;
    char buf[256];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, args);
    va_end(args);
    examples.emplace_back(buf);
  }

  void merge(const tally& other) {
    count += other.count;
    examples.insert(examples.end(), other.examples.begin(), other.examples.end());
    std::sort(examples.begin(), examples.end());  // inputs print as fixed-width hex
    if (examples.size() > max_examples) examples.resize(max_examples);
  }

  [[nodiscard]] std::string joined() const {
    std::string s;
    for (const auto& e : examples) s += "\n    " + e;
    return s;
  }
};

/// Inputs per block given to a for_each_float32_block body (its arrays stay in cache).
inline constexpr std::uint32_t block_size = 2048;

/// Calls block(begin, tallies) for every block [begin, begin + block_size) of
/// [0, 2^32), in increasing order within a chunk of 2^22 inputs, the chunks
/// split over std::thread::hardware_concurrency() threads, each thread with its
/// own N tallies; returns the merged tallies. Prints the wall time under `what`.
template <std::size_t N, class Block>
std::array<tally, N> for_each_float32_block(const char* what, Block block) {
  constexpr std::uint64_t total = std::uint64_t(1) << 32;
  constexpr std::uint64_t chunk = std::uint64_t(1) << 22;
  static_assert(chunk % block_size == 0, "blocks tile a chunk");
  const unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<std::uint64_t> next{0};
  std::vector<std::array<tally, N>> per_thread(n_threads);

  const auto start = std::chrono::steady_clock::now();
  const std::clock_t cpu_start = std::clock();  // process CPU time, all threads
  std::vector<std::thread> threads;
  threads.reserve(n_threads);
  for (unsigned t = 0; t < n_threads; ++t) {
    threads.emplace_back([&, t] {
      std::array<tally, N>& mine = per_thread[t];
      for (std::uint64_t begin; (begin = next.fetch_add(chunk)) < total;) {
        const std::uint64_t end = begin + chunk;
        for (std::uint64_t b = begin; b < end; b += block_size) block(static_cast<std::uint32_t>(b), mine);
      }
    });
  }
  for (auto& th : threads) th.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu_seconds = double(std::clock() - cpu_start) / CLOCKS_PER_SEC;

  std::array<tally, N> merged;
  for (const auto& mine : per_thread)
    for (std::size_t k = 0; k < N; ++k) merged[k].merge(mine[k]);
  const std::string msg = std::string(what) + ": all 2^32 floats in " + std::to_string(seconds) + " s wall, " +
                          std::to_string(cpu_seconds) + " s CPU, " + std::to_string(n_threads) + " threads";
  MESSAGE(msg);
  return merged;
}

/// Calls body(u, tallies) for every u in [0, 2^32), as for_each_float32_block.
template <std::size_t N, class Body>
std::array<tally, N> for_each_float32(const char* what, Body body) {
  return for_each_float32_block<N>(what, [&body](std::uint32_t begin, std::array<tally, N>& tl) {
    for (std::uint32_t i = 0; i < block_size; ++i) body(begin + i, tl);
  });
}

// --- the instruction set of the loops over cpd's scalar calls ------------------

/// The instruction sets isa_variants compiles for.
enum class isa { baseline, avx2, avx512 };

inline const char* to_string(isa i) noexcept {
  return i == isa::avx512 ? "avx512" : i == isa::avx2 ? "avx2" : "baseline";
}

#if defined(__GNUC__) || defined(__clang__)
/// A function whose calls are all inlined into it (a reference's conversion function, which
/// the compiler keeps out of line, then folds for the constant arguments of each call).
#define CPD_TEST_FLATTEN __attribute__((flatten))
#else
#define CPD_TEST_FLATTEN
#endif

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define CPD_TEST_ISA_VARIANTS 1
#define CPD_TEST_ALWAYS_INLINE inline __attribute__((always_inline))
#define CPD_TEST_TARGET_AVX2 __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt")))
#if defined(__clang__)
#define CPD_TEST_TARGET_AVX512 \
  __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt,avx512f,avx512bw,avx512vl,avx512dq"), min_vector_width(512)))
#else
#define CPD_TEST_TARGET_AVX512 \
  __attribute__((target("avx2,bmi,bmi2,popcnt,lzcnt,avx512f,avx512bw,avx512vl,avx512dq,prefer-vector-width=512")))
#endif
#else
#define CPD_TEST_ISA_VARIANTS 0
#define CPD_TEST_ALWAYS_INLINE inline
#endif

/// The best instruction set of this CPU, capped by CPD_EXHAUSTIVE_ISA (read once).
inline isa vector_isa() noexcept {
#if CPD_TEST_ISA_VARIANTS
  static const isa chosen = [] {
    __builtin_cpu_init();
    isa best = isa::baseline;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2")) best = isa::avx2;
    if (best == isa::avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      best = isa::avx512;
    isa cap = isa::avx512;
    if (const char* env = std::getenv("CPD_EXHAUSTIVE_ISA")) {
      if (std::strcmp(env, "baseline") == 0) cap = isa::baseline;
      else if (std::strcmp(env, "avx2") == 0) cap = isa::avx2;
    }
    return best < cap ? best : cap;
  }();
  return chosen;
#else
  return isa::baseline;
#endif
}

/// K::run(args...) (a CPD_TEST_ALWAYS_INLINE static function) compiled for each
/// instruction set; run() calls the one vector_isa() chose.
template <class K>
struct isa_variants {
  template <class... A>
  static void baseline(A&... a) { K::run(a...); }
#if CPD_TEST_ISA_VARIANTS
  template <class... A>
  CPD_TEST_TARGET_AVX2 static void avx2(A&... a) { K::run(a...); }
  template <class... A>
  CPD_TEST_TARGET_AVX512 static void avx512(A&... a) { K::run(a...); }
#endif
  template <class... A>
  static void run(A&... a) {
#if CPD_TEST_ISA_VARIANTS
    switch (vector_isa()) {
      case isa::avx512: return avx512(a...);
      case isa::avx2: return avx2(a...);
      case isa::baseline: break;
    }
#endif
    baseline(a...);
  }
};

/// Prints which instruction set the loops over cpd's scalar calls were compiled for.
inline void report_isa() {
  const std::string msg = std::string("cpd scalar calls in blocks compiled for: ") + to_string(vector_isa());
  MESSAGE(msg);
}

/// Fails (and prints the examples) unless t counted nothing.
// (doctest 2.4.9 prints a const char* as a pointer: messages are std::strings.)
inline void require_none(const char* name, const tally& t) {
  const std::string msg = std::string(name) + ": " + std::to_string(t.count) + " mismatches" + t.joined();
  INFO(msg);
  CHECK(t.count == 0);
}

/// Prints a documented difference from the reference and the inputs it covers.
inline void report_documented(const char* name, const tally& t) {
  const std::string msg = std::string(name) + ": " + std::to_string(t.count) +
                          " inputs (documented difference, DESIGN semantics asserted)" + t.joined();
  MESSAGE(msg);
}

}  // namespace cpd_test
