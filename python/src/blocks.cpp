// SPDX-License-Identifier: MIT
//
// cpd._cpd: the in-process exchanges that cpd.simulate_allreduce's one power-of-two scale does
// not cover, as cpd-train runs them: with a scale per block (cpd::simulate_block_scaled_allreduce
// under OCP MX's mx32 or NVFP4's nvfp4 rule, the elements rounded nearest-even and saturating,
// as both rules define them) and through a gradient codec (cpd::simulate_codec_allreduce: each
// worker encodes, the payloads are decoded and added in float in rank order).

#include <cpd/exchange/codec.hpp>
#include <cpd/exchange/simulate.hpp>
#include <cpd/scaling/mx.hpp>
#include <cpd/scaling/nvfp4.hpp>

#include "args.hpp"
#include "module.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace cpd_python {
namespace {

/// cpd::simulate_block_scaled_allreduce<F, nearest_even, saturate> of W workers' arrays under
/// rule "mx32" (cpd::mx_block_scaling<F>) or "nvfp4" (cpd::nvfp4_block_scaling<F>).
py::dict simulate_blocks(const std::vector<py::buffer>& workers, const py::buffer& out, const std::string& fmt,
                         const std::string& rule, const std::string& algorithm, bool kahan, bool mean,
                         std::uint64_t seed, std::uint64_t stream, const std::string& generator, unsigned threads,
                         bool diagnostics) {
  const char* who = "cpd.simulate_block_scaled_allreduce";
  if (rule != "mx32" && rule != "nvfp4")
    throw std::invalid_argument(std::string(who) + ": rule must be mx32 or nvfp4, not '" + rule + "'");
  const view y = float_view(out, true, who, "out");
  const std::vector<const float*> x = worker_arrays(workers, y, who);
  cpd::allreduce_options opt = simulation_options(fmt, "nearest_even", algorithm, kahan, who);
  opt.mean = mean;
  opt.key = {seed, stream, parse_generator(generator)};
  opt.threads = threads;
  opt.diagnostics = diagnostics;
  const int w = static_cast<int>(x.size());
  cpd::block_allreduce_result r;
  (void)cpd::visit<cpd::exchange_formats>(parse_format(fmt), [&](auto tag) {
    using F = decltype(tag);
    constexpr auto ne = cpd::rounding::nearest_even;
    constexpr auto sat = cpd::overflow::saturate;
    py::gil_scoped_release nogil;
    if (rule == "mx32")
      r = cpd::simulate_block_scaled_allreduce<F, ne, sat>(x.data(), static_cast<float*>(y.ptr), y.n, w,
                                                          cpd::mx_block_scaling<F>(w), opt);
    else
      r = cpd::simulate_block_scaled_allreduce<F, ne, sat>(x.data(), static_cast<float*>(y.ptr), y.n, w,
                                                          cpd::nvfp4_block_scaling<F>(w), opt);
  });
  py::dict d;
  d["nonfinite"] = r.nonfinite;
  d["nonfinite_out"] = r.nonfinite_out;
  d["blocks"] = r.codes.size();
  d["tensor_scale"] = r.tensor_scale;
  if (diagnostics) {
    d["unscaled"] = stats_dict(r.unscaled);
    d["scaled"] = stats_dict(r.scaled);
  }
  return d;
}

/// cpd::simulate_codec_allreduce of W workers' arrays through make_codec(spec).
py::dict simulate_codec(const std::vector<py::buffer>& workers, const py::buffer& out, const std::string& spec,
                        bool mean, std::uint64_t seed, std::uint64_t stream, const std::string& generator,
                        unsigned threads) {
  const char* who = "cpd.simulate_codec_allreduce";
  const view y = float_view(out, true, who, "out");
  const std::vector<const float*> x = worker_arrays(workers, y, who);
  const std::unique_ptr<cpd::codec> c = cpd::make_codec(spec);
  cpd::codec_exchange_options opt;
  opt.mean = mean;
  opt.key = {seed, stream, parse_generator(generator)};
  opt.threads = threads;
  cpd::codec_exchange_result r;
  {
    py::gil_scoped_release nogil;
    r = cpd::simulate_codec_allreduce(*c, x.data(), static_cast<float*>(y.ptr), y.n, static_cast<int>(x.size()), opt);
  }
  py::dict d;
  d["payload_bytes"] = r.payload_bytes;
  d["bits_per_value"] = r.bits_per_value;
  d["nonfinite_out"] = r.nonfinite_out;
  d["name"] = c->name();
  return d;
}

}  // namespace

void bind_blocks(py::module_& m) {
  m.def("simulate_blocks", &simulate_blocks);
  m.def("simulate_codec", &simulate_codec);
}

}  // namespace cpd_python
