// SPDX-License-Identifier: MIT
//
// cpd._cpd: the arguments of its calls (args.hpp).

#include "args.hpp"

#include <cpd/core/detail/bits.hpp>

#include <cstring>
#include <stdexcept>

namespace cpd_python {

view get_view(const py::buffer& b, bool writable, const char* who, const char* arg) {
  py::buffer_info info = b.request(writable);
  view v;
  v.ptr = info.ptr;
  v.itemsize = static_cast<std::size_t>(info.itemsize);
  std::size_t n = 1;
  py::ssize_t expect = info.itemsize;
  for (py::ssize_t d = info.ndim; d-- > 0;) {
    if (info.shape[d] != 1 && info.strides[d] != expect)
      throw py::type_error(std::string(who) + ": " + arg + " must be C-contiguous");
    expect *= info.shape[d];
    n *= static_cast<std::size_t>(info.shape[d]);
  }
  v.n = n;
  const std::string& f = info.format;
  const char c = f.empty() ? 0 : f.back();
  if (info.itemsize == 4 && c == 'f') v.kind = 'f';
  else if (info.itemsize == 8 && c == 'd') v.kind = 'd';
  else if (c == 'B' || c == 'H' || c == 'I' || c == 'b' || c == 'h' || c == 'i' || c == 'L' || c == 'l')
    v.kind = 'u';
  else
    throw py::type_error(std::string(who) + ": " + arg + " has element format '" + f +
                         "'; expected float32 or float64 values or integer codes");
  return v;
}

view float_view(const py::buffer& b, bool writable, const char* who, const char* arg) {
  view v = get_view(b, writable, who, arg);
  if (v.kind != 'f') throw py::type_error(std::string(who) + ": " + arg + " must hold float32 values");
  return v;
}

view value_view(const py::buffer& b, bool writable, dtype t, const char* who, const char* arg) {
  view v = get_view(b, writable, who, arg);
  const bool ok = t == dtype::float32   ? v.kind == 'f'
                  : t == dtype::float64 ? v.kind == 'd'
                                        : v.kind == 'u' && v.itemsize == 2;
  if (!ok)
    throw py::type_error(std::string(who) + ": " + arg + " must hold " +
                         (t == dtype::float32   ? "float32 values"
                          : t == dtype::float64 ? "float64 values"
                                                : "16-bit codes (a uint16 view of float16 or bfloat16)"));
  return v;
}

view code_view(const py::buffer& b, bool writable, const char* who, const char* arg) {
  view v = get_view(b, writable, who, arg);
  if (v.kind != 'u' || (v.itemsize != 1 && v.itemsize != 2 && v.itemsize != 4))
    throw py::type_error(std::string(who) + ": " + arg + " must hold 8-, 16- or 32-bit integer codes");
  return v;
}

void same_size(const view& a, const view& b, const char* who) {
  if (a.n != b.n)
    throw std::invalid_argument(std::string(who) + ": the input has " + std::to_string(a.n) +
                                " values and the output " + std::to_string(b.n));
}

std::vector<const float*> worker_arrays(const std::vector<py::buffer>& workers, const view& out, const char* who) {
  if (workers.empty()) throw std::invalid_argument(std::string(who) + ": no workers");
  std::vector<const float*> x;
  for (const py::buffer& b : workers) {
    const view v = float_view(b, false, who, "a worker's tensor");
    same_size(v, out, who);
    x.push_back(static_cast<const float*>(v.ptr));
  }
  return x;
}

py::dict stats_dict(const cpd::value_stats& s) {
  py::dict d;
  for (const cpd::value_stats_field& f : cpd::value_stats_fields) d[f.name] = s.*f.member;
  return d;
}

cpd::random_generator parse_generator(const std::string& s) { return cpd::from_string<cpd::random_generator>(s); }

cpd::bulk_options key_options(std::uint64_t seed, std::uint64_t stream, const std::string& generator,
                              std::uint64_t offset) {
  cpd::bulk_options opt;
  opt.seed = seed;
  opt.stream = stream;
  opt.offset = offset;
  opt.generator = parse_generator(generator);
  return opt;
}

bulk_args make_args(const std::string& fmt, const std::string& rounding, const std::string& overflow,
                    std::uint64_t seed, std::uint64_t stream, const std::string& generator, std::uint64_t offset,
                    int scale_exponent, unsigned threads, const std::string& variant,
                    const std::string& subnormals, const std::string& exponents) {
  bulk_args a{parse_format(fmt), parse_rounding(rounding), parse_overflow(overflow),
              key_options(seed, stream, generator, offset), threads};
  a.opt.scale_exponent = scale_exponent;
  a.opt.variant = cpd::from_string<cpd::stochastic_variant>(variant);
  a.opt.subnormals = cpd::from_string<cpd::subnormal_mode>(subnormals);
  a.opt.exponents = cpd::from_string<cpd::exponent_range>(exponents);
  return a;
}

const void* compute_input(const view& x, dtype t, std::vector<float>& wide) {
  if (t == dtype::float32 || t == dtype::float64) return x.ptr;
  wide.resize(x.n);
  const auto* c = static_cast<const std::uint16_t*>(x.ptr);
  for (std::size_t i = 0; i < x.n; ++i) wide[i] = widen16(t, c[i]);
  return wide.data();
}

std::size_t store_floats(const float* r, const view& y, dtype t) {
  std::size_t inexact = 0;
  if (t == dtype::float32) {
    if (r != y.ptr) std::memcpy(y.ptr, r, y.n * sizeof(float));
  } else if (t == dtype::float64) {
    double* o = static_cast<double*>(y.ptr);
    for (std::size_t i = 0; i < y.n; ++i) o[i] = cpd::detail::widen(r[i]);
  } else {
    auto* o = static_cast<std::uint16_t*>(y.ptr);
    for (std::size_t i = 0; i < y.n; ++i) {
      o[i] = narrow16(t, r[i]);
      const float back = widen16(t, o[i]);
      inexact += (back == r[i] || (back != back && r[i] != r[i])) ? 0 : 1;
    }
  }
  return inexact;
}

std::pair<dtype, dtype> call_dtypes(const std::string& in, const std::string& out, const char* who) {
  const dtype ti = parse_dtype(in, who), to = parse_dtype(out, who);
  if (ti == dtype::float64 && to != dtype::float64)
    throw std::invalid_argument(std::string(who) + ": a float64 input rounds into float64 values (out: float64)");
  return {ti, to};
}

}  // namespace cpd_python
