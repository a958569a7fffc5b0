// SPDX-License-Identifier: MIT
//
// cpd._cpd: the exchange of W workers' gradients in one of cpd::exchange_formats, rounding
// nearest_even or stochastic. simulate runs cpd::simulate_allreduce_scaled in process;
// Exchange is one rank's side of an exchange whose messages Python moves (cpd.torch.comm_hook):
// the rank schedule of <cpd/exchange/schedule.hpp>, which cpd::mpi runs too, so that the same
// inputs give the bits of the simulation.

#include <cpd/core/format.hpp>
#include <cpd/exchange/algorithm.hpp>
#include <cpd/exchange/rank_exchange.hpp>
#include <cpd/exchange/simulate.hpp>
#include <cpd/scaling/scale.hpp>

#include "args.hpp"
#include "exchange.hpp"
#include "module.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace cpd_python {
namespace {

/// Calls fn(F{}, integral_constant<rounding, R>{}) for the exchange's compiled (format, mode)
/// pairs: the exchange formats, nearest_even or stochastic, overflow to infinity.
template <class Fn>
void visit_exchange_mode(const cpd::format& f, cpd::rounding r, const char* who, Fn&& fn) {
  if (r != cpd::rounding::nearest_even && r != cpd::rounding::stochastic)
    throw std::invalid_argument(std::string(who) + ": the exchange rounds nearest_even or stochastic, not " +
                                cpd::to_string(r));
  visit_exchange(f, who, [&](auto tag) {
    if (r == cpd::rounding::stochastic) fn(tag, std::integral_constant<cpd::rounding, cpd::rounding::stochastic>{});
    else fn(tag, std::integral_constant<cpd::rounding, cpd::rounding::nearest_even>{});
  });
}

}  // namespace

cpd::allreduce_options simulation_options(const std::string& fmt, const std::string& rounding,
                                          const std::string& algorithm, bool kahan, const char* who) {
  cpd::allreduce_options opt;
  opt.algorithm = parse_algorithm(algorithm);
  cpd::detail::check_one_of(who, "algorithm", opt.algorithm, cpd::simulated_algorithms, "the simulation runs");
  opt.kahan = kahan;
  if (opt.algorithm == cpd::allreduce_algorithm::two_step) cpd::detail::check_accumulator(opt.accumulator, kahan);
  visit_exchange_mode(parse_format(fmt), parse_rounding(rounding), who, [](auto, auto) {});
  return opt;
}

namespace {

/// cpd::simulate_allreduce_scaled of W workers' arrays with a power-of-two scale.
py::dict simulate(const std::vector<py::buffer>& workers, const py::buffer& out, const std::string& fmt,
                  const std::string& rounding, int scale_exponent, bool scale_nonfinite, const std::string& algorithm,
                  bool kahan, bool mean, std::uint64_t seed, std::uint64_t stream, const std::string& generator,
                  unsigned threads, bool diagnostics) {
  const char* who = "cpd.simulate_allreduce";
  const view y = float_view(out, true, who, "out");
  const std::vector<const float*> x = worker_arrays(workers, y, who);
  cpd::allreduce_options opt = simulation_options(fmt, rounding, algorithm, kahan, who);
  opt.mean = mean;
  opt.key = {seed, stream, parse_generator(generator)};
  opt.threads = threads;
  opt.diagnostics = diagnostics;
  const cpd::pow2_scale sc{scale_exponent, scale_nonfinite};
  py::dict d;
  visit_exchange_mode(parse_format(fmt), parse_rounding(rounding), who, [&](auto tag, auto rc) {
    using F = decltype(tag);
    cpd::allreduce_result<cpd::pow2_scale> r;
    {
      py::gil_scoped_release nogil;
      r = cpd::simulate_allreduce_scaled<F, decltype(rc)::value>(x.data(), static_cast<float*>(y.ptr), y.n,
                                                                 static_cast<int>(x.size()), sc, opt);
    }
    d["nonfinite_out"] = r.nonfinite_out;
    if (diagnostics) {
      d["unscaled"] = stats_dict(r.unscaled);
      d["scaled"] = stats_dict(r.scaled);
    }
  });
  return d;
}

/// The exchange of one call: per tensor its size, its scale (exponent and whether some rank's
/// values held inf or NaN: formats without NaN then carry NaN bits) and its stream.
std::unique_ptr<exchange_base> make_exchange(const std::string& fmt, const std::string& rounding,
                                             const std::string& algorithm, std::vector<std::size_t> sizes,
                                             std::vector<int> exponents, std::vector<bool> nonfinite,
                                             std::uint64_t seed, std::vector<std::uint64_t> streams,
                                             const std::string& generator, int world, int rank, bool kahan, bool mean,
                                             py::buffer out) {
  const char* who = "cpd exchange";
  if (exponents.size() != sizes.size() || nonfinite.size() != sizes.size() || streams.size() != sizes.size())
    throw std::invalid_argument("cpd exchange: one scale, one nonfinite flag and one stream per tensor");
  cpd::exchange_options opt;
  opt.algorithm = parse_algorithm(algorithm);
  opt.kahan = kahan;
  opt.mean = mean;
  std::vector<cpd::pow2_scale> scales;
  std::vector<cpd::random_stream> keys;
  const cpd::random_generator g = parse_generator(generator);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    scales.push_back({exponents[i], nonfinite[i]});
    keys.push_back({seed, streams[i], g});
  }
  std::unique_ptr<exchange_base> e;
  visit_exchange_mode(parse_format(fmt), parse_rounding(rounding), who, [&](auto tag, auto rc) {
    e = std::make_unique<exchange<decltype(tag), decltype(rc)::value>>(sizes, scales, keys, world, rank, opt, out);
  });
  return e;
}


}  // namespace

void bind_exchange(py::module_& m) {
  m.def("exchange_format_names", &exchange_format_names);
  m.def("simulate", &simulate);
  m.def("check_simulation", [](const std::string& fmt, const std::string& rounding, const std::string& algorithm,
                               bool kahan) {
    (void)simulation_options(fmt, rounding, algorithm, kahan, "cpd.simulate_allreduce");
  });
  m.attr("simulated_algorithms") = names_list(cpd::simulated_algorithms);
  m.attr("rank_algorithms") = names_list(cpd::rank_algorithms);

  py::class_<exchange_base>(m, "Exchange")
      .def("load", &exchange_base::load)
      .def("steps", &exchange_base::steps)
      .def("send_to", &exchange_base::send_to)
      .def("recv_from", &exchange_base::recv_from)
      .def("send", &exchange_base::send)
      .def("recv", &exchange_base::recv)
      .def("complete", &exchange_base::complete)
      .def_readonly("out_nonfinite", &exchange_base::out_nonfinite);
  m.def("make_exchange", &make_exchange);
}

}  // namespace cpd_python
