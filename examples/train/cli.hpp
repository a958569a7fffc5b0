// SPDX-License-Identifier: MIT
#pragma once

// The command line of cpd-train: every flag, its default, and clear errors.

#include "choices.hpp"
#include "files.hpp"

#include <cpd/cpd.hpp>
#include <cpd/exchange/policy.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace train {

/// A bad command line, with the message to print.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Whether codec runs feed their quantization error back into the next step.
enum class error_feedback { automatic, on, off };

/// auto: as in each codec's paper, i.e. on for 1-bit SGD (Seide et al. need it to
/// converge), off for QSGD (unbiased on its own), Dettmers' types and float formats.
inline bool wants_error_feedback(const cpd::codec& c, error_feedback mode) {
  if (mode != error_feedback::automatic) return mode == error_feedback::on;
  return dynamic_cast<const cpd::onebit_codec*>(&c) != nullptr;
}

/// The algorithms cpd-train runs: the simulation's (over MPI, cpd::rank_algorithms).
inline constexpr const auto& train_algorithms = cpd::simulated_algorithms;

/// The scaling rules --scaler takes (cpd::scaler_kind's names but fixed, whose scale is
/// fixed in advance), emulated and over MPI alike.
inline constexpr cpd::scaler_kind train_scalers[] = {
    cpd::scaler_kind::aps,     cpd::scaler_kind::amax, cpd::scaler_kind::amax_sqrtw, cpd::scaler_kind::predivide,
    cpd::scaler_kind::delayed, cpd::scaler_kind::mx32, cpd::scaler_kind::loss,       cpd::scaler_kind::none,
    cpd::scaler_kind::nvfp4};

/// The value of a command-line name among `accepted` (cpd::from_string), or a usage_error
/// "FLAG: 'x' is not one of a, b, c".
template <class E, std::size_t N>
E parse_name(const std::string& flag, const std::string& v, const E (&accepted)[N]) {
  if (const auto e = cpd::try_from_string(v, accepted)) return *e;
  throw usage_error(flag + ": '" + escaped(v) + "' is not one of " + cpd::names_of(accepted));
}

/// The allreduce_algorithm of a command-line name (its to_string); `flag` names the option.
inline cpd::allreduce_algorithm parse_algorithm(const std::string& v, const std::string& flag = "--algorithm") {
  return parse_name(flag, v, train_algorithms);
}

/// The rule and algorithm of a --policy choice: a scaler the exchange can run (train_scalers)
/// and an algorithm it can run (train_algorithms; over MPI
/// cpd::rank_algorithms; with --kahan not two_step); usage_error else.
inline void check_choice(const cpd::precision_choice& c, bool mpi, bool kahan) {
  if (c.scaler) {
    const char* name = cpd::to_string(*c.scaler);
    if (!cpd::is_one_of(*c.scaler, train_scalers))
      throw usage_error(std::string("--policy: scaler '") + name + "' is not one of " + cpd::names_of(train_scalers));
  }
  if (c.algorithm) {
    const char* name = cpd::to_string(*c.algorithm);
    if (!cpd::is_one_of(*c.algorithm, train_algorithms))
      throw usage_error(std::string("--policy: algorithm '") + name + "' is not one of " +
                        cpd::names_of(train_algorithms));
    if (mpi && !cpd::is_one_of(*c.algorithm, cpd::rank_algorithms))
      throw usage_error(std::string("--policy: algorithm ") + name +
                        " with --mpi: over MPI cpd runs ring, pipelined_ring, two_step and all_gather");
    if (kahan && *c.algorithm == cpd::allreduce_algorithm::two_step)
      throw usage_error("--policy: algorithm two_step with --kahan: two_step sums in float32 and rounds once");
  }
}

/// The table's and the CSV's APS column: off (no scaling), on (APS), else the scaler's name.
inline const char* scaler_column(cpd::scaler_kind k) {
  return k == cpd::scaler_kind::none ? "off" : k == cpd::scaler_kind::aps ? "on" : cpd::to_string(k);
}

struct options {
  std::vector<grad_format> grad_formats;
  std::vector<cpd::scaler_kind> scalers;  // runs per gradient format: --scaler, or --aps (off: none, on: aps)
  std::vector<codec_spec> codecs;
  bool kahan = false;
  cpd::allreduce_algorithm algorithm = cpd::allreduce_algorithm::ring;
  std::size_t rotate = 0;  // --rotate B: a random Hadamard rotation in blocks of B around the format runs' exchange
  int workers = 8;
  int epochs = 3;
  int batch = 256;
  double lr = 0.05;
  double momentum = 0.9;
  bool lars = false;
  double lars_eta = 0.001;
  double weight_decay = 0;
  std::uint64_t seed = 1;
  cpd::random_generator generator = cpd::default_generator;  // --generator: of stochastic rounding and codecs
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string csv, plot;
  std::optional<cpd::format> weights;
  std::string weights_name = "fp32";
  std::optional<cpd::format> activations;  // --activations: round the MLP's activations and their gradients
  std::string activations_name = "fp32";
  update_rounding update = update_rounding::nearest_even;
  int threads = 0;  // 0: all hardware threads
  std::size_t train_limit = 0;  // 0: the whole training set (tests use fewer)
  std::vector<std::size_t> hidden = {256, 128};
  bool progress = true;
  bool mpi = false;  // each MPI rank is one worker
  std::optional<std::string> policy;  // --policy: cpd::precision_policy's text form, on every format run
  std::string policy_file;            // --policy @FILE: the file (no output may be it)

  /// The random key of the run's stochastic rounding and codecs: its seed and generator.
  [[nodiscard]] cpd::random_stream key() const { return {seed, 0, generator}; }
  /// The rotation of --rotate (block 0: none): its signs from the run's seed, stream 0x0207A7E.
  [[nodiscard]] cpd::hadamard_options rotation() const { return {rotate, {seed, 0x0207A7E, generator}, false}; }
};

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

inline bool starts_with_space(const std::string& v) {
  return !v.empty() && std::isspace(static_cast<unsigned char>(v[0]));
}

/// A finite number, the whole of v (no leading blanks, no trailing characters).
inline double parse_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || starts_with_space(v) || *end != '\0') throw usage_error(flag + ": '" + v + "' is not a number");
  if (!std::isfinite(d) || (errno == ERANGE && std::fabs(d) > 1))
    throw usage_error(flag + ": '" + v + "' is not a finite number");
  return d;
}

/// A number that is used as a float: > 0 (or >= 0 when zero_ok), and finite and
/// (unless 0) not 0 as a float.
inline double parse_float_in(const std::string& flag, const std::string& v, bool zero_ok) {
  const double d = parse_double(flag, v);
  const float f = static_cast<float>(d);
  if (d < 0 || (!zero_ok && d == 0)) throw usage_error(flag + ": " + v + (zero_ok ? " is negative" : " is not > 0"));
  if (!std::isfinite(f)) throw usage_error(flag + ": " + v + " does not fit a float");
  if (d != 0 && f == 0) throw usage_error(flag + ": " + v + " is 0 as a float");
  return d;
}

/// An integer in [lo, hi], the whole of v.
inline long long parse_int(const std::string& flag, const std::string& v, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long d = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || starts_with_space(v) || *end != '\0') throw usage_error(flag + ": '" + v + "' is not an integer");
  if (errno == ERANGE || d < lo || d > hi)
    throw usage_error(flag + ": " + v + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return d;
}

/// The items of a comma-separated list: none empty, the list not empty.
inline std::vector<std::string> parse_list(const std::string& flag, const std::string& v) {
  if (v.empty()) throw usage_error(flag + ": empty list");
  std::vector<std::string> items = split(v, ',');
  for (const std::string& i : items)
    if (i.empty()) throw usage_error(flag + ": empty item in '" + v + "'");
  return items;
}

/// Why values in format f cannot be trained with (as `what`), or "".
inline std::string cannot_train(const cpd::format& f) {
  if (!f.spec().fits_float) return "has values that are not floats";
  if (!f.spec().has_sign) return "has no sign bit (it cannot hold a negative value)";
  if (!f.spec().has_zero) return "has no zero";
  return "";
}

inline grad_format parse_grad_format(const std::string& flag, const std::string& name) {
  if (name == "fp32" || name == "float32") return {name, std::nullopt};
  std::string why;
  auto f = cpd::format::try_parse(name, &why);
  if (!f) throw usage_error(flag + ": unknown format " + why);
  const std::string no = cannot_train(*f);
  if (!no.empty()) throw usage_error(flag + ": " + name + " " + no);
  return {name, f};
}

/// The codec named by spec, or a usage_error with make_codec's reason.
inline std::unique_ptr<cpd::codec> parse_codec(const std::string& spec) {
  try {
    return cpd::make_codec(spec);
  } catch (const std::invalid_argument& e) {
    std::string why = e.what();
    const std::string prefix = "cpd::make_codec: ";
    if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
    throw usage_error("--codec: " + why);
  }
}

/// The most a --policy @FILE may hold: rules are a few lines.
constexpr std::size_t max_policy_file = std::size_t(1) << 20;

/// --policy's value: the rules, or @FILE for the rules in a file (one a line, or ';'-separated),
/// a regular file of at most max_policy_file bytes; *file is set to FILE.
inline std::string read_policy(const std::string& v, std::string* file) {
  if (v.empty() || v[0] != '@') return v;
  *file = v.substr(1);
  if (file->empty()) throw usage_error("--policy: '@' names no file");
  try {
    return read_bounded(*file, max_policy_file);
  } catch (const file_error& e) {
    throw usage_error(std::string("--policy: ") + e.what());
  }
}

/// Every choice of --policy, checked as far as it can be before the data is read (the order of
/// phases in epochs against phases in steps is checked with the real steps of an epoch).
inline std::vector<cpd::precision_choice> policy_choices(const options& o) {
  return cpd::precision_policy::parse_choices(*o.policy, cpd::format::of<cpd::float_t<8, 23>>(),
                                              2 * (o.hidden.size() + 1));
}

/// The flags that parse reads in a second pass, once every flag is known.
struct deferred_flags {
  std::string formats = "fp32,e5m2,e4m3,e3m0", aps = "off,on";
  std::optional<std::string> codecs, feedback_flag, scaler_list;
  error_feedback feedback = error_feedback::automatic;
  std::set<std::string> seen;  // every --flag given
};

/// The next argument, the value of flag a.
using flag_value = std::function<std::string()>;

/// The flags of what is run (formats, scalers, a policy, codecs, the exchange); false when a
/// is none of them.
inline bool parse_run_flag(const std::string& a, const flag_value& value, options& o, deferred_flags& d) {
  if (a == "--grad-formats") d.formats = value();
  else if (a == "--aps") d.aps = value();
  else if (a == "--scaler") d.scaler_list = value();
  else if (a == "--policy") o.policy = read_policy(value(), &o.policy_file);
  else if (a == "--codec") d.codecs = value();
  else if (a == "--error-feedback") {
    const std::string v = value();
    d.feedback_flag = v;
    if (v == "auto") d.feedback = error_feedback::automatic;
    else if (v == "on") d.feedback = error_feedback::on;
    else if (v == "off") d.feedback = error_feedback::off;
    else throw usage_error("--error-feedback: '" + v + "' is not auto, on or off");
  } else if (a == "--kahan") o.kahan = true;
  else if (a == "--algorithm") o.algorithm = parse_algorithm(value());
  else return false;
  return true;
}

/// The flags of the optimizer and the network; false when a is none of them.
inline bool parse_training_flag(const std::string& a, const flag_value& value, options& o) {
  if (a == "--workers") o.workers = static_cast<int>(parse_int(a, value(), 1, 4096));
  else if (a == "--epochs") o.epochs = static_cast<int>(parse_int(a, value(), 1, 100000));
  else if (a == "--batch") o.batch = static_cast<int>(parse_int(a, value(), 1, 1 << 20));
  else if (a == "--lr") o.lr = parse_float_in(a, value(), false);
  else if (a == "--momentum") {
    const std::string v = value();
    o.momentum = parse_float_in(a, v, true);
    if (o.momentum >= 1) throw usage_error("--momentum: " + v + " is not below 1 (the velocity would never decay)");
  }
  else if (a == "--lars") o.lars = true;
  else if (a == "--weight-decay") o.weight_decay = parse_float_in(a, value(), true);
  else if (a == "--rotate") {
    o.rotate = static_cast<std::size_t>(parse_int(a, value(), 0, 65536));
    if (o.rotate == 1 || (o.rotate & (o.rotate - 1)) != 0)
      throw usage_error("--rotate: the block must be 0 (none) or a power of two from 2 to 65536");
  }
  else if (a == "--seed") o.seed = static_cast<std::uint64_t>(parse_int(a, value(), 0, (1ll << 62)));
  else if (a == "--generator") {
    const std::string v = value();
    const auto g = cpd::try_from_string<cpd::random_generator>(v);
    if (!g) throw usage_error("--generator: '" + v + "' is not " + cpd::names_of<cpd::random_generator>());
    o.generator = *g;
  }
  else if (a == "--hidden") {
    o.hidden.clear();
    for (const std::string& h : parse_list(a, value()))
      o.hidden.push_back(static_cast<std::size_t>(parse_int(a, h, 1, 1 << 16)));
    if (o.hidden.size() > 64) throw usage_error("--hidden: more than 64 hidden layers");
  } else return false;
  return true;
}

/// The flags of the data, the outputs, the precision of weights and activations and the
/// process; false when a is none of them.
inline bool parse_setup_flag(const std::string& a, const flag_value& value, options& o) {
  if (a == "--data" || a == "--csv" || a == "--plot") {
    std::string& target = a == "--data" ? o.data_dir : a == "--csv" ? o.csv : o.plot;
    target = value();
    if (target.empty()) throw usage_error(a + ": empty path");
  } else if (a == "--activations") {
    o.activations_name = value();
    o.activations = parse_grad_format(a, o.activations_name).fmt;
  } else if (a == "--weights") {
    o.weights_name = value();
    o.weights = parse_grad_format(a, o.weights_name).fmt;
  } else if (a == "--update-rounding") {
    const std::string v = value();
    if (v == "nearest_even") o.update = update_rounding::nearest_even;
    else if (v == "stochastic") o.update = update_rounding::stochastic;
    else if (v == "kahan") o.update = update_rounding::kahan;
    else throw usage_error("--update-rounding: '" + v + "' is not nearest_even, stochastic or kahan");
  } else if (a == "--threads") o.threads = static_cast<int>(parse_int(a, value(), 0, 1024));
  else if (a == "--train-limit") o.train_limit = static_cast<std::size_t>(parse_int(a, value(), 1, 1ll << 40));
  else if (a == "--no-progress") o.progress = false;
  else if (a == "--mpi") o.mpi = true;
  else return false;
  return true;
}

/// --grad-formats: the formats, none twice (under any name).
inline void parse_grad_formats(const std::string& formats, options& o) {
  if (formats == "none") return;
  for (const std::string& f : parse_list("--grad-formats", formats)) {
    grad_format g = parse_grad_format("--grad-formats", f);
    for (const grad_format& h : o.grad_formats)
      if (h.fmt == g.fmt)
        throw usage_error("--grad-formats: " + (h.name == f ? f + " twice" : f + " is the same format as " + h.name));
    o.grad_formats.push_back(std::move(g));
  }
}

/// --scaler, or --aps (off: none, on: aps): the scaling rules of each format, none twice.
inline void parse_scalers(const deferred_flags& d, options& o) {
  if (d.scaler_list && d.seen.count("--aps"))
    throw usage_error("--aps and --scaler: give one (--aps on is --scaler aps, --aps off is --scaler none)");
  const std::string flag = d.scaler_list ? "--scaler" : "--aps";
  for (const std::string& v : parse_list(flag, d.scaler_list ? *d.scaler_list : d.aps)) {
    cpd::scaler_kind k = cpd::scaler_kind::none;
    if (d.scaler_list) {
      k = parse_name("--scaler", v, train_scalers);
    } else {
      if (v != "off" && v != "on") throw usage_error("--aps: '" + v + "' is not off or on");
      k = v == "on" ? cpd::scaler_kind::aps : cpd::scaler_kind::none;
    }
    if (std::find(o.scalers.begin(), o.scalers.end(), k) != o.scalers.end()) throw usage_error(flag + ": " + v + " twice");
    o.scalers.push_back(k);
  }
}

/// --codec and --error-feedback: the codecs, none twice, each with its error feedback.
inline void parse_codecs(const deferred_flags& d, options& o) {
  if (d.codecs)
    for (const std::string& spec : parse_list("--codec", *d.codecs)) {
      const std::unique_ptr<cpd::codec> c = parse_codec(spec);
      for (const codec_spec& e : o.codecs)
        if (e.name == c->name()) throw usage_error("--codec: " + e.name + " twice");
      o.codecs.push_back({c->name(), wants_error_feedback(*c, d.feedback)});
    }
  if (o.grad_formats.empty() && o.codecs.empty())
    throw usage_error("--grad-formats none and no --codec: nothing to run");
  if (d.feedback_flag && o.codecs.empty())
    throw usage_error("--error-feedback " + *d.feedback_flag + " without --codec: only codec runs have error feedback");
}

/// --policy against the runs and the tensors (the steps of an epoch are known only with the data).
inline void check_policy_flag(const options& o) {
  if (!o.policy) return;
  if (o.grad_formats.empty()) throw usage_error("--policy: --grad-formats none leaves no format run to apply it to");
  try {  // the tensors are known here (two per layer); the steps of an epoch only with the data
    for (const cpd::precision_choice& c : policy_choices(o)) check_choice(c, o.mpi, o.kahan);
  } catch (const std::invalid_argument& e) {
    std::string why = e.what();
    const std::string prefix = "cpd::precision_policy: ";
    if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
    throw usage_error("--policy: " + why);
  }
}

/// The flags that cannot go together.
inline void check_combinations(const options& o) {
  if (o.batch < o.workers)
    throw usage_error("--batch " + std::to_string(o.batch) + " is smaller than --workers " + std::to_string(o.workers));
  if (o.update != update_rounding::nearest_even && !o.weights)
    throw usage_error("--update-rounding needs --weights FORMAT (weights are fp32 otherwise)");
  if (o.kahan && o.algorithm == cpd::allreduce_algorithm::two_step)
    throw usage_error("--kahan with --algorithm two_step: two_step sums in float32 and rounds once (no Kahan)");
  if (o.rotate != 0 && o.grad_formats.empty())
    throw usage_error("--rotate rotates the format runs' exchange; this run has none (--grad-formats)");
  if (o.mpi && !cpd::is_one_of(o.algorithm, cpd::rank_algorithms))
    throw usage_error(std::string("--algorithm ") + cpd::to_string(o.algorithm) +
                      " with --mpi: over MPI cpd runs ring, pipelined_ring, two_step and all_gather");
}

/// Parses argv; throws usage_error with a clear message. Returns nullopt for --help.
inline std::optional<options> parse(int argc, char** argv) {
  options o;
  deferred_flags d;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const flag_value value = [&]() -> std::string {
      if (i + 1 >= argc) throw usage_error(a + ": missing value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") return std::nullopt;
    if (a.rfind("--", 0) == 0 && !d.seen.insert(a).second) throw usage_error(a + " given twice");
    if (!parse_run_flag(a, value, o, d) && !parse_training_flag(a, value, o) && !parse_setup_flag(a, value, o))
      throw usage_error("unknown option '" + a + "' (see --help)");
  }
  parse_grad_formats(d.formats, o);
  parse_scalers(d, o);
  parse_codecs(d, o);
  check_policy_flag(o);
  check_combinations(o);
  return o;
}

}  // namespace train
