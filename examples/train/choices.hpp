// SPDX-License-Identifier: MIT
#pragma once

// The choices a cpd-train run is made of, as its domain (the exchange, the weights) takes
// them: a gradient format, a gradient codec, the update rounding of low-precision weights,
// and the rule and algorithm of a precision-policy choice. cli.hpp reads them from the
// command line; nothing here knows of it.

#include <cpd/cpd.hpp>
#include <cpd/exchange/policy.hpp>

#include <optional>
#include <string>

namespace train {

/// A gradient format on the command line: "fp32" means no rounding at all.
struct grad_format {
  std::string name;                 // as given on the command line
  std::optional<cpd::format> fmt;   // empty for fp32
};

/// A gradient codec on the command line (--codec): one more run, next to the format x APS runs.
struct codec_spec {
  std::string name;  // as cpd::codec::name() gives it, with every parameter (e.g. "qsgd:4bit:512")
  bool error_feedback = false;
};

/// How the weights are updated when they are kept in a low-precision format.
enum class update_rounding { nearest_even, stochastic, kahan };

/// The rule and algorithm a policy choice runs: its own (cli.hpp's check_choice checked
/// them), or the run's where it names none.
inline cpd::scaler_kind choice_scaler(const cpd::precision_choice& c, cpd::scaler_kind run) {
  return c.scaler.value_or(run);
}
inline cpd::allreduce_algorithm choice_algorithm(const cpd::precision_choice& c, cpd::allreduce_algorithm run) {
  return c.algorithm.value_or(run);
}

}  // namespace train
