// SPDX-License-Identifier: MIT
#pragma once
// The CUDA toolkit's host conversions (cuda_bf16.h, cuda_fp8.h and, when this
// toolkit has them, cuda_fp6.h and cuda_fp4.h), compiled by the host compiler
// as references for the exhaustive tests. Treated as a system header so that
// the toolkit's own warnings (e.g. unused parameters) stay out of our build.
#pragma GCC system_header

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#if __has_include(<cuda_fp6.h>) && __has_include(<cuda_fp4.h>)
#include <cuda_fp6.h>
#include <cuda_fp4.h>
#define CPD_TEST_HAVE_CUDA_FP6_FP4 1
#else
#define CPD_TEST_HAVE_CUDA_FP6_FP4 0
#endif
