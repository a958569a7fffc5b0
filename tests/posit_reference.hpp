// SPDX-License-Identifier: MIT
#pragma once

// An independent posit reference for the tests, written from the Posit Standard 2022's
// definition (and Gustafson's posit<n, es> for other es), sharing no code with cpd: a
// code is read bit by bit into an exact MPFR number, and the rounding of x is decided
// from x's neighbours and the (n+1)-bit posit between them, compared exactly.

#include <mpfr.h>

#include <cstdint>
#include <vector>

namespace posit_ref {

/// An MPFR number of 256 bits (exact for every posit of <= 33 bits and every double).
struct num {
  mpfr_t v;
  num() { mpfr_init2(v, 256); mpfr_set_zero(v, 1); }
  num(const num& o) { mpfr_init2(v, 256); mpfr_set(v, o.v, MPFR_RNDN); }
  num& operator=(const num& o) { mpfr_set(v, o.v, MPFR_RNDN); return *this; }
  ~num() { mpfr_clear(v); }
  explicit num(double d) { mpfr_init2(v, 256); mpfr_set_d(v, d, MPFR_RNDN); }
};

inline int cmp(const num& a, const num& b) { return mpfr_cmp(a.v, b.v); }

/// The value of code (its n low bits) of posit<n, es>; *nar set for NaR.
inline num value(int n, int es, std::uint64_t code, bool* nar = nullptr) {
  const std::uint64_t mask = (std::uint64_t(1) << n) - 1;
  code &= mask;
  if (nar) *nar = code == (std::uint64_t(1) << (n - 1));
  num out;
  if (code == 0 || code == (std::uint64_t(1) << (n - 1))) return out;
  const bool neg = (code >> (n - 1)) & 1;
  if (neg) code = (~code + 1) & mask;  // the magnitude's code
  std::vector<int> b;  // the n - 1 bits after the sign, first bit first
  for (int i = n - 2; i >= 0; --i) b.push_back(static_cast<int>((code >> i) & 1));
  std::size_t i = 0;
  const int first = b[0];
  int run = 0;
  while (i < b.size() && b[i] == first) { ++run; ++i; }
  const long k = first ? run - 1 : -run;
  ++i;  // the terminating bit (or past the end)
  long e = 0;
  for (int j = 0; j < es; ++j, ++i) e = 2 * e + (i < b.size() ? b[i] : 0);  // cut-off bits are zeros
  mpfr_set_ui(out.v, 1, MPFR_RNDN);
  num frac;
  long weight = -1;
  for (; i < b.size(); ++i, --weight)
    if (b[i]) {
      mpfr_set_ui_2exp(frac.v, 1, weight, MPFR_RNDN);
      mpfr_add(out.v, out.v, frac.v, MPFR_RNDN);
    }
  mpfr_mul_2si(out.v, out.v, k * (1L << es) + e, MPFR_RNDN);
  if (neg) mpfr_neg(out.v, out.v, MPFR_RNDN);
  return out;
}

/// The signed code of posit<n, es> as an integer in (-2^(n-1), 2^(n-1)) (NaR excluded):
/// posit order is this integer's order.
inline std::int64_t as_signed(int n, std::uint64_t code) {
  const std::int64_t c = static_cast<std::int64_t>(code & ((std::uint64_t(1) << n) - 1));
  return c >= (std::int64_t(1) << (n - 1)) ? c - (std::int64_t(1) << n) : c;
}

/// The code of signed integer s.
inline std::uint64_t of_signed(int n, std::int64_t s) {
  return static_cast<std::uint64_t>(s) & ((std::uint64_t(1) << n) - 1);
}

/// The largest code whose value is <= x (x finite, within [-maxpos, maxpos]), by bisection.
inline std::uint64_t floor_code(int n, int es, const num& x) {
  std::int64_t lo = -(std::int64_t(1) << (n - 1)) + 1, hi = (std::int64_t(1) << (n - 1)) - 1;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (cmp(value(n, es, of_signed(n, mid)), x) <= 0) lo = mid;
    else hi = mid - 1;
  }
  return of_signed(n, lo);
}

}  // namespace posit_ref
