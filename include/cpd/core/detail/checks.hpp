// SPDX-License-Identifier: MIT
#pragma once

// Argument checks shared by the host entry points: sizes computed without
// overflow (a wrapped size would pass every later check and then write out of
// bounds), address ranges compared as integers that cannot wrap, and enum values
// that arrive at run time. Each failure is a std::length_error or
// std::invalid_argument that names the caller and the field (detail/error.hpp).

#include <cpd/core/detail/error.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/rounding.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace cpd::detail {

/// v as printf's %.9g writes it (a float's shortest exact decimal is at most 9 digits).
inline std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

/// n * size, or std::length_error "<who>: <what> of n elements of size bytes overflows".
inline std::size_t checked_mul(const char* who, const char* what, std::size_t n, std::size_t size) {
  if (size != 0 && n > std::numeric_limits<std::size_t>::max() / size)
    fail_length(std::string(who) + ": " + what + " of " + std::to_string(n) + " elements of " + std::to_string(size) +
                " bytes does not fit in std::size_t");
  return n * size;
}

/// a + b, or std::length_error naming who and what.
inline std::size_t checked_add(const char* who, const char* what, std::size_t a, std::size_t b) {
  if (a > std::numeric_limits<std::size_t>::max() - b)
    fail_length(std::string(who) + ": " + what + " (" + std::to_string(a) + " + " + std::to_string(b) +
                " bytes) does not fit in std::size_t");
  return a + b;
}

/// ceil(n / d) for d >= 1, without the overflow of (n + d - 1) / d.
constexpr std::size_t ceil_div(std::size_t n, std::size_t d) noexcept { return n / d + (n % d != 0 ? 1 : 0); }

/// The end of the block [lo, lo + len) clipped to n (lo <= n), without the overflow of lo + len.
constexpr std::size_t block_end(std::size_t lo, std::size_t len, std::size_t n) noexcept {
  return n - lo > len ? lo + len : n;
}

/// The bytes [begin, end) of an array, as integers.
struct byte_range {
  std::uintptr_t begin = 0, end = 0;
};

/// The bytes of n elements of `size` bytes at p; std::length_error when they would run past
/// the end of the address space (n * size overflows, or p + n * size wraps).
inline byte_range bytes_of(const char* who, const char* what, const void* p, std::size_t n, std::size_t size) {
  const auto b = reinterpret_cast<std::uintptr_t>(p);
  if (size != 0 && n > (std::numeric_limits<std::uintptr_t>::max() - b) / size)
    fail_length(std::string(who) + ": " + what + " of " + std::to_string(n) + " elements of " + std::to_string(size) +
                " bytes does not fit in the address space");
  return {b, b + static_cast<std::uintptr_t>(n * size)};
}

/// True when the two ranges share a byte.
constexpr bool overlap(byte_range a, byte_range b) noexcept { return a.begin < b.end && b.begin < a.end; }

/// Fails unless r is one of the enumerators of cpd::rounding (a value cast from an int).
inline void check_enum(const char* who, rounding r) {
  switch (r) {
    case rounding::nearest_even:
    case rounding::nearest_away:
    case rounding::toward_zero:
    case rounding::upward:
    case rounding::downward:
    case rounding::stochastic:
    case rounding::odd:
    case rounding::nearest_zero: return;
  }
  fail_invalid(std::string(who) + ": rounding mode " + std::to_string(static_cast<int>(r)) +
               " is not a cpd::rounding");
}

/// Fails unless o is one of the enumerators of cpd::overflow.
inline void check_enum(const char* who, overflow o) {
  if (o == overflow::infinity || o == overflow::saturate || o == overflow::propagate) return;
  fail_invalid(std::string(who) + ": overflow mode " + std::to_string(static_cast<int>(o)) +
               " is not a cpd::overflow");
}

/// Fails unless m is one of the enumerators of cpd::subnormal_mode.
inline void check_enum(const char* who, subnormal_mode m) {
  if (m == subnormal_mode::keep || m == subnormal_mode::flush) return;
  fail_invalid(std::string(who) + ": subnormal mode " + std::to_string(static_cast<int>(m)) +
               " is not a cpd::subnormal_mode");
}

/// Fails unless r is one of the enumerators of cpd::exponent_range.
inline void check_enum(const char* who, exponent_range r) {
  if (r == exponent_range::format || r == exponent_range::unbounded) return;
  fail_invalid(std::string(who) + ": exponent range " + std::to_string(static_cast<int>(r)) +
               " is not a cpd::exponent_range");
}

/// Fails unless v is one of the enumerators of cpd::stochastic_variant, and k random bits
/// suit it ([1, 32]; variant b adds a bit: [1, 31]).
inline void check_variant(const char* who, stochastic_variant v, int k) {
  if (v != stochastic_variant::a && v != stochastic_variant::b && v != stochastic_variant::c &&
      v != stochastic_variant::equal)
    fail_invalid(std::string(who) + ": stochastic variant " + std::to_string(static_cast<int>(v)) +
                 " is not a cpd::stochastic_variant");
  if (v == stochastic_variant::b && k > 31)
    fail_invalid(std::string(who) + ": stochastic variant b uses random_bits + 1 bits: random_bits " +
                 std::to_string(k) + " must be in [1, 31]");
}

/// The bits of a Code that no code of s sets (above its width): 0 when every Code is a code.
template <class Code>
constexpr Code stray_bits(const spec& s) noexcept {
  return static_cast<Code>(~(s.mag_mask | s.sign_bit));
}

/// "<who>: code 0x.. [at index i] has bits set above the format's k bits: it is no code of the format".
[[noreturn]] inline void fail_stray_code(const char* who, const spec& s, std::uint64_t code, const std::size_t* index) {
  char hex[24];
  std::snprintf(hex, sizeof hex, "0x%llX", static_cast<unsigned long long>(code));
  fail_invalid(std::string(who) + ": code " + hex + (index ? " at index " + std::to_string(*index) : std::string()) +
               " has bits set above the format's " + std::to_string(s.bits) + " bits: it is no code of the format");
}

/// Fails at the first of in[0..n) with a bit of `stray` set.
template <class Code>
void check_codes(const char* who, const spec& s, const Code* in, std::size_t n, Code stray) {
  for (std::size_t i = 0; i < n; ++i)
    if ((in[i] & stray) != 0) fail_stray_code(who, s, in[i], &i);
}

/// Checks the arrays of an exchange of world_size workers' n floats (pointers not null,
/// world_size >= 1): every input x[r], residual (read and written, when given) and the
/// output fits in the address space (std::length_error), and no array that is written
/// shares a byte with another array, except that the output may be exactly an input and
/// a residual exactly its own worker's input (each element is read before it is written):
/// std::invalid_argument naming both arrays.
inline void check_exchange_arrays(const char* who, const float* const* x, float* const* residuals, const float* out,
                                  std::size_t n, int world_size) {
  const auto w = static_cast<std::size_t>(world_size);
  const byte_range o = bytes_of(who, "the output", out, n, sizeof(float));
  std::vector<byte_range> in(w), res(residuals ? w : 0);
  for (std::size_t r = 0; r < w; ++r) {
    in[r] = bytes_of(who, "an input", x[r], n, sizeof(float));
    if (residuals) res[r] = bytes_of(who, "a residual", residuals[r], n, sizeof(float));
  }
  auto fail = [&](const std::string& a, const std::string& b, const char* allowed) {
    fail_invalid(std::string(who) + ": " + a + " overlaps " + b + allowed);
  };
  auto worker = [](std::size_t r, const char* what) { return "worker " + std::to_string(r) + "'s " + what; };
  for (std::size_t r = 0; r < w; ++r)
    if (o.begin != in[r].begin && overlap(o, in[r])) fail("the output", worker(r, "input"), " (only out == an input is allowed)");
  for (std::size_t r = 0; r < res.size(); ++r) {
    if (overlap(o, res[r])) fail("the output", worker(r, "residual"), " (the residuals are kept for the next call)");
    for (std::size_t s = 0; s < w; ++s) {
      if (s == r && res[r].begin != in[r].begin && overlap(res[r], in[r]))
        fail(worker(r, "residual"), "its input", " (only residual == input is allowed)");
      if (s != r && overlap(res[r], in[s])) fail(worker(r, "residual"), worker(s, "input"), "");
      if (s > r && overlap(res[r], res[s])) fail(worker(r, "residual"), worker(s, "residual"), "");
    }
  }
}

}  // namespace cpd::detail
