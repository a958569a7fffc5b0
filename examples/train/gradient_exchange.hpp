// SPDX-License-Identifier: MIT
#pragma once

// One run's gradient exchange behind one interface, whatever carries it: the W workers
// emulated in this process (emulated_exchange, here) or one MPI rank per worker
// (mpi_exchange.hpp's mpi_worker_exchange). The training loop sees only
// gradient_exchange: one virtual call per step and phase, nothing per value.

#include "aligned.hpp"
#include "exchange.hpp"
#include "thread_pool.hpp"

#include <cpd/cpd.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace train {

class gradient_exchange {
 public:
  virtual ~gradient_exchange() = default;
  /// Runs worker(w) for every worker w whose gradient this process computes.
  virtual void compute(const std::function<void(std::size_t)>& worker) = 0;
  /// mean = the W workers' mean gradient at (global) step `step`, and losses[w] = every
  /// worker's loss (given here for the workers this process computed). Returns false when loss
  /// scaling skips the step.
  virtual bool allreduce_mean(std::vector<aligned_vector<float>>& grads, std::vector<double>& losses, float* mean,
                              std::uint64_t step) = 0;
  /// What the exchange did to the gradient values, over every worker (collective over MPI).
  virtual cpd::value_stats stats() const = 0;
  /// Bits per gradient value on the wire (a format's, a policy's mean, or a codec's payloads).
  virtual double bits_per_value() const = 0;
  /// Loss scaling: the steps skipped and the scale (never used by a codec).
  virtual const loss_scale_state& loss() const = 0;
};

/// The W workers in this process, all computed on the pool; Exchanger is exchanger or
/// codec_exchanger, built in place (exchanger's reducers hold its address).
template <class Exchanger>
class emulated_exchange final : public gradient_exchange {
 public:
  template <class... Args>
  emulated_exchange(const thread_pool& pool, std::size_t workers, Args&&... args)
      : pool_(pool), workers_(workers), ex_(std::forward<Args>(args)...) {}

  void compute(const std::function<void(std::size_t)>& worker) override { pool_.parallel_for(workers_, worker); }
  bool allreduce_mean(std::vector<aligned_vector<float>>& grads, std::vector<double>& /*losses: all computed here*/,
                      float* mean, std::uint64_t step) override {
    return ex_.allreduce_mean(grads, mean, step, pool_);
  }
  cpd::value_stats stats() const override { return ex_.stats(); }
  double bits_per_value() const override { return ex_.bits_per_value(); }
  const loss_scale_state& loss() const override { return ex_.loss(); }

 private:
  const thread_pool& pool_;
  std::size_t workers_;
  Exchanger ex_;
};

}  // namespace train
