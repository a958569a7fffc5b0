// SPDX-License-Identifier: MIT
#pragma once

// Execution policies of cpd's host bulk calls, passed first as in the standard
// algorithms: cpd::quantize<F, R>(cpd::execution::par, in, out, n).
// Results never depend on the policy: every element is rounded on its own, and
// stochastic rounding draws its bits from the element's index.

#include <cpd/core/config.hpp>
#include <cpd/host/detail/tuning.hpp>

#include <cstddef>
#include <type_traits>

namespace cpd::execution {

/// Run on the calling thread.
struct sequenced_policy {};

/// Run on several threads (OpenMP when compiled with -fopenmp, else std::thread).
struct parallel_policy {
  unsigned threads = 0;        ///< number of threads; 0 = std::thread::hardware_concurrency()
  std::size_t min_chunk = detail::tuning::min_chunk;  ///< fewest elements per thread worth a thread

  /// The same policy with `n` threads.
  [[nodiscard]] constexpr parallel_policy operator()(unsigned n) const noexcept { return {n, min_chunk}; }
};

/// The sequential policy.
inline constexpr sequenced_policy seq{};
/// The parallel policy with all hardware threads; par(n) for n threads.
inline constexpr parallel_policy par{};

/// True for cpd's execution policy types.
template <class P>
struct is_execution_policy
    : std::bool_constant<std::is_same_v<P, sequenced_policy> || std::is_same_v<P, parallel_policy>> {};
template <class P>
inline constexpr bool is_execution_policy_v = is_execution_policy<std::remove_cv_t<std::remove_reference_t<P>>>::value;

}  // namespace cpd::execution
