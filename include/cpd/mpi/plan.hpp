// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/plan.hpp>: cpd::mpi::allreduce_plan, the low-precision gradient allreduce
// over MPI (docs/mpi.md). Its twin for a format chosen at run time, dynamic_plan, is in
// cpd/mpi/dynamic_plan.hpp; the allreduce with block scales, block_scaled_plan, in
// cpd/mpi/block_plan.hpp.
//
// Every rank holds the same list of tensors (a model's gradients). One call:
//   1. with error feedback, x = g + residual (into the residual array);
//   2. one MPI_Allreduce(MPI_MAX) of a few int32 per call: every tensor's scaler
//      statistic, plus check words that detect ranks disagreeing on the call;
//   3. the scale of each tensor from the combined statistic;
//   4. each value quantized once as Q(x * scale), packed into codes of F (cpd/mpi/wire.hpp),
//      the residual updated to x - unscale(Q(x * scale));
//   5. the codes summed in F, every partial sum rounded:
//      - ring, pipelined_ring, two_step, all_gather: the rank schedule of
//        cpd/exchange/schedule.hpp, its messages moved by cpd/mpi/transport.hpp, in
//        exactly the rounding order of cpd::simulate_allreduce with the same algorithm:
//        the same inputs give the same bits on N ranks and in the simulator;
//      - native (cpd/mpi/native_op.hpp): MPI_Allreduce with a user-defined
//        MPI_Op that decodes, adds, rounds and re-encodes (MPI's own summation order);
//   6. decoded, unscaled (and divided by the number of ranks for a mean).
// Steps 4 to 6 are the summation protocol of cpd/exchange/protocol.hpp, which
// simulate_allreduce follows too.
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/fenv.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/exchange/protocol.hpp>
#include <cpd/exchange/rank_exchange.hpp>
#include <cpd/exchange/scales.hpp>
#include <cpd/host/hadamard.hpp>
#include <cpd/mpi/check.hpp>
#include <cpd/mpi/native_op.hpp>
#include <cpd/mpi/options.hpp>
#include <cpd/mpi/timing.hpp>
#include <cpd/mpi/transport.hpp>
#include <cpd/mpi/wire.hpp>
#include <cpd/scaling/registry.hpp>
#include <cpd/scaling/scaling.hpp>

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace cpd::mpi {

namespace detail {

/// A call's tensors with each in rotated by r into scratch (options::rotation; the outs are
/// the caller's).
inline std::vector<tensor> rotate_inputs(const tensor* t, std::size_t count, const hadamard_options& r,
                                         std::vector<float>& scratch) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < count; ++i) total += t[i].size;
  scratch.resize(total);
  std::vector<tensor> rotated;
  for (std::size_t i = 0, off = 0; i < count; off += t[i].size, ++i) {
    rotated.push_back(t[i]);  // (not assign(t, t + count): a false -Wnonnull in GCC 12)
    hadamard_rotate(t[i].in, scratch.data() + off, t[i].size, r);
    rotated.back().in = scratch.data() + off;
  }
  return rotated;
}

/// Each tensor's out rotated back by the inverse of r.
inline void rotate_outputs_back(const tensor* t, std::size_t count, hadamard_options r) {
  r.inverse = true;
  for (std::size_t i = 0; i < count; ++i) hadamard_rotate(t[i].out, t[i].out, t[i].size, r);
}

/// The agreement field of a rotation: a fingerprint of its block and key, shown as the block.
inline agreed rotation_field(const hadamard_options& r) {
  fingerprint h;
  h.add(r.block);
  h.add(r.key.seed);
  h.add(r.key.stream);
  h.add(static_cast<std::uint64_t>(r.key.generator));
  h.add(r.inverse ? 1u : 0u);
  return {"the rotation (block and key)", h.h, r.block == 0 ? "none" : "block " + std::to_string(r.block)};
}

/// The agreement field of a format: a fingerprint of (E, M, encoding, bias), shown by name.
inline agreed format_field(const format& f, const char* what = "the format") {
  fingerprint h;
  h.add(static_cast<std::uint64_t>(f.exponent_bits()));
  h.add(static_cast<std::uint64_t>(f.mantissa_bits()));
  h.add(static_cast<std::uint64_t>(f.encoding()));
  h.add(static_cast<std::uint64_t>(static_cast<std::int64_t>(f.bias())));
  return {what, h.h, f.name()};
}

}  // namespace detail

/// A low-precision allreduce of a fixed list of tensor sizes over a communicator, in format F,
/// rounding R, overflow O. Build it once (collective: it duplicates the communicator and checks
/// that every rank passes the same sizes, format and options), then call it every step
/// (collective). Destroy it before MPI_Finalize.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
class allreduce_plan {
  static_assert(is_float_format_v<F> && F::fits_float,
                "cpd::mpi::allreduce_plan: F must be a cpd::float_t whose values are floats");
  using wire = detail::wire<F>;
  using codes = cpd::detail::format_codes<F>;
  static constexpr bool sr = R == rounding::stochastic;

 public:
  using format_type = F;

  /// Collective over comm: duplicates it (errors return, tags are private) and checks that
  /// every rank has the same sizes, format, rounding and options; else throws
  /// mismatch_error on every rank.
  allreduce_plan(MPI_Comm comm, std::vector<std::size_t> sizes, options opt = {})
      : sizes_(std::move(sizes)), opt_(opt) {
    detail::check(MPI_Comm_dup(comm, &g_.comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(g_.comm, MPI_ERRORS_RETURN);
    try {
      detail::check(MPI_Comm_rank(g_.comm, &g_.rank), "MPI_Comm_rank");
      detail::check(MPI_Comm_size(g_.comm, &g_.size), "MPI_Comm_size");
      detail::agree(g_.comm, "cpd::mpi::allreduce_plan", agreement());
      check_options();  // after agree: the same options everywhere, so every rank throws alike
      codes::table();
      cpd::detail::code_sum<F, R, O>::get();
      if (opt_.algo == allreduce_algorithm::native) {
        const detail::native_layout<F> layout{opt_.kahan};
        detail::check(MPI_Type_contiguous(static_cast<int>(layout.unit_bytes()), MPI_BYTE, &unit_type_),
                      "MPI_Type_contiguous");
        detail::check(MPI_Type_commit(&unit_type_), "MPI_Type_commit");
        auto fn = opt_.kahan ? &detail::native_op<F, R, O, true> : &detail::native_op<F, R, O, false>;
        detail::check(MPI_Op_create(fn, opt_.kahan ? 0 : 1, &op_), "MPI_Op_create");
      }
    } catch (...) {
      release();
      throw;
    }
  }

  allreduce_plan(const allreduce_plan&) = delete;
  allreduce_plan& operator=(const allreduce_plan&) = delete;
  allreduce_plan(allreduce_plan&& o) noexcept { swap(o); }
  allreduce_plan& operator=(allreduce_plan&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~allreduce_plan() { release(); }

  [[nodiscard]] int rank() const noexcept { return g_.rank; }
  [[nodiscard]] int size() const noexcept { return g_.size; }
  /// The plan's own communicator (a duplicate, with MPI_ERRORS_RETURN).
  [[nodiscard]] MPI_Comm communicator() const noexcept { return g_.comm; }
  [[nodiscard]] const std::vector<std::size_t>& sizes() const noexcept { return sizes_; }
  [[nodiscard]] const options& opts() const noexcept { return opt_; }
  /// Bytes sent by this rank over all calls so far (statistics and payload).
  [[nodiscard]] std::uint64_t bytes_sent() const noexcept { return bytes_sent_; }
  /// Bytes of n values packed as codes of F.
  [[nodiscard]] static constexpr std::size_t packed_bytes(std::size_t n) noexcept { return wire::bytes(n); }

  /// The allreduce of count tensors (count and sizes as at construction) with a scaler shared by
  /// every tensor (e.g. cpd::aps<F>(size())), whose statistics are 32-bit and combine by max.
  /// Collective. Each tensor's out equals simulate_allreduce<F, R, O>(all ranks' in, out, size,
  /// size(), scaler, {algo, kahan, mean, key, residuals}) for every algorithm but native.
  template <class Scaler>
  auto operator()(const tensor* t, std::size_t count, Scaler&& scaler) {
    return run(t, count, [&](std::size_t) -> decltype(auto) { return (scaler); });
  }
  /// The same with one scaler per tensor (scalers[0..count)), for stateful scalers.
  template <class Scaler>
  auto each(const tensor* t, std::size_t count, Scaler* scalers) {
    return run(t, count, [&](std::size_t i) -> Scaler& { return scalers[i]; });
  }
  /// The same with scaler_of(i) the scaler of tensor i (a reference, one type for all tensors).
  template <class ScalerOf>
  auto per_tensor(const tensor* t, std::size_t count, ScalerOf&& scaler_of) {
    return run(t, count, scaler_of);
  }
  /// The allreduce without scaling.
  result<pow2_scale> operator()(const tensor* t, std::size_t count) { return (*this)(t, count, fixed_scaling{}); }
  template <class Scaler>
  auto operator()(const std::vector<tensor>& t, Scaler&& scaler) {
    return (*this)(t.data(), t.size(), std::forward<Scaler>(scaler));
  }
  result<pow2_scale> operator()(const std::vector<tensor>& t) { return (*this)(t.data(), t.size()); }

 private:
  /// The options every rank passed alike (checked by detail::agree): an algorithm of
  /// mpi::algorithms, two_step's accumulator as simulate_allreduce checks it.
  void check_options() const {
    cpd::detail::check_one_of("cpd::mpi::allreduce_plan", "options::algo", opt_.algo, algorithms, "cpd::mpi runs");
    if (opt_.algo == allreduce_algorithm::two_step) cpd::detail::check_accumulator(opt_.accumulator, opt_.kahan);
    if (opt_.rotation.block != 0) {
      cpd::detail::check_hadamard("cpd::mpi::allreduce_plan: options::rotation", opt_.rotation);
      if (opt_.rotation.inverse) cpd::detail::fail_invalid("cpd::mpi::allreduce_plan: options::rotation.inverse must be false");
    }
  }

  [[nodiscard]] std::vector<detail::agreed> agreement() const {
    std::uint64_t total = 0;
    detail::fingerprint f;
    std::string shown;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      total += sizes_[i];
      f.add(sizes_[i]);
      if (i < 8) shown += (i ? ", " : "") + std::to_string(sizes_[i]);
    }
    if (sizes_.size() > 8) shown += ", ...";
    return {{"the tensor count", sizes_.size(), ""},
            {"total elements", total, ""},
            {"the sizes", f.h, shown.empty() ? "none" : shown},
            detail::format_field(format::of<F>()),
            {"the rounding", static_cast<std::uint64_t>(R), to_string(R)},
            {"the overflow", static_cast<std::uint64_t>(O), to_string(O)},
            {"the algorithm", static_cast<std::uint64_t>(opt_.algo), cpd::detail::name_or_number(opt_.algo)},
            {"kahan", opt_.kahan ? 1u : 0u, ""},
            detail::format_field(opt_.accumulator, "the accumulator"),
            {"mean", opt_.mean ? 1u : 0u, ""},
            detail::rotation_field(opt_.rotation)};
  }

  void swap(allreduce_plan& o) noexcept {
    std::swap(g_, o.g_);
    std::swap(op_, o.op_);
    std::swap(unit_type_, o.unit_type_);
    std::swap(sizes_, o.sizes_);
    std::swap(opt_, o.opt_);
    std::swap(bytes_sent_, o.bytes_sent_);
    std::swap(ws_, o.ws_);
    std::swap(exchanges_, o.exchanges_);
    std::swap(rotated_, o.rotated_);
  }

  void release() noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      if (op_ != MPI_OP_NULL) MPI_Op_free(&op_);
      if (unit_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&unit_type_);
      if (g_.comm != MPI_COMM_NULL) MPI_Comm_free(&g_.comm);
    }
    op_ = MPI_OP_NULL;
    unit_type_ = MPI_DATATYPE_NULL;
    g_.comm = MPI_COMM_NULL;
  }

  /// Whether this rank's tensors match the plan (count, sizes, pointers, residual != out).
  [[nodiscard]] bool matches(const tensor* t, std::size_t count) const noexcept {
    if (count != sizes_.size()) return false;
    for (std::size_t i = 0; i < count; ++i)
      if (t[i].size != sizes_[i] || (t[i].size != 0 && (t[i].in == nullptr || t[i].out == nullptr)) ||
          (t[i].residual != nullptr && t[i].residual == t[i].out))
        return false;
    return true;
  }

  /// Steps 1-3 of a call by exchange_scales (exchange/scales.hpp): error feedback into x, the
  /// statistics combined over the ranks in one MPI_Allreduce(MPI_MAX) that also carries check
  /// words, then every tensor's scale. A bad call is reported on every rank (mismatch_error),
  /// through that same allreduce, which this rank then enters without statistics.
  template <class Scale, class ScalerOf>
  void scales(const tensor* t, bool bad, ScalerOf& scaler_of, std::vector<const float*>& x, result<Scale>& res,
              detail::comm_clock& clock) {
    detail::fingerprint f;
    f.add(bad ? 1 : 0);
    for (std::size_t i = 0; !bad && i < sizes_.size(); ++i) {
      f.add(t[i].residual != nullptr ? 1 : 0);
      if (sr) {
        f.add(t[i].key.seed);
        f.add(t[i].key.stream);
        f.add(static_cast<std::uint64_t>(t[i].key.generator));
      }
    }
    const auto h = static_cast<std::int32_t>(static_cast<std::uint32_t>(f.h ^ (f.h >> 32)));
    auto combine = [&](auto* st, std::size_t tn) { combine_over_ranks(st, tn, h, bad, res.statistics_bytes, clock); };
    if (bad) {
      combine(static_cast<std::int32_t*>(nullptr), 0);  // (throws mismatch_error on every rank)
      return;
    }
    res.scales = exchange_scales(
        1, sizes_.size(), [&](std::size_t, std::size_t i) { return exchange_input{t[i].in, t[i].residual, t[i].size}; },
        scaler_of, combine, x.data());
  }

  /// The statistics st[0..tn) of this rank (bits of 32-bit values) combined by max over the
  /// ranks in place, in one MPI_Allreduce(MPI_MAX) of int32 that leads with three check words:
  /// h and ~h (the ranks agree on error feedback and keys when the max of ~h is ~ the max of
  /// h) and whether some rank's call is bad (then mismatch_error on every rank).
  template <class St>
  void combine_over_ranks(St* st, std::size_t tn, std::int32_t h, bool bad, std::uint64_t& statistics_bytes,
                          detail::comm_clock& clock) {
    std::vector<std::int32_t> words(3 + sizes_.size(), 0);
    for (std::size_t i = 0; i < tn; ++i) std::memcpy(&words[3 + i], &st[i], 4);
    words[0] = h;
    words[1] = ~h;
    words[2] = bad ? 1 : 0;
    statistics_bytes = words.size() * 4;
    clock.time([&] {
      detail::check(MPI_Allreduce(MPI_IN_PLACE, words.data(), static_cast<int>(words.size()), MPI_INT32_T, MPI_MAX,
                                  g_.comm),
                    "MPI_Allreduce (statistics)");
    });
    if (words[2] != 0)
      cpd::detail::throw_error<mismatch_error>(
          bad ? "cpd::mpi::allreduce_plan: this rank passed tensors that do not match the plan "
                "(count, sizes, null pointers, or residual == out)"
              : "cpd::mpi::allreduce_plan: another rank passed tensors that do not match the plan");
    if (words[1] != ~words[0])
      cpd::detail::throw_error<mismatch_error>(
          "cpd::mpi::allreduce_plan: the ranks disagree on error feedback or the random keys");
    for (std::size_t i = 0; i < tn; ++i) std::memcpy(&st[i], &words[3 + i], 4);
  }

  /// The call, with the plan's rotation around it: each tensor's in rotated into scratch, the
  /// exchange of the rotated values, each out rotated back (a call that does not match the plan
  /// goes through unrotated, to be refused on every rank).
  template <class ScalerOf>
  auto run(const tensor* t, std::size_t count, ScalerOf&& scaler_of) {
    const bool rotate = opt_.rotation.block != 0 && matches(t, count);
    const std::vector<tensor> r = rotate ? detail::rotate_inputs(t, count, opt_.rotation, rotated_) : std::vector<tensor>{};
    auto res = exchange_call(rotate ? r.data() : t, count, scaler_of);  // (one call: it is large)
    if (rotate) detail::rotate_outputs_back(t, count, opt_.rotation);
    return res;
  }

  template <class ScalerOf>
  auto exchange_call(const tensor* t, std::size_t count, ScalerOf&& scaler_of) {
    using Scaler = std::decay_t<decltype(scaler_of(std::size_t(0)))>;
    using St = typename Scaler::statistic_type;
    using Scale = std::decay_t<decltype(scaler_of(std::size_t(0)).select(St{}))>;
    static_assert(sizeof(St) == 4 && (std::is_same_v<St, std::int32_t> || std::is_same_v<St, float>),
                  "cpd::mpi: the scaler's statistic must be an int32 or a non-negative float combined by max");
    static_assert(std::is_same_v<Scale, pow2_scale> || std::is_same_v<Scale, float_scale>,
                  "cpd::mpi: the scaler must select a cpd::pow2_scale or a cpd::float_scale");
    const cpd::detail::default_fp_env fp_env;  // the same bits whatever the caller's FTZ, DAZ, rounding
    const detail::call_clock call;
    detail::comm_clock clock;
    result<Scale> res;
    std::vector<const float*> x(sizes_.size(), nullptr);
    scales(t, !matches(t, count), scaler_of, x, res, clock);

    if (opt_.algo != allreduce_algorithm::native) {
      // The rank schedule (exchange/schedule.hpp): the simulation's bits by construction; for a
      // format without NaN its messages carry the NaN bits of a tensor marked nonfinite.
      detail::schedule_allreduce(exchange<Scale>(), g_, sizes_, t, x.data(), res, clock);
    } else {
      // A format without NaN: its codes cannot carry a NaN, which the simulation keeps (its
      // quantized values are floats). Where a scale says that some rank's tensor held inf or
      // NaN, this rank's NaN positions are noted now (out may be in) and OR-ed over the ranks
      // after the exchange, and those elements of the result become NaN on every rank.
      std::vector<std::uint64_t> nan_mask;
      if constexpr (!F::spec.has_nan) nan_mask = local_nan_mask(x.data(), res.scales);
      detail::native_allreduce<F, R, O>(g_, sizes_, opt_, unit_type_, op_, t, x.data(), res, ws_, clock);
      if (!nan_mask.empty()) apply_nan_mask(t, res, nan_mask, clock);
    }
    bytes_sent_ += res.bytes_sent();
    res.seconds = call.wall();
    res.seconds_codec = res.seconds - clock.wall;
    res.cpu_seconds_codec = call.cpu() - clock.cpu;
    return res;
  }


  /// One bit per element of every tensor whose scale is marked nonfinite, in tensor order: set
  /// where this rank's x is NaN. Empty when no scale is marked (the same on every rank).
  template <class Scale>
  std::vector<std::uint64_t> local_nan_mask(const float* const* x, const std::vector<Scale>& scales) const {
    std::size_t bits = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) bits += scales[i].nonfinite ? sizes_[i] : 0;
    std::vector<std::uint64_t> m(bits == 0 ? 0 : (bits + 63) / 64, 0);
    std::size_t b = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      if (!scales[i].nonfinite) continue;
      for (std::size_t j = 0; j < sizes_[i]; ++j, ++b)
        m[b / 64] |= static_cast<std::uint64_t>(x[i][j] != x[i][j]) << (b % 64);
    }
    return m;
  }

  /// ORs the NaN masks of all ranks and writes the canonical NaN where any bit is set.
  template <class Scale>
  void apply_nan_mask(const tensor* t, result<Scale>& res, std::vector<std::uint64_t>& m,
                      detail::comm_clock& clock) {
    clock.time([&] {
      const std::size_t piece = detail::max_message / 8;
      for (std::size_t u = 0; u < m.size(); u += piece)
        detail::check(MPI_Allreduce(MPI_IN_PLACE, m.data() + u, static_cast<int>(std::min(piece, m.size() - u)),
                                    MPI_UINT64_T, MPI_BOR, g_.comm),
                      "MPI_Allreduce (NaN mask)");
    });
    res.statistics_bytes += m.size() * 8;
    std::size_t b = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      if (!res.scales[i].nonfinite) continue;
      for (std::size_t j = 0; j < sizes_[i]; ++j, ++b)
        if ((m[b / 64] >> (b % 64)) & 1u) t[i].out[j] = cpd::detail::bit_cast<float>(0x7FC00000u);
    }
  }

  /// The schedule of this rank, one for each kind of scale, kept between calls (its
  /// buffers only grow).
  template <class Scale>
  rank_exchange<F, R, O, Scale>& exchange() {
    auto& x = std::get<std::unique_ptr<rank_exchange<F, R, O, Scale>>>(exchanges_);
    if (!x) x = std::make_unique<rank_exchange<F, R, O, Scale>>(g_.size, g_.rank, detail::schedule_options(opt_));
    return *x;
  }

  detail::group g_;
  std::tuple<std::unique_ptr<rank_exchange<F, R, O, pow2_scale>>, std::unique_ptr<rank_exchange<F, R, O, float_scale>>>
      exchanges_;
  MPI_Op op_ = MPI_OP_NULL;
  MPI_Datatype unit_type_ = MPI_DATATYPE_NULL;
  std::vector<std::size_t> sizes_;
  options opt_{};
  std::uint64_t bytes_sent_ = 0;
  detail::workspace<F> ws_;
  std::vector<float> rotated_;  // the rotated inputs of a call (options::rotation)
};

/// A one-shot allreduce (builds a plan: a communicator duplicate and one more small allreduce;
/// keep an allreduce_plan for repeated calls).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity, class Scaler>
auto allreduce(MPI_Comm comm, const tensor* t, std::size_t count, Scaler&& scaler, options opt = {}) {
  std::vector<std::size_t> sizes(count);
  for (std::size_t i = 0; i < count; ++i) sizes[i] = t[i].size;
  allreduce_plan<F, R, O> plan(comm, std::move(sizes), opt);
  return plan(t, count, std::forward<Scaler>(scaler));
}

}  // namespace cpd::mpi

