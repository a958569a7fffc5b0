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
  include/cpd/core/config.hpp
  include/cpd/core/detail/bits.hpp
  include/cpd/core/detail/checks.hpp
  include/cpd/core/detail/error.hpp
  include/cpd/core/detail/fenv.hpp
  include/cpd/core/detail/round.hpp
  include/cpd/core/encoding.hpp
  include/cpd/core/float.hpp
  include/cpd/core/format.hpp
  include/cpd/core/io.hpp
  include/cpd/core/options.hpp
  include/cpd/core/random.hpp
  include/cpd/core/rounding.hpp
  include/cpd/cpd.hpp
  include/cpd/cuda.cuh
  include/cpd/device/cuda.cuh
  include/cpd/device/functors.hpp
  include/cpd/device/nccl.cuh
  include/cpd/device/thrust.hpp
  include/cpd/diagnostics.hpp
  include/cpd/exchange/codec.hpp
  include/cpd/exchange/codecs/dettmers.hpp
  include/cpd/exchange/codecs/float_codec.hpp
  include/cpd/exchange/codecs/interface.hpp
  include/cpd/exchange/codecs/onebit.hpp
  include/cpd/exchange/codecs/qsgd.hpp
  include/cpd/exchange/simulate.hpp
  include/cpd/execution.hpp
  include/cpd/float.hpp
  include/cpd/format.hpp
  include/cpd/functors.hpp
  include/cpd/host/bulk.hpp
  include/cpd/host/detail/avx512.hpp
  include/cpd/host/detail/avx512_decode.hpp
  include/cpd/host/detail/call.hpp
  include/cpd/host/detail/decode.hpp
  include/cpd/host/detail/fast_plan.hpp
  include/cpd/host/detail/isa.hpp
  include/cpd/host/detail/kernels.hpp
  include/cpd/host/detail/parallel_for.hpp
  include/cpd/host/detail/run.hpp
  include/cpd/host/detail/select.hpp
  include/cpd/host/detail/tuning.hpp
  include/cpd/host/execution.hpp
  include/cpd/host/pack.hpp
  include/cpd/io.hpp
  include/cpd/mpi.hpp
  include/cpd/mpi/allreduce.hpp
  include/cpd/mpi/check.hpp
  include/cpd/mpi/codec.hpp
  include/cpd/mpi_check.hpp
  include/cpd/mpi_codec.hpp
  include/cpd/mx.hpp
  include/cpd/nccl.cuh
  include/cpd/pack.hpp
  include/cpd/random.hpp
  include/cpd/reduce.hpp
  include/cpd/reduce/reduce.hpp
  include/cpd/rounding.hpp
  include/cpd/runtime_format.hpp
  include/cpd/scaling.hpp
  include/cpd/scaling/diagnostics.hpp
  include/cpd/scaling/mx.hpp
  include/cpd/scaling/scaling.hpp
  include/cpd/thrust.hpp
  include/cpd/version.hpp
)

# Headers that need an optional dependency (MPI, Thrust, NCCL, CUDA): they are
# installed, but not compiled alone by cpd_header_check. Every .cuh is also
# treated as such.
set(CPD_OPTIONAL_DEPENDENCY_HEADERS
  include/cpd/device/thrust.hpp
  include/cpd/mpi.hpp
  include/cpd/mpi/allreduce.hpp
  include/cpd/mpi/check.hpp
  include/cpd/mpi/codec.hpp
  include/cpd/mpi_check.hpp
  include/cpd/mpi_codec.hpp
  include/cpd/thrust.hpp
)
