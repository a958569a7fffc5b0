// SPDX-License-Identifier: MIT
#pragma once

// cpd-train --mpi: each MPI rank is one worker; gradients travel as packed
// low-precision codes through cpd::mpi's ring, which sums in exactly the order
// of the emulated exchange, so both give the same weights-hash. Codec runs go
// through cpd::mpi::codec_allreduce, whose bits are those of the emulated
// cpd::simulate_codec_allreduce.

#include "exchange.hpp"
#include "mlp.hpp"

#include <cpd/cpd.hpp>
#include <cpd/mpi.hpp>
#include <cpd/mpi/codec.hpp>

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace train {

/// The sum of every rank's statistics (collective over MPI_COMM_WORLD).
inline exchange_stats sum_over_ranks(const exchange_stats& s) {
  std::uint64_t local[8] = {s.count, s.zeros, s.underflow, s.overflow, s.nan, s.saturated, s.nan_inputs, s.inf_inputs};
  std::uint64_t t[8] = {};
  MPI_Allreduce(local, t, 8, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  exchange_stats r;
  r.count = t[0];
  r.zeros = t[1];
  r.underflow = t[2];
  r.overflow = t[3];
  r.nan = t[4];
  r.saturated = t[5];
  r.nan_inputs = t[6];
  r.inf_inputs = t[7];
  return r;
}

/// The gradient exchange of one rank over MPI.
class mpi_exchanger {
 public:
  mpi_exchanger(std::optional<cpd::format> fmt, bool aps, bool kahan, std::vector<tensor_view> tensors,
                cpd::allreduce_algorithm algorithm = cpd::allreduce_algorithm::ring)
      : fmt_(fmt ? *fmt : cpd::format::of<cpd::float_t<8, 23>>()),
        quantized_(fmt.has_value()),
        tensors_(std::move(tensors)),
        plan_(MPI_COMM_WORLD, fmt_, cpd::rounding::nearest_even, sizes(tensors_),
              {mpi_algorithm(algorithm), kahan, /*mean=*/true}, aps) {}

  /// The MPI algorithm with the simulation's roundings (the command line allows only these).
  static cpd::mpi::algorithm mpi_algorithm(cpd::allreduce_algorithm a) {
    if (a == cpd::allreduce_algorithm::two_step) return cpd::mpi::algorithm::two_step;
    if (a == cpd::allreduce_algorithm::all_gather) return cpd::mpi::algorithm::all_gather;
    if (a == cpd::allreduce_algorithm::pipelined_ring) return cpd::mpi::algorithm::pipelined_ring;
    return cpd::mpi::algorithm::ring;
  }

  /// mean = the mean over all ranks of this rank's gradient `local`.
  void allreduce_mean(const float* local, float* mean) {
    std::vector<cpd::mpi::tensor> t(tensors_.size());
    for (std::size_t i = 0; i < tensors_.size(); ++i)
      t[i] = {local + tensors_[i].offset, mean + tensors_[i].offset, tensors_[i].size()};
    const auto r = plan_(t);
    bytes_ += r.bytes_sent();
    if (!quantized_) return;
    // What quantization did to this rank's values, from the bulk call's statistics (the
    // emulated run counts every worker's with cpd::measure_quantization: the same events).
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      cpd::value_stats st;
      cpd::bulk_options o;
      o.scale_exponent = r.scales[i].exponent;
      o.stats = &st;
      scratch_.resize(tensors_[i].size());
      cpd::quantize(fmt_, cpd::rounding::nearest_even, cpd::overflow::infinity, local + tensors_[i].offset,
                    scratch_.data(), tensors_[i].size(), o);
      stats_ += st;
    }
    // Non-finite sums are the same on every rank: count them once, on rank 0.
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
      for (const tensor_view& tv : tensors_)
        for (std::size_t k = tv.offset; k < tv.offset + tv.size(); ++k) stats_.overflow += !std::isfinite(mean[k]);
  }

  /// The statistics of all ranks (collective).
  exchange_stats stats() const { return sum_over_ranks(stats_); }

  /// Bytes this rank sent (statistics and packed codes).
  std::uint64_t bytes_sent() const { return bytes_; }

 private:
  static std::vector<std::size_t> sizes(const std::vector<tensor_view>& t) {
    std::vector<std::size_t> s;
    for (const tensor_view& v : t) s.push_back(v.size());
    return s;
  }

  cpd::format fmt_;
  bool quantized_;
  std::vector<tensor_view> tensors_;
  cpd::mpi::dynamic_plan<train_formats, false> plan_;
  exchange_stats stats_;
  std::vector<float> scratch_;
  std::uint64_t bytes_ = 0;
};

/// The codec exchange of one rank over MPI (the keys, residuals and statistics of codec_exchanger).
class mpi_codec_exchanger {
 public:
  mpi_codec_exchanger(const codec_spec& spec, std::uint64_t seed, std::vector<tensor_view> tensors, std::size_t n)
      : codec_(cpd::make_codec(spec.name)),
        feedback_(spec.error_feedback),
        seed_(seed),
        tensors_(std::move(tensors)),
        residual_(n, 0.0f),
        input_(feedback_ ? n : 0) {}

  /// mean = the mean over all ranks of this rank's gradient `local`, through the codec.
  void allreduce_mean(const float* local, float* mean, std::uint64_t step) {
    const std::size_t n = residual_.size();
    prepare_codec_residual(feedback_, local, residual_.data(), input_.data(), n);
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      const tensor_view& tv = tensors_[t];
      const cpd::mpi::codec_options opt{/*mean=*/true, residual_.data() + tv.offset,
                                        {seed_, codec_tensor_stream(step, tensors_.size(), t)}};
      bytes_ += cpd::mpi::codec_allreduce(*codec_, local + tv.offset, mean + tv.offset, tv.size(), MPI_COMM_WORLD, opt)
                    .payload_bytes;
    }
    count_codec(feedback_ ? input_.data() : local, residual_.data(), tensors_, stats_);
    // Non-finite means are the same on every rank: count them once, on rank 0.
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) stats_.overflow += count_nonfinite(mean, tensors_);
  }

  /// The statistics of all ranks (collective).
  exchange_stats stats() const { return sum_over_ranks(stats_); }

  /// Bytes of the payloads this rank sent.
  std::uint64_t bytes_sent() const { return bytes_; }

 private:
  std::unique_ptr<cpd::codec> codec_;
  bool feedback_;
  std::uint64_t seed_;
  std::vector<tensor_view> tensors_;
  aligned_vector<float> residual_, input_;
  exchange_stats stats_;
  std::uint64_t bytes_ = 0;
};

}  // namespace train
