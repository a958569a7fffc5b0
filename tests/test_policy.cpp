// SPDX-License-Identifier: MIT
// Precision policies (cpd/exchange/policy.hpp): per-tensor, phase and adaptive rules, step by
// step against hand-worked sequences, and the text form with its errors.

#include <cpd/exchange/policy.hpp>

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

namespace {

const cpd::format e3m0 = cpd::format::parse("e3m0");
const cpd::format e4m3 = cpd::format::parse("e4m3fn");
const cpd::format e5m2 = cpd::format::parse("e5m2");
const cpd::format fp32 = cpd::format::parse("fp32");

std::string message(const std::string& spec, std::size_t tensors = 6, std::uint64_t steps_per_epoch = 0) {
  try {
    (void)cpd::precision_policy::parse(spec, e3m0, tensors, steps_per_epoch);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("policy: the base format, per-tensor rules, phases") {
  cpd::precision_policy p(e3m0, 6);
  CHECK(p.at(0, 0) == e3m0);
  CHECK(p.at(5, 1000000) == e3m0);
  CHECK(!p.needs_statistics());
  p.tensor(0, e5m2).tensor(-1, fp32).from_step(10, e4m3).from_step(20, e5m2);
  for (std::uint64_t step : {0u, 9u, 10u, 19u, 20u, 500u}) {
    CHECK(p.at(0, step) == e5m2);  // a tensor's own rule wins over every phase
    CHECK(p.at(5, step) == fp32);
  }
  CHECK(p.at(2, 9) == e3m0);
  CHECK(p.at(2, 10) == e4m3);
  CHECK(p.at(2, 19) == e4m3);
  CHECK(p.at(2, 20) == e5m2);
  CHECK(p.formats() == std::vector<cpd::format>{e3m0, e4m3, e5m2, fp32});
  CHECK_THROWS_AS(p.tensor(6, e5m2), std::invalid_argument);
  CHECK_THROWS_AS(p.tensor(-7, e5m2), std::invalid_argument);
  CHECK_THROWS_AS(p.from_step(20, e4m3), std::invalid_argument);  // phases in increasing order
}

TEST_CASE("policy: adaptive, step by step") {
  cpd::precision_policy p(e3m0, 3);
  p.tensor(2, e4m3).adaptive(e5m2, 0.10, 0.01, 3);
  CHECK(p.needs_statistics());
  // step 0: tensor 0 loses 20 of 100 (above 0.10), tensor 1 loses 10 of 100 (not above)
  p.observe(0, 0, 100, 20);
  p.observe(1, 0, 100, 10);
  p.observe(2, 0, 100, 100);  // a tensor with its own rule never adapts
  CHECK(p.at(0, 1) == e5m2);
  CHECK(p.at(1, 1) == e3m0);
  CHECK(p.at(2, 1) == e4m3);
  // steps 1 and 2 in e5m2 lose nothing, but the hold is 3 steps (1, 2, 3)
  p.observe(0, 1, 100, 0);
  CHECK(p.at(0, 2) == e5m2);
  p.observe(0, 2, 100, 0);
  CHECK(p.at(0, 3) == e5m2);
  // step 3: the hold is over, but 2 of 100 is above `below` (0.01): it stays
  p.observe(0, 3, 100, 2);
  CHECK(p.at(0, 4) == e5m2);
  // step 4: 1 of 100 is at most 0.01: back to the base from step 5
  p.observe(0, 4, 100, 1);
  CHECK(p.at(0, 5) == e3m0);
  // value_stats: flushed and overflowed values count, zeros do not
  cpd::value_stats s;
  s.count = 1000;
  s.zeros = 900;
  s.underflow = 60;
  s.overflow = 41;
  CHECK(cpd::precision_policy::lost(s) == 101);
  p.observe(1, 5, s);
  CHECK(p.at(1, 6) == e5m2);
  // no values: nothing lost
  p.observe(0, 5, 0, 0);
  CHECK(p.at(0, 6) == e3m0);
  CHECK_THROWS_AS(p.adaptive(e5m2, 0.1, 0.1), std::invalid_argument);  // one adaptive rule
  cpd::precision_policy q(e3m0, 1);
  CHECK_THROWS_AS(q.adaptive(e5m2, 0.1, 0.2), std::invalid_argument);  // below > above
  CHECK_THROWS_AS(q.adaptive(e5m2, 1.5, 0.2), std::invalid_argument);
  CHECK_THROWS_AS(q.adaptive(e5m2, 0.1, 0.0, 0), std::invalid_argument);
}

TEST_CASE("policy: the text form") {
  const auto p = cpd::precision_policy::parse(
      "tensors 0,-2..-1 e5m2; from epoch 2 e4m3fn ;adapt fp32 above 0.05 below 0.001 hold 50", e3m0, 6, 100);
  CHECK(p.at(0, 0) == e5m2);
  CHECK(p.at(4, 0) == e5m2);
  CHECK(p.at(5, 999) == e5m2);
  CHECK(p.at(1, 199) == e3m0);
  CHECK(p.at(1, 200) == e4m3);
  CHECK(p.needs_statistics());
  CHECK(p.formats() == std::vector<cpd::format>{e3m0, e4m3, e5m2, fp32});
  const auto q = cpd::precision_policy::parse("adapt e5m2 above 0.1", e3m0, 2);
  auto r = q;
  r.observe(0, 0, 10, 2);
  CHECK(r.at(0, 1) == e5m2);
  r.observe(0, 1, 10, 1);  // below defaults to above (0.1), hold to 1
  CHECK(r.at(0, 2) == e3m0);
  CHECK(cpd::precision_policy::parse("from step 5 e5m2", e3m0, 2).at(1, 5) == e5m2);

  CHECK(message("") == "cpd::precision_policy: the policy has no rule");
  CHECK(message("layers 0 e5m2").find("a rule starts with tensors, from or adapt") != std::string::npos);
  CHECK(message("tensors 6 e5m2").find("tensor 6 does not exist (the model has 6 tensors)") != std::string::npos);
  CHECK(message("tensors 3..1 e5m2").find("is empty") != std::string::npos);
  CHECK(message("tensors x e5m2").find("'x' is not an integer") != std::string::npos);
  CHECK(message("tensors 0 e4m3x").find("'tensors 0 e4m3x': ") != std::string::npos);
  CHECK(message("from epoch 2 e5m2").find("epochs are not known here") != std::string::npos);
  CHECK(message("from epoch 2 e5m2", 6, 10).empty());
  CHECK(message("from step -1 e5m2").find("not negative") != std::string::npos);
  CHECK(message("from step 9 e5m2; from step 3 e4m3").find("increasing order") != std::string::npos);
  CHECK(message("adapt e5m2 below 0.1").find("needs 'above X'") != std::string::npos);
  CHECK(message("adapt e5m2 above 2").find("not a fraction in [0, 1]") != std::string::npos);
  CHECK(message("adapt e5m2 above 0.1 hold 0").find("at least 1 step") != std::string::npos);
  CHECK(message("adapt e5m2 above 0.1; adapt fp32 above 0.2").find("one adaptive rule") != std::string::npos);
}

TEST_CASE("policy: a rule may name the scaling rule and the algorithm of its tensors") {
  auto p = cpd::precision_policy::parse(
      "tensors 0 e5m2 scaler aps algorithm two_step; from step 10 e4m3fn algorithm all_gather;"
      "adapt e5m2 above 0.5 hold 2 scaler aps",
      e3m0, 3);
  using choice = cpd::precision_choice;
  constexpr auto aps = cpd::scaler_kind::aps;
  constexpr auto two_step = cpd::allreduce_algorithm::two_step, all_gather = cpd::allreduce_algorithm::all_gather;
  CHECK(p.choice_at(0, 0) == choice{e5m2, aps, two_step});
  CHECK(p.choice_at(1, 9) == choice{e3m0, {}, {}});  // the base: the run's rule and algorithm
  CHECK(p.choice_at(1, 10) == choice{e4m3, {}, all_gather});
  CHECK(p.at(1, 10) == e4m3);
  p.observe(2, 12, 10, 6);
  CHECK(p.choice_at(2, 13) == choice{e5m2, aps, {}});
  CHECK(p.choice_at(1, 13) == choice{e4m3, {}, all_gather});
  // every choice once, the base first; the formats once each
  CHECK(p.choices() == std::vector<choice>{{e3m0, {}, {}}, {e4m3, {}, all_gather}, {e5m2, aps, two_step},
                                           {e5m2, aps, {}}});
  CHECK(p.formats() == std::vector<cpd::format>{e3m0, e4m3, e5m2});
  // the same format with and without a rule are two choices
  CHECK(cpd::precision_policy::parse("tensors 0 e3m0 scaler aps", e3m0, 2).choices().size() == 2);

  CHECK(message("tensors 0 e5m2 scaler").find("tensors I[,I...] FORMAT [scaler S] [algorithm A]") !=
        std::string::npos);
  CHECK(message("tensors 0 e5m2 scaler aps scaler none").find("scaler twice") != std::string::npos);
  CHECK(message("from step 3 e5m2 rule aps").find("'rule' is not scaler or algorithm") != std::string::npos);
  CHECK(message("adapt e5m2 above 0.1 after 3").find("is not above, below, hold, scaler or algorithm") !=
        std::string::npos);
  // the names are cpd::scaler_kind's and cpd::allreduce_algorithm's, checked as the rule is read
  CHECK(cpd::precision_policy::parse("tensors 0 e5m2 scaler amax-sqrtw algorithm native", e3m0, 2).choice_at(0, 0) ==
        choice{e5m2, cpd::scaler_kind::amax_sqrtw, cpd::allreduce_algorithm::native});
  CHECK(message("tensors 0 e5m2 scaler mx99") ==
        "cpd::precision_policy: scaler 'mx99' is not one of aps, amax, amax-sqrtw, predivide, delayed, mx32, loss, "
        "none, fixed, nvfp4 (in 'tensors 0 e5m2 scaler mx99')");
  CHECK(message("from step 2 e5m2 algorithm zigzag") ==
        "cpd::precision_policy: algorithm 'zigzag' is not one of sequential, ring, halving_doubling, pipelined_ring, "
        "two_step, all_gather, native (in 'from step 2 e5m2 algorithm zigzag')");
  CHECK(message("adapt e5m2 above 0.1 algorithm two_step algorithm ring").find("algorithm twice") != std::string::npos);
}

TEST_CASE("policy: phases in epochs and in steps, ordered by the steps of an epoch") {
  // epoch 1 is step 16: a phase from step 5 after it is out of order, before it is not
  CHECK(message("from epoch 1 e4m3fn; from step 5 e5m2", 6, 16) ==
        "cpd::precision_policy: 'from step 5 e5m2' (step 5) is not after 'from epoch 1 e4m3fn' (step 16): phases must "
        "come in increasing order of their steps (16 steps an epoch)");
  const auto p = cpd::precision_policy::parse("from step 5 e5m2; from epoch 1 e4m3fn", e3m0, 6, 16);
  CHECK(p.at(0, 4) == e3m0);
  CHECK(p.at(0, 5) == e5m2);
  CHECK(p.at(0, 16) == e4m3);
  CHECK(message("from step 9 e5m2; from step 3 e4m3fn") ==
        "cpd::precision_policy: 'from step 3 e4m3fn' (step 3) is not after 'from step 9 e5m2' (step 9): phases must "
        "come in increasing order of their steps");
  CHECK(message("from epoch 100000000000 e5m2", 6, std::uint64_t(1) << 40).find("more than 2^64 steps") !=
        std::string::npos);
  // Before the steps of an epoch are known: everything else checked, the choices listed.
  using choice = cpd::precision_choice;
  constexpr auto aps = cpd::scaler_kind::aps;
  CHECK(cpd::precision_policy::parse_choices("from epoch 1 e4m3fn; from step 5 e5m2 scaler aps", e3m0, 6) ==
        std::vector<choice>{{e3m0, {}, {}}, {e4m3, {}, {}}, {e5m2, aps, {}}});
  CHECK_THROWS_WITH_AS((void)cpd::precision_policy::parse_choices("from step 9 e5m2; from step 3 e4m3fn", e3m0, 6),
                       doctest::Contains("'from step 3 e4m3fn' (step 3) is not after 'from step 9 e5m2' (step 9)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)cpd::precision_policy::parse_choices("from epoch 3 e5m2; from epoch 2 e4m3fn", e3m0, 6),
                       doctest::Contains("'from epoch 2 e4m3fn' (epoch 2) is not after 'from epoch 3 e5m2' (epoch 3)"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS((void)cpd::precision_policy::parse_choices("tensors 7 e5m2", e3m0, 6),
                       doctest::Contains("tensor 7 does not exist"), std::invalid_argument);
}

TEST_CASE("policy: the rules of a text, and messages that quote them escape control bytes and NUL") {
  CHECK(cpd::precision_policy::rules("tensors 0 e4m3\r\n\tfrom step 1   e5m2\n\n;") ==
        std::vector<std::string>{"tensors 0 e4m3", "from step 1 e5m2"});
  const char text[] = "tensors 0 e4m3\0zz after\n";
  CHECK(message(std::string(text, sizeof text - 1)) ==
        "cpd::precision_policy: 'tensors 0 e4m3\\x00zz after': tensors I[,I...] FORMAT [scaler S] [algorithm A]");
  CHECK(message("tensors 0 e5m2 \x1b[2J x") ==
        "cpd::precision_policy: 'tensors 0 e5m2 \\x1b[2J x': '\\x1b[2J' is not scaler or algorithm");
  CHECK(message("from step 1\x7f e5m2").find("'1\\x7f' is not an integer") != std::string::npos);
}
