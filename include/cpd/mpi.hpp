// SPDX-License-Identifier: MIT
#pragma once

// An entry point of cpd: it includes <cpd/mpi/allreduce.hpp>.

#include <cpd/mpi/allreduce.hpp>
