// SPDX-License-Identifier: MIT
#pragma once

// The scaling rules by name (docs/scaling.md), as cpd::make_codec names the codecs:
// cpd::scaler_kind and its names, which cpd-train's --scaler, the precision policies'
// `scaler NAME` and the Python package's scalers share, and cpd::make_scaler(name, format,
// options), a scaler chosen at run time. Scalers are templates over the format, so what
// make_scaler returns, cpd::any_scaler, holds the scaler compiled for that format (each
// format of a list is compiled in, exchange_formats by default) and offers:
//   - the protocol over 32-bit statistic words (an int32, or a float's bits): statistic,
//     combine, select (to a std::variant of the two scale types), for code that meets the
//     format only at run time (the Python package);
//   - visit(format, fn): fn(F{}, scaler) with the typed scaler, for code compiled for each
//     format (simulate_allreduce<F>, mpi::allreduce_plan<F>), which then runs it exactly as
//     if it had built that scaler itself.

#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/names.hpp>
#include <cpd/scaling/aps.hpp>
#include <cpd/scaling/exchange_rules.hpp>
#include <cpd/scaling/loss.hpp>
#include <cpd/scaling/scale.hpp>
#include <cpd/scaling/transformer_engine.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace cpd {

/// A scaling rule by name (docs/scaling.md).
enum class scaler_kind : unsigned char {
  aps,         ///< "aps": cpd::aps<F> (Han et al.)
  amax,        ///< "amax": cpd::current_scaling<F> (Transformer Engine's current scaling)
  amax_sqrtw,  ///< "amax-sqrtw": cpd::amax_sqrtw_scaling<F> (MS-AMP)
  predivide,   ///< "predivide": cpd::predivide_scaling (PyTorch's fp16_compress_hook)
  delayed,     ///< "delayed": cpd::delayed_scaling<F> (Transformer Engine)
  mx32,        ///< "mx32": cpd::mx_block_scaling<F>, 32-value blocks (OCP MX; not a per-tensor scaler)
  loss,        ///< "loss": cpd::dynamic_loss_scaling (PyTorch's GradScaler)
  none,        ///< "none": cpd::fixed_scaling{} (no scale; inf and NaN still marked)
  fixed,       ///< "fixed": cpd::fixed_scaling(2^exponent)
  nvfp4        ///< "nvfp4": cpd::nvfp4_block_scaling<F>, E4M3 per 16 values and fp32 per tensor (not a per-tensor scaler)
};

/// The name of a scaling rule, as cpd-train's --scaler takes it ("aps", "amax", "amax-sqrtw",
/// "predivide", "delayed", "mx32", "loss", "none", "fixed", "nvfp4"); "?" for a value that is none.
constexpr const char* to_string(scaler_kind k) noexcept {
  constexpr const char* names[] = {"aps", "amax", "amax-sqrtw", "predivide", "delayed",
                                   "mx32", "loss", "none",       "fixed",     "nvfp4"};
  const auto i = static_cast<unsigned>(k);
  return i < sizeof names / sizeof names[0] ? names[i] : "?";
}

template <>
struct enum_names<scaler_kind> {
  static constexpr const char* type = "cpd::scaler_kind";
  static constexpr scaler_kind values[] = {scaler_kind::aps,   scaler_kind::amax,  scaler_kind::amax_sqrtw,
                                           scaler_kind::predivide, scaler_kind::delayed, scaler_kind::mx32,
                                           scaler_kind::loss,  scaler_kind::none,  scaler_kind::fixed,
                                           scaler_kind::nvfp4};
};

/// The scale of a scaler chosen at run time: a power of two (aps, fixed, none) or a float.
using any_scale = std::variant<pow2_scale, float_scale>;

/// What make_scaler builds a scaler with; each rule reads the fields it takes and no other.
struct scaler_options {
  int world_size = 0;                  ///< aps, amax-sqrtw, predivide: the workers (>= 1)
  int margin = 0;                      ///< aps, amax, amax-sqrtw, delayed: binades of headroom
  float epsilon = 0.0f;                ///< amax: the smallest amax (amax_epsilon)
  bool power_of_two = false;           ///< amax, amax-sqrtw: truncate the scale to a power of two
  std::size_t history_length = 1024;  ///< delayed: amax_history_len
  amax_algorithm amax_compute = amax_algorithm::max;  ///< delayed: amax_compute_algo
  dynamic_loss_scaling::options loss{};               ///< loss: GradScaler's settings
  int exponent = 0;                                   ///< fixed: the scale 2^exponent
};

namespace detail {

/// One address per scaler type S: which type an any_scaler holds, without RTTI (the library
/// builds with -fno-rtti).
template <class S>
inline constexpr char scaler_type_tag = 0;

/// The protocol of one scaler over 32-bit statistic words.
class any_scaler_base {
 public:
  virtual ~any_scaler_base() = default;
  [[nodiscard]] virtual const void* type() const noexcept = 0;
  [[nodiscard]] virtual bool float_statistic() const noexcept = 0;
  [[nodiscard]] virtual std::int32_t identity() const noexcept = 0;
  [[nodiscard]] virtual std::int32_t statistic(const float* g, std::size_t n) const noexcept = 0;
  [[nodiscard]] virtual std::int32_t combine(std::int32_t a, std::int32_t b) const noexcept = 0;
  [[nodiscard]] virtual any_scale select(std::int32_t st) = 0;
};

/// Scaler S behind any_scaler_base; its statistic (int32 or float) travels as 32 bits.
template <class S>
class any_scaler_model final : public any_scaler_base {
  using St = typename S::statistic_type;
  static_assert(sizeof(St) == 4, "cpd::any_scaler: a scaler's statistic must be 32 bits");

 public:
  explicit any_scaler_model(S s) : scaler(std::move(s)) {}
  [[nodiscard]] const void* type() const noexcept override { return &scaler_type_tag<S>; }
  [[nodiscard]] bool float_statistic() const noexcept override { return std::is_floating_point_v<St>; }
  [[nodiscard]] std::int32_t identity() const noexcept override { return word(S::identity); }
  [[nodiscard]] std::int32_t statistic(const float* g, std::size_t n) const noexcept override {
    return word(scaler.statistic(g, n));
  }
  [[nodiscard]] std::int32_t combine(std::int32_t a, std::int32_t b) const noexcept override {
    return word(S::combine(value(a), value(b)));
  }
  [[nodiscard]] any_scale select(std::int32_t st) override { return scaler.select(value(st)); }

  S scaler;

 private:
  static std::int32_t word(St v) noexcept { return bit_cast<std::int32_t>(v); }
  static St value(std::int32_t w) noexcept { return bit_cast<St>(w); }
};

}  // namespace detail

template <class List>
class any_scaler;

/// The scaler of rule `kind` for format fmt (the rules of a format: aps, amax, amax-sqrtw and
/// delayed; the others take any format, or none) with the options it reads. std::invalid_argument
/// naming the problem: a rule that needs a format given none, a format not in List, mx32 (block
/// scales: cpd::mx_block_scaling), an option the scaler refuses (its constructor's message).
template <class List = exchange_formats>
[[nodiscard]] any_scaler<List> make_scaler(scaler_kind kind, const std::optional<format>& fmt,
                                           const scaler_options& opt = {});

/// A scaler chosen at run time (make_scaler), for the formats of List. Move-only; a stateful
/// rule (delayed, loss) keeps its state in it.
template <class List = exchange_formats>
class any_scaler {
 public:
  /// The statistic's 32 bits: an int32, or the bits of a float (float_statistic()); as int32
  /// they order like the statistic, so that one MPI_MAX over MPI_INT32_T combines them.
  using statistic_type = std::int32_t;

  [[nodiscard]] scaler_kind kind() const noexcept { return kind_; }
  /// The format a format's rule was made for (aps, amax, amax-sqrtw, delayed); empty for
  /// the others, which serve every format.
  [[nodiscard]] const std::optional<format>& bound_format() const noexcept { return fmt_; }
  /// Whether the statistic is a float (the amax rules) rather than an int32.
  [[nodiscard]] bool float_statistic() const noexcept { return impl_->float_statistic(); }
  /// The identity of combine.
  [[nodiscard]] statistic_type identity() const noexcept { return impl_->identity(); }
  /// The scaler's statistic of g[0..n).
  [[nodiscard]] statistic_type statistic(const float* g, std::size_t n) const noexcept {
    return impl_->statistic(g, n);
  }
  /// The scaler's combine.
  [[nodiscard]] statistic_type combine(statistic_type a, statistic_type b) const noexcept {
    return impl_->combine(a, b);
  }
  /// The scaler's select (a stateful rule updates).
  any_scale select(statistic_type st) { return impl_->select(st); }

  /// The typed scaler when it is an S (aps<F>, current_scaling<F>, ..., fixed_scaling for none
  /// and fixed), else nullptr: for code compiled for one format that takes the state along.
  template <class S>
  [[nodiscard]] S* get_if() noexcept {
    if (impl_->type() != &detail::scaler_type_tag<S>) return nullptr;
    return &static_cast<detail::any_scaler_model<S>&>(*impl_).scaler;
  }

  /// fn(F{}, scaler): the typed scaler (aps<F>&, fixed_scaling&, ...) with F, the type of f in
  /// List. std::invalid_argument when f is not in List, or is not the format the rule was
  /// made for.
  template <class Fn>
  void visit(const format& f, Fn&& fn) {
    if (fmt_ && *fmt_ != f)
      detail::fail_invalid(std::string("cpd::any_scaler::visit: the ") + to_string(kind_) + " scaler is for " +
                           fmt_->name() + ", not " + f.name());
    const bool found = cpd::visit<List>(f, [&](auto tag) {
      using F = decltype(tag);
      switch (kind_) {
        case scaler_kind::aps: fn(tag, get<aps<F>>()); return;
        case scaler_kind::amax: fn(tag, get<current_scaling<F>>()); return;
        case scaler_kind::amax_sqrtw: fn(tag, get<amax_sqrtw_scaling<F>>()); return;
        case scaler_kind::delayed: fn(tag, get<delayed_scaling<F>>()); return;
        case scaler_kind::predivide: fn(tag, get<predivide_scaling>()); return;
        case scaler_kind::loss: fn(tag, get<dynamic_loss_scaling>()); return;
        case scaler_kind::none:
        case scaler_kind::fixed: fn(tag, get<fixed_scaling>()); return;
        case scaler_kind::mx32:
        case scaler_kind::nvfp4: return;  // (make_scaler makes none)
      }
    });
    if (!found)
      detail::fail_invalid("cpd::any_scaler::visit: format " + f.name() + " is not among the scaler's formats");
  }

 private:
  template <class L>
  friend any_scaler<L> make_scaler(scaler_kind, const std::optional<format>&, const scaler_options&);

  any_scaler(scaler_kind kind, std::optional<format> fmt, std::unique_ptr<detail::any_scaler_base> impl)
      : kind_(kind), fmt_(std::move(fmt)), impl_(std::move(impl)) {}

  template <class S>
  S& get() noexcept {
    return static_cast<detail::any_scaler_model<S>&>(*impl_).scaler;
  }

  scaler_kind kind_;
  std::optional<format> fmt_;
  std::unique_ptr<detail::any_scaler_base> impl_;
};

namespace detail {

/// A scaler of type S behind any_scaler_base.
template <class S>
std::unique_ptr<any_scaler_base> erase_scaler(S s) {
  return std::make_unique<any_scaler_model<S>>(std::move(s));
}

}  // namespace detail

template <class List>
any_scaler<List> make_scaler(scaler_kind kind, const std::optional<format>& fmt, const scaler_options& opt) {
  detail::check_one_of("cpd::make_scaler", "the rule", kind, enum_names<scaler_kind>::values, "cpd has");
  switch (kind) {
    case scaler_kind::predivide:
      return {kind, std::nullopt, detail::erase_scaler(predivide_scaling(opt.world_size))};
    case scaler_kind::loss: return {kind, std::nullopt, detail::erase_scaler(dynamic_loss_scaling(opt.loss))};
    case scaler_kind::none: return {kind, std::nullopt, detail::erase_scaler(fixed_scaling{})};
    case scaler_kind::fixed:
      return {kind, std::nullopt, detail::erase_scaler(fixed_scaling(pow2_scale{opt.exponent}))};
    case scaler_kind::mx32:
      detail::fail_invalid("cpd::make_scaler: mx32 scales blocks of 32 values, not tensors: use "
                           "cpd::mx_block_scaling and cpd::simulate_block_scaled_allreduce");
    case scaler_kind::nvfp4:
      detail::fail_invalid("cpd::make_scaler: nvfp4 scales blocks of 16 values, not tensors: use "
                           "cpd::nvfp4_block_scaling and cpd::simulate_block_scaled_allreduce");
    default: break;
  }
  if (!fmt) detail::fail_invalid(std::string("cpd::make_scaler: ") + to_string(kind) + " needs a format");
  std::unique_ptr<detail::any_scaler_base> impl;
  cpd::visit<List>(*fmt, [&](auto tag) {
    using F = decltype(tag);
    if (kind == scaler_kind::aps) impl = detail::erase_scaler(aps<F>(opt.world_size, opt.margin));
    else if (kind == scaler_kind::amax)
      impl = detail::erase_scaler(current_scaling<F>({opt.margin, opt.epsilon, opt.power_of_two}));
    else if (kind == scaler_kind::amax_sqrtw)
      impl = detail::erase_scaler(amax_sqrtw_scaling<F>(opt.world_size, {opt.margin, opt.power_of_two}));
    else  // delayed
      impl = detail::erase_scaler(delayed_scaling<F>({opt.history_length, opt.amax_compute, opt.margin}));
  });
  if (!impl)
    detail::fail_invalid("cpd::make_scaler: format " + fmt->name() + " is not among the formats compiled in");
  return {kind, fmt, std::move(impl)};
}

/// make_scaler of the rule named `name` (to_string(scaler_kind): "aps", "amax-sqrtw", ...).
template <class List = exchange_formats>
[[nodiscard]] any_scaler<List> make_scaler(std::string_view name, const std::optional<format>& fmt,
                                           const scaler_options& opt = {}) {
  return make_scaler<List>(from_string<scaler_kind>(name), fmt, opt);
}

}  // namespace cpd
