// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/codec_allreduce.hpp>: "codec" 3 of 3, the exchange of a gradient codec
// (exchange/codecs/) over MPI (docs/codecs.md).
// Every rank encodes its gradient (plus its error-feedback residual) to a payload,
// the payloads are all-gathered (MPI_Allgather: every rank's payload has the same
// size), and every rank decodes all of them and sums them in float in rank order:
// the same bits on every rank, and the bits of cpd::simulate_codec_allreduce.
// Before the payloads move, one small collective (cpd/mpi/check.hpp) checks that every
// rank passes the same codec, n, payload size, mean and (stochastic codecs) key.
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/core/detail/fenv.hpp>
#include <cpd/exchange/codec_allreduce.hpp>
#include <cpd/mpi/check.hpp>
#include <cpd/core/detail/error.hpp>

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cpd {
namespace mpi {

/// Options of codec_allreduce (one rank's view of cpd::codec_exchange_options).
struct codec_options {
  bool mean = false;         ///< divide the sum by the number of ranks (in float)
  float* residual = nullptr;  ///< this rank's error-feedback residual (n floats), or nullptr
  random_stream key{};        ///< rank r encodes with stream cpd::codec_stream(key, ranks, r)
};

/// out[0..n) = the rank-order float sum (or mean) of every rank's decoded payload of g[0..n)
/// through codec c. Collective over comm: every rank passes the same codec, n, mean and (for a
/// stochastic codec) key, else every rank throws cpd::mpi::mismatch_error naming what differs.
/// Returns what this rank sent. Throws cpd::mpi::error when MPI fails.
inline codec_exchange_result codec_allreduce(const codec& c, const float* g, float* out, std::size_t n,
                                             MPI_Comm comm, const codec_options& opt = {}) {
  const cpd::detail::default_fp_env fp_env;  // the same sums whatever the caller's FTZ, DAZ, rounding
  int rank = 0, size = 1;
  detail::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  detail::check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  const std::size_t bytes = c.payload_size(n);
  const std::string name = c.name();
  detail::fingerprint h;
  h.add(name);
  const bool keyed = c.stochastic();
  detail::agree(comm, "cpd::mpi::codec_allreduce",
                {{"the codec", h.h, name},
                 {"n", n, ""},
                 {"the payload size", bytes, ""},
                 {"mean", opt.mean ? 1u : 0u, ""},
                 {"the key's seed", keyed ? opt.key.seed : 0u, ""},
                 {"the key's stream", keyed ? opt.key.stream : 0u, ""},
                 {"the key's generator", keyed ? static_cast<std::uint64_t>(opt.key.generator) : 0u, ""}});
  if (bytes > static_cast<std::size_t>(INT_MAX))
    cpd::detail::fail_invalid("cpd::mpi::codec_allreduce: a payload of more than INT_MAX bytes; split the tensor");
  const float* x = g;
  if (opt.residual) {
    for (std::size_t i = 0; i < n; ++i) opt.residual[i] = g[i] + opt.residual[i];
    x = opt.residual;
  }
  std::vector<std::uint8_t> all(bytes * static_cast<std::size_t>(size));
  std::uint8_t* mine = all.data() + bytes * static_cast<std::size_t>(rank);
  c.encode(x, n, mine, opt.key.with_stream(codec_stream(opt.key, size, rank)));
  if (opt.residual) {
    std::vector<float> d(n);
    c.decode(mine, n, d.data());
    for (std::size_t i = 0; i < n; ++i) opt.residual[i] = opt.residual[i] - d[i];
  }
  const int count = static_cast<int>(bytes);
  detail::check(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all.data(), count, MPI_BYTE, comm),
                "MPI_Allgather");
  std::vector<float> d(n);
  c.decode(all.data(), n, out);
  for (int r = 1; r < size; ++r) {
    c.decode(all.data() + bytes * static_cast<std::size_t>(r), n, d.data());
    for (std::size_t i = 0; i < n; ++i) out[i] += d[i];
  }
  if (opt.mean) {
    const float fw = static_cast<float>(size);
    for (std::size_t i = 0; i < n; ++i) out[i] = out[i] / fw;
  }
  return {bytes, c.bits_per_value(n), cpd::detail::count_nonfinite(out, n)};
}

}  // namespace mpi
}  // namespace cpd
