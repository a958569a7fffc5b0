// SPDX-License-Identifier: MIT
#pragma once

// For every flag of `cpd-train --help` that changes what is computed: two command lines that
// differ in that flag only (test_train_inputs checks that train::agreement() tells them apart
// and names the flag, and that every flag of --help is here or in train::local_flags();
// test_train_mpi gives them to two MPI ranks, which must both refuse to train).

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace train_test {

/// Two settings of `flag`: nullopt leaves it out, "" gives it alone (a switch); `also` is given
/// on both sides (a flag that needs another).
struct flag_variant {
  std::string flag;
  std::optional<std::string> a, b;
  std::vector<std::string> also;
};

inline const std::vector<flag_variant>& flag_variants(const std::string& other_data_dir) {
  static const std::vector<flag_variant> v = [&] {
    const std::nullopt_t none = std::nullopt;
    return std::vector<flag_variant>{
        {"--grad-formats", "fp32", "e4m3", {}},
        {"--aps", none, "on", {}},
        {"--scaler", none, "aps", {}},
        {"--policy", none, "from step 1 e4m3", {}},
        {"--codec", none, "onebit", {}},
        {"--error-feedback", none, "off", {"--codec", "onebit"}},
        {"--kahan", none, "", {}},
        {"--algorithm", none, "two_step", {}},
        {"--rotate", none, "16", {}},
        {"--workers", "2", "3", {}},
        {"--epochs", "1", "2", {}},
        {"--batch", "64", "32", {}},
        {"--lr", none, "0.5", {}},
        {"--momentum", none, "0.5", {}},
        {"--lars", none, "", {}},
        {"--weight-decay", none, "0.001", {}},
        {"--seed", none, "2", {}},
        {"--generator", "v1", "v2", {}},
        {"--data", "", other_data_dir, {}},  // "": the common data directory
        {"--weights", none, "bf16", {}},
        {"--update-rounding", none, "stochastic", {"--weights", "bf16"}},
        {"--activations", none, "bf16", {}},
        {"--hidden", "8", "16", {}},
        {"--train-limit", "128", "192", {}},
    };
  }();
  return v;
}

/// The arguments of side a (or b) of variant v on top of a tiny run on data_dir: every flag of
/// the tiny run that v does not set, then v's flag, then v.also.
inline std::vector<std::string> variant_args(const flag_variant& v, bool side_b, const std::string& data_dir) {
  const std::vector<std::pair<std::string, std::string>> base = {
      {"--data", data_dir},  {"--train-limit", "128"}, {"--batch", "64"},          {"--workers", "2"},
      {"--epochs", "1"},     {"--hidden", "8"},        {"--grad-formats", "fp32"},
  };
  std::vector<std::string> args;
  for (const auto& [flag, value] : base)
    if (flag != v.flag) args.insert(args.end(), {flag, value});
  const std::optional<std::string>& mine = side_b ? v.b : v.a;
  if (mine) {
    args.push_back(v.flag);
    if (v.flag == "--data" && mine->empty()) args.push_back(data_dir);
    else if (!mine->empty()) args.push_back(*mine);
  }
  args.insert(args.end(), v.also.begin(), v.also.end());
  return args;
}

/// Every flag at the start of a line of cpd-train --help ("  --lr X ..." gives "--lr").
inline std::vector<std::string> help_flags(const std::string& usage) {
  std::vector<std::string> flags;
  std::size_t at = 0;
  while ((at = usage.find("\n  --", at)) != std::string::npos) {
    at += 3;
    std::size_t end = at;
    while (end < usage.size() && usage[end] != ' ' && usage[end] != '\n') ++end;
    flags.push_back(usage.substr(at, end - at));
  }
  return flags;
}

}  // namespace train_test
