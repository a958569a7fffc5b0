// SPDX-License-Identifier: MIT
//
// cpd._cpd: encode, which rounds float16, bfloat16, float32 and float64 arrays into 8-, 16- or
// 32-bit codes of a runtime format (the runtime-format bulk cpd::encode; its kernels are
// compiled in encode_float.cpp and encode_double.cpp, encode.hpp).

#include "args.hpp"
#include "encode.hpp"
#include "module.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace cpd_python {
namespace {

py::object encode(const py::buffer& in, const py::buffer& out, const std::string& in_dtype, const std::string& fmt,
                  const std::string& rounding, const std::string& overflow, std::uint64_t seed, std::uint64_t stream,
                  const std::string& generator, std::uint64_t offset, int scale_exponent, const std::string& variant,
                  const std::string& subnormals, const std::string& exponents, unsigned threads, bool stats) {
  const char* who = "cpd.encode";
  const dtype ti = parse_dtype(in_dtype, who);
  const view x = value_view(in, false, ti, who, "the input");
  const view c = code_view(out, true, who, "out");
  same_size(x, c, who);
  return round_call(fmt, rounding, overflow, seed, stream, generator, offset, scale_exponent, variant, subnormals,
                    exponents, threads, stats,
                    [&](const bulk_args& a) {
                      std::vector<float> wide;
                      const void* src = compute_input(x, ti, wide);
                      if (ti == dtype::float64) encode_codes(a, static_cast<const double*>(src), c);
                      else encode_codes(a, static_cast<const float*>(src), c);
                    });
}

}  // namespace

void bind_encode(py::module_& m) { m.def("encode", &encode); }

}  // namespace cpd_python
