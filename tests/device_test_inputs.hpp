// SPDX-License-Identifier: MIT
#pragma once
// Inputs shared by the Thrust and CUDA tests: for a format F, every code's value,
// every midpoint between neighbouring values and the floats just beside it, the
// special values of float, and random floats (any bit pattern, and values in F's range).

#include <cpd/core/float.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace cpd_test {

inline float from_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
inline std::uint32_t to_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

/// The number of codes of F (all bit patterns of its storage width).
template <class F>
constexpr std::uint64_t code_count() {
  return std::uint64_t(1) << F::spec.bits;
}

/// Every code's value, the midpoints between neighbours and the floats one ulp either side
/// of them, float specials, and `random` random floats (half any bits, half in F's range).
template <class F>
std::vector<float> inputs(std::size_t random, std::uint64_t seed = 1) {
  std::vector<float> v;
  std::vector<float> values;
  for (std::uint64_t c = 0; c < code_count<F>(); ++c) {
    const F f = F::from_bits(static_cast<typename F::storage_type>(c));
    const float x = static_cast<float>(f);
    v.push_back(x);
    if (std::isfinite(x)) values.push_back(x);
  }
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  for (std::size_t i = 0; i + 1 < values.size(); ++i) {
    const double mid = (static_cast<double>(values[i]) + values[i + 1]) / 2;
    const float m = static_cast<float>(mid);
    for (float x : {m, std::nextafter(m, -INFINITY), std::nextafter(m, INFINITY)}) v.push_back(x);
  }
  const float lim = std::numeric_limits<float>::max();
  const double max_f = F::spec.max_value;
  for (float x : {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::quiet_NaN(),
                  -std::numeric_limits<float>::quiet_NaN(), from_bits(0x7F800001u), from_bits(0xFFA00000u), lim, -lim,
                  std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::min(),
                  static_cast<float>(max_f * 2), static_cast<float>(-max_f * 1.0625), static_cast<float>(max_f * 1.01)})
    v.push_back(x);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (std::size_t i = 0; i < random; ++i) {
    if (i % 2 == 0) {
      v.push_back(from_bits(static_cast<std::uint32_t>(gen())));
    } else {  // sign * 2^[emin - M - 2, emax + 2) * [1, 2)
      const int lo = F::spec.emin - F::mantissa_bits - 2, hi = F::spec.emax + 2;
      const int e = lo + static_cast<int>(gen() % static_cast<std::uint64_t>(hi - lo));
      const double m = 1.0 + std::abs(unit(gen));
      v.push_back(static_cast<float>(std::ldexp(unit(gen) < 0 ? -m : m, e)));
    }
  }
  return v;
}

/// Bits of two float arrays equal, element by element; returns the first mismatch or -1.
inline long first_mismatch(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (to_bits(a[i]) != to_bits(b[i])) return static_cast<long>(i);
  return -1;
}
template <class U>
long first_mismatch(const std::vector<U>& a, const std::vector<U>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<long>(i);
  return -1;
}

}  // namespace cpd_test
