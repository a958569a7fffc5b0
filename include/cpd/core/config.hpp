// SPDX-License-Identifier: MIT
#pragma once

#include <cpd/version.hpp>

/// Marks a function usable from host and device code (CUDA/HIP), a no-op elsewhere.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define CPD_HOST_DEVICE __host__ __device__
#else
#define CPD_HOST_DEVICE
#endif

/// Before a CPD_HOST_DEVICE template that may call a host-only function of the user's
/// type (e.g. std::get of a std::tuple): tells nvcc not to warn when it is instantiated
/// for such a type in host code. A no-op elsewhere.
#if defined(__CUDACC__) && !defined(__clang__)
#define CPD_EXEC_CHECK_DISABLE _Pragma("nv_exec_check_disable")
#else
#define CPD_EXEC_CHECK_DISABLE
#endif

/// 1 when the translation unit is compiled for a GPU (device pass).
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define CPD_DEVICE_PASS 1
#else
#define CPD_DEVICE_PASS 0
#endif

/// 1 when C++ exceptions are enabled; with -fno-exceptions cpd reports runtime errors
/// through return values where it can (see cpd::format::check), and every error it would
/// throw prints its message to stderr, then abort()s (cpd/core/detail/error.hpp).
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define CPD_HAS_EXCEPTIONS 1
#else
#define CPD_HAS_EXCEPTIONS 0
#endif

#if defined(__GNUC__) || defined(__clang__)
#define CPD_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define CPD_ALWAYS_INLINE inline
#endif
