// SPDX-License-Identifier: MIT
#pragma once

// What the MPI ranks of cpd-train --mpi must agree on: every option that changes what is
// computed (main.cpp checks them with cpd::mpi's agreement check, one allreduce, before
// anything else), and the flags that may differ.

#include "cli.hpp"

#include <cpd/exchange/policy.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace train {

/// One option that every MPI rank must give alike, named by the flag(s) that set it, with its
/// value as a number or as text.
struct agreed_option {
  enum class kind { integer, real, text };
  std::string flags;
  kind how = kind::integer;
  std::uint64_t integer = 0;
  double real = 0;
  std::string text;
};

/// Every option of `options` that changes what is computed (cpd-train --mpi refuses to train
/// unless every rank gives them alike: ranks that differ would train different models, or wait
/// forever in a collective the others never call). Lists compare by value (e4m3fn is
/// float8_e4m3fn). The data is agreed on by its contents once read, not by the --data path;
/// the flags that may differ are local_flags(). test_train_inputs checks that every flag of
/// --help is one or the other.
inline std::vector<agreed_option> agreement(const options& o) {
  using k = agreed_option::kind;
  const auto name = [](const std::optional<cpd::format>& f) { return f ? f->name() : std::string("fp32"); };
  const auto join = [](std::string& to, const std::string& item) { to += (to.empty() ? "" : ",") + item; };
  std::string formats, scalers, codecs, hidden, policy;
  for (const grad_format& g : o.grad_formats) join(formats, name(g.fmt));
  for (cpd::scaler_kind s : o.scalers) join(scalers, cpd::to_string(s));
  for (const codec_spec& c : o.codecs) join(codecs, c.name + (c.error_feedback ? "+ef" : ""));
  for (std::size_t h : o.hidden) join(hidden, std::to_string(h));
  if (o.policy)
    for (const std::string& r : cpd::precision_policy::rules(*o.policy)) policy += (policy.empty() ? "" : "; ") + r;
  const char* const updates[] = {"nearest_even", "stochastic", "kahan"};
  return {
      {"--grad-formats", k::text, 0, 0, formats.empty() ? "none" : formats},
      {"--scaler (or --aps)", k::text, 0, 0, scalers},
      {"--codec (with --error-feedback)", k::text, 0, 0, codecs.empty() ? "none" : codecs},
      {"--policy", k::text, 0, 0, o.policy ? policy : "none"},
      {"--kahan", k::integer, o.kahan ? 1u : 0u, 0, ""},
      {"--algorithm", k::text, 0, 0, cpd::to_string(o.algorithm)},
      {"--rotate", k::integer, static_cast<std::uint64_t>(o.rotate), 0, ""},
      {"--workers", k::integer, static_cast<std::uint64_t>(o.workers), 0, ""},
      {"--epochs", k::integer, static_cast<std::uint64_t>(o.epochs), 0, ""},
      {"--batch", k::integer, static_cast<std::uint64_t>(o.batch), 0, ""},
      {"--lr", k::real, 0, o.lr, ""},
      {"--momentum", k::real, 0, o.momentum, ""},
      {"--lars", k::integer, o.lars ? 1u : 0u, 0, ""},
      {"--weight-decay", k::real, 0, o.weight_decay, ""},
      {"--seed", k::integer, o.seed, 0, ""},
      {"--generator", k::text, 0, 0, cpd::to_string(o.generator)},
      {"--weights", k::text, 0, 0, name(o.weights)},
      {"--update-rounding", k::text, 0, 0, updates[static_cast<int>(o.update)]},
      {"--activations", k::text, 0, 0, name(o.activations)},
      {"--hidden", k::text, 0, 0, hidden},
      {"--train-limit", k::integer, o.train_limit, 0, ""},
  };
}

/// The flags of --help that MPI ranks may give differently: they change what is written, where,
/// or how fast, never what is computed (weights-hashes do not depend on the thread count).
inline const std::vector<std::string>& local_flags() {
  static const std::vector<std::string> flags = {"--csv", "--plot", "--threads", "--no-progress", "--mpi", "--help"};
  return flags;
}

}  // namespace train
