// SPDX-License-Identifier: MIT
#pragma once

// The gradient exchange of cpd-train and the low-precision weight store.

#include "aligned.hpp"
#include "choices.hpp"
#include "mlp.hpp"

#include <cpd/exchange/simulate.hpp>
#include <cpd/exchange/codec.hpp>
#include <cpd/exchange/policy.hpp>
#include <cpd/cpd.hpp>
#include <cpd/scaling/scaling.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace train {

// What an exchange did to the gradient values, summed over a run, is a cpd::value_stats:
// count: values rounded to the gradient format; underflow: non-zero values that became zero;
// overflow: finite values that overflowed (to inf or NaN, or clipped to +-max), plus sums that
// became inf or NaN; nan_inputs, inf_inputs: values that were NaN or inf before rounding
// (cpd's NaN/inf policy).

/// 32 random bits for element i of step `step`: cpd's counter-based generator under the
/// run's seed and generator (key.stream unused).
inline std::uint32_t hash_bits(const cpd::random_stream& key, std::uint64_t step, std::uint64_t i) {
  return key.with_stream(step)(i);
}

/// The names of formats of a list, as the command line takes them (fp32: no rounding).
template <class... F>
std::string format_names(cpd::format_list<F...>) {
  std::string s;
  const auto add = [&s](const cpd::format& f) {
    s += (s.empty() ? "" : ", ") + (f == cpd::format::of<cpd::float_t<8, 23>>() ? std::string("fp32") : f.name());
  };
  (add(cpd::format::of<F>()), ...);
  return s;
}

/// The gradient formats cpd-train is compiled for, cpd::exchange_formats (simulate_allreduce
/// and the scalers are templates over the format), for the message that rejects any other.
inline std::string train_format_names() { return format_names(cpd::exchange_formats{}); }

/// GradScaler's loss scale, one for every tensor of a run that uses --scaler loss (as its
/// rule or a policy choice's); both exchanges update it from the step's mean, which every
/// worker holds alike.
class loss_scale_state {
 public:
  bool used = false;  ///< some tensor's rule is loss scaling
  /// The exponent of the current scale (GradScaler's scales are powers of two: 2^16, x 2, x 0.5).
  int exponent() const { return std::ilogb(scaler_.scale()); }
  /// After a step's exchange with `nonfinite` inf or NaN sums: GradScaler.update; false when
  /// the step must be skipped.
  bool after_step(std::uint64_t nonfinite) {
    if (!used) return true;
    scaler_.update(nonfinite != 0 ? 1 : 0);
    skipped_ += scaler_.skipped();
    return !scaler_.skipped();
  }
  std::uint64_t skipped_steps() const { return skipped_; }
  float scale() const { return scaler_.scale(); }

 private:
  cpd::dynamic_loss_scaling scaler_;  // PyTorch's defaults
  std::uint64_t skipped_ = 0;
};

/// The bits of a tensor of n values in format f under rule k: the values, and the block scales
/// that mx32 (one e8m0 per 32 values) and nvfp4 (one e4m3 per 16 values and one fp32 amax per
/// tensor) exchange besides them (their statistics allreduces).
inline double exchange_bits(const cpd::format& f, cpd::scaler_kind k, std::size_t n) {
  const bool nv = k == cpd::scaler_kind::nvfp4;
  const double per_value = static_cast<double>(f.bits()) + (k == cpd::scaler_kind::mx32 ? 8.0 / 32.0 : nv ? 8.0 / 16.0 : 0.0);
  return per_value * static_cast<double>(n) + (nv ? 32.0 : 0.0);
}

/// Sums the W workers' gradients tensor by tensor with cpd::simulate_allreduce in
/// ring order, every addition rounded to the gradient format (fp32: float sums),
/// scaled by the run's rule, and writes their mean. With a precision policy, each
/// tensor's format at each step is the policy's (and its rule and algorithm, where a policy
/// rule names them), which observes the simulation's counts. mx32 and nvfp4 run
/// cpd::simulate_block_scaled_allreduce (elements saturate, as MX's and NVFP4's do); loss keeps one
/// cpd::dynamic_loss_scaling for all tensors and says when a step must be skipped.
class exchanger {
 public:
  exchanger(std::optional<cpd::format> fmt, cpd::scaler_kind scaler, bool kahan, int workers,
            std::vector<tensor_view> tensors, cpd::allreduce_algorithm algorithm = cpd::allreduce_algorithm::ring,
            std::optional<cpd::precision_policy> policy = std::nullopt, cpd::hadamard_options rotation = {0, {}, false})
      : tensors_(std::move(tensors)), workers_(workers), policy_(std::move(policy)) {
    opt_.kahan = kahan;
    opt_.mean = true;
    opt_.diagnostics = true;
    opt_.rotation = rotation;  // (block 0: none)
    const cpd::format base = fmt ? *fmt : cpd::format::of<cpd::float_t<8, 23>>();
    // one reducer per choice the run can make: the run's (format, rule, algorithm), or each of
    // the policy's, whose empty names stand for the run's (cli.hpp checked the names)
    for (const cpd::precision_choice& c :
         policy_ ? policy_->choices() : std::vector<cpd::precision_choice>{{base, {}, {}}}) {
      const cpd::scaler_kind k = choice_scaler(c, scaler);
      reducers_.push_back({c, make_reducer(c.fmt, k, choice_algorithm(c, algorithm)), k});
      loss_.used |= k == cpd::scaler_kind::loss;
    }
  }

  /// mean = the W-way mean of grads, per tensor, through the low-precision ring, at
  /// (global) step `step`. Returns false when the step must be skipped (loss scaling found
  /// an inf or NaN in the sums; the loss scale has backed off), else true.
  template <class Pool>
  bool allreduce_mean(std::vector<aligned_vector<float>>& grads, float* mean, std::uint64_t step, const Pool& pool) {
    opt_.threads = static_cast<unsigned>(pool.size());
    std::vector<const float*> ptrs(grads.size());
    std::uint64_t nonfinite = 0;
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const tensor_view& t = tensors_[i];
      for (std::size_t w = 0; w < grads.size(); ++w) ptrs[w] = grads[w].data() + t.offset;
      const reducer_entry& red = policy_ ? reducer(policy_->choice_at(i, step)) : reducers_[0];
      const cpd::format& f = red.choice.fmt;
      const auto r = red.fn(i, ptrs.data(), mean + t.offset, t.size());
      stats_ += r.first;
      stats_.overflow += r.second;
      nonfinite += r.second;
      if (policy_) policy_->observe(i, step, r.first);
      bits_ += exchange_bits(f, red.scaler, t.size());
      values_ += t.size();
    }
    return loss_.after_step(nonfinite);
  }

  const cpd::value_stats& stats() const { return stats_; }
  /// Bits per gradient value the formats of the run took, averaged over every step.
  double bits_per_value() const { return values_ ? bits_ / static_cast<double>(values_) : 0.0; }
  /// Loss scaling: the steps skipped so far, and the scale of the next step.
  const loss_scale_state& loss() const { return loss_; }

 private:
  /// The scaled values' counts and the non-finite sums of one tensor's exchange.
  using tensor_result = std::pair<cpd::value_stats, std::uint64_t>;
  using reducer_fn = std::function<tensor_result(std::size_t, const float* const*, float*, std::size_t)>;

  struct reducer_entry {
    cpd::precision_choice choice;
    reducer_fn fn;
    cpd::scaler_kind scaler;
  };

  /// The exchange of one tensor in format f with rule `scaler` and `algorithm`: the rule's
  /// scaler from cpd::make_scaler (one per tensor: delayed scaling keeps an amax history per
  /// tensor and choice), handed to simulate_allreduce<F>; mx32's and nvfp4's block scales through
  /// simulate_block_scaled_allreduce (elements saturate, as MX's do); loss's scale is the run's
  /// (loss_scale_state), a fixed power of two for the step. Defined in exchange.cpp, the one
  /// translation unit that compiles the simulated exchange for every cpd::exchange_formats
  /// (the library cpd_train_exchange, which cpd-train and its tests link).
  reducer_fn make_reducer(const cpd::format& f, cpd::scaler_kind scaler, cpd::allreduce_algorithm algorithm);

  const reducer_entry& reducer(const cpd::precision_choice& c) const {
    for (const auto& r : reducers_)
      if (r.choice == c) return r;
    return reducers_[0];  // the policy chooses only among its choices()
  }

  std::vector<tensor_view> tensors_;
  int workers_;
  std::optional<cpd::precision_policy> policy_;
  cpd::allreduce_options opt_;
  std::vector<reducer_entry> reducers_;
  loss_scale_state loss_;
  cpd::value_stats stats_;
  double bits_ = 0;
  std::uint64_t values_ = 0;
};

/// The key stream of tensor t of T at a (global) step: every (step, tensor) pair draws
/// its own random bits, and worker r encodes with cpd::codec_stream(key, W, r).
inline std::uint64_t codec_tensor_stream(std::uint64_t step, std::size_t tensors, std::size_t t) {
  return step * static_cast<std::uint64_t>(tensors) + static_cast<std::uint64_t>(t);
}

/// Bits on the wire per gradient value: one worker's payloads of all tensors, headers included.
inline double codec_bits_per_value(const cpd::codec& c, const std::vector<tensor_view>& tensors) {
  std::size_t bytes = 0, n = 0;
  for (const tensor_view& t : tensors) {
    bytes += c.payload_size(t.size());
    n += t.size();
  }
  return n ? 8.0 * static_cast<double>(bytes) / static_cast<double>(n) : 0.0;
}

/// Before a codec exchange of one worker's n values: without error feedback, residual = -0
/// everywhere, so that the exchange encodes x = g + (-0), which is g bit for bit (even -0);
/// with it, x = g + residual (the exchange's own sum, repeated) is kept in `x` for count_codec.
inline void prepare_codec_residual(bool feedback, const float* g, float* residual, float* x, std::size_t n) {
  if (!feedback) {
    std::fill(residual, residual + n, -0.0f);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) x[i] = g[i] + residual[i];
}

/// After the exchange: residual = x - decode(encode(x)). A value counts as flushed when
/// x != 0 decoded to 0, i.e. when the residual is x itself (no codec here decodes a non-zero
/// code to less than half an ulp of x: the nearest of its values, a QSGD level >= 1 of the
/// bucket's norm, or 1-bit SGD's mean of at least |x| / bucket), and as overflowed when a
/// finite x gave a non-finite residual (a non-finite decoded value), and as a NaN or inf
/// input when x is (its codec block then decodes to NaN).
/// Counted over the tensors of the flat arrays x and residual (not the gaps between them).
inline void count_codec(const float* x, const float* residual, const std::vector<tensor_view>& tensors,
                        cpd::value_stats& s) {
  std::uint64_t zeros = 0, flushed = 0, overflowed = 0, nans = 0, infs = 0;
  for (const tensor_view& t : tensors) {
    for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) {
      zeros += x[i] == 0.0f;
      flushed += x[i] != 0.0f && residual[i] == x[i];
      overflowed += std::isfinite(x[i]) && !std::isfinite(residual[i]);
      nans += std::isnan(x[i]);
      infs += std::isinf(x[i]);
    }
    s.count += t.size();
  }
  s.zeros += zeros;
  s.underflow += flushed;
  s.overflow += overflowed;
  s.nan_inputs += nans;
  s.inf_inputs += infs;
}

/// Non-finite values in the tensors of the flat array x.
inline std::uint64_t count_nonfinite(const float* x, const std::vector<tensor_view>& tensors) {
  std::uint64_t n = 0;
  for (const tensor_view& t : tensors)
    for (std::size_t i = t.offset; i < t.offset + t.size(); ++i) n += !std::isfinite(x[i]);
  return n;
}

/// Sums the W workers' gradients tensor by tensor through a gradient codec with
/// cpd::simulate_codec_allreduce (each worker encodes, the payloads are all-gathered,
/// decoded and added in float in rank order) and writes their mean; optionally with
/// error feedback (each worker's quantization error added to its next gradient).
class codec_exchanger {
 public:
  codec_exchanger(const codec_spec& spec, int workers, cpd::random_stream key, std::vector<tensor_view> tensors,
                  std::size_t n)
      : codec_(cpd::make_codec(spec.name)),
        feedback_(spec.error_feedback),
        key_(key),
        tensors_(std::move(tensors)),
        residuals_(static_cast<std::size_t>(workers), aligned_vector<float>(n, 0.0f)),
        inputs_(feedback_ ? static_cast<std::size_t>(workers) : 0, aligned_vector<float>(n)) {}

  /// mean = the W-way mean of grads, per tensor, through the codec; `step` keys its random bits.
  /// Returns true: no step is skipped (as exchanger::allreduce_mean's, with which it shares
  /// gradient_exchange.hpp's adapter).
  template <class Pool>
  bool allreduce_mean(std::vector<aligned_vector<float>>& grads, float* mean, std::uint64_t step, const Pool& pool) {
    const std::size_t W = grads.size(), n = residuals_[0].size();
    pool.parallel_for(W, [&](std::size_t w) {
      prepare_codec_residual(feedback_, grads[w].data(), residuals_[w].data(), feedback_ ? inputs_[w].data() : nullptr,
                             n);
    });
    cpd::codec_exchange_options opt;
    opt.mean = true;
    opt.threads = static_cast<unsigned>(pool.size());
    opt.key = key_;
    std::vector<const float*> ptrs(W);
    std::vector<float*> res(W);
    opt.residuals = res.data();
    for (std::size_t t = 0; t < tensors_.size(); ++t) {
      const tensor_view& tv = tensors_[t];
      for (std::size_t w = 0; w < W; ++w) {
        ptrs[w] = grads[w].data() + tv.offset;
        res[w] = residuals_[w].data() + tv.offset;
      }
      opt.key.stream = codec_tensor_stream(step, tensors_.size(), t);
      cpd::simulate_codec_allreduce(*codec_, ptrs.data(), mean + tv.offset, tv.size(), static_cast<int>(W), opt);
    }
    std::vector<cpd::value_stats> per(W);
    pool.parallel_for(W, [&](std::size_t w) {
      count_codec(feedback_ ? inputs_[w].data() : grads[w].data(), residuals_[w].data(), tensors_, per[w]);
    });
    for (const cpd::value_stats& s : per) stats_ += s;
    stats_.overflow += count_nonfinite(mean, tensors_);
    return true;
  }

  const cpd::value_stats& stats() const { return stats_; }
  /// Bits on the wire per gradient value (codec_bits_per_value).
  double bits_per_value() const { return codec_bits_per_value(*codec_, tensors_); }
  /// Codecs scale by themselves: no loss scaling, no step skipped.
  const loss_scale_state& loss() const { return loss_; }

 private:
  std::unique_ptr<cpd::codec> codec_;
  bool feedback_;
  cpd::random_stream key_;  // the run's seed and generator
  std::vector<tensor_view> tensors_;
  std::vector<aligned_vector<float>> residuals_;  // per worker; -0 before every step without feedback
  std::vector<aligned_vector<float>> inputs_;     // per worker: gradient + residual (feedback only)
  cpd::value_stats stats_;
  loss_scale_state loss_;  // unused
};

/// The weights, kept in float or in a low-precision format with a chosen update rounding.
class weight_store {
 public:
  weight_store(std::optional<cpd::format> fmt, update_rounding mode, cpd::random_stream key,
               const aligned_vector<float>& init)
      : fmt_(fmt), mode_(mode), key_(key), w_(init), c_(init.size(), 0.0f) {
    if (fmt_)
      for (float& x : w_) x = cpd::quantize(*fmt_, cpd::rounding::nearest_even, cpd::overflow::saturate, x);
  }
  const float* values() const { return w_.data(); }

  /// w += u, rounded to the format as chosen.
  void apply(const float* u, std::uint64_t step) {
    if (!fmt_) {
      for (std::size_t i = 0; i < w_.size(); ++i) w_[i] += u[i];
      return;
    }
    const auto& f = *fmt_;
    constexpr auto sat = cpd::overflow::saturate;
    for (std::size_t i = 0; i < w_.size(); ++i) {
      switch (mode_) {
        case update_rounding::nearest_even:
          w_[i] = cpd::quantize(f, cpd::rounding::nearest_even, sat, double(w_[i]) + double(u[i]));
          break;
        case update_rounding::stochastic:
          w_[i] = cpd::quantize(f, cpd::rounding::stochastic, sat, double(w_[i]) + double(u[i]),
                                hash_bits(key_, step, i));
          break;
        case update_rounding::kahan: {
          const float y = cpd::quantize(f, cpd::rounding::nearest_even, sat, double(u[i]) - double(c_[i]));
          const float t = cpd::quantize(f, cpd::rounding::nearest_even, sat, double(w_[i]) + double(y));
          const float z = cpd::quantize(f, cpd::rounding::nearest_even, sat, double(t) - double(w_[i]));
          c_[i] = cpd::quantize(f, cpd::rounding::nearest_even, sat, double(z) - double(y));
          w_[i] = t;
          break;
        }
      }
    }
  }

 private:
  std::optional<cpd::format> fmt_;
  update_rounding mode_;
  cpd::random_stream key_;  // the run's seed and generator
  aligned_vector<float> w_, c_;
};

}  // namespace train
