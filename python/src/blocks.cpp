// SPDX-License-Identifier: MIT
//
// cpd._cpd: the in-process exchanges that cpd.simulate_allreduce's one power-of-two scale does
// not cover, as cpd-train runs them: with a scale per block (cpd::simulate_block_scaled_allreduce
// under OCP MX's mx32 or NVFP4's nvfp4 rule, the elements rounded nearest-even and saturating,
// as both rules define them) and through a gradient codec (cpd::simulate_codec_allreduce: each
// worker encodes, the payloads are decoded and added in float in rank order); and Codec, one
// rank's side of that exchange over a process group (cpd.torch's codec=).

#include <cpd/core/detail/fenv.hpp>
#include <cpd/exchange/codec.hpp>
#include <cpd/exchange/simulate.hpp>
#include <cpd/scaling/mx.hpp>
#include <cpd/scaling/nvfp4.hpp>

#include "args.hpp"
#include "module.hpp"

#include <pybind11/numpy.h>
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

/// A gradient codec (cpd::make_codec) for one rank's side of cpd.torch's codec exchange, whose
/// payloads Python all-gathers: the steps of cpd::mpi::codec_allreduce and the bits of
/// cpd::simulate_codec_allreduce, tensor by tensor, T tensors back to back.
class codec_side {
 public:
  explicit codec_side(const std::string& spec) : c_(cpd::make_codec(spec)) {}
  std::string name() const { return c_->name(); }
  bool stochastic() const { return c_->stochastic(); }
  std::size_t payload_size(std::size_t n) const { return c_->payload_size(n); }

  /// This rank's payloads of the tensors of `sizes` held back to back in x: tensor i encoded
  /// with the key (seed, codec_stream((seed, streams[i]), world, rank), generator).
  py::array_t<std::uint8_t> encode(const py::buffer& xb, const std::vector<std::size_t>& sizes, std::uint64_t seed,
                                   const std::vector<std::uint64_t>& streams, const std::string& generator, int world,
                                   int rank) const {
    const char* who = "cpd codec exchange";
    if (streams.size() != sizes.size()) throw std::invalid_argument(std::string(who) + ": one stream per tensor");
    if (world < 1 || rank < 0 || rank >= world)
      throw std::invalid_argument(std::string(who) + ": rank " + std::to_string(rank) + " of " + std::to_string(world));
    const view x = float_view(xb, false, who, "the values");
    if (x.n != total(sizes))
      throw std::invalid_argument(std::string(who) + ": " + std::to_string(x.n) + " values for tensors of " +
                                  std::to_string(total(sizes)));
    const cpd::random_generator g = parse_generator(generator);
    py::array_t<std::uint8_t> payload(static_cast<py::ssize_t>(bytes(sizes)));
    std::uint8_t* p = payload.mutable_data();
    const float* xp = static_cast<const float*>(x.ptr);
    py::gil_scoped_release nogil;
    for (std::size_t i = 0; i < sizes.size(); xp += sizes[i], p += c_->payload_size(sizes[i]), ++i) {
      const cpd::random_stream key{seed, streams[i], g};
      c_->encode(xp, sizes[i], p, key.with_stream(cpd::codec_stream(key, world, rank)));
    }
    return payload;
  }

  /// out = for each tensor, the sum in float in rank order of every rank's decoded payload
  /// (payloads: W rows of this rank's encode's size), divided by W in float for a mean.
  /// Returns the elements of out that are inf or NaN.
  std::uint64_t reduce(const py::buffer& pb, const std::vector<std::size_t>& sizes, int world, bool mean,
                       const py::buffer& ob) const {
    const char* who = "cpd codec exchange";
    const view p = get_view(pb, false, who, "payloads");
    const view y = float_view(ob, true, who, "out");
    const std::size_t row = bytes(sizes);
    if (world < 1 || p.itemsize != 1 || p.n != row * static_cast<std::size_t>(world))
      throw std::invalid_argument(std::string(who) + ": the payloads must be " + std::to_string(world) + " rows of " +
                                  std::to_string(row) + " bytes");
    if (y.n != total(sizes))
      throw std::invalid_argument(std::string(who) + ": out has " + std::to_string(y.n) + " values, the tensors " +
                                  std::to_string(total(sizes)));
    const auto* pay = static_cast<const std::uint8_t*>(p.ptr);
    float* out = static_cast<float*>(y.ptr);
    py::gil_scoped_release nogil;
    const cpd::detail::default_fp_env fp_env;  // (the float sums of simulate_codec_allreduce)
    std::vector<float> d;
    const float fw = static_cast<float>(world);
    for (std::size_t i = 0, at = 0, off = 0; i < sizes.size(); at += sizes[i], off += c_->payload_size(sizes[i]), ++i) {
      const std::size_t n = sizes[i];
      float* o = out + at;
      c_->decode(pay + off, n, o);
      d.resize(n);
      for (int r = 1; r < world; ++r) {
        c_->decode(pay + static_cast<std::size_t>(r) * row + off, n, d.data());
        for (std::size_t j = 0; j < n; ++j) o[j] += d[j];
      }
      if (mean)
        for (std::size_t j = 0; j < n; ++j) o[j] = o[j] / fw;
    }
    return cpd::detail::count_nonfinite(out, total(sizes));
  }

 private:
  static std::size_t total(const std::vector<std::size_t>& sizes) {
    std::size_t t = 0;
    for (std::size_t n : sizes) t += n;
    return t;
  }
  std::size_t bytes(const std::vector<std::size_t>& sizes) const {
    std::size_t t = 0;
    for (std::size_t n : sizes) t += c_->payload_size(n);
    return t;
  }
  std::unique_ptr<cpd::codec> c_;
};

}  // namespace

void bind_blocks(py::module_& m) {
  m.def("simulate_blocks", &simulate_blocks);
  m.def("simulate_codec", &simulate_codec);
  py::class_<codec_side>(m, "Codec")
      .def(py::init<const std::string&>())
      .def_property_readonly("name", &codec_side::name)
      .def_property_readonly("stochastic", &codec_side::stochastic)
      .def("payload_size", &codec_side::payload_size)
      .def("encode", &codec_side::encode)
      .def("reduce", &codec_side::reduce);
}

}  // namespace cpd_python
