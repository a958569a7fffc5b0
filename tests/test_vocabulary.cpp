// SPDX-License-Identifier: MIT
// cpd's one vocabulary (issue 31, item 4): the names of every choice both ways
// (to_string / from_string), the one algorithm enum and the subset each consumer runs,
// the one statistics record and its field list, the scalers by name (make_scaler) and
// the first steps of every exchange written once (exchange_scales).

#include <cpd/cpd.hpp>
#include <cpd/exchange/rank_exchange.hpp>

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

std::vector<float> random_values(std::size_t n, unsigned seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

}  // namespace

TEST_CASE("names: every choice read back from its name, and one message for a bad name") {
  check_round_trip<cpd::rounding>(
      "cpd::rounding", "nearest_even, nearest_away, toward_zero, upward, downward, stochastic, odd, nearest_zero");
  check_round_trip<cpd::overflow>("cpd::overflow", "infinity, saturate, propagate");
  check_round_trip<cpd::stochastic_variant>("cpd::stochastic_variant", "a, b, c, equal");
  check_round_trip<cpd::subnormal_mode>("cpd::subnormal_mode", "keep, flush");
  check_round_trip<cpd::exponent_range>("cpd::exponent_range", "format, unbounded");
  check_round_trip<cpd::encoding_kind>("cpd::encoding_kind",
                                       "ieee, fn, fnuz, finite, fnu, p3109_sf, p3109_se, p3109_uf, p3109_ue");
  check_round_trip<cpd::allreduce_algorithm>(
      "cpd::allreduce_algorithm", "sequential, ring, halving_doubling, pipelined_ring, two_step, all_gather, native");
  check_round_trip<cpd::scaler_kind>("cpd::scaler_kind",
                                     "aps, amax, amax-sqrtw, predivide, delayed, mx32, loss, none, fixed, nvfp4");
  check_round_trip<cpd::amax_algorithm>("cpd::amax_algorithm", "max, most_recent");
  check_round_trip<cpd::mx_scale_rule>("cpd::mx_scale_rule", "floor, ceil, rceil, even");
  check_round_trip<cpd::random_generator>("cpd::random_generator", "v1, v2");
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

TEST_CASE("one statistics record: the field list covers every counter, sums and compares by it") {
  CHECK(std::size(cpd::value_stats_fields) * sizeof(std::uint64_t) == sizeof(cpd::value_stats));
  std::set<std::string> names;
  cpd::value_stats a, b;
  std::uint64_t k = 1;
  for (const cpd::value_stats_field& f : cpd::value_stats_fields) {
    CHECK(names.insert(f.name).second);
    a.*f.member = k;
    b.*f.member = 10 * k++;
  }
  CHECK(names == std::set<std::string>{"count", "zeros", "underflow", "overflow", "nan", "saturated", "nan_inputs",
                                       "inf_inputs"});
  // every member is listed once: setting each through the list gave each its own value
  CHECK((a.count == 1 && a.zeros == 2 && a.underflow == 3 && a.overflow == 4 && a.nan == 5 && a.saturated == 6 &&
         a.nan_inputs == 7 && a.inf_inputs == 8));
  cpd::value_stats s = a;
  s += b;
  k = 1;
  for (const cpd::value_stats_field& f : cpd::value_stats_fields) CHECK(s.*f.member == 11 * k++);
  for (const cpd::value_stats_field& f : cpd::value_stats_fields) {
    cpd::value_stats c = a;
    CHECK(c == a);
    c.*f.member += 1;
    CHECK(c != a);
  }
}

TEST_CASE("the scalers' multi-tensor statistics, written once") {
  const std::vector<float> t0 = random_values(300, 1, 3.0f), t1 = random_values(5, 2, 1e-3f);
  std::vector<float> t2 = random_values(40, 3, 1.0f);
  t2[7] = std::numeric_limits<float>::infinity();
  const float* g[3] = {t0.data(), t1.data(), t2.data()};
  const std::size_t n[3] = {t0.size(), t1.size(), t2.size()};
  const auto check = [&](const auto& s) {
    typename std::decay_t<decltype(s)>::statistic_type out[3];
    s.statistics(g, n, 3, out);
    for (int t = 0; t < 3; ++t) {
      const auto v = s.statistic(g[t], n[t]);
      CHECK(std::memcmp(&out[t], &v, 4) == 0);
    }
  };
  check(cpd::aps<cpd::float8_e4m3fn>(4));
  check(cpd::fixed_scaling{});
  check(cpd::current_scaling<cpd::float8_e5m2>());
  check(cpd::delayed_scaling<cpd::float8_e5m2>());
  check(cpd::amax_sqrtw_scaling<cpd::float8_e4m3fn>(8));
  check(cpd::predivide_scaling(8));
  check(cpd::dynamic_loss_scaling());
}

TEST_CASE("make_scaler: each rule by name is the typed scaler, through the protocol and through visit") {
  using F = cpd::float8_e4m3fn;
  const cpd::format f = cpd::format::of<F>();
  cpd::scaler_options o;
  o.world_size = 4;
  o.margin = 1;
  const std::vector<float> x = random_values(1000, 7, 0.25f);
  // aps: the int32 statistic and the power-of-two scale of cpd::aps<F>(4, 1)
  auto a = cpd::make_scaler("aps", f, o);
  const cpd::aps<F> typed(4, 1);
  CHECK(a.kind() == cpd::scaler_kind::aps);
  CHECK(a.bound_format() == f);
  CHECK_FALSE(a.float_statistic());
  CHECK(a.identity() == cpd::aps<F>::identity);
  CHECK(a.statistic(x.data(), x.size()) == typed.statistic(x.data(), x.size()));
  CHECK(a.combine(3, -7) == 3);
  CHECK(std::get<cpd::pow2_scale>(a.select(5)) == typed.select(5));
  bool visited = false;
  a.visit(f, [&](auto tag, auto& s) {  // (instantiated for every rule and format; called with aps<F>)
    using S = std::decay_t<decltype(s)>;
    if constexpr (std::is_same_v<S, cpd::aps<decltype(tag)>>) {
      visited = std::is_same_v<decltype(tag), F> && s.world_size() == 4 && s.margin() == 1;
    }
  });
  CHECK(visited);
  // an exchange through visit gives the bits of the same exchange with the typed scaler
  const std::vector<float> y = random_values(1000, 8, 0.5f);
  const float* g[2] = {x.data(), y.data()};
  std::vector<float> via(x.size()), direct(x.size());
  cpd::scaler_options two = o;
  two.world_size = 2;
  auto a2 = cpd::make_scaler("aps", f, two);
  a2.visit(f, [&](auto tag, auto& s) { cpd::simulate_allreduce<decltype(tag)>(g, via.data(), x.size(), 2, s); });
  cpd::simulate_allreduce<F>(g, direct.data(), x.size(), 2, cpd::aps<F>(2, 1));
  CHECK(std::memcmp(via.data(), direct.data(), 4 * x.size()) == 0);
  // amax: the float statistic travels as its bits; the scale is current_scaling's
  auto m = cpd::make_scaler(cpd::scaler_kind::amax, f, o);
  CHECK(m.float_statistic());
  const cpd::current_scaling<F> cur({1, 0.0f, false});
  const float amax = cur.statistic(x.data(), x.size());
  CHECK(static_cast<std::uint32_t>(m.statistic(x.data(), x.size())) == bits_of(amax));
  CHECK(std::get<cpd::float_scale>(m.select(static_cast<std::int32_t>(bits_of(amax)))) == cur.select(amax));
  // the stateful rules keep their state in the scaler: delayed's scale comes from earlier steps
  auto d = cpd::make_scaler("delayed", f, o);
  cpd::delayed_scaling<F> dt({1024, cpd::amax_algorithm::max, 1});
  for (float step_amax : {2.0f, 0.5f, 8.0f}) {
    const auto w = static_cast<std::int32_t>(bits_of(step_amax));
    CHECK(std::get<cpd::float_scale>(d.select(w)) == dt.select(step_amax));
  }
  // the rules of no format serve every format
  auto p = cpd::make_scaler("predivide", std::nullopt, o);
  CHECK_FALSE(p.bound_format().has_value());
  CHECK(std::get<cpd::float_scale>(p.select(0)) == cpd::predivide_scaling(4).select(0));
  for (const cpd::format& h : {cpd::format::of<cpd::float8_e5m2>(), cpd::format::of<cpd::bfloat16>()}) {
    bool ok = false;
    p.visit(h, [&](auto, auto& s) { ok = std::is_same_v<std::decay_t<decltype(s)>, cpd::predivide_scaling>; });
    CHECK(ok);
  }
  cpd::scaler_options e;
  e.exponent = -3;
  CHECK(std::get<cpd::pow2_scale>(cpd::make_scaler("fixed", std::nullopt, e).select(1)) == cpd::pow2_scale{-3, true});
  CHECK(std::get<cpd::pow2_scale>(cpd::make_scaler("none", std::nullopt).select(0)) == cpd::pow2_scale{});
  CHECK(std::get<cpd::float_scale>(cpd::make_scaler("loss", std::nullopt).select(0)).value == 65536.0f);
}

TEST_CASE("make_scaler: what it cannot make is refused by name") {
  CHECK(error_of([] { (void)cpd::make_scaler("aps", std::nullopt); }) == "cpd::make_scaler: aps needs a format");
  CHECK(error_of([] { (void)cpd::make_scaler("mx32", cpd::format::parse("e4m3fn")); })
            .find("mx32 scales blocks of 32 values") != std::string::npos);
  CHECK(error_of([] { (void)cpd::make_scaler("nvfp4", cpd::format::parse("e2m1fn")); })
            .find("nvfp4 scales blocks of 16 values") != std::string::npos);
  CHECK(error_of([] { (void)cpd::make_scaler("apss", std::nullopt); })
            .find("'apss' is not one of aps, amax, amax-sqrtw,") != std::string::npos);
  CHECK(error_of([] { (void)cpd::make_scaler("amax", cpd::format::parse("e6m9")); }) ==
        "cpd::make_scaler: format e6m9 is not among the formats compiled in");
  CHECK(error_of([] { (void)cpd::make_scaler("aps", cpd::format::parse("e5m2")); }) ==
        "cpd::aps: world_size must be >= 1");
  CHECK(error_of([] {
          cpd::scaler_options o;
          o.world_size = 2;
          auto s = cpd::make_scaler("aps", cpd::format::parse("e5m2"), o);
          s.visit(cpd::format::parse("e4m3fn"), [](auto, auto&) {});
        }) == "cpd::any_scaler::visit: the aps scaler is for e5m2, not e4m3fn");
  CHECK(error_of([] {
          cpd::make_scaler("none", std::nullopt).visit(cpd::format::parse("e6m9"), [](auto, auto&) {});
        }) == "cpd::any_scaler::visit: format e6m9 is not among the scaler's formats");
}

TEST_CASE("exchange_scales: one worker's statistics, the caller's combine, the scales") {
  using F = cpd::float8_e5m2;
  constexpr int W = 3;
  const std::size_t n[2] = {100, 7};
  std::vector<std::vector<float>> g, res;
  for (int r = 0; r < W; ++r)
    for (std::size_t t = 0; t < 2; ++t) {
      g.push_back(random_values(n[t], 10 + 2 * r + static_cast<unsigned>(t), 1.0f + static_cast<float>(r)));
      res.push_back(random_values(n[t], 50 + 2 * r + static_cast<unsigned>(t), 0.01f));
    }
  const cpd::aps<F> scaler(W);
  // the reference: x = g + residual, each tensor's statistic combined over the workers, selected
  std::vector<std::vector<float>> x = g;
  for (std::size_t k = 0; k < x.size(); ++k)
    for (std::size_t i = 0; i < x[k].size(); ++i) x[k][i] = g[k][i] + res[k][i];
  // every worker alone, its statistics merged by the combine with the other workers' (an allreduce of max)
  for (int me = 0; me < W; ++me) {
    std::vector<std::vector<float>> mine(res.begin() + 2 * me, res.begin() + 2 * me + 2);
    const float* xs[2];
    int calls = 0;
    const auto scales = cpd::exchange_scales(
        1, 2,
        [&](std::size_t, std::size_t t) {
          return cpd::exchange_input{g[2 * static_cast<std::size_t>(me) + t].data(), mine[t].data(), n[t]};
        },
        [&](std::size_t) -> const cpd::aps<F>& { return scaler; },
        [&](std::int32_t* st, std::size_t count) {
          ++calls;
          REQUIRE(count == 2);
          for (std::size_t t = 0; t < 2; ++t)
            for (int r = 0; r < W; ++r)
              st[t] = cpd::aps<F>::combine(st[t], scaler.statistic(x[2 * std::size_t(r) + t].data(), n[t]));
        },
        xs);
    CHECK(calls == 1);
    for (std::size_t t = 0; t < 2; ++t) {
      std::int32_t st = cpd::aps<F>::identity;
      for (int r = 0; r < W; ++r)
        st = cpd::aps<F>::combine(st, scaler.statistic(x[2 * static_cast<std::size_t>(r) + t].data(), n[t]));
      CHECK(scales[t] == scaler.select(st));
      CHECK(xs[t] == mine[t].data());  // with error feedback the exchange reads x in the residual
      CHECK(mine[t] == x[2 * static_cast<std::size_t>(me) + t]);
    }
  }
  // all the workers here (the simulation's case): combined in worker order, nothing elsewhere
  const float* xs[W];
  const auto local = cpd::exchange_scales(
      W, 1, [&](std::size_t r, std::size_t) { return cpd::exchange_input{g[2 * r].data(), nullptr, n[0]}; },
      [&](std::size_t) -> const cpd::aps<F>& { return scaler; }, cpd::local_combine{}, xs);
  std::int32_t st = cpd::aps<F>::identity;
  for (std::size_t r = 0; r < W; ++r) {
    st = cpd::aps<F>::combine(st, scaler.statistic(g[2 * r].data(), n[0]));
    CHECK(xs[r] == g[2 * r].data());
  }
  CHECK(local.size() == 1);
  CHECK(local[0] == scaler.select(st));
}
