// SPDX-License-Identifier: MIT
//
// cpd._cpd: the posit calls (cpd/host/posit_bulk.hpp). The package cpd sends a format named
// "posit<n>es<es>" here (python/cpd/_posit.py). float32 and float64 only.

#include <cpd/core/posit.hpp>
#include <cpd/host/posit_bulk.hpp>

#include "args.hpp"
#include "module.hpp"

#include <cstdint>
#include <string>

namespace cpd_python {
namespace {

/// posit_quantize of a float32 or float64 buffer into one of the same dtype.
py::object posit_quantize(const py::buffer& in, const py::buffer& out, const std::string& dtype_name,
                          const std::string& fmt, const std::string& rounding, std::uint64_t seed,
                          std::uint64_t stream, const std::string& generator, std::uint64_t offset, unsigned threads,
                          bool stats) {
  const char* who = "cpd.quantize";
  const cpd::posit_format p = cpd::posit_format::parse(fmt);
  const dtype t = parse_dtype(dtype_name, who);
  const view x = value_view(in, false, t, who, "the input");
  const view y = value_view(out, true, t, who, "out");
  same_size(x, y, who);
  const cpd::rounding r = parse_rounding(rounding);
  cpd::bulk_options opt = key_options(seed, stream, generator, offset);
  return counted_call(opt, stats, [&] {
    with_policy(threads, [&](auto policy) {
      if (t == dtype::float64)
        cpd::posit_quantize(policy, p, r, static_cast<const double*>(x.ptr), static_cast<double*>(y.ptr), x.n, opt);
      else
        cpd::posit_quantize(policy, p, r, static_cast<const float*>(x.ptr), static_cast<float*>(y.ptr), x.n, opt);
    });
  });
}

template <class T>
void posit_encode_codes(const cpd::posit_format& p, cpd::rounding r, const T* x, const view& c, unsigned threads,
                        const cpd::bulk_options& opt) {
  with_policy(threads, [&](auto policy) {
    if (c.itemsize == 1) cpd::posit_encode(policy, p, r, x, static_cast<std::uint8_t*>(c.ptr), c.n, opt);
    else if (c.itemsize == 2) cpd::posit_encode(policy, p, r, x, static_cast<std::uint16_t*>(c.ptr), c.n, opt);
    else cpd::posit_encode(policy, p, r, x, static_cast<std::uint32_t*>(c.ptr), c.n, opt);
  });
}

/// posit_encode of a float32 or float64 buffer into integer codes.
py::object posit_encode(const py::buffer& in, const py::buffer& out, const std::string& dtype_name,
                        const std::string& fmt, const std::string& rounding, std::uint64_t seed, std::uint64_t stream,
                        const std::string& generator, std::uint64_t offset, unsigned threads, bool stats) {
  const char* who = "cpd.encode";
  const cpd::posit_format p = cpd::posit_format::parse(fmt);
  const dtype t = parse_dtype(dtype_name, who);
  const view x = value_view(in, false, t, who, "the input");
  const view c = code_view(out, true, who, "out");
  same_size(x, c, who);
  const cpd::rounding r = parse_rounding(rounding);
  cpd::bulk_options opt = key_options(seed, stream, generator, offset);
  return counted_call(opt, stats, [&] {
    if (t == dtype::float64) posit_encode_codes(p, r, static_cast<const double*>(x.ptr), c, threads, opt);
    else posit_encode_codes(p, r, static_cast<const float*>(x.ptr), c, threads, opt);
  });
}

template <class T>
void posit_decode_codes(const cpd::posit_format& p, const view& c, T* y, unsigned threads) {
  with_policy(threads, [&](auto policy) {
    if (c.itemsize == 1) cpd::posit_decode(policy, p, static_cast<const std::uint8_t*>(c.ptr), y, c.n);
    else if (c.itemsize == 2) cpd::posit_decode(policy, p, static_cast<const std::uint16_t*>(c.ptr), y, c.n);
    else cpd::posit_decode(policy, p, static_cast<const std::uint32_t*>(c.ptr), y, c.n);
  });
}

/// posit_decode of integer codes into float32 or float64 values.
void posit_decode(const py::buffer& in, const py::buffer& out, const std::string& dtype_name, const std::string& fmt,
                  unsigned threads) {
  const char* who = "cpd.decode";
  const cpd::posit_format p = cpd::posit_format::parse(fmt);
  const dtype t = parse_dtype(dtype_name, who);
  const view c = code_view(in, false, who, "the codes");
  const view y = value_view(out, true, t, who, "out");
  same_size(c, y, who);
  py::gil_scoped_release nogil;
  if (t == dtype::float64) posit_decode_codes(p, c, static_cast<double*>(y.ptr), threads);
  else posit_decode_codes(p, c, static_cast<float*>(y.ptr), threads);
}

/// The facts of a posit format, for cpd.finfo.
py::dict posit_info(const std::string& name) {
  const cpd::posit_format p = cpd::posit_format::parse(name);
  py::dict d;
  d["name"] = p.name();
  d["bits"] = p.bits();
  d["es"] = p.exponent_bits();
  d["maxpos"] = p.maxpos();
  d["minpos"] = p.minpos();
  d["fraction_bits"] = p.spec().fraction_bits();
  d["max_exponent"] = p.spec().max_exponent();
  d["fits_float"] = p.fits_float();
  return d;
}

}  // namespace

void bind_posits(py::module_& m) {
  m.def("posit_quantize", &posit_quantize);
  m.def("posit_encode", &posit_encode);
  m.def("posit_decode", &posit_decode);
  m.def("posit_info", &posit_info);
}

}  // namespace cpd_python
