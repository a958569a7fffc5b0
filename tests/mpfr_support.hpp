// SPDX-License-Identifier: MIT
#pragma once

// Glue between cpd and the MPFR oracle for the tests: the oracle's description
// of a cpd::float_t (from its template arguments only), the library's results in
// every deterministic mode, and a mismatch collector. Nothing here rounds.

#include <cpd/core/float.hpp>

#include "mpfr_oracle.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace cpd_test {

namespace mo = mpfr_oracle;

/// The oracle's format for F, from F's template arguments (never from its spec).
template <class F>
mo::format oracle_format() {
  using Enc = typename F::encoding;
  mo::kind k = mo::kind::ieee;
  if (std::is_same_v<Enc, cpd::fn>) k = mo::kind::fn;
  if (std::is_same_v<Enc, cpd::fnuz>) k = mo::kind::fnuz;
  if (std::is_same_v<Enc, cpd::finite>) k = mo::kind::finite;
  if (std::is_same_v<Enc, cpd::fnu>) k = mo::kind::fnu;
  return mo::make_format(F::exponent_bits, F::mantissa_bits, k, F::bias);
}

/// "float_t<E,M,enc,bias>".
template <class F>
std::string format_name() {
  const mo::format f = oracle_format<F>();
  return "float_t<" + std::to_string(f.E) + "," + std::to_string(f.M) + "," + mo::name(f.k) + "," +
         std::to_string(f.bias) + ">";
}

/// True when cpd::convert<F> accepts a float source.
template <class F>
inline constexpr bool convert_from_float = F::exponent_bits <= 8 && F::mantissa_bits <= 23;
/// True when cpd::quantize<F> accepts a float source.
template <class F>
inline constexpr bool quantize_from_float = F::fits_float;

inline constexpr cpd::rounding deterministic_modes[mo::mode_count] = {
    cpd::rounding::nearest_even, cpd::rounding::nearest_away, cpd::rounding::toward_zero, cpd::rounding::upward,
    cpd::rounding::downward,     cpd::rounding::odd,          cpd::rounding::nearest_zero};

/// The library's results for x in every deterministic mode and both overflow
/// modes: the code, the code's value by the oracle's decoder, and quantize's value.
struct lib_results {
  std::uint64_t code[mo::mode_count][2];
  double code_value[mo::mode_count][2];
  double quantized[mo::mode_count][2];
  bool has_quantized = false;
};

template <class F, cpd::rounding R, cpd::overflow O, class T>
void lib_one(const mo::format& f, T x, int mi, int oi, lib_results& out) {
  const std::uint64_t c = cpd::convert<F, R, O>(x).bits();
  out.code[mi][oi] = c;
  out.code_value[mi][oi] = f.decode(c);
  if constexpr (std::is_same_v<T, double> || quantize_from_float<F>) {
    out.quantized[mi][oi] = static_cast<double>(cpd::quantize<F, R, O>(x));
    out.has_quantized = true;
  }
}

template <class F, class T, std::size_t... I>
void lib_all_impl(const mo::format& f, T x, lib_results& out, std::index_sequence<I...>) {
  (lib_one<F, deterministic_modes[I], cpd::overflow::infinity>(f, x, int(I), 0, out), ...);
  (lib_one<F, deterministic_modes[I], cpd::overflow::saturate>(f, x, int(I), 1, out), ...);
}

template <class F, class T>
lib_results lib_all(const mo::format& f, T x) {
  lib_results r{};
  lib_all_impl<F>(f, x, r, std::make_index_sequence<mo::mode_count>{});
  return r;
}

inline std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

/// Counts checks and keeps the first few mismatches as text.
struct collector {
  std::uint64_t checks = 0;
  std::uint64_t failures = 0;
  std::vector<std::string> first;

  void fail(std::string s) {
    ++failures;
    if (first.size() < 12) first.push_back(std::move(s));
  }
  void merge(const collector& o) {
    checks += o.checks;
    failures += o.failures;
    for (const auto& s : o.first)
      if (first.size() < 12) first.push_back(s);
  }
};

/// Checks the library against the oracle for one input x (float or double).
template <class F, class T>
void check_input(const mo::format& f, T x, collector& col) {
  const mo::results want = mo::round_all(f, static_cast<double>(x));
  const lib_results got = lib_all<F>(f, x);
  for (int m = 0; m < mo::mode_count; ++m) {
    for (int o = 0; o < 2; ++o) {
      const double w = want.value[m][o];
      col.checks += got.has_quantized ? 2 : 1;
      const bool code_ok = mo::same(got.code_value[m][o], w);
      const bool quant_ok =
          !got.has_quantized || mo::same(got.quantized[m][o], mo::quantized_value(f, static_cast<double>(x), w));
      if (!code_ok || !quant_ok) {
        char buf[400];
        std::snprintf(buf, sizeof buf,
                      "%s from %s x=%s (%.17g) %s/%s: want %s, convert gave code 0x%" PRIx64
                      " = %s, quantize gave %s",
                      format_name<F>().c_str(), std::is_same_v<T, float> ? "float" : "double",
                      hex(double(x)).c_str(), double(x), mo::name(mo::mode(m)), o ? "saturate" : "infinity",
                      hex(w).c_str(), got.code[m][o], hex(got.code_value[m][o]).c_str(),
                      got.has_quantized ? hex(got.quantized[m][o]).c_str() : "-");
        col.fail(buf);
      }
    }
  }
}

/// True when CPD_TEST_VERBOSE is set: the tests then print how much they checked.
inline bool verbose() {
  static const bool v = std::getenv("CPD_TEST_VERBOSE") != nullptr;
  return v;
}

/// Reports a collector through doctest (call from the main thread only).
#define CPD_REPORT(what, col)                                                             \
  do {                                                                                    \
    if (::cpd_test::verbose())                                                            \
      std::printf("%-40s %-28s %12llu checks\n", ::cpd_test::format_name<F>().c_str(), what, \
                  static_cast<unsigned long long>((col).checks));                         \
    for (const auto& line_ : (col).first) MESSAGE(line_);                                 \
    CHECK_MESSAGE((col).failures == 0, (col).failures << " mismatches of " << (col).checks); \
  } while (0)

}  // namespace cpd_test
