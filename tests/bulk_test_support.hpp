// SPDX-License-Identifier: MIT
// Shared by the bulk tests: test inputs, the scalar reference of a bulk call, and
// a loop over the instruction-set paths.
#pragma once

#include <cpd/host/bulk.hpp>
#include <cpd/cpd.hpp>

#include <doctest/doctest.h>

#include "test_context.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace bulk_test {

using cpd::overflow;
using cpd::rounding;
namespace cd = cpd::detail;

/// The instruction-set paths this CPU has (baseline always).
inline std::vector<cd::isa> isa_paths() {
  std::vector<cd::isa> v{cd::isa::baseline};
  if (cd::cpu_isa() >= cd::isa::avx2) v.push_back(cd::isa::avx2);
  if (cd::cpu_isa() >= cd::isa::avx512) v.push_back(cd::isa::avx512);
  return v;
}

/// Restores the instruction-set cap at the end of a scope.
struct isa_guard {
  ~isa_guard() { cd::set_isa_override(-1); }
};

template <class T>
using bits_t = cd::uint_of<T>;

template <class T>
bits_t<T> bits(T x) {
  return cd::bit_cast<bits_t<T>>(x);
}

template <class T>
T from_bits(bits_t<T> b) {
  return cd::bit_cast<T>(b);
}

/// Random bit patterns, values of every magnitude, and the special values of F:
/// zeros, infinities, NaNs, subnormals of T, the format's max, min, their
/// neighbours and midpoints.
template <class F, class T>
std::vector<T> test_inputs(std::size_t n_random, unsigned seed) {
  std::vector<T> v;
  std::mt19937_64 g(seed);
  for (std::size_t i = 0; i < n_random; ++i) {
    const std::uint64_t r = g();
    if (i % 3 == 0) {
      v.push_back(from_bits<T>(static_cast<bits_t<T>>(r)));  // any bit pattern
    } else {
      // |x| within a few binades of the format's range, any sign
      const double lo = std::log2(F::spec.min_positive) - 3, hi = std::log2(F::spec.max_value) + 3;
      const double e = lo + (hi - lo) * static_cast<double>(r >> 11) * 0x1p-53;
      const double m = std::exp2(e) * ((r & 1) ? -1 : 1);
      v.push_back(static_cast<T>(m));
    }
  }
  const T inf = std::numeric_limits<T>::infinity();
  const T specials[] = {T(0), -T(0), inf, -inf, std::numeric_limits<T>::quiet_NaN(),
                        -std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::denorm_min(),
                        -std::numeric_limits<T>::denorm_min(), std::numeric_limits<T>::min(),
                        std::numeric_limits<T>::max(), -std::numeric_limits<T>::max(), T(1), T(-1), T(0.5)};
  for (T s : specials) v.push_back(s);
  v.push_back(from_bits<T>(static_cast<bits_t<T>>(bits(inf) | 1)));  // signalling NaN
  const double anchors[] = {F::spec.max_value, F::spec.min_positive, F::spec.min_normal};
  for (double a : anchors) {
    const T t = static_cast<T>(a);
    if (!std::isfinite(t) || t == 0) continue;
    for (int d = -3; d <= 3; ++d) {
      const T u = from_bits<T>(static_cast<bits_t<T>>(bits(t) + d));
      v.push_back(u);
      v.push_back(-u);
      v.push_back(u * T(1.5));  // near a midpoint above
      v.push_back(u * T(0.75));
    }
  }
  return v;
}

/// Runs fn() on every instruction-set path.
template <class Fn>
void on_every_isa(Fn&& fn) {
  isa_guard guard;
  for (cd::isa i : isa_paths()) {
    cd::set_isa_override(i);
    CPD_TEST_CONTEXT("isa := ", cd::to_string(i));
    fn();
  }
}

/// The scalar reference for element i of a call: the value and code of
/// round(x * scale * 2^k) in F, from the double (exact) product.
template <class F, rounding R, overflow O, class T>
cd::rounded<double> reference(T x, const cpd::bulk_options& o, std::size_t i) {
  T y = x;
  if (o.scale != 1.0f) y = y * static_cast<T>(o.scale);
  const double z = static_cast<double>(y) * std::ldexp(1.0, o.scale_exponent);  // exact for the k tested
  const std::uint32_t rnd =
      R == rounding::stochastic ? cpd::random_bits(o.seed, o.stream, o.offset + i, o.generator) : 0u;
  constexpr cd::spec s = F::spec;
  return cd::round_bits<R, O, double>(s, cd::bit_cast<std::uint64_t>(z), rnd, o.random_bits);
}

/// The reference result of bulk quantize for element i.
template <class F, rounding R, overflow O, class T>
T reference_quantize(T x, const cpd::bulk_options& o, std::size_t i) {
  const double q = cd::bit_cast<double>(reference<F, R, O, T>(x, o, i).value) * std::ldexp(1.0, -o.scale_exponent);
  T t = static_cast<T>(q);
  const T inv = o.scale_inverse != 0 ? static_cast<T>(o.scale_inverse) : T(1) / static_cast<T>(o.scale);
  if (o.scale != 1.0f || inv != T(1)) t = t * inv;
  return t;
}

/// The reference statistics of a call (definitions of cpd::value_stats).
template <class F, rounding R, overflow O, class T>
cpd::value_stats reference_stats(const std::vector<T>& in, const cpd::bulk_options& o) {
  cpd::value_stats st;
  st.count = in.size();
  for (std::size_t i = 0; i < in.size(); ++i) {
    T y = in[i];
    if (o.scale != 1.0f) y = y * static_cast<T>(o.scale);
    if (y == 0) ++st.zeros;
    const auto r = reference<F, R, O, T>(in[i], o, i);
    const F f = F::from_bits(static_cast<typename F::storage_type>(r.code));
    const bool finite = std::isfinite(y);
    if (finite && y != 0 && cpd::iszero(f)) ++st.underflow;
    if (finite && r.overflow) ++st.overflow;
    if (!std::isnan(y) && cpd::isnan(f)) ++st.nan;
    if (((finite && r.overflow) || std::isinf(y)) && !cpd::isnan(f) &&
        (f.bits() & F::spec.mag_mask) == F::spec.max_code)
      ++st.saturated;
    if (std::isnan(y)) ++st.nan_inputs;
    if (std::isinf(y)) ++st.inf_inputs;
  }
  return st;
}

/// A wrong element of a call (check_mode's first five of each): its index, input, result
/// and the reference's (values in hexadecimal: every float and double exactly).
inline void report_value(const char* call, std::size_t i, double in, double got, double want) {
  FAIL_CHECK(call << " element " << i << ": in " << std::hexfloat << in << " got " << got << " want " << want
                  << std::defaultfloat);
}
inline void report_code(std::size_t i, double in, std::uint64_t got, std::uint64_t want) {
  FAIL_CHECK("encode element " << i << ": in " << std::hexfloat << in << std::defaultfloat << " got " << got
                               << " want " << want);
}
/// The end of a call's check: no wrong element, and the reference's statistics.
inline void check_call(int bad, const cpd::value_stats& st, const cpd::value_stats& want) {
  CHECK(bad == 0);
  CHECK(st == want);
}

/// Bulk quantize and encode of F in mode (R, O) against the scalar core.
template <class F, rounding R, overflow O, class T>
void check_mode(const std::vector<T>& in, const cpd::bulk_options& base) {
  CPD_TEST_CONTEXT("R := ", cpd::to_string(R), ", O := ", cpd::to_string(O));
  using code_t = typename F::storage_type;
  const std::size_t n = in.size();
  cpd::value_stats want_stats = reference_stats<F, R, O, T>(in, base);
  on_every_isa([&] {
    cpd::value_stats st;
    cpd::bulk_options o = base;
    o.stats = &st;
    if constexpr (std::is_same_v<T, double> || F::fits_float) {
      std::vector<T> out(n);
      cpd::quantize<F, R, O>(in.data(), out.data(), n, o);
      int bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const T want = reference_quantize<F, R, O, T>(in[i], base, i);
        if (bits(out[i]) != bits(want) && bad++ < 5) report_value("quantize", i, in[i], out[i], want);
      }
      check_call(bad, st, want_stats);
    }
    std::vector<code_t> codes(n);
    st = {};
    cpd::encode<F, R, O>(in.data(), codes.data(), n, o);
    int bad = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto want = static_cast<code_t>(reference<F, R, O, T>(in[i], base, i).code);
      if (codes[i] != want && bad++ < 5) report_code(i, in[i], codes[i], want);
    }
    check_call(bad, st, want_stats);
  });
}

template <class F, overflow O, class T>
void check_all_modes(const std::vector<T>& in, const cpd::bulk_options& o) {
  check_mode<F, rounding::nearest_even, O>(in, o);
  check_mode<F, rounding::nearest_away, O>(in, o);
  check_mode<F, rounding::toward_zero, O>(in, o);
  check_mode<F, rounding::upward, O>(in, o);
  check_mode<F, rounding::downward, O>(in, o);
  for (cpd::random_generator g : {cpd::random_generator::v1, cpd::random_generator::v2}) {
    cpd::bulk_options og = o;
    og.generator = g;
    CPD_TEST_CONTEXT("generator := ", cpd::to_string(g));
    check_mode<F, rounding::stochastic, O>(in, og);
  }
  check_mode<F, rounding::odd, O>(in, o);
}

}  // namespace bulk_test
