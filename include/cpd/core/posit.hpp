// SPDX-License-Identifier: MIT
#pragma once

// Posits: posit<n, es> for n in [2, 32] and es in [0, 4] (docs/formats.md, "Posits").
// A family of its own beside cpd::float_t: a posit is not an (E, M) encoding, so it has
// its own core (cpd/core/detail/posit_round.hpp), its own runtime format
// (cpd::posit_format, named "posit<n>es<es>") and its own bulk calls
// (cpd/host/posit_bulk.hpp). The Posit Standard 2022 fixes es = 2 (its posit8, posit16
// and posit32 are posit8es2, posit16es2, posit32es2); SoftPosit's posit8, posit16 and
// posit32 are the 2017 conventions posit8es0, posit16es1, posit32es2.
//
// Rounding: nearest_even is the standard's rule (to nearest, ties to the even code,
// a tie being the (n+1)-bit posit between two codes); nearest_away and odd decide on
// the code in the same way; toward_zero, upward and downward take the neighbour on
// that side; stochastic goes up with probability (|x| - lo) / (hi - lo). In every
// mode a nonzero finite value gives a nonzero posit within [-maxpos, maxpos] (no
// underflow to 0, no overflow to NaR), and NaN and +-inf give NaR.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/detail/posit_round.hpp>
#include <cpd/core/format.hpp>
#include <cpd/core/rounding.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace cpd {

/// A posit format chosen at compile or run time: posit<n, es>.
class posit_format {
 public:
  /// Why (n, es) is no posit format (naming the bad field), or nullptr.
  [[nodiscard]] static constexpr const char* check(int n, int es) noexcept { return detail::posit_error(n, es); }

  /// posit<N, ES>, checked at compile time.
  template <int N, int ES>
  [[nodiscard]] static constexpr posit_format of() noexcept {
    static_assert(N >= 2 && N <= 32, "cpd::posit_format: n (the bits of a code) must be in [2, 32]");
    static_assert(ES >= 0 && ES <= 4, "cpd::posit_format: es (the exponent bits) must be in [0, 4]");
    return posit_format(posit_spec{N, ES}, 0);
  }

  /// posit<n, es>; std::invalid_argument naming the bad field.
  posit_format(int n, int es) : spec_{n, es} {
    if (const char* why = check(n, es))
      detail::fail_invalid("cpd::posit_format: " + std::string(why) + " (got n = " + std::to_string(n) +
                           ", es = " + std::to_string(es) + ")");
  }

  /// Parses "posit<n>es<es>" ("posit16es1"); nullopt with *why set otherwise (never throws).
  [[nodiscard]] static std::optional<posit_format> try_parse(std::string_view name, std::string* why = nullptr);

  /// Like try_parse, throwing std::invalid_argument with the reason.
  [[nodiscard]] static posit_format parse(std::string_view name) {
    std::string why;
    auto p = try_parse(name, &why);
    if (!p) detail::fail_invalid("cpd::posit_format: " + why);
    return *p;
  }

  /// The canonical name, "posit<n>es<es>"; parse(p.name()) == p.
  [[nodiscard]] std::string name() const {
    return "posit" + std::to_string(spec_.n) + "es" + std::to_string(spec_.es);
  }

  [[nodiscard]] constexpr int bits() const noexcept { return spec_.n; }
  [[nodiscard]] constexpr int exponent_bits() const noexcept { return spec_.es; }
  [[nodiscard]] constexpr const posit_spec& spec() const noexcept { return spec_; }
  /// maxpos, minpos and the spacing of the values in [1, 2): 2^-fraction_bits().
  [[nodiscard]] constexpr double maxpos() const noexcept { return detail::pow2<double>(spec_.max_exponent()); }
  [[nodiscard]] constexpr double minpos() const noexcept { return detail::pow2<double>(-spec_.max_exponent()); }
  [[nodiscard]] constexpr double eps() const noexcept { return detail::pow2<double>(-spec_.fraction_bits()); }
  /// Every value is a float (quantize from float needs it; decode to float rounds without it).
  [[nodiscard]] constexpr bool fits_float() const noexcept { return spec_.fits_float(); }

  friend constexpr bool operator==(const posit_format& a, const posit_format& b) noexcept {
    return a.spec_ == b.spec_;
  }
  friend constexpr bool operator!=(const posit_format& a, const posit_format& b) noexcept { return !(a == b); }

 private:
  constexpr posit_format(posit_spec s, int) noexcept : spec_(s) {}
  posit_spec spec_;
};

/// The Posit Standard 2022's posits (es = 2 for every n).
inline constexpr posit_format posit8es2 = posit_format::of<8, 2>();
inline constexpr posit_format posit16es2 = posit_format::of<16, 2>();
inline constexpr posit_format posit32es2 = posit_format::of<32, 2>();
/// SoftPosit's posit8 and posit16 (the 2017 conventions; its posit32 is posit32es2).
inline constexpr posit_format posit8es0 = posit_format::of<8, 0>();
inline constexpr posit_format posit16es1 = posit_format::of<16, 1>();

inline std::optional<posit_format> posit_format::try_parse(std::string_view name, std::string* why) {
  auto bad = [&](const std::string& msg) -> std::optional<posit_format> {
    if (why) *why = "'" + detail::printable(name) + "': " + msg;
    return std::nullopt;
  };
  std::string_view s = name;
  int n = 0, es = 0;
  if (s.substr(0, 5) != "posit") return bad("not a posit (expected posit<n>es<es>, e.g. posit16es1)");
  s.remove_prefix(5);
  if (!detail::parse_int(s, n)) return bad("expected the bits n after 'posit' (posit<n>es<es>)");
  if (s.empty())
    return bad("say the exponent bits: posit" + std::to_string(n) + "es2 is the Posit Standard 2022's posit" +
               std::to_string(n) + " (SoftPosit's posit8 is posit8es0, its posit16 posit16es1)");
  if (s.substr(0, 2) != "es") return bad("expected 'es' and the exponent bits after the bits (posit<n>es<es>)");
  s.remove_prefix(2);
  if (!detail::parse_int(s, es) || !s.empty()) return bad("expected the exponent bits after 'es' and nothing more");
  if (const char* err = check(n, es)) return bad(err);
  return posit_format(posit_spec{n, es}, 0);
}

// --- scalar calls --------------------------------------------------------------------

namespace detail {
template <class T>
constexpr void check_posit_value() noexcept {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cpd::posit: T must be float or double");
}

/// Fails unless a float result can hold every value of p (quantize would round twice).
inline void check_posit_float(const char* who, const posit_format& p) {
  if (!p.fits_float())
    fail_invalid(std::string(who) + ": " + p.name() + " has values that are not floats; use double");
}

/// Fails unless code is a code of p (no bits above its n).
inline void check_posit_code(const char* who, const posit_format& p, std::uint64_t code) {
  if ((code & ~std::uint64_t(p.spec().code_mask())) != 0)
    fail_invalid(std::string(who) + ": code " + std::to_string(code) + " has bits set above the " +
                 std::to_string(p.bits()) + " bits of " + p.name() + ": it is no code of the format");
}
}  // namespace detail

/// The code of x (float or double) rounded to posit p in mode R; for stochastic, the
/// low random_bits_used bits of random_bits (clamped to [1, 32]) are the random bits.
template <rounding R = rounding::nearest_even, class T, class = std::enable_if_t<std::is_floating_point_v<T>>>
[[nodiscard]] constexpr std::uint32_t posit_encode(const posit_format& p, T x, std::uint32_t random_bits = 0,
                                                   int random_bits_used = 32) noexcept {
  detail::check_posit_value<T>();
  return detail::posit_round_bits<R, T>(p.spec(), detail::bit_cast<detail::uint_of<T>>(x), random_bits,
                                        random_bits_used);
}

/// The value of a code of posit p: exact as a double; as a float exact when p.fits_float(),
/// else rounded to the nearest float (ties to even). NaR is NaN. A code with bits set
/// above p.bits() is std::invalid_argument.
template <class T = double>
[[nodiscard]] T posit_decode(const posit_format& p, std::uint64_t code) {
  detail::check_posit_value<T>();
  detail::check_posit_code("cpd::posit_decode", p, code);
  return detail::bit_cast<T>(detail::posit_decode_as<T>(p.spec(), static_cast<std::uint32_t>(code)));
}

/// x rounded to posit p in mode R, as a T; from float every value of p must be a float
/// (std::invalid_argument otherwise: use double).
template <rounding R = rounding::nearest_even, class T, class = std::enable_if_t<std::is_floating_point_v<T>>>
[[nodiscard]] T posit_quantize(const posit_format& p, T x, std::uint32_t random_bits = 0,
                               int random_bits_used = 32) {
  detail::check_posit_value<T>();
  if (std::is_same_v<T, float>) detail::check_posit_float("cpd::posit_quantize", p);
  const std::uint32_t c = posit_encode<R>(p, x, random_bits, random_bits_used);
  return detail::bit_cast<T>(detail::posit_decode_as<T>(p.spec(), c));
}

/// posit_encode with a runtime mode (std::invalid_argument for a mode that is no
/// enumerator, or random_bits_used outside [1, 32]).
template <class T, class = std::enable_if_t<std::is_floating_point_v<T>>>
[[nodiscard]] std::uint32_t posit_encode(const posit_format& p, rounding r, T x, std::uint32_t random_bits = 0,
                                         int random_bits_used = 32) {
  detail::check_random_bits("cpd::posit_encode", random_bits_used);
  return detail::with_rounding(r, [&](auto rc) {
    return posit_encode<decltype(rc)::value>(p, x, random_bits, random_bits_used);
  }, "cpd::posit_encode");
}

/// posit_quantize with a runtime mode (errors as posit_encode's and posit_quantize's).
template <class T, class = std::enable_if_t<std::is_floating_point_v<T>>>
[[nodiscard]] T posit_quantize(const posit_format& p, rounding r, T x, std::uint32_t random_bits = 0,
                               int random_bits_used = 32) {
  detail::check_random_bits("cpd::posit_quantize", random_bits_used);
  return detail::with_rounding(r, [&](auto rc) {
    return posit_quantize<decltype(rc)::value>(p, x, random_bits, random_bits_used);
  }, "cpd::posit_quantize");
}

}  // namespace cpd
