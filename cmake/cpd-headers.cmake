# SPDX-License-Identifier: MIT
#
# The one list of cpd's headers, relative to the project root. Add every new
# header here: it is installed from this list, checked to compile on its own
# (tests/CMakeLists.txt, target cpd_header_check), and the ctest
# `headers.listed` fails when a header under include/ is missing from it.

set(CPD_HEADERS
  include/cpd/allreduce_sim.hpp
  include/cpd/bulk.hpp
  include/cpd/codec.hpp
  include/cpd/codecs/dettmers.hpp
  include/cpd/codecs/float_codec.hpp
  include/cpd/codecs/interface.hpp
  include/cpd/codecs/onebit.hpp
  include/cpd/codecs/qsgd.hpp
  include/cpd/config.hpp
  include/cpd/cpd.hpp
  include/cpd/cuda.cuh
  include/cpd/detail/bits.hpp
  include/cpd/detail/checks.hpp
  include/cpd/detail/error.hpp
  include/cpd/detail/round.hpp
  include/cpd/detail/fast_avx512.hpp
  include/cpd/detail/fenv.hpp
  include/cpd/detail/simd.hpp
  include/cpd/diagnostics.hpp
  include/cpd/execution.hpp
  include/cpd/float.hpp
  include/cpd/format.hpp
  include/cpd/functors.hpp
  include/cpd/io.hpp
  include/cpd/mx.hpp
  include/cpd/mpi.hpp
  include/cpd/mpi_check.hpp
  include/cpd/mpi_codec.hpp
  include/cpd/nccl.cuh
  include/cpd/pack.hpp
  include/cpd/random.hpp
  include/cpd/reduce.hpp
  include/cpd/rounding.hpp
  include/cpd/runtime_format.hpp
  include/cpd/scaling.hpp
  include/cpd/thrust.hpp
  include/cpd/version.hpp
)

# Headers that need an optional dependency (MPI, Thrust, NCCL, CUDA): they are
# installed, but not compiled alone by cpd_header_check. Every .cuh is also
# treated as such.
set(CPD_OPTIONAL_DEPENDENCY_HEADERS
  include/cpd/mpi.hpp
  include/cpd/mpi_check.hpp
  include/cpd/mpi_codec.hpp
  include/cpd/nccl.hpp
  include/cpd/thrust.hpp
)
