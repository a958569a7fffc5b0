// SPDX-License-Identifier: MIT
//
// cpd-train's simulated exchange for every gradient format (cpd::exchange_formats): the one
// translation unit that instantiates simulate_allreduce and simulate_block_scaled_allreduce
// for them, compiled once into the library cpd_train_exchange, which cpd-train and
// test_train_faults link (each compiled it on its own before: ~2 CPU minutes apiece).

#include "exchange.hpp"

namespace train {

exchanger::reducer_fn exchanger::make_reducer(const cpd::format& f, cpd::scaler_kind scaler,
                                           cpd::allreduce_algorithm algorithm) {
  if (!cpd::visit<cpd::exchange_formats>(f, [](auto) {}))
    throw std::invalid_argument("gradient format " + (f == cpd::format::of<cpd::float_t<8, 23>>() ? "fp32" : f.name()) +
                      " is not compiled into cpd-train; use one of " + train_format_names() +
                      " (or add it to cpd::exchange_formats in include/cpd/core/format.hpp)");
  const int w = workers_;
  cpd::scaler_options so;
  so.world_size = w;
  auto scalers = std::make_shared<std::vector<cpd::any_scaler<>>>();
  if (scaler != cpd::scaler_kind::mx32 && scaler != cpd::scaler_kind::nvfp4 && scaler != cpd::scaler_kind::loss)
    for (std::size_t t = 0; t < tensors_.size(); ++t) scalers->push_back(cpd::make_scaler(scaler, f, so));
  return [this, f, scaler, algorithm, w, scalers](std::size_t t, const float* const* g, float* out, std::size_t len) {
    cpd::allreduce_options opt = opt_;  // (the threads of this step) with this choice's algorithm
    opt.algorithm = algorithm;
    tensor_result r;
    if (scaler == cpd::scaler_kind::mx32 || scaler == cpd::scaler_kind::nvfp4) {
      cpd::visit<cpd::exchange_formats>(f, [&](auto tag) {
        using F = decltype(tag);
        const auto block = [&](const auto& rule) {  // the elements saturate, as MX's and NVFP4's do
          const auto b = cpd::simulate_block_scaled_allreduce<F, cpd::rounding::nearest_even, cpd::overflow::saturate>(
              g, out, len, w, rule, opt);
          r = {b.scaled, b.nonfinite_out};
        };
        if (scaler == cpd::scaler_kind::mx32) block(cpd::mx_block_scaling<F>(w));
        else block(cpd::nvfp4_block_scaling<F>(w));
      });
      return r;
    }
    const auto run = [&](auto tag, auto& s) {
      const auto a = cpd::simulate_allreduce<decltype(tag)>(g, out, len, w, s, opt);
      r = {a.scaled, a.nonfinite_out};
    };
    if (scaler == cpd::scaler_kind::loss) {  // GradScaler's scales are powers of two (2^16, x 2, x 0.5)
      cpd::scaler_options fixed;
      fixed.exponent = loss_.exponent();
      cpd::make_scaler(cpd::scaler_kind::fixed, f, fixed).visit(f, run);
    } else {
      (*scalers)[t].visit(f, run);
    }
    return r;
  };
}

}  // namespace train
