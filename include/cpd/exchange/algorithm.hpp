// SPDX-License-Identifier: MIT
#pragma once

// cpd::allreduce_algorithm: the one name of every way cpd sums W workers' values, shared by
// the simulation (cpd::simulate_allreduce), the rank schedule (cpd::rank_exchange), MPI
// (cpd::mpi::options::algo), the performance model (cpd::perf) and the Python package. Each
// runs a subset, listed here, and refuses the rest with a message that names the algorithm
// and the ones it runs; two_step's accumulator is checked here for all of them.

#include <cpd/core/detail/error.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/names.hpp>

#include <string>

namespace cpd {

/// How W workers' values are summed (docs/reduction.md, docs/mpi.md).
enum class allreduce_algorithm : unsigned char {
  sequential,        ///< rank 0 adds ranks 1, 2, ..., W-1 in order (CPD's emulation)
  ring,              ///< ring reduce-scatter then all-gather, chunk by chunk, every hop rounded to F
  halving_doubling,  ///< recursive halving reduce-scatter + recursive doubling all-gather (Rabenseifner)
  pipelined_ring,    ///< ring's roundings; over MPI, segments in flight while others are coded
  two_step,          ///< reduce-scatter into a wide accumulator, one rounding to F, all-gather
  all_gather,        ///< every rank gathers all quantized vectors and adds them in rank order (CPD's)
  native             ///< MPI only: MPI_Allreduce with a user-defined MPI_Op (MPI's summation order)
};

/// The name of an algorithm ("sequential", "ring", "halving_doubling", "pipelined_ring",
/// "two_step", "all_gather", "native"); "?" for a value that is none of them.
constexpr const char* to_string(allreduce_algorithm a) noexcept {
  constexpr const char* names[] = {"sequential", "ring",       "halving_doubling", "pipelined_ring",
                                   "two_step",   "all_gather", "native"};
  const auto i = static_cast<unsigned>(a);
  return i < sizeof names / sizeof names[0] ? names[i] : "?";
}

template <>
struct enum_names<allreduce_algorithm> {
  static constexpr const char* type = "cpd::allreduce_algorithm";
  static constexpr allreduce_algorithm values[] = {
      allreduce_algorithm::sequential,     allreduce_algorithm::ring,     allreduce_algorithm::halving_doubling,
      allreduce_algorithm::pipelined_ring, allreduce_algorithm::two_step, allreduce_algorithm::all_gather,
      allreduce_algorithm::native};
};

/// The algorithms cpd::simulate_allreduce runs: all but native (whose order is the MPI library's).
inline constexpr allreduce_algorithm simulated_algorithms[] = {
    allreduce_algorithm::sequential,     allreduce_algorithm::ring,     allreduce_algorithm::halving_doubling,
    allreduce_algorithm::pipelined_ring, allreduce_algorithm::two_step, allreduce_algorithm::all_gather};

/// The algorithms one rank runs with a transport's sendrecv (cpd::rank_exchange): the Python
/// package's exchange, and cpd::mpi's but native.
inline constexpr allreduce_algorithm rank_algorithms[] = {allreduce_algorithm::ring, allreduce_algorithm::pipelined_ring,
                                                          allreduce_algorithm::two_step,
                                                          allreduce_algorithm::all_gather};

namespace detail {

/// two_step's accumulator: float32, or a format whose float sums can be rounded to odd
/// and then to it (values that are floats, at most 22 significand bits); no Kahan (the wide
/// accumulator is two_step's answer to the error that Kahan compensates).
inline void check_accumulator(const format& acc, bool kahan) {
  if (kahan)
    fail_invalid("cpd::simulate_allreduce: two_step adds in a wide accumulator and takes no Kahan "
                 "compensation; set allreduce_options::kahan to false");
  const spec& s = acc.spec();
  if (acc == format::of<float_t<8, 23>>()) return;
  if (!s.fits_float || s.M > 21)
    fail_invalid("cpd::simulate_allreduce: the accumulator " + acc.name() +
                 " must be float32 or a format whose values are floats with at most 22 significand bits");
}

}  // namespace detail

}  // namespace cpd
