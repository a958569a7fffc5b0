// SPDX-License-Identifier: MIT
#pragma once

// cpd-train --mpi: each MPI rank is one worker; gradients travel as packed
// low-precision codes through cpd::mpi's ring, which sums in exactly the order
// of the emulated exchange, so both give the same weights-hash. Codec runs go
// through cpd::mpi::codec_allreduce, whose bits are those of the emulated
// cpd::simulate_codec_allreduce.

#include "exchange.hpp"
#include "gradient_exchange.hpp"
#include "mlp.hpp"

#include <cpd/cpd.hpp>
#include <cpd/mpi.hpp>

#include <mpi.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace train {

/// The sum of every rank's statistics, counter by counter (collective over MPI_COMM_WORLD).
inline cpd::value_stats sum_over_ranks(const cpd::value_stats& s) {
  constexpr int n = static_cast<int>(std::size(cpd::value_stats_fields));
  std::uint64_t local[n], total[n];
  for (int i = 0; i < n; ++i) local[i] = s.*cpd::value_stats_fields[i].member;
  MPI_Allreduce(local, total, n, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  cpd::value_stats r;
  for (int i = 0; i < n; ++i) r.*cpd::value_stats_fields[i].member = total[i];
  return r;
}

/// The bulk options that quantize as a call with scale s did (its statistics: the exchange's).
inline void set_scale(cpd::bulk_options& o, const cpd::pow2_scale& s) { o.scale_exponent = s.exponent; }
inline void set_scale(cpd::bulk_options& o, const cpd::float_scale& s) {
  o.scale = s.value;
  o.scale_inverse = s.inverse;
}
inline void set_scale(cpd::bulk_options& o, const cpd::any_scale& s) {
  std::visit([&o](const auto& x) { set_scale(o, x); }, s);
}

/// The plan of cpd-train's MPI exchange: every format of cpd::exchange_formats, nearest_even.
using mpi_plan = cpd::mpi::dynamic_plan<cpd::exchange_formats, false>;

/// A plan over MPI_COMM_WORLD for format f (APS off: the scalers come with each call).
/// Defined in mpi_plan.cpp, the one translation unit that instantiates the plans of every
/// format (about two thirds of cpd-train's compile time), so that it compiles beside main.cpp.
std::unique_ptr<mpi_plan> make_mpi_plan(const cpd::format& f, std::vector<std::size_t> sizes,
                                        const cpd::mpi::options& o);

/// The gradient exchange of one rank over MPI. With a precision policy, the tensors of a
/// step go in one plan per choice (the format, and the rule and algorithm a rule names), and
/// the policy observes every rank's counts summed by one allreduce of two integers per tensor:
/// the choices, and so the bits, of the emulated run. Loss scaling (the run's rule or a
/// choice's) keeps one scale for the model and skips the steps the emulation skips.
class mpi_exchanger {
 public:
  mpi_exchanger(std::optional<cpd::format> fmt, cpd::scaler_kind scaler, bool kahan, std::vector<tensor_view> tensors,
                cpd::allreduce_algorithm algorithm = cpd::allreduce_algorithm::ring,
                std::optional<cpd::precision_policy> policy = std::nullopt,
                cpd::hadamard_options rotation = {0, {}, false})
      : fmt_(fmt ? *fmt : cpd::format::of<cpd::float_t<8, 23>>()),
        scaler_(scaler),
        opt_{algorithm, kahan, /*mean=*/true},
        tensors_(std::move(tensors)),
        policy_(std::move(policy)) {
    opt_.rotation = rotation;  // (block 0: none; every plan rotates)
    for (const cpd::precision_choice& c :
         policy_ ? policy_->choices() : std::vector<cpd::precision_choice>{{fmt_, {}, {}}})
      loss_.used |= choice_scaler(c, scaler_) == cpd::scaler_kind::loss;
  }

  /// mean = the mean over all ranks of this rank's gradient `local`, at (global) step `step`.
  /// Returns false when loss scaling skips the step (as exchanger::allreduce_mean).
  bool allreduce_mean(const float* local, float* mean, std::uint64_t step) {
    const std::size_t T = tensors_.size();
    std::vector<cpd::precision_choice> at(T, cpd::precision_choice{fmt_, {}, {}});
    if (policy_)
      for (std::size_t i = 0; i < T; ++i) at[i] = policy_->choice_at(i, step);
    std::vector<std::uint64_t> counts(2 * T, 0);
    std::vector<bool> done(T, false);
    for (std::size_t i = 0; i < T; ++i) {
      if (done[i]) continue;
      std::vector<std::size_t> members;  // the tensors with choice at[i] this step, in order
      for (std::size_t j = i; j < T; ++j)
        if (!done[j] && at[j] == at[i]) {
          members.push_back(j);
          done[j] = true;
        }
      std::vector<cpd::mpi::tensor> t;
      for (std::size_t j : members) t.push_back({local + tensors_[j].offset, mean + tensors_[j].offset, tensors_[j].size()});
      const cpd::scaler_kind rule = choice_scaler(at[i], scaler_);
      if (rule == cpd::scaler_kind::mx32 || rule == cpd::scaler_kind::nvfp4) {
        // block scales: the library counts what quantization did to this rank's scaled values
        const auto r = plan(at[i], members).block_scaled(t, rule, /*diagnostics=*/true);
        bytes_ += r.bytes_sent();
        for (std::size_t k = 0; k < members.size(); ++k) count(at[i], rule, members[k], r.scales[k].scaled, counts);
        continue;
      }
      std::vector<cpd::any_scale> scales;
      if (rule == cpd::scaler_kind::loss) {
        const auto r = plan(at[i], members)(t, cpd::fixed_scaling(cpd::pow2_scale{loss_.exponent()}));
        bytes_ += r.bytes_sent();
        scales.assign(r.scales.begin(), r.scales.end());
      } else {  // each tensor's scaler of this choice, as the emulation's (delayed keeps a history in it)
        std::vector<cpd::any_scaler<>*> s;
        for (std::size_t j : members) s.push_back(&scaler(at[i], j));
        const auto r = plan(at[i], members)(t.data(), t.size(), s.data());
        bytes_ += r.bytes_sent();
        scales = r.scales;
      }
      // What quantization did to this rank's values, from the bulk call's statistics (the
      // emulated run counts every worker's with cpd::measure_quantization: the same events).
      for (std::size_t k = 0; k < members.size(); ++k) {
        const tensor_view& tv = tensors_[members[k]];
        cpd::value_stats st;
        cpd::bulk_options o;
        set_scale(o, scales[k]);
        o.stats = &st;
        scratch_.resize(tv.size());
        const float* values = local + tv.offset;  // (rotated where the exchange rotates: what it quantized)
        if (opt_.rotation.block != 0) {
          rotated_.resize(tv.size());
          cpd::hadamard_rotate(values, rotated_.data(), tv.size(), opt_.rotation);
          values = rotated_.data();
        }
        cpd::quantize(at[i].fmt, cpd::rounding::nearest_even, cpd::overflow::infinity, values, scratch_.data(),
                      tv.size(), o);
        count(at[i], rule, members[k], st, counts);
      }
    }
    // Non-finite sums are the same on every rank: count them once, on rank 0.
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const std::uint64_t nonfinite = count_nonfinite(mean, tensors_);  // the same on every rank
    if (rank == 0) stats_.overflow += nonfinite;
    if (policy_ && policy_->needs_statistics()) {  // the policy's one small allreduce of the step
      std::vector<std::uint64_t> sum(2 * T);
      MPI_Allreduce(counts.data(), sum.data(), static_cast<int>(2 * T), MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
      bytes_ += 2 * T * sizeof(std::uint64_t);
      for (std::size_t j = 0; j < T; ++j) policy_->observe(j, step, sum[2 * j], sum[2 * j + 1]);
    }
    return loss_.after_step(nonfinite);  // every rank holds the same mean: no allreduce
  }

  /// Loss scaling: the steps skipped so far, and the scale of the next step.
  const loss_scale_state& loss() const { return loss_; }

  /// The statistics of all ranks (collective).
  cpd::value_stats stats() const { return sum_over_ranks(stats_); }

  /// Bytes this rank sent (statistics, block scales and packed codes).
  std::uint64_t bytes_sent() const { return bytes_; }

  /// Bits per gradient value the formats of the run took, averaged over every step.
  double bits_per_value() const { return values_ ? bits_ / static_cast<double>(values_) : 0.0; }

 private:
  using plan_type = mpi_plan;

  /// Notes what quantization did to this rank's values of tensor j (st) under choice c and
  /// rule k: the run's counts, the policy's (counts[2j], counts[2j + 1]) and the bits sent.
  void count(const cpd::precision_choice& c, cpd::scaler_kind k, std::size_t j, const cpd::value_stats& st,
             std::vector<std::uint64_t>& counts) {
    stats_ += st;
    counts[2 * j] = st.count;
    counts[2 * j + 1] = cpd::precision_policy::lost(st);
    bits_ += exchange_bits(c.fmt, k, tensors_[j].size());
    values_ += tensors_[j].size();
  }

  /// The name of choice c: its format, rule and algorithm (a choice's empty rule or algorithm
  /// is the run's; cli.hpp allowed only the rules of mpi_scalers and the algorithms of the rank
  /// schedule, whose bits are the simulation's).
  std::string choice_key(const cpd::precision_choice& c) const {
    return c.fmt.name() + "/" + cpd::to_string(choice_scaler(c, scaler_)) + "/" +
           cpd::to_string(choice_algorithm(c, opt_.algo));
  }

  /// The plan of choice c for these tensors, made the first time they go together.
  plan_type& plan(const cpd::precision_choice& c, const std::vector<std::size_t>& members) {
    std::string key = choice_key(c);
    for (std::size_t j : members) key += "," + std::to_string(j);
    auto& p = plans_[key];
    if (!p) {
      std::vector<std::size_t> sizes;
      for (std::size_t j : members) sizes.push_back(tensors_[j].size());
      cpd::mpi::options o = opt_;
      o.algo = choice_algorithm(c, opt_.algo);
      p = make_mpi_plan(c.fmt, std::move(sizes), o);
    }
    return *p;
  }

  /// The scaler of tensor j under choice c (not loss), made as the emulated exchanger makes it
  /// (cpd::make_scaler with the world size), one per tensor and choice for the whole run.
  cpd::any_scaler<>& scaler(const cpd::precision_choice& c, std::size_t j) {
    auto& v = scalers_[choice_key(c)];
    if (v.empty()) {
      int size = 1;
      MPI_Comm_size(MPI_COMM_WORLD, &size);
      cpd::scaler_options so;
      so.world_size = size;
      for (std::size_t k = 0; k < tensors_.size(); ++k) v.push_back(cpd::make_scaler(choice_scaler(c, scaler_), c.fmt, so));
    }
    return v[j];
  }

  cpd::format fmt_;
  cpd::scaler_kind scaler_;  // the run's rule (one of mpi_scalers: cli.hpp)
  loss_scale_state loss_;  // one scale for the whole model
  cpd::mpi::options opt_;
  std::vector<tensor_view> tensors_;
  std::optional<cpd::precision_policy> policy_;
  std::map<std::string, std::unique_ptr<plan_type>> plans_;
  std::map<std::string, std::vector<cpd::any_scaler<>>> scalers_;  // per choice, one per tensor
  cpd::value_stats stats_;
  std::vector<float> scratch_, rotated_;
  std::uint64_t bytes_ = 0;
  double bits_ = 0;
  std::uint64_t values_ = 0;
};

/// The codec exchange of one rank over MPI (the keys, residuals and statistics of codec_exchanger).
class mpi_codec_exchanger {
 public:
  mpi_codec_exchanger(const codec_spec& spec, cpd::random_stream key, std::vector<tensor_view> tensors, std::size_t n)
      : codec_(cpd::make_codec(spec.name)),
        feedback_(spec.error_feedback),
        key_(key),
        tensors_(std::move(tensors)),
        residual_(n, 0.0f),
        input_(feedback_ ? n : 0) {}

  /// mean = the mean over all ranks of this rank's gradient `local`, through the codec.
  /// Returns true: no step is skipped.
  bool allreduce_mean(const float* local, float* mean, std::uint64_t step) {
    const std::size_t n = residual_.size();
    prepare_codec_residual(feedback_, local, residual_.data(), input_.data(), n);
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      const tensor_view& tv = tensors_[t];
      const cpd::mpi::codec_options opt{/*mean=*/true, residual_.data() + tv.offset,
                                        key_.with_stream(codec_tensor_stream(step, tensors_.size(), t))};
      bytes_ += cpd::mpi::codec_allreduce(*codec_, local + tv.offset, mean + tv.offset, tv.size(), MPI_COMM_WORLD, opt)
                    .payload_bytes;
    }
    count_codec(feedback_ ? input_.data() : local, residual_.data(), tensors_, stats_);
    // Non-finite means are the same on every rank: count them once, on rank 0.
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) stats_.overflow += count_nonfinite(mean, tensors_);
    return true;
  }

  /// The statistics of all ranks (collective).
  cpd::value_stats stats() const { return sum_over_ranks(stats_); }

  /// Bytes of the payloads this rank sent.
  std::uint64_t bytes_sent() const { return bytes_; }

  /// Bits on the wire per gradient value (codec_bits_per_value).
  double bits_per_value() const { return codec_bits_per_value(*codec_, tensors_); }

  /// Codecs scale by themselves: no loss scaling, no step skipped.
  const loss_scale_state& loss() const { return loss_; }

 private:
  std::unique_ptr<cpd::codec> codec_;
  bool feedback_;
  cpd::random_stream key_;  // the run's seed and generator
  std::vector<tensor_view> tensors_;
  aligned_vector<float> residual_, input_;
  cpd::value_stats stats_;
  loss_scale_state loss_;  // unused
  std::uint64_t bytes_ = 0;
};

/// This process as worker `rank` of the MPI job: it computes its own gradient, gathers
/// every worker's loss (summed in rank order by the training loop, as in the emulation) and
/// exchanges through Exchanger (mpi_exchanger or mpi_codec_exchanger, built in place).
template <class Exchanger>
class mpi_worker_exchange final : public gradient_exchange {
 public:
  template <class... Args>
  explicit mpi_worker_exchange(int rank, Args&&... args)
      : rank_(static_cast<std::size_t>(rank)), ex_(std::forward<Args>(args)...) {}

  void compute(const std::function<void(std::size_t)>& worker) override { worker(rank_); }
  bool allreduce_mean(std::vector<aligned_vector<float>>& grads, std::vector<double>& losses, float* mean,
                      std::uint64_t step) override {
    // Every rank's loss into losses; this rank's is already at losses[rank_] (MPI_IN_PLACE: the
    // standard forbids a send buffer inside the receive buffer).
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, losses.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD);
    return ex_.allreduce_mean(grads[rank_].data(), mean, step);
  }
  cpd::value_stats stats() const override { return ex_.stats(); }
  double bits_per_value() const override { return ex_.bits_per_value(); }
  const loss_scale_state& loss() const override { return ex_.loss(); }

 private:
  std::size_t rank_;
  Exchanger ex_;
};

}  // namespace train
