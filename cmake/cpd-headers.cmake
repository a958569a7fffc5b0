# SPDX-License-Identifier: MIT
#
# The one list of cpd's headers, relative to the project root. Add every new
# header here: it is installed from this list, checked to compile on its own
# (tests/CMakeLists.txt, target cpd_header_check), and the ctest
# `headers.listed` fails when a header under include/ is missing from it.

set(CPD_HEADERS
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
  include/cpd/core/limits.hpp
  include/cpd/core/options.hpp
  include/cpd/core/random.hpp
  include/cpd/core/rounding.hpp
  include/cpd/core/stats.hpp
  include/cpd/cpd.hpp
  include/cpd/cuda.cuh
  include/cpd/device/cuda.cuh
  include/cpd/device/detail/fast.cuh
  include/cpd/device/detail/kernels.cuh
  include/cpd/device/functors.hpp
  include/cpd/device/nccl.cuh
  include/cpd/device/options.hpp
  include/cpd/device/statistics.hpp
  include/cpd/device/thrust.hpp
  include/cpd/exchange/codec.hpp
  include/cpd/exchange/codec_allreduce.hpp
  include/cpd/exchange/codecs/dettmers.hpp
  include/cpd/exchange/codecs/float_codec.hpp
  include/cpd/exchange/codecs/interface.hpp
  include/cpd/exchange/codecs/make_codec.hpp
  include/cpd/exchange/codecs/onebit.hpp
  include/cpd/exchange/codecs/qsgd.hpp
  include/cpd/exchange/codes.hpp
  include/cpd/exchange/partition.hpp
  include/cpd/exchange/policy.hpp
  include/cpd/exchange/protocol.hpp
  include/cpd/exchange/schedule.hpp
  include/cpd/exchange/simulate.hpp
  include/cpd/exchange/wire.hpp
  include/cpd/host/bulk.hpp
  include/cpd/host/detail/avx512.hpp
  include/cpd/host/detail/avx512_decode.hpp
  include/cpd/host/detail/avx512_hop.hpp
  include/cpd/host/detail/call.hpp
  include/cpd/host/detail/decode.hpp
  include/cpd/host/detail/fast_plan.hpp
  include/cpd/host/detail/isa.hpp
  include/cpd/host/detail/lanes.hpp
  include/cpd/host/detail/kernels.hpp
  include/cpd/host/detail/parallel_for.hpp
  include/cpd/host/detail/run.hpp
  include/cpd/host/detail/select.hpp
  include/cpd/host/detail/tuning.hpp
  include/cpd/host/execution.hpp
  include/cpd/host/pack.hpp
  include/cpd/mpi.hpp
  include/cpd/mpi/check.hpp
  include/cpd/mpi/codec_allreduce.hpp
  include/cpd/mpi/native_op.hpp
  include/cpd/mpi/options.hpp
  include/cpd/mpi/plan.hpp
  include/cpd/mpi/timing.hpp
  include/cpd/mpi/transport.hpp
  include/cpd/mpi/wire.hpp
  include/cpd/nccl.cuh
  include/cpd/perf_model.hpp
  include/cpd/reduce/gemm.hpp
  include/cpd/reduce/kahan.hpp
  include/cpd/reduce/reduce.hpp
  include/cpd/reduce/sum.hpp
  include/cpd/scaling/apply.hpp
  include/cpd/scaling/aps.hpp
  include/cpd/scaling/diagnostics.hpp
  include/cpd/scaling/exchange_rules.hpp
  include/cpd/scaling/loss.hpp
  include/cpd/scaling/mx.hpp
  include/cpd/scaling/scale.hpp
  include/cpd/scaling/scaling.hpp
  include/cpd/scaling/transformer_engine.hpp
  include/cpd/thrust.hpp
  include/cpd/version.hpp
)

# Headers that need an optional dependency (MPI, Thrust, NCCL, CUDA): they are
# installed, but not compiled alone by cpd_header_check. Every .cuh is also
# treated as such.
set(CPD_OPTIONAL_DEPENDENCY_HEADERS
  include/cpd/device/thrust.hpp
  include/cpd/mpi.hpp
  include/cpd/mpi/check.hpp
  include/cpd/mpi/codec_allreduce.hpp
  include/cpd/mpi/native_op.hpp
  include/cpd/mpi/options.hpp
  include/cpd/mpi/plan.hpp
  include/cpd/mpi/timing.hpp
  include/cpd/mpi/transport.hpp
  include/cpd/mpi/wire.hpp
  include/cpd/thrust.hpp
)
