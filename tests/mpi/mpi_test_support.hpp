// SPDX-License-Identifier: MIT
#pragma once
// What the MPI tests share: the rank and size of MPI_COMM_WORLD and every rank's inputs,
// which every rank generates from (seed, rank) so that each can run the in-process simulation
// of the whole allreduce.

#include <mpi.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace mpi_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int w = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &w);
  return w;
}

inline std::uint64_t mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// Value j of tensor t of `rank` for `seed`: signed, spread over 12 binades around 2^(-4 t).
/// Rank 1 has tensor 2 all zeros.
inline float input(std::uint64_t seed, int rank, std::size_t t, std::size_t j) {
  if (rank == 1 && t == 2) return 0.0f;
  const std::uint64_t z = mix(seed ^ mix(static_cast<std::uint64_t>(rank) * 1000003u + t) ^ mix(j));
  const double m = 1.0 + static_cast<double>(z >> 40) / static_cast<double>(1ull << 24);
  const int e = static_cast<int>((z >> 8) % 12) - 8 - 4 * static_cast<int>(t);
  const double v = std::ldexp(m, e) * ((z & 1) ? -1.0 : 1.0);
  return static_cast<float>(v);
}

/// Tensor sizes: empty, smaller than the number of ranks, odd, and a larger one.
inline const std::vector<std::size_t> sizes = {1, 2, 7, 0, 3, 1001, 4096 + 5};

inline std::uint32_t bits(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}

/// All ranks' inputs for one step.
struct inputs {
  std::vector<std::vector<std::vector<float>>> g;  // [rank][tensor][j]
  inputs(std::uint64_t seed, int w, const std::vector<std::size_t>& sz = sizes) : g(static_cast<std::size_t>(w)) {
    for (int r = 0; r < w; ++r)
      for (std::size_t t = 0; t < sz.size(); ++t) {
        std::vector<float> v(sz[t]);
        for (std::size_t j = 0; j < v.size(); ++j) v[j] = input(seed, r, t, j);
        g[static_cast<std::size_t>(r)].push_back(std::move(v));
      }
  }
};

}  // namespace mpi_test
