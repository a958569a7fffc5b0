// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/plan.hpp>: cpd::mpi::allreduce_plan, the low-precision gradient allreduce
// over MPI (docs/mpi.md), and dynamic_plan, its twin for a format chosen at run time.
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
            {"mean", opt_.mean ? 1u : 0u, ""}};
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

  template <class ScalerOf>
  auto run(const tensor* t, std::size_t count, ScalerOf&& scaler_of) {
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
};

/// An allreduce_plan for a format and rounding mode chosen at run time (a command line's
/// "e4m3"): dispatches, once, to allreduce_plan<F, R> for the F of List equal to the format,
/// R = nearest_even or stochastic, with APS (cpd::aps<F>(size(), margin)) or no scaling, or
/// per call with a fixed_scaling or with run-time scalers (cpd::make_scaler), one per tensor.
/// Each F of List is compiled in (twice with Stochastic): pass the formats a program offers.
template <class List = compiled_formats, bool Stochastic = true>
class dynamic_plan {
 public:
  /// Collective, as allreduce_plan's constructor. First every rank checks, in one collective
  /// that each enters whatever it found, that all ranks pass the same format, rounding and APS
  /// settings and that the format and rounding are compiled in everywhere: else mismatch_error
  /// on every rank. Then, when the format is not in List or the rounding is neither nearest_even
  /// nor stochastic on every rank, std::invalid_argument on every rank.
  dynamic_plan(MPI_Comm comm, const format& f, rounding r, std::vector<std::size_t> sizes, options opt = {},
               bool use_aps = true, int aps_margin = 0) {
    const bool offered = r == rounding::nearest_even || (Stochastic && r == rounding::stochastic);
    bool compiled = false;
    visit<List>(f, [&](auto tag) { compiled = decltype(tag)::fits_float; });
    detail::agree(comm, "cpd::mpi::dynamic_plan",
                  {detail::format_field(f),
                   {"the rounding", static_cast<std::uint64_t>(r), to_string(r)},
                   {"APS", use_aps ? 1u : 0u, ""},
                   {"the APS margin", static_cast<std::uint64_t>(static_cast<std::int64_t>(aps_margin)), ""},
                   {std::string("whether rounding ") + to_string(r) + " is offered", offered ? 1u : 0u, ""},
                   {"whether format " + f.name() + " is compiled in", compiled ? 1u : 0u, ""}});
    if (!offered)
      cpd::detail::fail_invalid(std::string("cpd::mpi::dynamic_plan: rounding ") + to_string(r) +
                                (Stochastic ? " is not offered (nearest_even or stochastic)"
                                            : " is not offered (nearest_even)"));
    if (!compiled)
      cpd::detail::fail_invalid("cpd::mpi::dynamic_plan: format " + f.name() +
                                " is not among the formats compiled in (or its values are not floats)");
    visit<List>(f, [&](auto tag) {
      using F = decltype(tag);
      if constexpr (F::fits_float) {
        if constexpr (Stochastic) {
          if (r == rounding::stochastic) {
            impl_ = std::make_unique<impl<F, rounding::stochastic>>(comm, std::move(sizes), opt, use_aps, aps_margin);
            return;
          }
        }
        impl_ = std::make_unique<impl<F, rounding::nearest_even>>(comm, std::move(sizes), opt, use_aps, aps_margin);
      }
    });
  }

  /// The allreduce of the plan's tensors (collective); see allreduce_plan::operator().
  result<pow2_scale> operator()(const tensor* t, std::size_t count) { return impl_->run(t, count); }
  result<pow2_scale> operator()(const std::vector<tensor>& t) { return impl_->run(t.data(), t.size()); }
  /// The same with a fixed power-of-two scale for this call instead of the plan's rule (a
  /// loss scale, chosen alike on every rank: GradScaler's); fixed_scaling's statistic still
  /// marks inf and NaN.
  result<pow2_scale> operator()(const tensor* t, std::size_t count, fixed_scaling s) {
    return impl_->run_fixed(t, count, s);
  }
  result<pow2_scale> operator()(const std::vector<tensor>& t, fixed_scaling s) {
    return impl_->run_fixed(t.data(), t.size(), s);
  }
  /// The same with a scaler chosen at run time for each tensor: scalers[i] is tensor i's, made
  /// by cpd::make_scaler for the plan's format (all of one rule: aps, amax, amax-sqrtw,
  /// predivide, delayed, none or fixed; a stateful rule keeps its state there). Each tensor's
  /// out is simulate_allreduce<F>'s with that scaler (allreduce_plan::per_tensor with the typed
  /// scalers). A null scaler, rules that differ, another rule (loss: a fixed_scaling per call,
  /// the overload above) or a scaler made for another format is std::invalid_argument on this
  /// rank, which enters the call's collective as a bad call: mismatch_error on the others.
  result<any_scale> operator()(const tensor* t, std::size_t count, any_scaler<List>* const* scalers) {
    const std::string why = refusal(count, scalers);
    if (!why.empty()) {
      try {
        (void)impl_->run(t, 0);  // (a call that does not match the plan: every rank throws, none waits)
      } catch (const mismatch_error&) {
      }
      cpd::detail::fail_invalid("cpd::mpi::dynamic_plan: " + why);
    }
    return impl_->run_any(t, count, scalers);
  }
  /// Bytes sent by this rank over all calls so far.
  [[nodiscard]] std::uint64_t bytes_sent() const noexcept { return impl_->bytes_sent(); }

 private:
  struct base {
    virtual ~base() = default;
    virtual result<pow2_scale> run(const tensor* t, std::size_t count) = 0;
    virtual result<pow2_scale> run_fixed(const tensor* t, std::size_t count, fixed_scaling s) = 0;
    virtual result<any_scale> run_any(const tensor* t, std::size_t count, any_scaler<List>* const* s) = 0;
    [[nodiscard]] virtual std::uint64_t bytes_sent() const noexcept = 0;
    [[nodiscard]] virtual format fmt() const = 0;
  };
  /// Why scalers[0..count) cannot run in this plan ("" when they can).
  std::string refusal(std::size_t count, any_scaler<List>* const* scalers) const {
    constexpr scaler_kind runs[] = {scaler_kind::aps,       scaler_kind::amax,    scaler_kind::amax_sqrtw,
                                    scaler_kind::predivide, scaler_kind::delayed, scaler_kind::none,
                                    scaler_kind::fixed};
    for (std::size_t i = 0; i < count; ++i) {
      if (scalers == nullptr || scalers[i] == nullptr || scalers[i]->kind() != scalers[0]->kind())
        return "one scaler per tensor, all of one rule";
      if (!is_one_of(scalers[i]->kind(), runs))
        return std::string("the rule ") + to_string(scalers[i]->kind()) +
               " is not a per-tensor scaler the plan runs (" + names_of(runs) + "; loss: pass its fixed_scaling)";
      const auto& bound = scalers[i]->bound_format();
      if (bound && *bound != impl_->fmt())
        return "a scaler was made for " + bound->name() + ", not the plan's " + impl_->fmt().name();
    }
    return "";
  }
  /// r with its scales as any_scale.
  template <class Scale>
  static result<any_scale> erase(result<Scale> r) {
    result<any_scale> a;
    a.scales.assign(r.scales.begin(), r.scales.end());
    a.statistics_bytes = r.statistics_bytes;
    a.payload_bytes = r.payload_bytes;
    a.seconds = r.seconds;
    a.seconds_codec = r.seconds_codec;
    a.cpu_seconds_codec = r.cpu_seconds_codec;
    return a;
  }
  template <class F, rounding R>
  struct impl final : base {
    impl(MPI_Comm comm, std::vector<std::size_t> sizes, options opt, bool use_aps, int margin)
        : plan(comm, std::move(sizes), opt), scaler(plan.size(), margin), use_aps_(use_aps) {}
    result<pow2_scale> run(const tensor* t, std::size_t count) override {
      return use_aps_ ? plan(t, count, scaler) : plan(t, count);
    }
    result<pow2_scale> run_fixed(const tensor* t, std::size_t count, fixed_scaling s) override {
      return plan(t, count, s);
    }
    /// (dynamic_plan::operator() checked the scalers: one rule that the switch takes, F's.)
    result<any_scale> run_any(const tensor* t, std::size_t count, any_scaler<List>* const* s) override {
      switch (count == 0 ? scaler_kind::none : s[0]->kind()) {
        case scaler_kind::aps: return with<aps<F>>(t, count, s);
        case scaler_kind::amax: return with<current_scaling<F>>(t, count, s);
        case scaler_kind::amax_sqrtw: return with<amax_sqrtw_scaling<F>>(t, count, s);
        case scaler_kind::delayed: return with<delayed_scaling<F>>(t, count, s);
        case scaler_kind::predivide: return with<predivide_scaling>(t, count, s);
        default: return count == 0 ? erase(plan(t, count)) : with<fixed_scaling>(t, count, s);  // none, fixed
      }
    }
    /// The call with the typed scalers S of s[0..count).
    template <class S>
    result<any_scale> with(const tensor* t, std::size_t count, any_scaler<List>* const* s) {
      std::vector<S*> typed(count);
      for (std::size_t i = 0; i < count; ++i) typed[i] = s[i]->template get_if<S>();
      return erase(plan.per_tensor(t, count, [&](std::size_t i) -> S& { return *typed[i]; }));
    }
    [[nodiscard]] format fmt() const override { return format::of<F>(); }
    [[nodiscard]] std::uint64_t bytes_sent() const noexcept override { return plan.bytes_sent(); }
    allreduce_plan<F, R> plan;
    aps<F> scaler;
    bool use_aps_;
  };
  std::unique_ptr<base> impl_;
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

