// SPDX-License-Identifier: MIT
#pragma once

// cpd's one host thread splitter: parallel_for(policy, n, fn) calls fn(begin, end)
// on pieces of [0, n), on the calling thread (execution::seq) or on several threads
// (execution::par: OpenMP under -fopenmp, else std::thread), and sums the pieces'
// results in piece order (a fn that returns void returns nothing). Every piece runs
// in the default floating-point environment (a pool thread inherits nothing from
// the caller).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/host/detail/tuning.hpp>
#include <cpd/host/execution.hpp>

#include <algorithm>
#include <functional>
#include <cstddef>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace cpd::detail {

/// The threads that policy p gives n elements: p.threads (0: the hardware's), at most
/// one per p.min_chunk elements, at least 1.
inline unsigned thread_count(const execution::parallel_policy& p, std::size_t n) noexcept {
  const unsigned t = p.threads != 0 ? p.threads : std::max(1u, std::thread::hardware_concurrency());
  const std::size_t min_chunk = std::max<std::size_t>(p.min_chunk, 1);
  return static_cast<unsigned>(std::min<std::size_t>(t, std::max<std::size_t>(n / min_chunk, 1)));
}

/// Calls piece(j) for j in [0, t), on t threads (this one does piece 0).
template <class Piece>
void run_threads(unsigned t, Piece&& piece) {
#if defined(_OPENMP)
#pragma omp parallel for num_threads(static_cast<int>(t)) schedule(static, 1)
  for (int j = 0; j < static_cast<int>(t); ++j) piece(static_cast<unsigned>(j));
#else
  std::vector<std::thread> pool;
  pool.reserve(t - 1);
  for (unsigned j = 1; j < t; ++j) {
#if CPD_HAS_EXCEPTIONS
    try {
      pool.emplace_back(std::ref(piece), j);
    } catch (...) {  // no thread to be had: do that piece here
      piece(j);
    }
#else
    pool.emplace_back(std::ref(piece), j);
#endif
  }
  piece(0);
  for (auto& th : pool) th.join();
#endif
}

/// fn(0, n) on the calling thread.
template <class Fn>
decltype(auto) parallel_for(execution::sequenced_policy, std::size_t n, Fn&& fn,
                            std::size_t = tuning::chunk_granule) {
  return fn(std::size_t(0), n);
}

/// fn(begin, end) on chunks of [0, n) (multiples of `granule` elements: whole cache
/// lines and packing groups by default; 1 for a loop over workers), one per thread;
/// returns the sum (operator+=, from a value-initialized result) of the chunks'
/// results in chunk order, or nothing when fn returns void.
template <class Fn>
auto parallel_for(const execution::parallel_policy& p, std::size_t n, Fn&& fn,
                  std::size_t granule = tuning::chunk_granule) {
  using result = std::invoke_result_t<Fn&, std::size_t, std::size_t>;
  const unsigned t = thread_count(p, n);
  if (t <= 1) return fn(std::size_t(0), n);
  const std::size_t g = std::max<std::size_t>(granule, 1);
  const std::size_t chunk = ((n + t - 1) / t + g - 1) / g * g;
  const auto bounds = [=](unsigned j) {
    return std::pair<std::size_t, std::size_t>(std::min(n, j * chunk), std::min(n, (j + 1) * chunk));
  };
  if constexpr (std::is_void_v<result>) {
    run_threads(t, [&](unsigned j) {
      const default_fp_env fp_env;
      const auto [b, e] = bounds(j);
      if (b < e) fn(b, e);
    });
  } else {
    std::vector<result> parts(t);
    run_threads(t, [&](unsigned j) {
      const default_fp_env fp_env;
      const auto [b, e] = bounds(j);
      parts[j] = b < e ? fn(b, e) : result{};
    });
    result sum{};
    for (const auto& s : parts) sum += s;
    return sum;
  }
}

}  // namespace cpd::detail
