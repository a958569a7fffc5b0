// SPDX-License-Identifier: MIT
#pragma once

// How an allreduce splits n elements among its ranks: index_range, partition (the
// block split of Open MPI's ring and MPICH) and floor_pow2 (the power-of-two core of
// recursive halving). Shared by cpd::simulate_allreduce and <cpd/mpi.hpp>.

#include <cstddef>

namespace cpd {

/// A half-open range of element indices.
struct index_range {
  std::size_t begin = 0;  ///< first index
  std::size_t end = 0;    ///< one past the last index
  [[nodiscard]] constexpr std::size_t size() const noexcept { return end - begin; }
};

/// Part `index` of n elements split into `parts` contiguous parts, the first n % parts of
/// which hold one element more (Open MPI's ring and MPICH's block split).
[[nodiscard]] constexpr index_range partition(std::size_t n, std::size_t parts, std::size_t index) noexcept {
  const std::size_t base = n / parts, extra = n % parts;
  const std::size_t begin = index * base + (index < extra ? index : extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

/// The largest power of two <= w (w >= 1).
[[nodiscard]] constexpr int floor_pow2(int w) noexcept {
  int p = 1;
  while (p <= w / 2) p *= 2;
  return p;
}

}  // namespace cpd
