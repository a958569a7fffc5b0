// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/dynamic_plan.hpp>: cpd::mpi::dynamic_plan, the allreduce_plan (and
// block_scaled_plan) of a format and rounding mode chosen at run time (docs/mpi.md).
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/core/detail/error.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/rounding.hpp>
#include <cpd/mpi/block_plan.hpp>
#include <cpd/mpi/check.hpp>
#include <cpd/mpi/options.hpp>
#include <cpd/mpi/plan.hpp>
#include <cpd/scaling/registry.hpp>
#include <cpd/scaling/scaling.hpp>

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cpd::mpi {

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
  /// The allreduce with block scales of a rule chosen at run time (collective):
  /// scaler_kind::mx32 (cpd::mx_block_scaling<F>(size()): OCP MX's 32 values a scale, the floor
  /// rule, headroom for the sum) or scaler_kind::nvfp4 (cpd::nvfp4_block_scaling<F>(size())),
  /// the elements saturating: block_scaled_plan<F, R, overflow::saturate>, made by the first
  /// such call (collective), with the plan's sizes and options. Each tensor's out is
  /// simulate_block_scaled_allreduce<F, R, overflow::saturate>'s. Another rule is
  /// std::invalid_argument on this rank and mismatch_error on the others.
  result<block_allreduce_result> block_scaled(const tensor* t, std::size_t count, scaler_kind rule,
                                              bool diagnostics = false) {
    return impl_->run_block(t, count, rule, diagnostics);
  }
  result<block_allreduce_result> block_scaled(const std::vector<tensor>& t, scaler_kind rule, bool diagnostics = false) {
    return impl_->run_block(t.data(), t.size(), rule, diagnostics);
  }
  /// Bytes sent by this rank over all calls so far (block-scaled calls included).
  [[nodiscard]] std::uint64_t bytes_sent() const noexcept { return impl_->bytes_sent(); }

 private:
  struct base {
    virtual ~base() = default;
    virtual result<pow2_scale> run(const tensor* t, std::size_t count) = 0;
    virtual result<pow2_scale> run_fixed(const tensor* t, std::size_t count, fixed_scaling s) = 0;
    virtual result<any_scale> run_any(const tensor* t, std::size_t count, any_scaler<List>* const* s) = 0;
    virtual result<block_allreduce_result> run_block(const tensor* t, std::size_t count, scaler_kind rule,
                                                     bool diagnostics) = 0;
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
    result<block_allreduce_result> run_block(const tensor* t, std::size_t count, scaler_kind rule,
                                             bool diagnostics) override {
      if (!block) block = std::make_unique<block_scaled_plan<F, R, overflow::saturate>>(plan.communicator(), plan.sizes(),
                                                                                        plan.opts());
      if (rule == scaler_kind::mx32) return (*block)(t, count, mx_block_scaling<F>(plan.size()), diagnostics);
      if (rule == scaler_kind::nvfp4) return (*block)(t, count, nvfp4_block_scaling<F>(plan.size()), diagnostics);
      block->refuse(std::string("cpd::mpi::dynamic_plan: the rule ") + to_string(rule) +
                    " has no block scales (mx32 or nvfp4)");
    }
    [[nodiscard]] format fmt() const override { return format::of<F>(); }
    [[nodiscard]] std::uint64_t bytes_sent() const noexcept override {
      return plan.bytes_sent() + (block ? block->bytes_sent() : 0);
    }
    allreduce_plan<F, R> plan;
    std::unique_ptr<block_scaled_plan<F, R, overflow::saturate>> block;  // made by the first block-scaled call
    aps<F> scaler;
    bool use_aps_;
  };
  std::unique_ptr<base> impl_;
};

}  // namespace cpd::mpi
