// SPDX-License-Identifier: MIT
#pragma once

// The first steps of every exchange, written once (docs/architecture.md, "The exchange,
// written once"): error feedback, each tensor's statistic, the statistics combined over the
// workers, the scales selected. The simulation (W workers in this process), cpd::mpi (one rank,
// MPI_Allreduce(MPI_MAX) with its check words) and the Python package (one rank, torch's
// all_reduce(MAX)) call exchange_scales and differ only in the combine they hand it.

#include <cpd/exchange/protocol.hpp>

#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace cpd {

/// One worker's tensor before its exchange.
struct exchange_input {
  const float* in = nullptr;  ///< the worker's values (e.g. its gradient)
  float* residual = nullptr;  ///< error feedback: the worker's residual (in + residual is written into it); or nullptr
  std::size_t size = 0;       ///< the number of values
};

namespace detail {

/// A scaler's identity of combine: S::identity, or s.identity() for a runtime scaler (any_scaler).
template <class S>
[[nodiscard]] typename S::statistic_type identity_of(const S& s) noexcept {
  if constexpr (std::is_member_function_pointer_v<decltype(&S::identity)>) return s.identity();
  else return S::identity;
}

}  // namespace detail

/// A combine for exchange_scales with no worker elsewhere: leaves the statistics as they are.
struct local_combine {
  template <class St>
  void operator()(St*, std::size_t) const noexcept {}
};

/// Steps 1 to 3 of an exchange of `tensors` tensors held by `workers` workers in this process
/// (the simulation: W workers, one tensor; a rank of MPI or torch.distributed: one worker,
/// every tensor). input(w, t) is worker w's tensor t (an exchange_input), scaler_of(t) the
/// scaler of tensor t (a reference; the same object for every t, or one each):
///   1. error feedback: where a residual is given, x = in + residual (in float), written into
///      the residual; else x = in;
///   2. st[t] = the statistics of x of the workers here combined in worker order, from the
///      scaler's identity;
///   3. combine(st, tensors) merges st, in place and element by element as the scaler's
///      combine, with the statistics of the workers elsewhere (local_combine: none; an
///      MPI_Allreduce(MPI_MAX); torch's all_reduce(MAX)); every worker must end with the same;
///   4. scale[t] = scaler_of(t).select(st[t]).
/// x[w * tensors + t] receives the values that worker w's tensor t exchanges (its in, or its
/// residual after feedback). Returns the scales.
template <class Input, class ScalerOf, class Combine>
auto exchange_scales(std::size_t workers, std::size_t tensors, Input&& input, ScalerOf&& scaler_of,
                     Combine&& combine, const float** x) {
  using S = std::decay_t<decltype(scaler_of(std::size_t(0)))>;
  using St = typename S::statistic_type;
  std::vector<St> st(tensors);
  for (std::size_t t = 0; t < tensors; ++t) {
    const S& scaler = scaler_of(t);
    for (std::size_t w = 0; w < workers; ++w) {
      const exchange_input in = input(w, t);
      const float* v = in.in;
      if (in.residual) {
        for (std::size_t i = 0; i < in.size; ++i) in.residual[i] = in.in[i] + in.residual[i];
        v = in.residual;
      }
      x[w * tensors + t] = v;
      const St here = detail::exchange_statistic(scaler, v, in.size);
      st[t] = scaler.combine(w == 0 ? detail::identity_of(scaler) : st[t], here);
    }
  }
  combine(st.data(), tensors);
  std::vector<std::decay_t<decltype(scaler_of(std::size_t(0)).select(St{}))>> scales;
  scales.reserve(tensors);
  for (std::size_t t = 0; t < tensors; ++t) scales.push_back(scaler_of(t).select(st[t]));
  return scales;
}

}  // namespace cpd
