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
// and releases the GIL around every loop over values.

#include <cpd/cpd.hpp>
#include <cpd/exchange/protocol.hpp>
#include <cpd/exchange/scales.hpp>
#include <cpd/exchange/schedule.hpp>
#include <cpd/host/pack.hpp>
#include <cpd/host/posit_bulk.hpp>

#include "dtypes.hpp"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <variant>
#include <vector>

namespace py = pybind11;

namespace {

// --- arguments --------------------------------------------------------------------

cpd::format parse_format(const std::string& name) { return cpd::format::parse(name); }

cpd::rounding parse_rounding(const std::string& s) { return cpd::from_string<cpd::rounding>(s); }

cpd::overflow parse_overflow(const std::string& s) { return cpd::from_string<cpd::overflow>(s); }

/// A C-contiguous buffer of `what` (the Python layer makes them so; this is the last check).
struct view {
  void* ptr = nullptr;
  std::size_t n = 0;
  std::size_t itemsize = 0;
  char kind = 0;  // 'f' float32, 'd' float64, 'u' unsigned or signed integer codes
};

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

/// A buffer of values of dtype t: float32 or float64 values, or the 16-bit codes of float16
/// and bfloat16 values (the Python layer passes those as uint16 views).
view value_view(const py::buffer& b, bool writable, cpd_python::dtype t, const char* who, const char* arg) {
  view v = get_view(b, writable, who, arg);
  const bool ok = t == cpd_python::dtype::float32   ? v.kind == 'f'
                  : t == cpd_python::dtype::float64 ? v.kind == 'd'
                                                    : v.kind == 'u' && v.itemsize == 2;
  if (!ok)
    throw py::type_error(std::string(who) + ": " + arg + " must hold " +
                         (t == cpd_python::dtype::float32   ? "float32 values"
                          : t == cpd_python::dtype::float64 ? "float64 values"
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

/// Runs f(policy): sequential for one thread, else cpd::execution::par(threads) (0: all).
template <class Fn>
void with_policy(unsigned threads, Fn&& f) {
  if (threads == 1) f(cpd::execution::seq);
  else f(cpd::execution::par(threads));
}

py::dict stats_dict(const cpd::value_stats& s) {
  py::dict d;
  for (const cpd::value_stats_field& f : cpd::value_stats_fields) d[f.name] = s.*f.member;
  return d;
}

struct bulk_args {
  cpd::format f;
  cpd::rounding r;
  cpd::overflow o;
  cpd::bulk_options opt;
  unsigned threads;
};

/// A generator by name ("v1", "v2"; ValueError listing them otherwise).
cpd::random_generator parse_generator(const std::string& s) { return cpd::from_string<cpd::random_generator>(s); }

bulk_args make_args(const std::string& fmt, const std::string& rounding, const std::string& overflow,
                    std::uint64_t seed, std::uint64_t stream, const std::string& generator, std::uint64_t offset,
                    int scale_exponent, unsigned threads) {
  bulk_args a{parse_format(fmt), parse_rounding(rounding), parse_overflow(overflow), {}, threads};
  a.opt.seed = seed;
  a.opt.stream = stream;
  a.opt.generator = parse_generator(generator);
  a.opt.offset = offset;
  a.opt.scale_exponent = scale_exponent;
  return a;
}

// --- bulk calls -------------------------------------------------------------------

/// run() with the GIL released and opt.stats pointing at a record when the counts are
/// asked for; returns them (a dict) or None. Every rounding call goes through it.
template <class Run>
py::object counted_call(cpd::bulk_options& opt, bool stats, Run&& run) {
  cpd::value_stats st;
  if (stats) opt.stats = &st;
  {
    py::gil_scoped_release nogil;
    run();
  }
  if (stats) return stats_dict(st);
  return py::none();
}

/// The arguments of a rounding call (quantize, encode), the GIL released around run(args),
/// and the counts when asked for.
template <class Run>
py::object round_call(const std::string& fmt, const std::string& rounding, const std::string& overflow,
                      std::uint64_t seed, std::uint64_t stream, const std::string& generator, std::uint64_t offset,
                      int scale_exponent, unsigned threads, bool stats, Run&& run) {
  bulk_args a = make_args(fmt, rounding, overflow, seed, stream, generator, offset, scale_exponent, threads);
  return counted_call(a.opt, stats, [&] { run(a); });
}

// --- values of every dtype: float16 and bfloat16 widened to float (exact), the results
// narrowed back or widened to double (cpd_python::widen16 / narrow16, as the CUDA module) ---

using cpd_python::dtype;

/// The input as its rounding reads it: itself (float32, float64), or its float16 or bfloat16
/// codes widened to float into `wide` (exact).
const void* compute_input(const view& x, dtype t, std::vector<float>& wide) {
  if (t == dtype::float32 || t == dtype::float64) return x.ptr;
  wide.resize(x.n);
  const auto* c = static_cast<const std::uint16_t*>(x.ptr);
  for (std::size_t i = 0; i < x.n; ++i) wide[i] = cpd_python::widen16(t, c[i]);
  return wide.data();
}

/// Stores the floats r[0, y.n) into y of dtype t (narrowed to float16 or bfloat16 codes,
/// nearest-even; widened to double, exactly); returns how many changed value (NaN aside).
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
      o[i] = cpd_python::narrow16(t, r[i]);
      const float back = cpd_python::widen16(t, o[i]);
      inexact += (back == r[i] || (back != back && r[i] != r[i])) ? 0 : 1;
    }
  }
  return inexact;
}

/// The dtypes of a rounding call: its input's and its output's. A float64 input rounds into
/// float64 (from the double, never through float); the others round from float.
std::pair<dtype, dtype> call_dtypes(const std::string& in, const std::string& out, const char* who) {
  const dtype ti = cpd_python::parse_dtype(in, who), to = cpd_python::parse_dtype(out, who);
  if (ti == dtype::float64 && to != dtype::float64)
    throw std::invalid_argument(std::string(who) + ": a float64 input rounds into float64 values (out: float64)");
  return {ti, to};
}

py::object quantize(const py::buffer& in, const py::buffer& out, const std::string& in_dtype,
                    const std::string& out_dtype, const std::string& fmt, const std::string& rounding,
                    const std::string& overflow, std::uint64_t seed, std::uint64_t stream,
                    const std::string& generator, std::uint64_t offset, int scale_exponent, unsigned threads,
                    bool stats) {
  const char* who = "cpd.quantize";
  const auto [ti, to] = call_dtypes(in_dtype, out_dtype, who);
  const view x = value_view(in, false, ti, who, "the input");
  const view y = value_view(out, true, to, who, "out");
  same_size(x, y, who);
  return round_call(fmt, rounding, overflow, seed, stream, generator, offset, scale_exponent, threads, stats,
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

template <class T, class Code>
void encode_as(const bulk_args& a, const T* x, const view& c) {
  with_policy(a.threads, [&](auto policy) {
    cpd::encode(policy, a.f, a.r, a.o, x, static_cast<Code*>(c.ptr), c.n, a.opt);
  });
}

template <class T>
void encode_codes(const bulk_args& a, const T* x, const view& c) {
  if (c.itemsize == 1) encode_as<T, std::uint8_t>(a, x, c);
  else if (c.itemsize == 2) encode_as<T, std::uint16_t>(a, x, c);
  else encode_as<T, std::uint32_t>(a, x, c);
}

py::object encode(const py::buffer& in, const py::buffer& out, const std::string& in_dtype, const std::string& fmt,
                  const std::string& rounding, const std::string& overflow, std::uint64_t seed, std::uint64_t stream,
                  const std::string& generator, std::uint64_t offset, int scale_exponent, unsigned threads,
                  bool stats) {
  const char* who = "cpd.encode";
  const dtype ti = cpd_python::parse_dtype(in_dtype, who);
  const view x = value_view(in, false, ti, who, "the input");
  const view c = code_view(out, true, who, "out");
  same_size(x, c, who);
  return round_call(fmt, rounding, overflow, seed, stream, generator, offset, scale_exponent, threads, stats,
                    [&](const bulk_args& a) {
                      std::vector<float> wide;
                      const void* src = compute_input(x, ti, wide);
                      if (ti == dtype::float64) encode_codes(a, static_cast<const double*>(src), c);
                      else encode_codes(a, static_cast<const float*>(src), c);
                    });
}

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
  const dtype to = cpd_python::parse_dtype(out_dtype, who);
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

/// Copies the values of `in` (float16, bfloat16 or float32; float64 into float32) into `out`,
/// narrowing nearest-even or widening exactly as the bulk calls do, whatever the floating-point
/// environment; returns how many values changed (NaN aside), 0 when the copy is exact.
std::size_t cast(const py::buffer& in, const py::buffer& out, const std::string& in_dtype,
                 const std::string& out_dtype) {
  const char* who = "cpd._cpd.cast";
  const dtype ti = cpd_python::parse_dtype(in_dtype, who), to = cpd_python::parse_dtype(out_dtype, who);
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
float scalar_quantize(const std::string& fmt, const std::string& rounding, const std::string& overflow, float x,
                       std::uint32_t random_bits) {
  return cpd::quantize(parse_format(fmt), parse_rounding(rounding), parse_overflow(overflow), x, random_bits);
}

// --- names ------------------------------------------------------------------------

/// The names of `values` (to_string's), as a Python tuple.
template <class E, std::size_t N>
py::tuple names_list(const E (&values)[N]) {
  py::list l;
  for (E v : values) l.append(cpd::to_string(v));
  return py::tuple(l);
}

// --- formats ------------------------------------------------------------------------

template <class... F>
std::vector<std::string> format_names_of(cpd::format_list<F...>) {
  return {cpd::format::of<F>().name()...};
}

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

// --- scalers ----------------------------------------------------------------------

std::string exchange_format_names() {
  std::string s;
  for (const std::string& n : format_names_of(cpd::exchange_formats{})) s += (s.empty() ? "" : ", ") + n;
  return s;
}

template <class Fn>
void visit_exchange(const cpd::format& f, const char* who, Fn&& fn) {
  if (!cpd::visit<cpd::exchange_formats>(f, std::forward<Fn>(fn)))
    throw std::invalid_argument(std::string(who) + ": format " + f.name() + " is not compiled into the package; use " +
                                "one of " + exchange_format_names());
}

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
                                       cpd::float4_e2m1fn>;
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
                                " is not an OCP MX element (e4m3fn, e5m2, e3m2fn, e2m3fn, e2m1fn)");
}

// --- the exchange -------------------------------------------------------------------

cpd::allreduce_algorithm parse_algorithm(const std::string& s) { return cpd::from_string<cpd::allreduce_algorithm>(s); }

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

/// The options of cpd.simulate_allreduce, checked: an algorithm of cpd::simulated_algorithms
/// (two_step without Kahan), a format of cpd::exchange_formats, nearest_even or stochastic;
/// std::invalid_argument naming the problem. The Python layer checks them (check_simulation)
/// before the scaler's select, which moves a stateful scaler on.
cpd::allreduce_options simulation_options(const std::string& fmt, const std::string& rounding,
                                          const std::string& algorithm, bool kahan) {
  const char* who = "cpd.simulate_allreduce";
  cpd::allreduce_options opt;
  opt.algorithm = parse_algorithm(algorithm);
  cpd::detail::check_one_of(who, "algorithm", opt.algorithm, cpd::simulated_algorithms, "the simulation runs");
  opt.kahan = kahan;
  if (opt.algorithm == cpd::allreduce_algorithm::two_step) cpd::detail::check_accumulator(opt.accumulator, kahan);
  visit_exchange_mode(parse_format(fmt), parse_rounding(rounding), who, [](auto, auto) {});
  return opt;
}

/// cpd::simulate_allreduce_scaled of W workers' arrays with a power-of-two scale.
py::dict simulate(const std::vector<py::buffer>& workers, const py::buffer& out, const std::string& fmt,
                  const std::string& rounding, int scale_exponent, bool scale_nonfinite, const std::string& algorithm,
                  bool kahan, bool mean, std::uint64_t seed, std::uint64_t stream, const std::string& generator,
                  unsigned threads, bool diagnostics) {
  const char* who = "cpd.simulate_allreduce";
  if (workers.empty()) throw std::invalid_argument(std::string(who) + ": no workers");
  const view y = float_view(out, true, who, "out");
  std::vector<const float*> x;
  for (const py::buffer& b : workers) {
    const view v = float_view(b, false, who, "a worker's tensor");
    same_size(v, y, who);
    x.push_back(static_cast<const float*>(v.ptr));
  }
  cpd::allreduce_options opt = simulation_options(fmt, rounding, algorithm, kahan);
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

/// One rank's side of an exchange of T tensors whose messages the caller moves: the rank
/// schedule of <cpd/exchange/schedule.hpp> (ring, pipelined_ring, two_step, all_gather), as
/// cpd::mpi runs it, with the tensors back to back in one float32 array; this binds it and
/// nothing else. The roundings, chunks and random bits are those of
/// cpd::simulate_allreduce(algorithm) tensor by tensor.
class exchange_base {
 public:
  virtual ~exchange_base() = default;
  virtual void load(const py::buffer& x) = 0;  // this rank's values, all tensors back to back
  virtual int steps() const = 0;
  virtual int send_to(int step) const = 0;
  virtual int recv_from(int step) const = 0;
  virtual py::memoryview send(int step) = 0;
  virtual py::memoryview recv(int step) = 0;
  virtual void complete(int step) = 0;  // after step's messages arrived
  std::uint64_t out_nonfinite = 0;
};

py::memoryview bytes_view(const unsigned char* p, std::size_t n, bool writable) {
  return py::memoryview::from_memory(const_cast<unsigned char*>(p), static_cast<py::ssize_t>(n), !writable);
}

template <class F, cpd::rounding R>
class exchange final : public exchange_base {
 public:
  exchange(std::vector<std::size_t> sizes, std::vector<cpd::pow2_scale> scales, std::vector<cpd::random_stream> keys,
           int world, int rank, cpd::exchange_options opt, py::buffer out)
      : x_(world, rank, opt), sizes_(std::move(sizes)), scales_(std::move(scales)), keys_(std::move(keys)),
        out_(std::move(out)) {
    for (std::size_t s : sizes_) total_ += s;
    const view y = float_view(out_, true, "cpd exchange", "out");
    if (y.n != total_)
      throw std::invalid_argument("cpd exchange: out has " + std::to_string(y.n) + " values, the tensors " +
                                  std::to_string(total_));
    y_ = static_cast<float*>(y.ptr);
  }

  void load(const py::buffer& xb) override {
    const view x = float_view(xb, false, "cpd exchange", "the values");
    if (x.n != total_)
      throw std::invalid_argument("cpd exchange: " + std::to_string(x.n) + " values for tensors of " +
                                  std::to_string(total_));
    const float* xp = static_cast<const float*>(x.ptr);
    std::vector<cpd::exchange_tensor<cpd::pow2_scale>> ts;
    std::size_t at = 0;
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      ts.push_back({xp + at, y_ + at, sizes_[i], nullptr, keys_[i], scales_[i]});
      at += sizes_[i];
    }
    py::gil_scoped_release nogil;
    x_.start(ts.data(), ts.size());
    if (x_.steps() == 0) count_out();
  }
  int steps() const override { return x_.steps(); }
  int send_to(int step) const override { return x_.send_to(check_step(step)); }
  int recv_from(int step) const override { return x_.recv_from(check_step(step)); }
  py::memoryview send(int step) override {
    check_step(step);
    return bytes_view(x_.send_data(step, 0), x_.send_bytes(step, 0), false);
  }
  py::memoryview recv(int step) override {
    check_step(step);
    return bytes_view(x_.recv_data(step, 0), x_.recv_bytes(step, 0), true);
  }
  void complete(int step) override {
    check_step(step);
    py::gil_scoped_release nogil;
    x_.complete(step, 0);
    if (step == x_.steps() - 1) count_out();
  }

 private:
  int check_step(int step) const {
    if (step < 0 || step >= x_.steps())
      throw std::invalid_argument("cpd exchange: step " + std::to_string(step) + " of " + std::to_string(x_.steps()));
    return step;
  }
  void count_out() noexcept {
    std::uint64_t k = 0;
    for (std::size_t i = 0; i < total_; ++i) k += (y_[i] - y_[i] == 0) ? 0 : 1;
    out_nonfinite = k;
  }

  cpd::rank_exchange<F, R, cpd::overflow::infinity, cpd::pow2_scale> x_;
  std::vector<std::size_t> sizes_;
  std::vector<cpd::pow2_scale> scales_;
  std::vector<cpd::random_stream> keys_;
  py::buffer out_;
  float* y_ = nullptr;
  std::size_t total_ = 0;
};

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


#include "posit_bindings.hpp"  // posits: uses the helpers above

}  // namespace

PYBIND11_MODULE(_cpd, m) {
  m.doc() = "cpd's native calls (use the package cpd: docs/python.md)";
  m.attr("version") = std::to_string(CPD_VERSION_MAJOR) + "." + std::to_string(CPD_VERSION_MINOR) + "." + std::to_string(CPD_VERSION_PATCH);
  m.def("quantize", &quantize);
  bind_posits(m);
  m.def("encode", &encode);
  m.def("decode", &decode);
  m.def("cast", &cast);
  m.def("time_quantize", &time_quantize);
  m.def("scalar_quantize", &scalar_quantize);
  m.def("random_bits", [](std::uint64_t seed, std::uint64_t stream, std::uint64_t counter,
                          const std::string& generator) {
    return cpd::random_bits(seed, stream, counter, parse_generator(generator));
  });
  m.def("format_names", &format_names);
  m.def("format_info", &format_info);
  m.def("exchange_format_names", &exchange_format_names);
  m.def("mx_quantize", &mx_quantize);
  m.def("simulate", &simulate);
  m.def("check_simulation", [](const std::string& fmt, const std::string& rounding, const std::string& algorithm,
                               bool kahan) { (void)simulation_options(fmt, rounding, algorithm, kahan); });
  m.attr("value_stats_fields") = [] {
    py::list l;
    for (const cpd::value_stats_field& f : cpd::value_stats_fields) l.append(f.name);
    return py::tuple(l);
  }();
  m.attr("roundings") = names_list(cpd::enum_names<cpd::rounding>::values);
  m.attr("generators") = names_list(cpd::enum_names<cpd::random_generator>::values);
  m.attr("default_generator") = cpd::to_string(cpd::default_generator);
  m.attr("overflows") = names_list(cpd::enum_names<cpd::overflow>::values);
  m.attr("simulated_algorithms") = names_list(cpd::simulated_algorithms);
  m.attr("rank_algorithms") = names_list(cpd::rank_algorithms);
  m.def("hardware_threads", [] { return std::max(1u, std::thread::hardware_concurrency()); });

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
