// SPDX-License-Identifier: MIT
// cpd's one vocabulary (issue 31, item 4): the names of every choice both ways
// (to_string / from_string), the one algorithm enum and the subset each consumer runs.

#include <cpd/cpd.hpp>
#include <cpd/exchange/schedule.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace {

std::string error_of(void (*f)()) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

/// Every value of E survives to_string then from_string, every name is distinct, and a
/// name that is none of them is refused with every name listed.
template <class E>
void check_round_trip(const char* type, const std::string& all_names) {
  std::set<std::string> seen;
  for (E v : cpd::enum_names<E>::values) {
    CAPTURE(cpd::to_string(v));
    CHECK(cpd::from_string<E>(cpd::to_string(v)) == v);
    CHECK(cpd::try_from_string<E>(cpd::to_string(v)) == v);
    CHECK(seen.insert(cpd::to_string(v)).second);
  }
  CHECK(cpd::names_of<E>() == all_names);
  CHECK_FALSE(cpd::try_from_string<E>("Ring").has_value());
  const std::string message =
      std::string("cpd::from_string<") + type + ">: 'no such\\x0a' is not one of " + all_names;
  CHECK_THROWS_WITH_AS((void)cpd::from_string<E>("no such\n"), message.c_str(), std::invalid_argument);
}

}  // namespace

TEST_CASE("names: every choice read back from its name, and one message for a bad name") {
  check_round_trip<cpd::rounding>("cpd::rounding",
                                  "nearest_even, nearest_away, toward_zero, upward, downward, stochastic, odd");
  check_round_trip<cpd::overflow>("cpd::overflow", "infinity, saturate");
  check_round_trip<cpd::encoding_kind>("cpd::encoding_kind", "ieee, fn, fnuz, finite, fnu");
  check_round_trip<cpd::allreduce_algorithm>(
      "cpd::allreduce_algorithm", "sequential, ring, halving_doubling, pipelined_ring, two_step, all_gather, native");
  check_round_trip<cpd::amax_algorithm>("cpd::amax_algorithm", "max, most_recent");
  check_round_trip<cpd::mx_scale_rule>("cpd::mx_scale_rule", "floor, ceil, rceil");
  // a subset: the names it takes, and the message lists only those
  CHECK(cpd::from_string("two_step", cpd::rank_algorithms) == cpd::allreduce_algorithm::two_step);
  CHECK_THROWS_WITH_AS((void)cpd::from_string("sequential", cpd::rank_algorithms),
                       "cpd::from_string<cpd::allreduce_algorithm>: 'sequential' is not one of ring, pipelined_ring, "
                       "two_step, all_gather",
                       std::invalid_argument);
}

TEST_CASE("one algorithm enum: each consumer runs its subset and refuses the others by name") {
  using A = cpd::allreduce_algorithm;
  CHECK_FALSE(cpd::is_one_of(A::native, cpd::simulated_algorithms));
  CHECK(cpd::is_one_of(A::halving_doubling, cpd::simulated_algorithms));
  CHECK_FALSE(cpd::is_one_of(A::sequential, cpd::rank_algorithms));
  CHECK(std::size(cpd::simulated_algorithms) + 1 == std::size(cpd::enum_names<A>::values));
  // the simulation has no native (MPI's own order)
  CHECK(error_of([] {
          float x = 1, y = 0;
          const float* g[2] = {&x, &x};
          cpd::allreduce_options o;
          o.algorithm = A::native;
          cpd::simulate_allreduce<cpd::float8_e5m2>(g, &y, 1, 2, o);
        }) == "cpd::simulate_allreduce: allreduce_options::algorithm native is not one the simulation runs "
             "(sequential, ring, halving_doubling, pipelined_ring, two_step, all_gather)");
  // one rank's schedule runs ring, pipelined_ring, two_step and all_gather
  for (A a : {A::sequential, A::halving_doubling, A::native}) {
    CAPTURE(cpd::to_string(a));
    cpd::exchange_options o;
    o.algorithm = a;
    using X = cpd::rank_exchange<cpd::float8_e5m2, cpd::rounding::nearest_even, cpd::overflow::infinity,
                                 cpd::pow2_scale>;
    CHECK_THROWS_WITH_AS(X(2, 0, o),
                         (std::string("cpd::rank_exchange: algorithm ") + cpd::to_string(a) +
                          " is not one a rank runs alone (ring, pipelined_ring, two_step, all_gather)")
                             .c_str(),
                         std::invalid_argument);
  }
}
