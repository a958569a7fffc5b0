// SPDX-License-Identifier: MIT
//
// cpd._cpd: the calls from values to values. quantize rounds float16, bfloat16, float32 and
// float64 arrays into arrays of a dtype (the runtime-format bulk cpd::quantize); cast copies
// between dtypes as the bulk calls widen and narrow; time_quantize and scalar_quantize are the
// benchmark's yardstick and the tests' scalar reference.

#include <cpd/core/detail/bits.hpp>
#include <cpd/core/format.hpp>
#include <cpd/host/bulk.hpp>
#include <cpd/host/fixed_point.hpp>
#include <cpd/host/hadamard.hpp>
#include <cpd/host/integer.hpp>

#include "args.hpp"
#include "module.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace cpd_python {
namespace {

py::object quantize(const py::buffer& in, const py::buffer& out, const std::string& in_dtype,
                    const std::string& out_dtype, const std::string& fmt, const std::string& rounding,
                    const std::string& overflow, std::uint64_t seed, std::uint64_t stream,
                    const std::string& generator, std::uint64_t offset, int scale_exponent,
                    const std::string& variant, const std::string& subnormals, const std::string& exponents,
                    unsigned threads, bool stats) {
  const char* who = "cpd.quantize";
  const auto [ti, to] = call_dtypes(in_dtype, out_dtype, who);
  const view x = value_view(in, false, ti, who, "the input");
  const view y = value_view(out, true, to, who, "out");
  same_size(x, y, who);
  return round_call(fmt, rounding, overflow, seed, stream, generator, offset, scale_exponent, variant, subnormals,
                    exponents, threads, stats,
                    [&](const bulk_args& a) {
                      if (ti == dtype::float64) {
                        with_policy(a.threads, [&](auto policy) {
                          cpd::quantize(policy, a.f, a.r, a.o, static_cast<const double*>(x.ptr),
                                        static_cast<double*>(y.ptr), x.n, a.opt);
                        });
                        return;
                      }
                      std::vector<float> wide, result;
                      const auto* src = static_cast<const float*>(compute_input(x, ti, wide));
                      float* dst = static_cast<float*>(y.ptr);
                      if (to != dtype::float32) {
                        if (wide.empty()) result.resize(x.n);
                        dst = wide.empty() ? result.data() : wide.data();
                      }
                      with_policy(a.threads, [&](auto policy) {
                        cpd::quantize(policy, a.f, a.r, a.o, src, dst, x.n, a.opt);
                      });
                      store_floats(dst, y, to);
                    });
}

/// cpd::fixed_point_quantize of a float32 or float64 buffer into one of the same dtype
/// (cpd.fixed_point_quantize, cpd.qtorch.fixed_point_quantize).
py::object fixed_point_quantize(const py::buffer& in, const py::buffer& out, const std::string& dtype_name,
                                int word_bits, int fraction_bits, bool symmetric, bool clamp,
                                const std::string& rounding, std::uint64_t seed, std::uint64_t stream,
                                const std::string& generator, std::uint64_t offset, int scale_exponent,
                                unsigned threads, bool stats) {
  const char* who = "cpd.fixed_point_quantize";
  const dtype t = parse_dtype(dtype_name, who);
  if (t != dtype::float32 && t != dtype::float64)
    throw py::type_error(std::string(who) + ": float32 or float64 values only");
  const view x = value_view(in, false, t, who, "the input");
  const view y = value_view(out, true, t, who, "out");
  same_size(x, y, who);
  const cpd::fixed_point fp{word_bits, fraction_bits, symmetric};
  const cpd::rounding r = parse_rounding(rounding);
  cpd::bulk_options opt = key_options(seed, stream, generator, offset);
  opt.scale_exponent = scale_exponent;
  return counted_call(opt, stats, [&] {
    with_policy(threads, [&](auto policy) {
      if (t == dtype::float64)
        cpd::fixed_point_quantize(policy, fp, r, clamp, static_cast<const double*>(x.ptr),
                                  static_cast<double*>(y.ptr), x.n, opt);
      else
        cpd::fixed_point_quantize(policy, fp, r, clamp, static_cast<const float*>(x.ptr), static_cast<float*>(y.ptr),
                                  x.n, opt);
    });
  });
}

/// cpd::hadamard_rotate of a float32 or float64 buffer into one of the same dtype
/// (cpd.hadamard): {"blocks", "nonfinite_blocks"}.
py::dict hadamard(const py::buffer& in, const py::buffer& out, const std::string& dtype_name, std::size_t block,
                  std::uint64_t seed, std::uint64_t stream, const std::string& generator, bool inverse,
                  unsigned threads) {
  const char* who = "cpd.hadamard";
  const dtype t = parse_dtype(dtype_name, who);
  if (t != dtype::float32 && t != dtype::float64) throw py::type_error(std::string(who) + ": float32 or float64 values only");
  const view x = value_view(in, false, t, who, "the input");
  const view y = value_view(out, true, t, who, "out");
  same_size(x, y, who);
  cpd::hadamard_options o;
  o.block = block;
  o.key = {seed, stream, parse_generator(generator)};
  o.inverse = inverse;
  cpd::hadamard_stats st;
  {
    py::gil_scoped_release nogil;
    with_policy(threads, [&](auto policy) {
      st = t == dtype::float64 ? cpd::hadamard_rotate(policy, static_cast<const double*>(x.ptr),
                                                      static_cast<double*>(y.ptr), x.n, o)
                               : cpd::hadamard_rotate(policy, static_cast<const float*>(x.ptr),
                                                      static_cast<float*>(y.ptr), x.n, o);
    });
  }
  py::dict d;
  d["blocks"] = st.blocks;
  d["nonfinite_blocks"] = st.nonfinite_blocks;
  return d;
}

/// The arguments of cpd.int_quantize's two calls: the values in and out, the scales (float32)
/// and zero points (int32) out, one per group, the format, mode and key.
struct int_call {
  view x, y, s, z;
  cpd::int_format f;
  cpd::rounding r;
  cpd::bulk_options opt;
  std::vector<cpd::int_params> p;

  int_call(const py::buffer& in, const py::buffer& out, const py::buffer& scales, const py::buffer& zero_points,
           std::size_t groups, int bits, bool symmetric, const std::string& rounding, std::uint64_t seed,
           std::uint64_t stream, const std::string& generator, std::uint64_t offset)
      : f{bits, symmetric}, r(parse_rounding(rounding)), opt(key_options(seed, stream, generator, offset)), p(groups) {
    const char* who = "cpd.int_quantize";
    x = float_view(in, false, who, "the input");
    y = float_view(out, true, who, "out");
    same_size(x, y, who);
    s = float_view(scales, true, who, "scales");
    z = get_view(zero_points, true, who, "zero_points");
    if (s.n != groups || z.n != groups || z.itemsize != 4 || z.kind != 'u')
      throw std::invalid_argument(std::string(who) + ": scales and zero_points must hold one float32 and one int32 per group");
  }
  /// Writes the groups' scales and zero points.
  void write_params() const {
    for (std::size_t b = 0; b < p.size(); ++b) {
      static_cast<float*>(s.ptr)[b] = p[b].scale;
      static_cast<std::int32_t*>(z.ptr)[b] = p[b].zero_point;
    }
  }
};

/// cpd::int_quantize of a float32 buffer in groups of `group` values, each group's scale and
/// zero point written to `scales` (float32) and `zero_points` (int32) (cpd.int_quantize).
py::object int_quantize(const py::buffer& in, const py::buffer& out, const py::buffer& scales,
                        const py::buffer& zero_points, int bits, bool symmetric, std::size_t group,
                        const std::string& rounding, std::uint64_t seed, std::uint64_t stream,
                        const std::string& generator, std::uint64_t offset, unsigned threads, bool stats) {
  const std::size_t n = float_view(in, false, "cpd.int_quantize", "the input").n;
  int_call a(in, out, scales, zero_points, group == 0 ? 0 : (n + group - 1) / group, bits, symmetric, rounding, seed,
             stream, generator, offset);
  py::object counts = counted_call(a.opt, stats, [&] {
    with_policy(threads, [&](auto policy) {
      cpd::int_quantize(policy, a.f, a.r, static_cast<const float*>(a.x.ptr), static_cast<float*>(a.y.ptr), a.x.n, group,
                        a.p.data(), a.opt);
    });
  });
  a.write_params();
  return counts;
}

/// cpd::int_quantize_channels of a float32 buffer of shape [outer][channels][inner], each
/// channel's scale and zero point written to `scales` and `zero_points` (cpd.int_quantize(axis=)).
py::object int_quantize_channels(const py::buffer& in, const py::buffer& out, const py::buffer& scales,
                                 const py::buffer& zero_points, int bits, bool symmetric, std::size_t outer,
                                 std::size_t channels, std::size_t inner, const std::string& rounding,
                                 std::uint64_t seed, std::uint64_t stream, const std::string& generator,
                                 std::uint64_t offset, unsigned threads, bool stats) {
  int_call a(in, out, scales, zero_points, channels, bits, symmetric, rounding, seed, stream, generator, offset);
  if (outer * channels * inner != a.x.n)
    throw std::invalid_argument("cpd.int_quantize: the shape does not hold the buffer's values");
  py::object counts = counted_call(a.opt, stats, [&] {
    with_policy(threads, [&](auto policy) {
      cpd::int_quantize_channels(policy, a.f, a.r, static_cast<const float*>(a.x.ptr), static_cast<float*>(a.y.ptr),
                                 outer, channels, inner, a.p.data(), a.opt);
    });
  });
  a.write_params();
  return counts;
}

/// Copies the values of `in` (float16, bfloat16 or float32; float64 into float32) into `out`,
/// narrowing nearest-even or widening exactly as the bulk calls do, whatever the floating-point
/// environment; returns how many values changed (NaN aside), 0 when the copy is exact.
std::size_t cast(const py::buffer& in, const py::buffer& out, const std::string& in_dtype,
                 const std::string& out_dtype) {
  const char* who = "cpd._cpd.cast";
  const dtype ti = parse_dtype(in_dtype, who), to = parse_dtype(out_dtype, who);
  if (ti == dtype::float64 && to != dtype::float32)
    throw std::invalid_argument(std::string(who) + ": float64 values are cast to float32 only");
  const view x = value_view(in, false, ti, who, "the input");
  const view y = value_view(out, true, to, who, "out");
  same_size(x, y, who);
  if (ti == dtype::float64) {
    const auto* d = static_cast<const double*>(x.ptr);
    auto* f = static_cast<float*>(y.ptr);
    std::size_t inexact = 0;
    py::gil_scoped_release nogil;
    for (std::size_t i = 0; i < x.n; ++i) {
      const double v = d[i];
      f[i] = cpd::detail::narrow(v);
      inexact += (cpd::detail::widen(f[i]) == v || v != v) ? 0 : 1;
    }
    return inexact;
  }
  std::vector<float> wide;
  const auto* src = static_cast<const float*>(compute_input(x, ti, wide));
  if (src == y.ptr && to != dtype::float32) wide.assign(src, src + x.n), src = wide.data();
  py::gil_scoped_release nogil;
  return store_floats(src, y, to);
}

/// Seconds per call of the C++ bulk quantize on the buffer, the best of `repeats` timed
/// calls (the benchmark's yardstick: the same call without Python in between).
double time_quantize(const py::buffer& in, const py::buffer& out, const std::string& fmt, const std::string& rounding,
                     unsigned threads, int repeats) {
  const view x = float_view(in, false, "cpd._cpd.time_quantize", "the input");
  const view y = float_view(out, true, "cpd._cpd.time_quantize", "out");
  same_size(x, y, "cpd._cpd.time_quantize");
  const bulk_args a = make_args(fmt, rounding, "infinity", 1, 0, cpd::to_string(cpd::default_generator), 0, 0, threads);
  py::gil_scoped_release nogil;
  double best = 1e30;
  for (int k = 0; k < std::max(repeats, 1); ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    with_policy(a.threads, [&](auto policy) {
      cpd::quantize(policy, a.f, a.r, a.o, static_cast<const float*>(x.ptr), static_cast<float*>(y.ptr), x.n, a.opt);
    });
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

/// The scalar core on one float (cpd::quantize of a runtime format): the
/// tests' check that the bulk binding passes modes, seeds, streams and offsets through.
/// Also the oracle tests' entry to stochastic rounding with given random bits R, their count N
/// and the variant (a, b, c: IEEE P3109's StochasticA, B, C), in double.
double scalar_quantize(const std::string& fmt, const std::string& rounding, const std::string& overflow, double x,
                       std::uint32_t random_bits, int random_bits_used, const std::string& variant, bool in_float) {
  const cpd::format f = parse_format(fmt);
  const cpd::stochastic_variant v = cpd::from_string<cpd::stochastic_variant>(variant);
  if (in_float)
    return cpd::quantize(f, parse_rounding(rounding), parse_overflow(overflow), static_cast<float>(x), random_bits,
                         random_bits_used, v);
  return cpd::quantize(f, parse_rounding(rounding), parse_overflow(overflow), x, random_bits, random_bits_used, v);
}

}  // namespace

void bind_values(py::module_& m) {
  m.def("quantize", &quantize);
  m.def("cast", &cast);
  m.def("fixed_point_quantize", &fixed_point_quantize);
  m.def("int_quantize", &int_quantize);
  m.def("int_quantize_channels", &int_quantize_channels);
  m.def("hadamard", &hadamard);
  m.def("time_quantize", &time_quantize);
  m.def("scalar_quantize", &scalar_quantize, py::arg("format"), py::arg("rounding"), py::arg("overflow"), py::arg("x"),
        py::arg("random_bits") = 0, py::arg("random_bits_used") = 32, py::arg("variant") = "a",
        py::arg("in_float") = true);
}

}  // namespace cpd_python
