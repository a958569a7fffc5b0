// SPDX-License-Identifier: MIT
//
// cpd-train --mpi: the MPI plans of every gradient format (cpd::exchange_formats), the one
// translation unit that instantiates them (mpi_exchange.hpp calls them through the plan's
// virtual interface), so that they compile beside main.cpp rather than inside it.

#include "mpi_exchange.hpp"

namespace train {

std::unique_ptr<mpi_plan> make_mpi_plan(const cpd::format& f, std::vector<std::size_t> sizes,
                                        const cpd::mpi::options& o) {
  return std::make_unique<mpi_plan>(MPI_COMM_WORLD, f, cpd::rounding::nearest_even, std::move(sizes), o,
                                    /*use_aps=*/false);
}

}  // namespace train
