// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/options.hpp>: the vocabulary of cpd's MPI allreduce (docs/mpi.md): the
// algorithms it runs, the options of a plan, one tensor of a call and what a call did.
// Shared by the plan (cpd/mpi/plan.hpp) and its transports (cpd/mpi/transport.hpp,
// cpd/mpi/native_op.hpp).

#include <cpd/exchange/simulate.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cpd::mpi {

/// The algorithms cpd::mpi runs: the rank schedule's (cpd/exchange/schedule.hpp: ring,
/// pipelined_ring, two_step and all_gather, the bits of cpd::simulate_allreduce with the same
/// algorithm) and native (MPI_Allreduce with a user-defined MPI_Op: MPI's summation order).
inline constexpr allreduce_algorithm algorithms[] = {allreduce_algorithm::ring, allreduce_algorithm::pipelined_ring,
                                                     allreduce_algorithm::two_step, allreduce_algorithm::all_gather,
                                                     allreduce_algorithm::native};

/// Options fixed for the life of an allreduce_plan.
struct options {
  allreduce_algorithm algo = allreduce_algorithm::ring;  ///< the summation algorithm, one of mpi::algorithms
  bool kahan = false;                ///< Kahan-compensated sums (the compensation travels with the sum)
  bool mean = false;                 ///< divide the unscaled sum by the number of ranks (in float)
  /// two_step: the wide accumulator, as allreduce_options::accumulator (float32 by default).
  format accumulator = format::of<float_t<8, 23>>();
  /// pipelined_ring: the bytes of one segment of a step's message (at most 256 segments a step).
  std::size_t segment_bytes = std::size_t(1) << 18;
  /// A random Hadamard rotation around the exchange, as allreduce_options::rotation: each
  /// tensor's values rotated (cpd::hadamard_rotate) before the statistics, the sum rotated back.
  /// block 0: none (the default).
  hadamard_options rotation = {0, {}, false};
};

/// One tensor of a multi-tensor allreduce, as this rank sees it.
struct tensor {
  const float* in = nullptr;   ///< this rank's values (e.g. its gradient)
  float* out = nullptr;        ///< the reduced values; may equal in, not residual
  std::size_t size = 0;        ///< the number of values (the same on every rank)
  float* residual = nullptr;   ///< error feedback: this rank's residual, read and overwritten; or nullptr
  random_stream key{};         ///< random bits of stochastic rounding, as allreduce_options::key
};

/// What one call did on this rank.
template <class Scale>
struct result {
  std::vector<Scale> scales;             ///< the scale of each tensor (the same on every rank)
  std::uint64_t statistics_bytes = 0;    ///< bytes this rank handed to the statistics MPI_Allreduce (and the NaN mask's)
  std::uint64_t payload_bytes = 0;       ///< packed-code bytes this rank sent (ring) or handed to MPI_Allreduce (native)
  double seconds = 0;                    ///< wall time of the call
  double seconds_codec = 0;              ///< of which: statistics, scaling, encoding, decoding and adding
  double cpu_seconds_codec = 0;          ///< processor time of the same work (std::clock), robust to a loaded machine
  /// Statistics plus payload.
  [[nodiscard]] std::uint64_t bytes_sent() const noexcept { return statistics_bytes + payload_bytes; }
};

}  // namespace cpd::mpi
