// SPDX-License-Identifier: MIT
#pragma once

// The arguments of cpd._cpd's calls, shared by its translation units (module.cpp and the
// files it lists in module.hpp): names parsed into the library's values, the C-contiguous
// buffers the Python layer passes (view), the options of a rounding call, the call itself
// with the GIL released and its counts, and the values of every dtype (float16 and bfloat16
// widened to float, exactly; the results narrowed back or widened to double, as the CUDA
// module does: cpd_python::widen16 / narrow16). The definitions are in args.cpp.

#include <cpd/core/format.hpp>
#include <cpd/core/names.hpp>
#include <cpd/core/options.hpp>
#include <cpd/core/stats.hpp>
#include <cpd/host/execution.hpp>

#include "dtypes.hpp"

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cpd_python {

namespace py = pybind11;

// --- names ------------------------------------------------------------------------

inline cpd::format parse_format(const std::string& name) { return cpd::format::parse(name); }

inline cpd::rounding parse_rounding(const std::string& s) { return cpd::from_string<cpd::rounding>(s); }

inline cpd::overflow parse_overflow(const std::string& s) { return cpd::from_string<cpd::overflow>(s); }

/// The names of `values` (to_string's), as a Python tuple.
template <class E, std::size_t N>
py::tuple names_list(const E (&values)[N]) {
  py::list l;
  for (E v : values) l.append(cpd::to_string(v));
  return py::tuple(l);
}

/// The names of the formats of a cpd::format_list.
template <class... F>
std::vector<std::string> format_names_of(cpd::format_list<F...>) {
  return {cpd::format::of<F>().name()...};
}

// --- buffers ----------------------------------------------------------------------

/// A C-contiguous buffer of `what` (the Python layer makes them so; this is the last check).
struct view {
  void* ptr = nullptr;
  std::size_t n = 0;
  std::size_t itemsize = 0;
  char kind = 0;  // 'f' float32, 'd' float64, 'u' unsigned or signed integer codes
};

/// The buffer b as a view; py::type_error naming `who` and `arg` unless it is C-contiguous
/// float32, float64 or integer codes.
view get_view(const py::buffer& b, bool writable, const char* who, const char* arg);

/// A buffer of float32 values.
view float_view(const py::buffer& b, bool writable, const char* who, const char* arg);

/// A buffer of values of dtype t: float32 or float64 values, or the 16-bit codes of float16
/// and bfloat16 values (the Python layer passes those as uint16 views).
view value_view(const py::buffer& b, bool writable, dtype t, const char* who, const char* arg);

/// A buffer of 8-, 16- or 32-bit integer codes.
view code_view(const py::buffer& b, bool writable, const char* who, const char* arg);

/// std::invalid_argument unless a and b hold as many elements.
void same_size(const view& a, const view& b, const char* who);

/// The W workers' float32 buffers of an in-process exchange, each holding as many values as
/// out (std::invalid_argument naming `who` when there are none or a size differs).
std::vector<const float*> worker_arrays(const std::vector<py::buffer>& workers, const view& out, const char* who);

// --- rounding calls ---------------------------------------------------------------

/// Runs f(policy): sequential for one thread, else cpd::execution::par(threads) (0: all).
template <class Fn>
void with_policy(unsigned threads, Fn&& f) {
  if (threads == 1) f(cpd::execution::seq);
  else f(cpd::execution::par(threads));
}

/// The counts of a value_stats record as a dict, one entry per cpd::value_stats_fields.
py::dict stats_dict(const cpd::value_stats& s);

struct bulk_args {
  cpd::format f;
  cpd::rounding r;
  cpd::overflow o;
  cpd::bulk_options opt;
  unsigned threads;
};

/// A generator by name ("v1", "v2"; ValueError listing them otherwise).
cpd::random_generator parse_generator(const std::string& s);

/// Options holding only a stochastic-rounding key: seed, stream, counter offset, generator.
cpd::bulk_options key_options(std::uint64_t seed, std::uint64_t stream, const std::string& generator,
                              std::uint64_t offset);

/// The arguments of a rounding call; variant, subnormals and exponents name a
/// cpd::stochastic_variant, cpd::subnormal_mode and cpd::exponent_range (ValueError listing
/// them otherwise).
bulk_args make_args(const std::string& fmt, const std::string& rounding, const std::string& overflow,
                    std::uint64_t seed, std::uint64_t stream, const std::string& generator, std::uint64_t offset,
                    int scale_exponent, unsigned threads, const std::string& variant = "a",
                    const std::string& subnormals = "keep", const std::string& exponents = "format");

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
                      int scale_exponent, const std::string& variant, const std::string& subnormals,
                      const std::string& exponents, unsigned threads, bool stats, Run&& run) {
  bulk_args a = make_args(fmt, rounding, overflow, seed, stream, generator, offset, scale_exponent, threads, variant,
                          subnormals, exponents);
  return counted_call(a.opt, stats, [&] { run(a); });
}

// --- values of every dtype --------------------------------------------------------

/// The input as its rounding reads it: itself (float32, float64), or its float16 or bfloat16
/// codes widened to float into `wide` (exact).
const void* compute_input(const view& x, dtype t, std::vector<float>& wide);

/// Stores the floats r[0, y.n) into y of dtype t (narrowed to float16 or bfloat16 codes,
/// nearest-even; widened to double, exactly); returns how many changed value (NaN aside).
std::size_t store_floats(const float* r, const view& y, dtype t);

/// The dtypes of a rounding call: its input's and its output's. A float64 input rounds into
/// float64 (from the double, never through float); the others round from float.
std::pair<dtype, dtype> call_dtypes(const std::string& in, const std::string& out, const char* who);

}  // namespace cpd_python
