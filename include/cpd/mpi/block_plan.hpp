// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/block_plan.hpp>: cpd::mpi::block_scaled_plan, the low-precision allreduce with
// block scales (OCP MX's e8m0 per 32 values, NVFP4's E4M3 per 16 and fp32 per tensor) over
// MPI (docs/mpi.md, "Block scales"). One call, on each rank, runs the steps of
// cpd/exchange/block_scaled.hpp, as cpd::simulate_block_scaled_allreduce does for W workers:
//   1. one MPI_Allreduce(MPI_MAX) of int32: three check words and, for NVFP4, every tensor's
//      finite amax (4 bytes a tensor);
//   2. one MPI_Allreduce(MPI_MAX) of the block codes (1 byte a block: 1/32 byte a value for
//      MX-32, 1/16 for NVFP4), so that every rank holds every block's scale;
//   3. its values scaled block by block, summed by an allreduce_plan<F, R, O> with scale 1
//      (its own small statistics allreduce, then the packed codes of F);
//   4. the sum unscaled block by block (and divided by the number of ranks for a mean).
// The same inputs give the bits of simulate_block_scaled_allreduce on every algorithm but native.
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/exchange/block_scaled.hpp>
#include <cpd/exchange/simulate.hpp>
#include <cpd/host/hadamard.hpp>
#include <cpd/mpi/check.hpp>
#include <cpd/mpi/options.hpp>
#include <cpd/mpi/plan.hpp>
#include <cpd/mpi/timing.hpp>
#include <cpd/mpi/wire.hpp>
#include <cpd/scaling/diagnostics.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cpd::mpi {

/// An allreduce of a fixed list of tensor sizes with block scales, in format F, rounding R,
/// overflow O (MX and NVFP4 saturate their elements: overflow::saturate). Build it once
/// (collective, as allreduce_plan's constructor), call it every step (collective).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
class block_scaled_plan {
 public:
  using format_type = F;

  /// Collective over comm: duplicates it and checks that every rank passes the same sizes,
  /// format, rounding and options (else mismatch_error on every rank).
  block_scaled_plan(MPI_Comm comm, std::vector<std::size_t> sizes, options opt = {})
      : mean_(opt.mean), rotation_(opt.rotation), plan_(comm, std::move(sizes), inner_options(opt)) {
    detail::agree(plan_.communicator(), "cpd::mpi::block_scaled_plan",
                  {{"mean", mean_ ? 1u : 0u, ""}, detail::rotation_field(rotation_)});
    if (rotation_.block != 0) {
      cpd::detail::check_hadamard("cpd::mpi::block_scaled_plan: options::rotation", rotation_);
      if (rotation_.inverse)
        cpd::detail::fail_invalid("cpd::mpi::block_scaled_plan: options::rotation.inverse must be false");
    }
  }

  [[nodiscard]] int rank() const noexcept { return plan_.rank(); }
  [[nodiscard]] int size() const noexcept { return plan_.size(); }
  [[nodiscard]] const std::vector<std::size_t>& sizes() const noexcept { return plan_.sizes(); }
  /// Bytes sent by this rank over all calls so far (check words, amax, block codes, payload).
  [[nodiscard]] std::uint64_t bytes_sent() const noexcept { return bytes_sent_; }

  /// The allreduce of count tensors (count and sizes as at construction) with block scales
  /// of rule S: cpd::mx_block_scaling<F> or cpd::nvfp4_block_scaling<F>, made for size() ranks,
  /// alike on every rank. Collective. Tensor i's out equals simulate_block_scaled_allreduce<F, R,
  /// O>(all ranks' in, out, size, size(), scaler, {algo, kahan, mean, key}) for every algorithm
  /// but native; res.scales[i] is what that call returned, except that unscaled and scaled (with
  /// diagnostics) count this rank's values only: their sum over the ranks is the simulation's.
  /// A call that does not match the plan (count, sizes, null pointers), that asks for error
  /// feedback (a residual: block scales take none) or whose scaler is for another number of
  /// ranks is std::invalid_argument on this rank and mismatch_error on the others; ranks
  /// passing different rules (kind, block size, scale rule, headroom) get mismatch_error.
  template <class S>
  result<block_allreduce_result> operator()(const tensor* t, std::size_t count, const S& scaler,
                                            bool diagnostics = false) {
    // with the rotation: each tensor's in rotated into scratch, each out rotated back
    const bool rotate = rotation_.block != 0 && refusal(t, count, scaler.world_size()).empty();
    const std::vector<tensor> r = rotate ? detail::rotate_inputs(t, count, rotation_, rotated_) : std::vector<tensor>{};
    auto res = exchange_call(rotate ? r.data() : t, count, scaler, diagnostics);  // (one call: it is large)
    if (rotate) {
      detail::rotate_outputs_back(t, count, rotation_);
      for (std::size_t i = 0; i < count; ++i) {  // (a NaN now fills its rotation block)
        std::uint64_t& bad = res.scales[i].nonfinite_out;
        bad = 0;
        for (std::size_t j = 0; j < t[i].size; ++j) bad += (t[i].out[j] - t[i].out[j] == 0) ? 0 : 1;
      }
    }
    return res;
  }

  /// Enters a call's collectives as a call this rank refuses: std::invalid_argument(why) here,
  /// mismatch_error on the other ranks (which made a call of their own). For a caller that
  /// finds its arguments wrong before it can make the call (cpd::mpi::dynamic_plan).
  [[noreturn]] void refuse(const std::string& why) {
    result<block_allreduce_result> res;
    detail::comm_clock clock;
    (void)tensor_amax<mx_block_scaling<F>>(nullptr, {}, {}, why.empty() ? "refused" : why, res, clock);
    cpd::detail::fail_invalid(why);  // (not reached: tensor_amax threw)
  }

 private:
  /// The call on the values of t as they are (rotated already where the plan rotates).
  template <class S>
  result<block_allreduce_result> exchange_call(const tensor* t, std::size_t count, const S& scaler,
                                               bool diagnostics) {
    static_assert(std::is_same_v<S, mx_block_scaling<F>> || std::is_same_v<S, nvfp4_block_scaling<F>>,
                  "cpd::mpi::block_scaled_plan: the scaler must be cpd::mx_block_scaling<F> or "
                  "cpd::nvfp4_block_scaling<F> of the plan's F");
    const cpd::detail::default_fp_env fp_env;
    const detail::call_clock call;
    detail::comm_clock clock;
    const std::string why = refusal(t, count, scaler.world_size());
    std::vector<cpd::detail::block_scales<S>> bs;
    if (why.empty())
      for (std::size_t i = 0; i < count; ++i) bs.emplace_back(scaler, t[i].size);
    result<block_allreduce_result> res;
    const std::vector<float> amax = tensor_amax(t, bs, rule_words(scaler), why, res, clock);

    // The block codes of every tensor, combined over the ranks in one allreduce.
    std::size_t total = 0;
    for (const auto& b : bs) total += b.blocks();
    std::vector<std::uint8_t> codes(total);
    for (std::size_t i = 0, off = 0; i < count; off += bs[i].blocks(), ++i)
      bs[i].local_codes(t[i].in, amax[i], codes.data() + off);
    clock.time([&] {
      for (std::size_t u = 0; u < total; u += detail::max_message)
        detail::check(MPI_Allreduce(MPI_IN_PLACE, codes.data() + u, static_cast<int>(std::min(detail::max_message, total - u)),
                                    MPI_UINT8_T, MPI_MAX, plan_.communicator()),
                      "MPI_Allreduce (block scales)");
    });
    res.statistics_bytes += total;

    // Each rank's values scaled, summed with scale 1 by the plan, unscaled.
    std::size_t values = 0;
    for (std::size_t i = 0; i < count; ++i) values += t[i].size;
    scaled_.resize(values);
    std::vector<tensor> inner(count);
    res.scales.resize(count);
    for (std::size_t i = 0, off = 0, coff = 0; i < count; off += t[i].size, coff += bs[i].blocks(), ++i) {
      std::copy(codes.begin() + static_cast<std::ptrdiff_t>(coff),
                codes.begin() + static_cast<std::ptrdiff_t>(coff + bs[i].blocks()), bs[i].codes());
      float* y = scaled_.data() + off;
      bs[i].scale(t[i].in, y);
      if (diagnostics) {
        res.scales[i].unscaled = measure_quantization<F, R, O>(t[i].in, t[i].size);
        res.scales[i].scaled = measure_quantization<F, R, O>(y, t[i].size);
      }
      inner[i] = {y, t[i].out, t[i].size, nullptr, t[i].key};
    }
    const std::clock_t c0 = std::clock();
    const result<pow2_scale> sum = plan_(inner.data(), count, fixed_scaling{});
    const double sum_cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    const float w = mean_ ? static_cast<float>(size()) : 1.0f;
    for (std::size_t i = 0; i < count; ++i) {
      block_allreduce_result& r = res.scales[i];
      r.nonfinite = bs[i].nonfinite();
      r.tensor_scale = bs[i].tensor_scale();
      r.nonfinite_out = bs[i].unscale(t[i].out, w);
      r.codes = bs[i].code_vector();
    }
    res.statistics_bytes += sum.statistics_bytes;
    res.payload_bytes = sum.payload_bytes;
    bytes_sent_ += res.bytes_sent();
    res.seconds = call.wall();
    res.seconds_codec = res.seconds - clock.wall - sum.seconds + sum.seconds_codec;
    res.cpu_seconds_codec = call.cpu() - clock.cpu - (sum_cpu - sum.cpu_seconds_codec);
    return res;
  }

  /// The summing plan's options: no mean (this plan unscales, then divides), no rotation (this
  /// plan rotates before its statistics).
  static options inner_options(options o) {
    o.mean = false;
    o.rotation.block = 0;
    return o;
  }

  /// Why this rank's call cannot run ("" when it can).
  std::string refusal(const tensor* t, std::size_t count, int world_size) const {
    const std::string who = "cpd::mpi::block_scaled_plan: ";
    if (count != sizes().size() || (count != 0 && t == nullptr))
      return who + "the call passes " + std::to_string(count) + " tensors, the plan has " +
             std::to_string(sizes().size());
    for (std::size_t i = 0; i < count; ++i) {
      if (t[i].size != sizes()[i] || (t[i].size != 0 && (t[i].in == nullptr || t[i].out == nullptr)))
        return who + "tensor " + std::to_string(i) + " does not match the plan (its size, or a null pointer)";
      if (t[i].residual != nullptr)
        return who + "block scales take no error feedback; tensor " + std::to_string(i) + " has a residual";
    }
    if (world_size != size())
      return who + "the scaler is for " + std::to_string(world_size) + " ranks, the communicator has " +
             std::to_string(size());
    return "";
  }

  /// What the ranks must agree on about a rule: its kind and options.
  template <class S>
  static std::vector<std::uint64_t> rule_words(const S& s) {
    if constexpr (cpd::detail::is_nvfp4_scaling<S>::value)
      return {2, S::block_size(), s.opts().sum_headroom ? 1u : 0u, static_cast<std::uint64_t>(s.world_size())};
    else
      return {1, s.opts().block_size, static_cast<std::uint64_t>(s.opts().rule), s.opts().sum_headroom ? 1u : 0u,
              static_cast<std::uint64_t>(s.world_size())};
  }

  /// Step 1: one MPI_Allreduce(MPI_MAX) of int32 that leads with three check words (a
  /// fingerprint h of the rule and the keys, ~h, and whether some rank refuses its call) and
  /// carries every tensor's finite amax (NVFP4; its bits order as the numbers: it is >= 0).
  /// Returns the combined amax of each tensor; throws on every rank when some rank refuses.
  template <class S>
  std::vector<float> tensor_amax(const tensor* t, const std::vector<cpd::detail::block_scales<S>>& bs,
                                 const std::vector<std::uint64_t>& rule, const std::string& why,
                                 result<block_allreduce_result>& res, detail::comm_clock& clock) {
    const std::size_t T = sizes().size();
    const bool bad = !why.empty();
    detail::fingerprint f;
    for (std::uint64_t r : rule) f.add(r);
    for (std::size_t i = 0; !bad && i < T; ++i)
      if (R == rounding::stochastic) {
        f.add(t[i].key.seed);
        f.add(t[i].key.stream);
        f.add(static_cast<std::uint64_t>(t[i].key.generator));
      }
    const auto h = static_cast<std::int32_t>(static_cast<std::uint32_t>(f.h ^ (f.h >> 32)));
    std::vector<std::int32_t> words(3 + T, 0);
    words[0] = h;
    words[1] = ~h;
    words[2] = bad ? 1 : 0;
    if (!bad && cpd::detail::block_scales<S>::two_level)
      for (std::size_t i = 0; i < T; ++i) {
        const float a = bs[i].local_amax(t[i].in);
        std::memcpy(&words[3 + i], &a, 4);
      }
    clock.time([&] {
      detail::check(MPI_Allreduce(MPI_IN_PLACE, words.data(), static_cast<int>(words.size()), MPI_INT32_T, MPI_MAX,
                                  plan_.communicator()),
                    "MPI_Allreduce (block scaling statistics)");
    });
    res.statistics_bytes += words.size() * 4;
    if (words[2] != 0) {
      if (bad) cpd::detail::fail_invalid(why);
      cpd::detail::throw_error<mismatch_error>(
          "cpd::mpi::block_scaled_plan: another rank passed a call that it refused (tensors that do not match "
          "the plan, a residual, or a scaler for another number of ranks)");
    }
    if (words[1] != ~words[0])
      cpd::detail::throw_error<mismatch_error>(
          "cpd::mpi::block_scaled_plan: the ranks disagree on the block rule (kind, block size, scale rule, "
          "headroom) or the random keys");
    std::vector<float> amax(T, 0.0f);
    for (std::size_t i = 0; i < T; ++i) std::memcpy(&amax[i], &words[3 + i], 4);
    return amax;
  }

  bool mean_;
  hadamard_options rotation_;
  allreduce_plan<F, R, O> plan_;
  std::vector<float> scaled_, rotated_;
  std::uint64_t bytes_sent_ = 0;
};

}  // namespace cpd::mpi
