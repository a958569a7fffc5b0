// SPDX-License-Identifier: MIT
//
// cpd._cpd: the native half of the Python package `cpd` (docs/python.md). It binds
// the library's own calls, nothing else: the bulk quantize / encode / decode of
// runtime formats, the formats' facts, the scalers of docs/scaling.md, the in-process
// simulation of an allreduce (cpd::simulate_allreduce_scaled) and the per-step work of
// one rank's side of an exchange whose messages Python moves (cpd.torch.comm_hook): the
// rank schedule of <cpd/exchange/schedule.hpp>, which cpd::mpi runs too, so that the same
// inputs give the bits of the simulation.
//
// The Python layer (python/cpd/__init__.py) checks dtypes and devices and turns torch
// tensors into arrays that share their memory; this layer takes C-contiguous buffers
// and releases the GIL around every loop over values. This file defines the module, the
// names and the formats' facts; the calls are in the parts that module.hpp lists, one
// translation unit each (they compile in parallel), over the arguments of args.hpp.

#include <cpd/core/encoding.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/names.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/stats.hpp>
#include <cpd/version.hpp>

#include "args.hpp"
#include "module.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace cpd_python {
namespace {

std::vector<std::string> format_names() { return format_names_of(cpd::compiled_formats{}); }

py::dict format_info(const std::string& name) {
  const cpd::format f = parse_format(name);
  const cpd::detail::spec& s = f.spec();
  py::dict d;
  d["name"] = f.name();
  d["bits"] = f.bits();
  d["exponent_bits"] = s.E;
  d["mantissa_bits"] = s.M;
  d["bias"] = s.bias;
  d["encoding"] = std::string(cpd::to_string(s.enc));
  d["max"] = s.max_value;
  d["smallest_normal"] = s.min_normal;
  d["smallest_subnormal"] = s.min_positive;
  d["emax"] = s.emax;
  d["emin"] = s.emin;
  d["has_sign"] = s.has_sign;
  d["has_inf"] = s.has_inf;
  d["has_nan"] = s.has_nan;
  d["has_negative_zero"] = s.has_neg_zero;
  d["has_subnormals"] = s.has_subnormals;
  d["has_zero"] = s.has_zero;
  d["fits_float"] = s.fits_float;
  return d;
}

}  // namespace
}  // namespace cpd_python

PYBIND11_MODULE(_cpd, m) {
  using namespace cpd_python;
  m.doc() = "cpd's native calls (use the package cpd: docs/python.md)";
  m.attr("version") = std::to_string(CPD_VERSION_MAJOR) + "." + std::to_string(CPD_VERSION_MINOR) + "." + std::to_string(CPD_VERSION_PATCH);
  bind_values(m);
  bind_encode(m);
  bind_decode(m);
  bind_posits(m);
  m.def("random_bits", [](std::uint64_t seed, std::uint64_t stream, std::uint64_t counter,
                          const std::string& generator) {
    return cpd::random_bits(seed, stream, counter, parse_generator(generator));
  });
  m.def("format_names", &format_names);
  m.def("format_info", &format_info);
  m.attr("value_stats_fields") = [] {
    py::list l;
    for (const cpd::value_stats_field& f : cpd::value_stats_fields) l.append(f.name);
    return py::tuple(l);
  }();
  m.attr("roundings") = names_list(cpd::enum_names<cpd::rounding>::values);
  m.attr("stochastic_variants") = names_list(cpd::enum_names<cpd::stochastic_variant>::values);
  m.attr("subnormal_modes") = names_list(cpd::enum_names<cpd::subnormal_mode>::values);
  m.attr("exponent_ranges") = names_list(cpd::enum_names<cpd::exponent_range>::values);
  m.attr("overflows") = names_list(cpd::enum_names<cpd::overflow>::values);
  m.attr("generators") = names_list(cpd::enum_names<cpd::random_generator>::values);
  m.attr("default_generator") = cpd::to_string(cpd::default_generator);
  m.def("hardware_threads", [] { return std::max(1u, std::thread::hardware_concurrency()); });
  bind_scalers(m);
  bind_exchange(m);
  bind_blocks(m);
  bind_block_exchange(m);
}
