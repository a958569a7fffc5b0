# SPDX-License-Identifier: MIT
#
# CUDA for cpd's own tests and benchmarks and for the Python package's CUDA module
# (python/src/cuda_module.cu, once it exists), never for the cpd::cpd target, which
# is header-only and imposes nothing. Included at the top level, since CUDA is
# enabled for the whole tree. Sets:
#   CPD_CUDA_ENABLED   ON when nvcc was found and CUDA is enabled
#   cpd_nccl           an imported target for nccl.h + libnccl, when found
# and defines cpd_target_cuda(<target>): C++17, nvcc host warnings.
#
# CUDA targets are built once per configuration: with GCC as the C++ compiler
# (nvcc's host compiler here) and without sanitizers, so the clang and asan
# presets do not compile the same device code again. CMAKE_CUDA_ARCHITECTURES
# defaults to "80;90" (A100, H100): the tests and the benchmark compile for both
# and run where a GPU is present (ctest label cuda; skipped without one).

include_guard(GLOBAL)

option(CPD_ENABLE_CUDA "Build cpd's CUDA tests and benchmarks, and the Python package's CUDA module, when nvcc is found" ON)
set(CPD_CUDA_ENABLED OFF)

set(cpd_cuda_for_python OFF)
if(CPD_BUILD_PYTHON AND EXISTS "${PROJECT_SOURCE_DIR}/python/src/cuda_module.cu")
  set(cpd_cuda_for_python ON)
endif()
if(NOT CPD_ENABLE_CUDA OR NOT (CPD_BUILD_TESTS OR CPD_BUILD_BENCHMARKS OR cpd_cuda_for_python))
  return()
endif()
if(CPD_ENABLE_SANITIZERS)
  message(STATUS "cpd: CUDA targets are not built with sanitizers (CPD_ENABLE_SANITIZERS is ON)")
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  message(STATUS "cpd: CUDA targets are built in GCC configurations only (C++ compiler: ${CMAKE_CXX_COMPILER_ID})")
  return()
endif()

if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc CACHE FILEPATH "The CUDA compiler")
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "cpd: nvcc not found (set CUDACXX); skipping the CUDA tests and benchmark")
  return()
endif()
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CPD_CUDA_ENABLED ON)
message(STATUS "cpd: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES}")

# NCCL: the toolkit's copy (nccl.h next to cuda_runtime.h) or Debian's libnccl-dev.
find_path(CPD_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
find_library(CPD_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} "${CUDAToolkit_LIBRARY_ROOT}/lib"
             "${CUDAToolkit_BIN_DIR}/../lib" "${CUDAToolkit_BIN_DIR}/../lib64")
if(CPD_NCCL_INCLUDE_DIR AND CPD_NCCL_LIBRARY)
  add_library(cpd_nccl INTERFACE IMPORTED)
  set_target_properties(cpd_nccl PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CPD_NCCL_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${CPD_NCCL_LIBRARY}")
  message(STATUS "cpd: NCCL ${CPD_NCCL_LIBRARY}")
else()
  message(STATUS "cpd: NCCL not found (nccl.h and libnccl; Debian: libnccl-dev); skipping test_nccl")
endif()

# cpd_target_cuda(<target> [STATIC_RUNTIME]): C++17 for nvcc, -Wall -Wextra for the host
# pass, the CUDA runtime as a shared library, or linked in with STATIC_RUNTIME (the Python
# package's module, which must load where libcudart is not on the loader's path).
function(cpd_target_cuda target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "STATIC_RUNTIME" "" "")
  set_target_properties(${target} PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON CUDA_EXTENSIONS OFF)
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>")
  if(arg_STATIC_RUNTIME)
    set_target_properties(${target} PROPERTIES CUDA_RUNTIME_LIBRARY Static)
    target_link_libraries(${target} PRIVATE CUDA::cudart_static)
  else()
    target_link_libraries(${target} PRIVATE CUDA::cudart)
  endif()
endfunction()
