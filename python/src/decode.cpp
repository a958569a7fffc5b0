// SPDX-License-Identifier: MIT
//
// cpd._cpd: decode, which turns 8-, 16- or 32-bit codes of a runtime format into float16,
// bfloat16, float32 or float64 values (the runtime-format bulk cpd::decode).

#include <cpd/core/detail/bits.hpp>
#include <cpd/core/format.hpp>
#include <cpd/host/bulk.hpp>

#include "args.hpp"
#include "module.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace cpd_python {
namespace {

template <class Code, class T>
void decode_as(const cpd::format& f, const cpd::bulk_options& opt, unsigned threads, const view& c, T* y) {
  with_policy(threads, [&](auto policy) { cpd::decode(policy, f, static_cast<const Code*>(c.ptr), y, c.n, opt); });
}

/// Decodes to double (every value of the scaled format is one), then rounds each value to
/// float once, as a conversion does in the default environment: nearest-even, ±inf beyond
/// float's range, ±0 or a subnormal below it (what quantize gives for the same scale).
template <class Code>
void decode_through_double(const cpd::format& f, const cpd::bulk_options& opt, unsigned threads, const view& c,
                           float* y) {
  std::vector<double> wide(c.n);
  decode_as<Code>(f, opt, threads, c, wide.data());
  for (std::size_t i = 0; i < c.n; ++i) y[i] = cpd::detail::narrow(wide[i]);
}

template <class Code>
void decode_codes(bool wide, const cpd::format& f, const cpd::bulk_options& opt, unsigned threads, const view& c,
                  float* y) {
  if (wide) decode_through_double<Code>(f, opt, threads, c, y);
  else decode_as<Code>(f, opt, threads, c, y);
}

/// Decodes into y of dtype t: float64 directly, float32 as decode_codes, float16 and bfloat16
/// through float32 values narrowed (the Python layer allows the formats whose values fit).
template <class Code>
void decode_into(dtype t, bool wide, const cpd::format& f, const cpd::bulk_options& opt, unsigned threads,
                 const view& c, const view& y) {
  if (t == dtype::float64) return decode_as<Code>(f, opt, threads, c, static_cast<double*>(y.ptr));
  if (t == dtype::float32) return decode_codes<Code>(wide, f, opt, threads, c, static_cast<float*>(y.ptr));
  std::vector<float> values(c.n);
  decode_codes<Code>(wide, f, opt, threads, c, values.data());
  store_floats(values.data(), y, t);
}

void decode(const py::buffer& in, const py::buffer& out, const std::string& out_dtype, const std::string& fmt,
            int scale_exponent, unsigned threads) {
  const char* who = "cpd.decode";
  const dtype to = parse_dtype(out_dtype, who);
  const view c = code_view(in, false, who, "the codes");
  const view y = value_view(out, true, to, who, "out");
  same_size(c, y, who);
  const cpd::format f = parse_format(fmt);
  cpd::bulk_options opt;
  opt.scale_exponent = scale_exponent;
  // quantize and encode take every scale_exponent that keeps the scaled format in double's
  // range; where 2^-k times the format's values leaves float's, decode rounds them to float.
  const bool wide = scale_exponent != 0 && f.spec().fits_float &&
                    !cpd::detail::scaled_spec(f.spec(), scale_exponent, who).fits_float;
  py::gil_scoped_release nogil;
  if (c.itemsize == 1) decode_into<std::uint8_t>(to, wide, f, opt, threads, c, y);
  else if (c.itemsize == 2) decode_into<std::uint16_t>(to, wide, f, opt, threads, c, y);
  else decode_into<std::uint32_t>(to, wide, f, opt, threads, c, y);
}

}  // namespace

void bind_decode(py::module_& m) { m.def("decode", &decode); }

}  // namespace cpd_python
