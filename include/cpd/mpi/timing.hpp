// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/timing.hpp>: how an allreduce_plan splits a call's time between MPI and
// its own work (result::seconds_codec, ::cpu_seconds_codec): every MPI call that moves
// data runs inside comm_clock::time, which adds its wall and processor time.
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <mpi.h>

#include <ctime>
#include <utility>

namespace cpd::mpi::detail {

/// The wall and processor seconds spent in MPI during one call.
struct comm_clock {
  double wall = 0;  ///< MPI_Wtime seconds
  double cpu = 0;   ///< std::clock seconds

  /// Runs f(), adding its time.
  template <class Fn>
  decltype(auto) time(Fn&& f) {
    const double w0 = MPI_Wtime();
    const std::clock_t c0 = std::clock();
    struct add_on_exit {
      comm_clock& c;
      double w0;
      std::clock_t c0;
      ~add_on_exit() {
        c.cpu += static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
        c.wall += MPI_Wtime() - w0;
      }
    } guard{*this, w0, c0};
    return std::forward<Fn>(f)();
  }
};

/// The wall and processor time of a whole call, from construction.
struct call_clock {
  double wall0 = MPI_Wtime();
  std::clock_t cpu0 = std::clock();
  [[nodiscard]] double wall() const { return MPI_Wtime() - wall0; }
  [[nodiscard]] double cpu() const { return static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC; }
};

}  // namespace cpd::mpi::detail
