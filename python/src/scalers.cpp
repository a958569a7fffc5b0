// SPDX-License-Identifier: MIT
//
// cpd._cpd: the scalers of docs/scaling.md. A scaler is chosen by name (cpd::make_scaler);
// Python sees its statistic as an int or a float and its scale as a Scale. exchange_scales
// runs cpd::exchange_scales (statistic -> combine across ranks -> select) for one rank's
// tensors; mx_quantize is the OCP MX block scaling of an array, nvfp4_* NVFP4's.

#include <cpd/core/detail/bits.hpp>
#include <cpd/core/format.hpp>
#include <cpd/exchange/scales.hpp>
#include <cpd/host/mx.hpp>
#include <cpd/scaling/mx.hpp>
#include <cpd/host/nvfp4.hpp>
#include <cpd/scaling/nvfp4.hpp>
#include <cpd/scaling/registry.hpp>

#include "args.hpp"
#include "dtypes.hpp"
#include "module.hpp"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace cpd_python {
namespace {

/// A scale as Python sees it: a power of two (exponent) or a float (value, inverse).
struct scale_value {
  bool pow2 = true;
  int exponent = 0;
  float value = 1.0f, inverse = 1.0f;
  bool nonfinite = false;
  [[nodiscard]] double factor() const {
    return pow2 ? cpd::pow2_scale{exponent, nonfinite}.factor() : static_cast<double>(value);
  }
};

scale_value from_scale(cpd::pow2_scale s) { return {true, s.exponent, 1.0f, 1.0f, s.nonfinite}; }
scale_value from_scale(cpd::float_scale s) { return {false, 0, s.value, s.inverse, s.nonfinite}; }
scale_value from_scale(const cpd::any_scale& s) {
  return std::visit([](auto v) { return from_scale(v); }, s);
}

/// A scaler of docs/scaling.md, chosen by name (cpd::make_scaler); its statistic is a Python
/// int or float, as the scaler's is.
using scaler = cpd::any_scaler<>;

py::object statistic_object(const scaler& s, scaler::statistic_type w) {
  if (s.float_statistic()) return py::cast(cpd::detail::bit_cast<float>(w));
  return py::cast(w);
}

scaler::statistic_type statistic_word(const scaler& s, const py::object& st) {
  if (s.float_statistic()) return cpd::detail::bit_cast<std::int32_t>(st.cast<float>());
  return st.cast<std::int32_t>();
}

py::object scaler_statistic(const scaler& s, const py::buffer& b) {
  const view v = float_view(b, false, "cpd scaler statistic", "the tensor");
  scaler::statistic_type w = 0;
  {
    py::gil_scoped_release nogil;
    w = s.statistic(static_cast<const float*>(v.ptr), v.n);
  }
  return statistic_object(s, w);
}

/// cpd::make_scaler: the rule `name` for `fmt` (None for the rules that take no format), with
/// the options each rule reads.
scaler make_scaler(const std::string& name, const std::optional<std::string>& fmt, int world_size, int margin,
                   float epsilon, bool power_of_two, std::size_t history_length, const std::string& amax_algorithm,
                   float init_scale, float growth_factor, float backoff_factor, int growth_interval, float min_scale,
                   int exponent) {
  cpd::scaler_options o;
  o.world_size = world_size;
  o.margin = margin;
  o.epsilon = epsilon;
  o.power_of_two = power_of_two;
  o.history_length = history_length;
  o.amax_compute = cpd::from_string<cpd::amax_algorithm>(amax_algorithm);
  o.loss = {init_scale, growth_factor, backoff_factor, growth_interval, min_scale};
  o.exponent = exponent;
  std::optional<cpd::format> f;
  if (fmt) f = parse_format(*fmt);
  return cpd::make_scaler(name, f, o);
}

void mx_quantize(const py::buffer& in, const py::buffer& out, const std::string& elem, const std::string& rounding,
                 std::size_t block_size, const std::string& rule, std::uint64_t seed, std::uint64_t stream,
                 const std::string& generator) {
  const view x = float_view(in, false, "cpd.mx_quantize", "the input");
  const view y = float_view(out, true, "cpd.mx_quantize", "out");
  same_size(x, y, "cpd.mx_quantize");
  cpd::mx_options o;
  o.block_size = block_size;
  o.rule = cpd::from_string<cpd::mx_scale_rule>(rule);
  o.key = {seed, stream, parse_generator(generator)};
  const cpd::rounding r = parse_rounding(rounding);
  if (r != cpd::rounding::nearest_even && r != cpd::rounding::stochastic)
    throw std::invalid_argument("cpd.mx_quantize: rounding must be nearest_even or stochastic");
  const cpd::format f = parse_format(elem);
  using mx_elements = cpd::format_list<cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::float6_e3m2fn, cpd::float6_e2m3fn,
                                       cpd::float4_e2m1fn, cpd::mx_int8, cpd::mx_int4, cpd::mx_int2>;
  const bool found = cpd::visit<mx_elements>(f, [&](auto tag) {
    using E = decltype(tag);
    py::gil_scoped_release nogil;
    if (r == cpd::rounding::stochastic)
      cpd::mx_quantize<E, cpd::rounding::stochastic>(static_cast<const float*>(x.ptr), static_cast<float*>(y.ptr), x.n,
                                                     o);
    else
      cpd::mx_quantize<E>(static_cast<const float*>(x.ptr), static_cast<float*>(y.ptr), x.n, o);
  });
  if (!found)
    throw std::invalid_argument("cpd.mx_quantize: element format " + f.name() +
                                " is not an OCP MX element (e4m3fn, e5m2, e3m2fn, e2m3fn, e2m1fn, int8, int4, int2)");
}

/// The values of `in` (dtype `name`: float16 and bfloat16 as their uint16 codes) as float32:
/// 16-bit ones exactly, float64 rounded to nearest even (as torch's .float()).
std::vector<float> nvfp4_input(const py::buffer& in, const std::string& name, const char* who) {
  const dtype t = parse_dtype(name, who);
  const view x = value_view(in, false, t, who, "the input");
  std::vector<float> v(x.n);
  for (std::size_t i = 0; i < x.n; ++i)
    v[i] = t == dtype::float32   ? static_cast<const float*>(x.ptr)[i]
           : t == dtype::float64 ? static_cast<float>(static_cast<const double*>(x.ptr)[i])
                                 : widen16(t, static_cast<const std::uint16_t*>(x.ptr)[i]);
  return v;
}

/// Writes float32 values into `out` of dtype `name` (16-bit: rounded to nearest even by the core).
void nvfp4_output(const std::vector<float>& v, const py::buffer& out, const std::string& name, const char* who) {
  const dtype t = parse_dtype(name, who);
  const view y = value_view(out, true, t, who, "out");
  if (y.n != v.size()) throw std::invalid_argument(std::string(who) + ": out holds " + std::to_string(y.n) +
                                                   " values, the input " + std::to_string(v.size()));
  for (std::size_t i = 0; i < y.n; ++i) {
    if (t == dtype::float32) static_cast<float*>(y.ptr)[i] = v[i];
    else if (t == dtype::float64) static_cast<double*>(y.ptr)[i] = v[i];
    else static_cast<std::uint16_t*>(y.ptr)[i] = narrow16(t, v[i]);
  }
}

cpd::nvfp4_options nvfp4_opts(float tensor_scale, std::uint64_t seed, std::uint64_t stream, const std::string& gen) {
  cpd::nvfp4_options o;
  o.tensor_scale = tensor_scale;
  o.key = {seed, stream, parse_generator(gen)};
  return o;
}

/// Runs f.template operator()<R>() for the rounding mode named `rounding` (the library's dispatch).
template <class Fn>
void with_rounding(const std::string& rounding, Fn&& f) {
  cpd::detail::with_rounding(parse_rounding(rounding), std::forward<Fn>(f));
}

/// cpd::nvfp4_quantize of `in` (dtype ni) into `out` (dtype no); the counts as a dict.
py::dict nvfp4_quantize(const py::buffer& in, const py::buffer& out, const std::string& ni, const std::string& no,
                        const std::string& rounding, float tensor_scale, std::uint64_t seed, std::uint64_t stream,
                        const std::string& generator) {
  const char* who = "cpd.nvfp4_quantize";
  std::vector<float> v = nvfp4_input(in, ni, who);
  const cpd::nvfp4_options o = nvfp4_opts(tensor_scale, seed, stream, generator);
  cpd::value_stats st;
  with_rounding(rounding, [&](auto r) {
    py::gil_scoped_release nogil;
    st = cpd::nvfp4_quantize<decltype(r)::value>(v.data(), v.data(), v.size(), o);
  });
  nvfp4_output(v, out, no, who);
  return stats_dict(st);
}

/// cpd::nvfp4_encode of `in` (dtype ni) into packed (uint8, ceil(n/2)) and scales (uint8,
/// ceil(n/16)); returns (tensor scale, counts).
py::tuple nvfp4_encode(const py::buffer& in, const py::buffer& packed, const py::buffer& scales, const std::string& ni,
                       const std::string& rounding, float tensor_scale, std::uint64_t seed, std::uint64_t stream,
                       const std::string& generator) {
  const char* who = "cpd.nvfp4_encode";
  const std::vector<float> v = nvfp4_input(in, ni, who);
  const view p = code_view(packed, true, who, "packed");
  const view sc = code_view(scales, true, who, "scales");
  if (p.itemsize != 1 || sc.itemsize != 1) throw py::type_error(std::string(who) + ": packed and scales are uint8");
  if (p.n != cpd::nvfp4_packed_size(v.size()) || sc.n != cpd::nvfp4_scale_count(v.size()))
    throw std::invalid_argument(std::string(who) + ": packed must hold ceil(n / 2) bytes and scales ceil(n / 16)");
  const cpd::nvfp4_options o = nvfp4_opts(tensor_scale, seed, stream, generator);
  cpd::value_stats st;
  float s = 0.0f;
  with_rounding(rounding, [&](auto r) {
    py::gil_scoped_release nogil;
    st = cpd::nvfp4_encode<decltype(r)::value>(v.data(), v.size(), static_cast<std::uint8_t*>(p.ptr),
                                               static_cast<std::uint8_t*>(sc.ptr), &s, o);
  });
  return py::make_tuple(s, stats_dict(st));
}

/// cpd::nvfp4_decode into `out` (dtype no) of n values.
void nvfp4_decode(const py::buffer& packed, const py::buffer& scales, float tensor_scale, const py::buffer& out,
                  const std::string& no, std::size_t n) {
  const char* who = "cpd.nvfp4_decode";
  const view p = code_view(packed, false, who, "packed");
  const view sc = code_view(scales, false, who, "scales");
  if (p.itemsize != 1 || sc.itemsize != 1) throw py::type_error(std::string(who) + ": packed and scales are uint8");
  if (p.n != cpd::nvfp4_packed_size(n) || sc.n != cpd::nvfp4_scale_count(n))
    throw std::invalid_argument(std::string(who) + ": packed must hold ceil(n / 2) bytes and scales ceil(n / 16)");
  std::vector<float> v(n);
  {
    py::gil_scoped_release nogil;
    cpd::nvfp4_decode(static_cast<const std::uint8_t*>(p.ptr), static_cast<const std::uint8_t*>(sc.ptr),
                      tensor_scale, n, v.data());
  }
  nvfp4_output(v, out, no, who);
}

/// The scales of one rank's tensors (held back to back in `values`, `sizes` each) by
/// cpd::exchange_scales: each tensor's statistic, combine(statistics) (an int32 array, the
/// statistics' bits; its element-wise MAX over the ranks, e.g. torch's all_reduce, or None
/// for one rank), then the scaler's select.
std::vector<scale_value> exchange_scales(scaler& sc, const py::buffer& values, const std::vector<std::size_t>& sizes,
                                         const py::object& combine) {
  const char* who = "cpd exchange";
  const view v = float_view(values, false, who, "the values");
  std::vector<std::size_t> at(sizes.size() + 1, 0);
  for (std::size_t t = 0; t < sizes.size(); ++t) at[t + 1] = at[t] + sizes[t];
  if (at.back() != v.n)
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(v.n) + " values for tensors of " +
                                std::to_string(at.back()));
  const float* p = static_cast<const float*>(v.ptr);
  const auto with_others = [&](std::int32_t* st, std::size_t n) {
    if (combine.is_none()) return;
    py::array_t<std::int32_t> a(static_cast<py::ssize_t>(n));
    std::copy(st, st + n, a.mutable_data());
    const auto got = combine(a).cast<py::array_t<std::int32_t, py::array::c_style | py::array::forcecast>>();
    if (static_cast<std::size_t>(got.size()) != n)
      throw std::invalid_argument(std::string(who) + ": the combined statistics are " + std::to_string(got.size()) +
                                  " values, not " + std::to_string(n));
    std::copy(got.data(), got.data() + n, st);
  };
  std::vector<const float*> x(sizes.size());
  std::vector<scale_value> out;
  for (const cpd::any_scale& s : cpd::exchange_scales(
           1, sizes.size(),
           [&](std::size_t, std::size_t t) { return cpd::exchange_input{p + at[t], nullptr, sizes[t]}; },
           [&](std::size_t) -> scaler& { return sc; }, with_others, x.data()))
    out.push_back(from_scale(s));
  return out;
}

}  // namespace

void bind_scalers(py::module_& m) {
  m.def("mx_quantize", &mx_quantize);
  m.def("nvfp4_quantize", &nvfp4_quantize);
  m.def("nvfp4_encode", &nvfp4_encode);
  m.def("nvfp4_decode", &nvfp4_decode);
  py::class_<scale_value>(m, "Scale")
      .def_readonly("pow2", &scale_value::pow2)
      .def_readonly("exponent", &scale_value::exponent)
      .def_readonly("value", &scale_value::value)
      .def_readonly("inverse", &scale_value::inverse)
      .def_readonly("nonfinite", &scale_value::nonfinite)
      .def_property_readonly("factor", &scale_value::factor)
      .def("__repr__", [](const scale_value& s) {
        std::string r = s.pow2 ? "Scale(2**" + std::to_string(s.exponent) : "Scale(" + std::to_string(s.value);
        return r + (s.nonfinite ? ", nonfinite=True)" : ")");
      });

  py::class_<scaler>(m, "Scaler")
      .def_property_readonly("kind", [](const scaler& s) { return std::string(cpd::to_string(s.kind())); })
      .def("statistic", &scaler_statistic)
      .def("combine",
           [](const scaler& s, const py::object& a, const py::object& b) {
             return statistic_object(s, s.combine(statistic_word(s, a), statistic_word(s, b)));
           })
      .def("select", [](scaler& s, const py::object& st) { return from_scale(s.select(statistic_word(s, st))); })
      .def_property_readonly("identity", [](const scaler& s) { return statistic_object(s, s.identity()); });
  m.def("make_scaler", &make_scaler, py::arg("name"), py::arg("format"), py::arg("world_size") = 0,
        py::arg("margin") = 0, py::arg("epsilon") = 0.0f, py::arg("power_of_two") = false,
        py::arg("history_length") = 1024, py::arg("amax_algorithm") = "max", py::arg("init_scale") = 65536.0f,
        py::arg("growth_factor") = 2.0f, py::arg("backoff_factor") = 0.5f, py::arg("growth_interval") = 2000,
        py::arg("min_scale") = 0x1p-126f, py::arg("exponent") = 0);
  m.def("exchange_scales", &exchange_scales);
}

}  // namespace cpd_python
