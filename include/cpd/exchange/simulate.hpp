// SPDX-License-Identifier: MIT
#pragma once

// simulate_allreduce: W workers' gradients summed in one process, in the exact
// order of a real allreduce algorithm, with every addition rounded to F
// (CPD's "emulate N nodes"). docs/reduction.md defines, for each algorithm,
// which partial sums are rounded when, the chunk boundaries and the keys of the
// random bits, precisely enough for a real MPI implementation to match it bit
// for bit. It runs in the default floating-point environment, whatever the
// caller's (cpd/core/detail/fenv.hpp).

#include <cpd/core/config.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/exchange/algorithm.hpp>
#include <cpd/exchange/block_scaled.hpp>
#include <cpd/exchange/partition.hpp>
#include <cpd/exchange/protocol.hpp>
#include <cpd/exchange/scales.hpp>
#include <cpd/host/detail/parallel_for.hpp>
#include <cpd/host/detail/tuning.hpp>
#include <cpd/host/hadamard.hpp>
#include <cpd/host/execution.hpp>
#include <cpd/reduce/reduce.hpp>
#include <cpd/scaling/diagnostics.hpp>
#include <cpd/scaling/mx.hpp>
#include <cpd/scaling/nvfp4.hpp>
#include <cpd/scaling/scaling.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cpd {

/// Options of simulate_allreduce.
struct allreduce_options {
  allreduce_algorithm algorithm = allreduce_algorithm::ring;  ///< the summation order
  bool kahan = false;       ///< Kahan-compensated sums (the compensation travels with the partial sum)
  bool mean = false;        ///< divide the unscaled sum by W (in float)
  random_stream key{};      ///< random bits for stochastic rounding (docs/reduction.md)
  unsigned threads = 0;     ///< worker threads; 0: std::thread::hardware_concurrency()
  /// Error feedback: W arrays of n floats, each worker's rounding residual; read (added to the
  /// gradient before scaling) and overwritten with the new residual. nullptr: none.
  float* const* residuals = nullptr;
  bool diagnostics = false;  ///< fill allreduce_result::unscaled and ::scaled (two extra passes)
  /// two_step: the format of the wide accumulator; float32 (the default) adds in float, any
  /// other format whose values are floats and whose significand has at most 22 bits rounds
  /// every addition to it (nearest-even), as a hardware accumulator of that format would.
  format accumulator = format::of<float_t<8, 23>>();
  /// A random Hadamard rotation around the exchange (docs/scaling.md#random-hadamard-rotations):
  /// each worker's values rotated by cpd::hadamard_rotate in blocks of rotation.block values
  /// (its key's signs) before the scale's statistics, the sum rotated back once after it (a
  /// rotation is linear: the sum runs in the rotated domain). rotation.block == 0: none (the
  /// default); rotation.inverse must be false. With error feedback the residuals hold the
  /// rotated domain's errors. A NaN or inf reaches every value of its rotation block.
  hadamard_options rotation = {0, {}, false};
};

/// What simulate_allreduce did.
template <class Scale>
struct allreduce_result {
  Scale scale{};                  ///< the scale the scaler selected (scale.nonfinite: some input was inf or NaN)
  value_stats unscaled{};  ///< all workers' values quantized without the scale (with diagnostics)
  value_stats scaled{};    ///< the same with the scale: what the exchange actually did (nan/inf_inputs: inf/NaN inputs)
  std::uint64_t nonfinite_out = 0;  ///< elements of the result that are inf or NaN (NaN wherever an input was NaN)
};

namespace detail {

/// One simulated allreduce with a known scale: the rounding order of docs/reduction.md.
template <class F, rounding R, overflow O, class Scale>
class allreduce_engine {
  using protocol = summation<F, R, O, Scale>;
  static constexpr std::size_t block = protocol::block;

 public:
  allreduce_engine(const float* const* x, float* const* residuals, float* out, std::size_t n, int w, Scale sc,
                   const allreduce_options& opt)
      : x_(x), res_(residuals), out_(out), n_(n), w_(w), opt_(opt), p_(floor_pow2(w)),
        protocol_(sc, w, opt.kahan, opt.mean, opt.key) {
    while ((1 << levels_) < p_) ++levels_;
  }

  /// Runs the elements [lo, hi) (any sub-range: the result does not depend on the split).
  void run(std::size_t lo, std::size_t hi) {
    std::vector<float> scratch(block * (opt_.kahan ? 2 : 1) * (static_cast<std::size_t>(levels_) + 3));
    std::vector<const float*> pointers;  // (the fused chain's: one per worker)
    auto segments = [&](std::size_t parts, auto&& body) {
      for (std::size_t c = 0; c < parts; ++c) {
        const index_range r = partition(n_, parts, c);
        const std::size_t b = std::max(r.begin, lo), e = std::min(r.end, hi);
        for (std::size_t s = b; s < e; s += block) body(c, s, std::min(e, s + block), scratch.data());
      }
    };
    switch (opt_.algorithm) {
      case allreduce_algorithm::sequential:
      case allreduce_algorithm::all_gather:  // every rank sums as rank 0 does in sequential
        segments(1, [&](std::size_t, std::size_t a, std::size_t b, float* m) { sequential(a, b, m, pointers); });
        break;
      case allreduce_algorithm::ring:
      case allreduce_algorithm::pipelined_ring:  // the same roundings; only the schedule differs
        segments(static_cast<std::size_t>(w_),
                 [&](std::size_t c, std::size_t a, std::size_t b, float* m) { ring(static_cast<int>(c), a, b, m, pointers); });
        break;
      case allreduce_algorithm::two_step:
        segments(static_cast<std::size_t>(w_), [&](std::size_t c, std::size_t a, std::size_t b, float* m) {
          two_step(static_cast<int>(c), a, b, m);
        });
        break;
      case allreduce_algorithm::halving_doubling:
        segments(static_cast<std::size_t>(p_), [&](std::size_t c, std::size_t a, std::size_t b, float* m) {
          halving_doubling(static_cast<int>(c), a, b, m);
        });
        break;
      case allreduce_algorithm::native: break;  // (refused by check_allreduce_args)
    }
  }

 private:
  /// The protocol's load of worker r's elements [lo, hi) into q, with error feedback.
  void load(int r, std::size_t lo, std::size_t hi, float* q) const {
    protocol_.load(r, x_[r] + lo, lo, hi - lo, q);
    if (res_) protocol_.feedback(x_[r] + lo, q, hi - lo, res_[r] + lo);
  }

  void add(float* s, float* c, const float* q, std::size_t lo, std::size_t hi, int step, int rank) const {
    protocol_.add(s, c, q, lo, hi - lo, step, rank);
  }

  void finish(const float* s, std::size_t lo, std::size_t hi) const noexcept {
    protocol_.finish(s, hi - lo, out_ + lo);
  }

  /// out[lo, hi) = the finished chain of those elements over the workers first, first + 1,
  /// ... (mod W), hop j adding worker first + j at step j - 1 as rank(j, worker) (the ring's
  /// and the sequential order: the same roundings). Without Kahan and error feedback, the
  /// protocol's fused pass (the sum in registers); else, and where it stops, load, add and
  /// finish. (x: room for W pointers; m: scratch.)
  template <class Rank>
  void chain(int first, Rank&& rank, std::size_t lo, std::size_t hi, float* m, std::vector<const float*>& x) const {
    if (!opt_.kahan && res_ == nullptr) {
      x.resize(static_cast<std::size_t>(w_));
      for (int j = 0; j < w_; ++j) x[static_cast<std::size_t>(j)] = x_[(first + j) % w_] + lo;
      if (protocol_.chain(x.data(), w_, hi - lo, out_ + lo, [&](std::size_t at, std::size_t cnt) {
            float t[3 * 16];
            chain_by_hops(first, rank, lo + at, lo + at + cnt, t, 16);
            finish(t, lo + at, lo + at + cnt);
          }))
        return;
    }
    chain_by_hops(first, rank, lo, hi, m, block);
    finish(m, lo, hi);
  }

  /// The sums of chain by the protocol's load and add into m (scratch: s, q, c of `stride`
  /// floats each).
  template <class Rank>
  void chain_by_hops(int first, Rank&& rank, std::size_t lo, std::size_t hi, float* m, std::size_t stride) const {
    float* s = m;
    float* q = m + stride;
    float* c = m + 2 * stride;
    load(first, lo, hi, s);
    if (opt_.kahan) std::fill(c, c + (hi - lo), 0.0f);
    for (int j = 1; j < w_; ++j) {
      const int r = (first + j) % w_;
      load(r, lo, hi, q);
      add(s, c, q, lo, hi, j - 1, rank(j, r));
    }
  }

  void sequential(std::size_t lo, std::size_t hi, float* m, std::vector<const float*>& x) const {
    chain(0, [](int, int) { return 0; }, lo, hi, m, x);  // every hop rank 0's
  }

  void ring(int chunk, std::size_t lo, std::size_t hi, float* m, std::vector<const float*>& x) const {
    chain(chunk, [](int, int r) { return r; }, lo, hi, m, x);  // hop j made by the rank it reaches
  }

  /// Chunk c is reduced by rank c: it adds q_0 .. q_{W-1} in rank order in the accumulator,
  /// then rounds the sum to F once (step 0, rank c); the all-gather copies it.
  void two_step(int chunk, std::size_t lo, std::size_t hi, float* m) const {
    float* s = m;
    float* q = m + block;
    load(0, lo, hi, s);
    for (int r = 1; r < w_; ++r) {
      load(r, lo, hi, q);
      protocol_.accumulate(s, q, hi - lo, opt_.accumulator);
    }
    protocol_.round_sum(s, lo, hi - lo, chunk);
    finish(s, lo, hi);
  }

  /// The original rank that forms the level-l partial sum of group g for elements of block b.
  [[nodiscard]] int tree_rank(int b, int level, int group) const noexcept {
    int nr = group << (level + 1);
    for (int j = 0; j <= level; ++j) nr |= ((b >> (levels_ - 1 - j)) & 1) << j;
    const int rem = w_ - p_;
    return nr < rem ? 2 * nr + 1 : nr + rem;
  }

  void halving_doubling(int b, std::size_t lo, std::size_t hi, float* m) const noexcept {
    const int rem = w_ - p_;
    const std::size_t len = hi - lo;
    const std::size_t stride = opt_.kahan ? 2 * block : block;
    float* q = m;  // scratch for a loaded leaf
    // A stack of partial sums (sum, compensation) with their tree levels; slot d at m + (d + 1) * stride.
    int level_of[40];
    int depth = 0;
    for (int k = 0; k < p_; ++k) {
      float* s = m + static_cast<std::size_t>(depth + 1) * stride;
      float* c = s + block;
      if (opt_.kahan) std::fill(c, c + len, 0.0f);
      if (k < rem) {  // step 0: odd rank 2k+1 adds even rank 2k's vector
        load(2 * k, lo, hi, s);
        load(2 * k + 1, lo, hi, q);
        add(s, c, q, lo, hi, 0, 2 * k + 1);
      } else {
        load(k + rem, lo, hi, s);
      }
      level_of[depth++] = 0;
      // Merge equal levels: the partial sums of two aligned groups of 2^l new ranks.
      int group = k;
      while (depth >= 2 && level_of[depth - 1] == level_of[depth - 2]) {
        const int l = level_of[depth - 1];
        group >>= 1;
        float* s1 = m + static_cast<std::size_t>(depth - 1) * stride;
        float* s2 = m + static_cast<std::size_t>(depth) * stride;
        protocol_.merge(s1, s1 + block, s2, s2 + block, lo, len, l + 1, tree_rank(b, l, group));
        --depth;
        level_of[depth - 1] = l + 1;
      }
    }
    finish(m + stride, lo, hi);
  }

  const float* const* x_;
  float* const* res_;
  float* out_;
  std::size_t n_;
  int w_;
  allreduce_options opt_;
  int p_;
  protocol protocol_;
  int levels_ = 0;
};

/// Checks the arguments of simulate_allreduce: world_size >= 1, an algorithm of
/// simulated_algorithms (not native; two_step with an accumulator it takes), no null array
/// when n > 0, sizes that fit and no overlap of a written array with another
/// (detail::check_exchange_arrays).
inline void check_allreduce_args(const float* const* x, const float* out, std::size_t n, int world_size,
                                 const allreduce_options& opt) {
  if (world_size < 1) fail_invalid("cpd::simulate_allreduce: world_size must be >= 1");
  check_one_of("cpd::simulate_allreduce", "allreduce_options::algorithm", opt.algorithm, simulated_algorithms,
               "the simulation runs");
  if (opt.algorithm == allreduce_algorithm::two_step) check_accumulator(opt.accumulator, opt.kahan);
  if (n == 0) return;
  if (x == nullptr || out == nullptr) fail_invalid("cpd::simulate_allreduce: null pointer with n > 0");
  for (int r = 0; r < world_size; ++r)
    if (x[r] == nullptr || (opt.residuals && opt.residuals[r] == nullptr))
      fail_invalid("cpd::simulate_allreduce: worker " + std::to_string(r) + " has a null pointer");
  check_exchange_arrays("cpd::simulate_allreduce", x, opt.residuals, out, n, world_size);
  if (opt.rotation.block != 0) {
    check_hadamard("cpd::simulate_allreduce: allreduce_options::rotation", opt.rotation);
    if (opt.rotation.inverse) fail_invalid("cpd::simulate_allreduce: allreduce_options::rotation.inverse must be false");
  }
}

/// run(x, o): an exchange of the W workers' values x with options o. With opt.rotation, x are
/// the workers' values g rotated (in W * n floats of scratch) and o is opt without the
/// rotation; out is then rotated back and its inf and NaN counted again (result.nonfinite_out).
template <class Run>
auto with_rotation(const float* const* g, float* out, std::size_t n, int world_size, const allreduce_options& opt,
                   Run&& run) {
  // (one call of run: its body, inlined, is large)
  const bool rotate = opt.rotation.block != 0 && n != 0;
  allreduce_options o = opt;
  o.rotation.block = 0;
  const std::size_t W = rotate ? static_cast<std::size_t>(world_size) : 0;
  std::vector<float> rotated(W * n);
  std::vector<const float*> x(W);
  for (std::size_t r = 0; r < W; ++r) {
    x[r] = rotated.data() + r * n;
    hadamard_rotate(g[r], rotated.data() + r * n, n, opt.rotation);
  }
  auto result = run(rotate ? x.data() : g, o);
  if (rotate) {
    hadamard_options back = opt.rotation;
    back.inverse = true;
    hadamard_rotate(out, out, n, back);
    result.nonfinite_out = 0;
    for (std::size_t i = 0; i < n; ++i) result.nonfinite_out += (out[i] - out[i] == 0) ? 0 : 1;
  }
  return result;
}

/// The policy of simulate_allreduce: opt.threads threads (0: all), each with at least
/// tuning::simulate_min_work additions (work_per_element per element).
inline execution::parallel_policy simulate_policy(unsigned threads, std::size_t work_per_element) noexcept {
  const std::size_t w = std::max<std::size_t>(work_per_element, 1);
  return {threads, std::max<std::size_t>((tuning::simulate_min_work + w - 1) / w, 1)};
}

}  // namespace detail

/// Sums W workers' tensors x[0..W)[0..n) into out[0..n) in the order of opt.algorithm, every
/// addition rounded to F in mode R, with a scale chosen in advance: each worker's value is
/// quantized as Q(x * scale), the sum is unscaled (and divided by W for a mean) in float.
/// out may be one of the inputs but overlap none otherwise; with error feedback, x may be
/// opt.residuals (std::invalid_argument for any other overlap).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class Scale = pow2_scale>
allreduce_result<Scale> simulate_allreduce_scaled(const float* const* x, float* out, std::size_t n, int world_size,
                                                  Scale scale, const allreduce_options& opt = {}) {
  static_assert(is_float_format_v<F> && F::fits_float,
                "cpd::simulate_allreduce: F must be a cpd::float_t whose values are floats");
  static_assert(std::is_same_v<Scale, pow2_scale> || std::is_same_v<Scale, float_scale>,
                "cpd::simulate_allreduce: the scale must be cpd::pow2_scale or cpd::float_scale");
  const detail::default_fp_env fp_env;
  detail::check_allreduce_args(x, out, n, world_size, opt);
  if (opt.rotation.block != 0)
    return detail::with_rotation(x, out, n, world_size, opt, [&](const float* const* y, const allreduce_options& o) {
      return simulate_allreduce_scaled<F, R, O>(y, out, n, world_size, scale, o);
    });
  allreduce_result<Scale> result;
  result.scale = scale;
  if (opt.diagnostics) {
    for (int r = 0; r < world_size; ++r) {
      result.unscaled += measure_quantization<F, R, O>(x[r], n, Scale{});
      result.scaled += measure_quantization<F, R, O>(x[r], n, scale);
    }
  }
  detail::allreduce_engine<F, R, O, Scale> engine(x, opt.residuals, out, n, world_size, scale, opt);
  detail::parallel_for(detail::simulate_policy(opt.threads, static_cast<std::size_t>(world_size) * (opt.kahan ? 4 : 1)),
                       n, [&](std::size_t lo, std::size_t hi) { engine.run(lo, hi); });
  for (std::size_t i = 0; i < n; ++i) result.nonfinite_out += (out[i] - out[i] == 0) ? 0 : 1;
  return result;
}

namespace detail {

/// simulate_allreduce on the values g as they are (rotated already where opt rotates).
template <class F, rounding R, overflow O, class Scaler>
auto simulate_scaled_exchange(const float* const* g, float* out, std::size_t n, int world_size, Scaler& scaler,
                              const allreduce_options& opt) {
  std::vector<const float*> x(static_cast<std::size_t>(world_size));
  const auto scales = exchange_scales(
      x.size(), 1,
      [&](std::size_t r, std::size_t) {
        return exchange_input{g[r], opt.residuals ? opt.residuals[r] : nullptr, n};
      },
      [&](std::size_t) -> auto& { return scaler; }, local_combine{}, x.data());
  return simulate_allreduce_scaled<F, R, O>(x.data(), out, n, world_size, scales[0], opt);
}

}  // namespace detail

/// The whole protocol for W workers, the first steps by exchange_scales (exchange/scales.hpp):
/// with error feedback, x_r = g_r + residual_r (in float, into the residual arrays);
/// st_r = scaler.statistic(x_r); st = combine over r = 0..W-1 in rank order;
/// scale = scaler.select(st); then simulate_allreduce_scaled. With opt.rotation, all of it
/// on the rotated values, and the result rotated back.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class Scaler,
          class = std::enable_if_t<!std::is_same_v<std::decay_t<Scaler>, allreduce_options>>>
auto simulate_allreduce(const float* const* g, float* out, std::size_t n, int world_size, Scaler&& scaler,
                        const allreduce_options& opt = {}) {
  const detail::default_fp_env fp_env;
  detail::check_allreduce_args(g, out, n, world_size, opt);
  return detail::with_rotation(g, out, n, world_size, opt, [&](const float* const* y, const allreduce_options& o) {
    return detail::simulate_scaled_exchange<F, R, O>(y, out, n, world_size, scaler, o);
  });
}

/// simulate_allreduce without a scale (each value quantized as it is).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
allreduce_result<pow2_scale> simulate_allreduce(const float* const* g, float* out, std::size_t n, int world_size,
                                                const allreduce_options& opt = {}) {
  return simulate_allreduce<F, R, O>(g, out, n, world_size, fixed_scaling{}, opt);
}

/// What simulate_block_scaled_allreduce did.
struct block_allreduce_result {
  std::vector<std::uint8_t> codes;  ///< every block's combined e8m0 code (0xFF: inf or NaN in the block)
  bool nonfinite = false;           ///< some block held inf or NaN (on some worker): skip the step
  value_stats unscaled{};           ///< all workers' values quantized without the scales (with diagnostics)
  value_stats scaled{};             ///< the same with the block scales: what the exchange did
  std::uint64_t nonfinite_out = 0;  ///< elements of the result that are inf or NaN
  float tensor_scale = 0.0f;        ///< NVFP4: the shared tensor scale s (MX: 0; codes are then E4M3)
};

namespace detail {

/// simulate_block_scaled_allreduce with rule S: the steps of cpd/exchange/block_scaled.hpp for
/// W workers, the scaled values summed by simulate_allreduce_scaled with scale 1.
template <class F, rounding R, overflow O, class S>
block_allreduce_result simulate_block_scaled(const float* const* g, float* out, std::size_t n, int world_size,
                                             const S& scaler, const allreduce_options& opt) {
  const default_fp_env fp_env;
  check_allreduce_args(g, out, n, world_size, opt);
  if (opt.residuals)
    fail_invalid("cpd::simulate_block_scaled_allreduce: block scales take no error feedback; "
                 "set allreduce_options::residuals to nullptr");
  if (world_size != scaler.world_size())
    fail_invalid("cpd::simulate_block_scaled_allreduce: the scaler is for " + std::to_string(scaler.world_size()) +
                 " workers, the exchange has " + std::to_string(world_size));
  if (opt.rotation.block != 0)
    return with_rotation(g, out, n, world_size, opt, [&](const float* const* y, const allreduce_options& o) {
      return simulate_block_scaled<F, R, O>(y, out, n, world_size, scaler, o);
    });
  const std::size_t W = static_cast<std::size_t>(world_size);
  block_scales<S> bs(scaler, n);
  float amax = 0.0f;
  for (std::size_t r = 0; r < W; ++r) amax = std::max(amax, bs.local_amax(g[r]));
  std::vector<typename S::statistic_type> mine(bs.blocks());
  for (std::size_t r = 0; r < W; ++r) {
    bs.local_codes(g[r], amax, mine.data());
    bs.combine(mine.data());
  }
  block_allreduce_result result;
  result.nonfinite = bs.nonfinite();
  result.tensor_scale = bs.tensor_scale();
  std::vector<float> scaled(W * n);
  std::vector<const float*> x(W);
  for (std::size_t r = 0; r < W; ++r) {
    float* y = scaled.data() + r * n;
    x[r] = y;
    bs.scale(g[r], y);
    if (opt.diagnostics) {
      result.unscaled += measure_quantization<F, R, O>(g[r], n);
      result.scaled += measure_quantization<F, R, O>(y, n);
    }
  }
  allreduce_options o = opt;
  o.mean = false;
  o.diagnostics = false;
  simulate_allreduce_scaled<F, R, O>(x.data(), out, n, world_size, pow2_scale{}, o);
  result.nonfinite_out = bs.unscale(out, opt.mean ? static_cast<float>(world_size) : 1.0f);
  result.codes = bs.code_vector();
  return result;
}

}  // namespace detail

/// The exchange of simulate_allreduce with one power-of-two scale per block (OCP MX's shared
/// scales, cpd::mx_block_scaling): st_r = scaler.statistics(g_r) (one e8m0 code per block),
/// combined by max over r in rank order; worker r's value g in a block with scale 2^-e is
/// quantized as Q(g * 2^-e) (the product rounded to float first, exact unless it falls below
/// 2^-126), the scaled values are summed in F in the order of opt.algorithm (the roundings,
/// chunks and random bits of simulate_allreduce with scale 1), and the sum s gives
/// out = s * 2^e rounded to float, divided by W in float for a mean (as simulate_allreduce
/// unscales). A block holding inf or NaN gets e = 0 (its NaN propagates). No error feedback
/// (opt.residuals: invalid). The steps are cpd/exchange/block_scaled.hpp's, which
/// cpd::mpi::block_scaled_plan runs on each rank: the same bits.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
block_allreduce_result simulate_block_scaled_allreduce(const float* const* g, float* out, std::size_t n,
                                                       int world_size, const mx_block_scaling<F>& scaler,
                                                       const allreduce_options& opt = {}) {
  return detail::simulate_block_scaled<F, R, O>(g, out, n, world_size, scaler, opt);
}

/// The exchange of simulate_allreduce with NVFP4's two scales (cpd::nvfp4_block_scaling<F>):
/// A = max over r of scaler.tensor_amax(g_r), s = scaler.tensor_scale(A); st_r =
/// scaler.statistics(g_r, s) (one E4M3 code per block of 16), combined by max over r; worker
/// r's value g in a block with factor f = s * b is quantized as Q(g / f) (the quotient in
/// float32, as nvfp4_quantize), the scaled values summed in F in the order of opt.algorithm
/// (as simulate_allreduce with scale 1), and the sum gives out = sum * f in float32, divided
/// by W in float for a mean. A block holding inf or NaN (on some worker) gets NaN (code 0x7F)
/// and sets nonfinite. No error feedback (opt.residuals: invalid). With W = 1, no headroom,
/// F = float4_e2m1fn and O = saturate, out is nvfp4_quantize<R>'s (R not stochastic).
/// cpd::mpi::block_scaled_plan runs the same steps on each rank.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
block_allreduce_result simulate_block_scaled_allreduce(const float* const* g, float* out, std::size_t n,
                                                       int world_size, const nvfp4_block_scaling<F>& scaler,
                                                       const allreduce_options& opt = {}) {
  return detail::simulate_block_scaled<F, R, O>(g, out, n, world_size, scaler, opt);
}

}  // namespace cpd
