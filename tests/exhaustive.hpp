// SPDX-License-Identifier: MIT
#pragma once

// Helpers for the exhaustive tests: run a check over all 2^32 float32 bit
// patterns on every hardware thread, count failures per check with the first
// few examples, and report them from the main thread with doctest.

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
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

/// Calls body(u, tallies) for every u in [0, 2^32), split in chunks over
/// std::thread::hardware_concurrency() threads, each with its own N tallies;
/// returns the merged tallies. Prints the wall time under `what`.
template <std::size_t N, class Body>
std::array<tally, N> for_each_float32(const char* what, Body body) {
  constexpr std::uint64_t total = std::uint64_t(1) << 32;
  constexpr std::uint64_t chunk = std::uint64_t(1) << 22;
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
        for (std::uint64_t i = begin; i < end; ++i) body(static_cast<std::uint32_t>(i), mine);
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
