// SPDX-License-Identifier: MIT
#pragma once

// Precision policies (docs/policy.md): which format each tensor of a model exchanges at each
// step, by rules: per tensor (first and last layers wider), per phase (another format from a
// step on), and adaptive per tensor (a wider format while the fraction of values the exchange
// flushed to zero or overflowed is above a threshold). The policy decides from statistics that
// every worker sees alike (the counts summed over the workers: in a simulation they are the
// simulation's own, over MPI one small allreduce of two integers per tensor per step), so the
// simulation and every rank of a real exchange choose the same formats and give the same bits.
// A rule may also name the scaling rule and the exchange algorithm of the tensors it covers
// (precision_choice: a cpd::scaler_kind and a cpd::allreduce_algorithm); the exchange that runs
// the policy refuses those it cannot run.

#include <cpd/core/detail/error.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/names.hpp>
#include <cpd/core/stats.hpp>
#include <cpd/exchange/algorithm.hpp>
#include <cpd/scaling/registry.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cpd {

/// What a policy chooses for a tensor at a step: the format, and optionally the scaling rule
/// and the exchange algorithm (empty: the exchange's own). The exchange that runs the policy
/// checks that it runs them (precision_policy::choices()).
struct precision_choice {
  format fmt = format::of<float_t<8, 23>>();
  std::optional<scaler_kind> scaler;             ///< e.g. scaler_kind::aps; empty: the run's rule
  std::optional<allreduce_algorithm> algorithm;  ///< e.g. two_step; empty: the run's algorithm

  friend bool operator==(const precision_choice& a, const precision_choice& b) {
    return a.fmt == b.fmt && a.scaler == b.scaler && a.algorithm == b.algorithm;
  }
  friend bool operator!=(const precision_choice& a, const precision_choice& b) { return !(a == b); }
};

/// Which format (and, by name, scaling rule and algorithm) each tensor of a model exchanges at
/// each step (docs/policy.md).
class precision_policy {
 public:
  /// Every tensor in `base` at every step until a rule says otherwise; `tensors` is the
  /// number of tensors of the model (the per-tensor rules count from its end too).
  precision_policy(format base, std::size_t tensors) : base_{base, {}, {}}, state_(tensors) {}

  /// Tensor t (negative: counted from the end, -1 the last) always exchanges in f: neither
  /// phases nor adaptation change it.
  precision_policy& tensor(long t, format f) { return tensor(t, precision_choice{f, {}, {}}); }
  precision_policy& tensor(long t, precision_choice f) {
    const long n = static_cast<long>(state_.size());
    const long i = t < 0 ? n + t : t;
    if (i < 0 || i >= n)
      fail_policy("tensor " + std::to_string(t) + " does not exist (the model has " + std::to_string(n) + " tensors)");
    state_[static_cast<std::size_t>(i)].fixed = true;
    state_[static_cast<std::size_t>(i)].fixed_choice = std::move(f);
    return *this;
  }

  /// From step `step` on, the tensors without a rule of their own exchange in f (a phase).
  /// Phases must come in increasing order of their steps.
  precision_policy& from_step(std::uint64_t step, format f) { return from_step(step, precision_choice{f, {}, {}}); }
  precision_policy& from_step(std::uint64_t step, precision_choice f) {
    if (!phases_.empty() && step <= phases_.back().step)
      fail_policy("the phase from step " + std::to_string(step) + " is not after the one from step " +
                  std::to_string(phases_.back().step) + ": phases must come in increasing order of their steps");
    phases_.push_back({step, std::move(f)});
    return *this;
  }

  /// Adaptive: a tensor without a rule of its own whose lost fraction at a step (values the
  /// exchange flushed to zero or overflowed, over the values it rounded, summed over the
  /// workers) is above `above` exchanges in `wider` from the next step on, for `hold` steps
  /// at least, and goes back once the fraction measured in `wider` is at most `below`.
  precision_policy& adaptive(format wider, double above, double below, std::uint64_t hold = 1) {
    return adaptive(precision_choice{wider, {}, {}}, above, below, hold);
  }
  precision_policy& adaptive(precision_choice wider, double above, double below, std::uint64_t hold = 1) {
    if (adaptive_) fail_policy("one adaptive rule per policy");
    if (!(above >= 0 && above <= 1) || !(below >= 0 && below <= above))
      fail_policy("adaptive thresholds need 0 <= below <= above <= 1");
    if (hold == 0) fail_policy("adaptive hold must be at least 1 step");
    adaptive_ = true;
    wider_ = std::move(wider);
    above_ = above;
    below_ = below;
    hold_ = hold;
    return *this;
  }

  /// The format of tensor t at step `step`.
  [[nodiscard]] format at(std::size_t t, std::uint64_t step) const { return choice_at(t, step).fmt; }

  /// The whole choice for tensor t at step `step`.
  [[nodiscard]] const precision_choice& choice_at(std::size_t t, std::uint64_t step) const {
    const tensor_state& s = state_.at(t);
    if (s.fixed) return s.fixed_choice;
    if (s.wide) return wider_;
    return phase_choice(step);
  }

  /// After the exchange of step `step`: tensor t's statistics summed over the workers (the
  /// simulation's `scaled` counts, or every rank's counts of its own values summed).
  void observe(std::size_t t, std::uint64_t step, const value_stats& s) { observe(t, step, s.count, lost(s)); }

  /// The same from the two integers a rank sends: values rounded, values lost.
  void observe(std::size_t t, std::uint64_t step, std::uint64_t count, std::uint64_t lost_values) {
    tensor_state& s = state_.at(t);
    if (!adaptive_ || s.fixed) return;
    const double f = count ? static_cast<double>(lost_values) / static_cast<double>(count) : 0.0;
    if (!s.wide && f > above_) {
      s.wide = true;
      s.since = step + 1;
    } else if (s.wide && step + 1 >= s.since + hold_ && f <= below_) {
      s.wide = false;
    }
  }

  /// Values lost to the format: flushed to zero, or overflowed.
  [[nodiscard]] static std::uint64_t lost(const value_stats& s) noexcept { return s.underflow + s.overflow; }

  /// Whether observe() can change anything (an adaptive rule): an exchange that needs no
  /// statistics need not gather them.
  [[nodiscard]] bool needs_statistics() const noexcept { return adaptive_; }

  /// Every format the policy can choose, the base first, each once.
  [[nodiscard]] std::vector<format> formats() const {
    std::vector<format> out;
    for (const precision_choice& c : choices()) {
      bool seen = false;
      for (const format& g : out) seen |= g == c.fmt;
      if (!seen) out.push_back(c.fmt);
    }
    return out;
  }

  /// Every choice the policy can make, the base first, each once.
  [[nodiscard]] std::vector<precision_choice> choices() const {
    std::vector<precision_choice> out{base_};
    const auto add = [&out](const precision_choice& c) {
      for (const precision_choice& g : out)
        if (g == c) return;
      out.push_back(c);
    };
    for (const phase& p : phases_) add(p.c);
    for (const tensor_state& s : state_)
      if (s.fixed) add(s.fixed_choice);
    if (adaptive_) add(wider_);
    return out;
  }

  [[nodiscard]] std::size_t tensors() const noexcept { return state_.size(); }
  [[nodiscard]] format base() const noexcept { return base_.fmt; }

  /// A policy from text (docs/policy.md): rules separated by ';' or new lines, each one of
  ///   tensors I[,I...] FORMAT [...]                  (I an index, negative from the end; or A..B)
  ///   from step S FORMAT [...] | from epoch E FORMAT [...]   (epochs: steps_per_epoch > 0)
  ///   adapt FORMAT above X [below Y] [hold N] [...]          (below defaults to X, hold to 1)
  /// where [...] is [scaler NAME] [algorithm NAME]: a name of cpd::scaler_kind and one of
  /// cpd::allreduce_algorithm (to_string's).
  /// Throws std::invalid_argument naming what is wrong (and quoting the rule, its control
  /// bytes and NUL escaped as \xNN).
  [[nodiscard]] static precision_policy parse(std::string_view spec, format base, std::size_t tensors,
                                              std::uint64_t steps_per_epoch = 0) {
    return parse_text(spec, base, tensors, steps_per_epoch, false);
  }

  /// Every choice of the policy that parse() would build (choices()), before the steps of an
  /// epoch are known: every rule is checked as parse() checks it, except the order of a phase
  /// in epochs against one in steps, which parse() checks once it knows the steps of an epoch.
  [[nodiscard]] static std::vector<precision_choice> parse_choices(std::string_view spec, format base,
                                                                   std::size_t tensors) {
    return parse_text(spec, base, tensors, 0, true).choices();
  }

  /// The rules of a text as parse() reads them: split at ';' and new lines, each rule's words
  /// (split at blanks, tabs and carriage returns) joined by one space, empty rules left out.
  [[nodiscard]] static std::vector<std::string> rules(std::string_view spec) {
    std::vector<std::string> out;
    for (std::string_view rule : split(spec, ";\n")) {
      std::string r;
      for (std::string_view w : words(rule)) r += (r.empty() ? "" : " ") + std::string(w);
      if (!r.empty()) out.push_back(std::move(r));
    }
    return out;
  }

 private:
  struct tensor_state {
    bool fixed = false;
    precision_choice fixed_choice;
    bool wide = false;
    std::uint64_t since = 0;  // first step in the wider format
  };
  struct phase {
    std::uint64_t step;
    precision_choice c;
  };

  /// A phase rule as parse_text saw it, for the message when the next one is out of order.
  struct phase_seen {
    std::string rule;
    bool epochs = false;  // given in epochs
    std::uint64_t at = 0;  // its step, or its epoch while the steps of an epoch are unknown
  };

  /// parse() and parse_choices(): with epochs_unknown, a phase in epochs keeps its epoch as
  /// its step and is ordered only against the other phases in epochs (its choices are right,
  /// its steps are not: the policy is only for choices()).
  static precision_policy parse_text(std::string_view spec, format base, std::size_t tensors,
                                     std::uint64_t steps_per_epoch, bool epochs_unknown) {
    precision_policy p(base, tensors);
    std::vector<phase_seen> seen;  // the last phase in steps, and the last in epochs
    const std::vector<std::string> all = rules(spec);
    for (const std::string& r : all) {
      const std::vector<std::string_view> w = words(r);
      if (w[0] == "tensors") {
        if (w.size() < 3 || w.size() % 2 == 0)
          fail_rule(r, "tensors I[,I...] FORMAT [scaler S] [algorithm A]");
        const precision_choice f = parse_choice(w, 2, r);
        for (std::string_view item : split(w[1], ",")) {
          const std::size_t dots = item.find("..");
          if (dots == std::string_view::npos) {
            p.tensor(p.index(parse_int(item, r), r), f);
            continue;
          }
          const long a = p.index(parse_int(item.substr(0, dots), r), r);
          const long b = p.index(parse_int(item.substr(dots + 2), r), r);
          if (a > b) fail_rule(r, "the range " + detail::printable(item) + " is empty");
          for (long i = a; i <= b; ++i) p.tensor(i, f);
        }
      } else if (w[0] == "from") {
        p.parse_phase(w, r, steps_per_epoch, epochs_unknown, seen);
      } else if (w[0] == "adapt") {
        if (w.size() < 4 || w.size() % 2 != 0)
          fail_rule(r, "adapt FORMAT above X [below Y] [hold N] [scaler S] [algorithm A]");
        precision_choice f{parse_format(w[1], r), {}, {}};
        double above = -1, below = -1;
        long hold = 1;
        for (std::size_t i = 2; i + 1 < w.size(); i += 2) {
          if (w[i] == "above") above = parse_fraction(w[i + 1], r);
          else if (w[i] == "below") below = parse_fraction(w[i + 1], r);
          else if (w[i] == "hold") hold = parse_int(w[i + 1], r);
          else if (!parse_option(f, w[i], w[i + 1], r))
            fail_rule(r, "'" + detail::printable(w[i]) + "' is not above, below, hold, scaler or algorithm");
        }
        if (above < 0) fail_rule(r, "adapt needs 'above X'");
        if (hold < 1) fail_rule(r, "hold is at least 1 step");
        p.adaptive(f, above, below < 0 ? above : below, static_cast<std::uint64_t>(hold));
      } else {
        fail_rule(r, "a rule starts with tensors, from or adapt");
      }
    }
    if (all.empty()) fail_policy("the policy has no rule");
    return p;
  }

  /// `from step S FORMAT [...]` or `from epoch E FORMAT [...]`, after the phases in `seen`.
  void parse_phase(const std::vector<std::string_view>& w, const std::string& r, std::uint64_t steps_per_epoch,
                   bool epochs_unknown, std::vector<phase_seen>& seen) {
    if (w.size() < 4 || w.size() % 2 != 0 || (w[1] != "step" && w[1] != "epoch"))
      fail_rule(r, "from step S FORMAT, or from epoch E FORMAT (then [scaler S] [algorithm A])");
    const long v = parse_int(w[2], r);
    if (v < 0) fail_rule(r, "a step or an epoch is not negative");
    phase_seen now{r, w[1] == "epoch", static_cast<std::uint64_t>(v)};
    const std::string per_epoch = " (" + std::to_string(steps_per_epoch) + " steps an epoch)";
    if (now.epochs && !epochs_unknown) {
      if (steps_per_epoch == 0) fail_rule(r, "epochs are not known here; give a step");
      if (now.at > UINT64_MAX / steps_per_epoch)
        fail_rule(r, "epoch " + std::to_string(v) + " is more than 2^64 steps" + per_epoch);
      now.at *= steps_per_epoch;
    }
    const bool as_epochs = now.epochs && epochs_unknown;  // then ordered among the epochs only
    for (const phase_seen& before : seen) {
      if ((before.epochs && epochs_unknown) != as_epochs || now.at > before.at) continue;
      const char* unit = as_epochs ? " (epoch " : " (step ";
      fail_policy("'" + detail::printable(r) + "'" + unit + std::to_string(now.at) + ") is not after '" +
                  detail::printable(before.rule) + "'" + unit + std::to_string(before.at) +
                  "): phases must come in increasing order of their steps" +
                  ((now.epochs || before.epochs) && !epochs_unknown ? per_epoch : ""));
    }
    const precision_choice c = parse_choice(w, 3, r);
    if (epochs_unknown) phases_.push_back({now.at, c});  // (for choices() only)
    else from_step(now.at, c);
    seen.erase(std::remove_if(seen.begin(), seen.end(),
                              [&](const phase_seen& b) { return (b.epochs && epochs_unknown) == as_epochs; }),
               seen.end());
    seen.push_back(std::move(now));
  }

  const precision_choice& phase_choice(std::uint64_t step) const {
    const precision_choice* c = &base_;
    for (const phase& p : phases_)
      if (step >= p.step) c = &p.c;
    return *c;
  }

  /// `scaler NAME` or `algorithm NAME` into c; false for another key.
  static bool parse_option(precision_choice& c, std::string_view key, std::string_view value, const std::string& rule) {
    if (key == "scaler") set_named(c.scaler, "scaler", value, rule);
    else if (key == "algorithm") set_named(c.algorithm, "algorithm", value, rule);
    else return false;
    return true;
  }

  /// slot = the value of E named `value` (from_string's names); fails naming the names of E.
  template <class E>
  static void set_named(std::optional<E>& slot, const char* key, std::string_view value, const std::string& rule) {
    if (slot) fail_rule(rule, std::string(key) + " twice");
    slot = try_from_string<E>(value);
    if (!slot)
      fail_policy(std::string(key) + " '" + detail::printable(value) + "' is not one of " + names_of<E>() + " (in '" +
                  detail::printable(rule) + "')");
  }

  /// FORMAT at w[at], then pairs of `scaler NAME` / `algorithm NAME` to the end.
  static precision_choice parse_choice(const std::vector<std::string_view>& w, std::size_t at, const std::string& rule) {
    precision_choice c{parse_format(w[at], rule), {}, {}};
    for (std::size_t i = at + 1; i + 1 < w.size(); i += 2)
      if (!parse_option(c, w[i], w[i + 1], rule))
        fail_rule(rule, "'" + detail::printable(w[i]) + "' is not scaler or algorithm");
    return c;
  }

  long index(long t, const std::string& rule) const {
    const long n = static_cast<long>(state_.size());
    const long i = t < 0 ? n + t : t;
    if (i < 0 || i >= n)
      fail_rule(rule,
                "tensor " + std::to_string(t) + " does not exist (the model has " + std::to_string(n) + " tensors)");
    return i;
  }

  [[noreturn]] static void fail_policy(const std::string& what) {
    detail::fail_invalid("cpd::precision_policy: " + what);
  }

  /// "'RULE': what", the rule's control bytes and NUL escaped (a NUL would end what()).
  [[noreturn]] static void fail_rule(const std::string& rule, const std::string& what) {
    fail_policy("'" + detail::printable(rule) + "': " + what);
  }

  static std::vector<std::string_view> split(std::string_view s, std::string_view seps) {
    std::vector<std::string_view> out;
    std::size_t at = 0;
    while (true) {
      const std::size_t e = s.find_first_of(seps, at);
      out.push_back(s.substr(at, e == std::string_view::npos ? std::string_view::npos : e - at));
      if (e == std::string_view::npos) return out;
      at = e + 1;
    }
  }

  static std::vector<std::string_view> words(std::string_view s) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < s.size()) {
      while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r')) ++i;
      std::size_t j = i;
      while (j < s.size() && s[j] != ' ' && s[j] != '\t' && s[j] != '\r') ++j;
      if (j > i) out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }

  static format parse_format(std::string_view name, const std::string& rule) {
    std::string why;
    const auto f = format::try_parse(name, &why);
    if (!f) fail_rule(rule, why);  // (why quotes the name escaped)
    return *f;
  }

  static long parse_int(std::string_view s, const std::string& rule) {
    std::size_t i = 0;
    const bool neg = !s.empty() && s[0] == '-';
    if (neg) ++i;
    if (i == s.size()) fail_rule(rule, "'" + detail::printable(s) + "' is not an integer");
    long v = 0;
    for (; i < s.size(); ++i) {
      if (s[i] < '0' || s[i] > '9' || v > 100000000000L)
        fail_rule(rule, "'" + detail::printable(s) + "' is not an integer");
      v = v * 10 + (s[i] - '0');
    }
    return neg ? -v : v;
  }

  static double parse_fraction(std::string_view s, const std::string& rule) {
    const std::string t(s);  // strtod: the C locale's decimal point (programs that keep it)
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size() || !(v >= 0 && v <= 1))
      fail_rule(rule, "'" + detail::printable(t) + "' is not a fraction in [0, 1]");
    return v;
  }

  precision_choice base_;
  std::vector<tensor_state> state_;
  std::vector<phase> phases_;
  bool adaptive_ = false;
  precision_choice wider_;
  double above_ = 1, below_ = 1;
  std::uint64_t hold_ = 1;
};

}  // namespace cpd
