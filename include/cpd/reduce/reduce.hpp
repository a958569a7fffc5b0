// SPDX-License-Identifier: MIT
#pragma once

// Low-precision reduction (docs/reduction.md): sums whose every partial result is
// rounded to a format F (reduce/sum.hpp), a Kahan-compensated variant in which
// every step is rounded too, as CPD does (reduce/kahan.hpp), and a GEMM with a
// low-precision accumulator (reduce/gemm.hpp).

#include <cpd/reduce/gemm.hpp>
#include <cpd/reduce/kahan.hpp>
#include <cpd/reduce/sum.hpp>
