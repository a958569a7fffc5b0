// SPDX-License-Identifier: MIT
#pragma once

// cpd::format: the runtime twin of cpd::float_t, for code that reads E and M from
// a command line. It carries the same detail::spec, so the same rounding core runs
// for it; visit() hands a runtime format to code compiled for the matching
// compile-time type when there is one in cpd's list of compiled formats.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/error.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/rounding.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace cpd {

/// A format chosen at run time: exponent bits, mantissa bits, encoding, bias.
class format {
 public:
  /// Why these fields are not a format (naming the bad field), or nullptr.
  [[nodiscard]] static constexpr const char* check(int exponent_bits, int mantissa_bits, encoding_kind enc,
                                                   int bias) noexcept {
    return detail::format_error(exponent_bits, mantissa_bits, enc, bias);
  }

  /// The format, or nullopt with *why set to the reason (never throws).
  [[nodiscard]] static std::optional<format> try_make(int exponent_bits, int mantissa_bits,
                                                      encoding_kind enc = encoding_kind::ieee,
                                                      std::optional<int> bias = std::nullopt,
                                                      const char** why = nullptr) noexcept {
    const char* err = exponent_bits < 1 || exponent_bits > 11
                          ? detail::format_error(exponent_bits, mantissa_bits, enc, 0)
                          : check(exponent_bits, mantissa_bits, enc,
                                  bias ? *bias : detail::default_bias(exponent_bits, enc));
    if (err) {
      if (why) *why = err;
      return std::nullopt;
    }
    return format(exponent_bits, mantissa_bits, enc, bias ? *bias : detail::default_bias(exponent_bits, enc), 0);
  }

  /// The format; throws std::invalid_argument naming the bad field (aborts without exceptions).
  format(int exponent_bits, int mantissa_bits, encoding_kind enc = encoding_kind::ieee,
         std::optional<int> bias = std::nullopt)
      : format(checked(exponent_bits, mantissa_bits, enc, bias)) {}

  /// The format of a compile-time type.
  template <class F, class = std::enable_if_t<is_float_format_v<F>>>
  [[nodiscard]] static constexpr format of() noexcept {
    return format(F::exponent_bits, F::mantissa_bits, F::encoding::kind, F::bias, 0);
  }

  /// Parses a name: an alias of cpd or ml_dtypes ("float8_e4m3fn", "e4m3fn", "bfloat16",
  /// "bf16", "fp16", "fp32", "tf32", "e8m0fnu", ...), "e<E>m<M>[b<bias>][fn|fnuz|fnu|finite|p3109_se|...]",
  /// or an IEEE P3109 name "binary<K>p<P>{s|u}{e|f}" ("binary8p3se"; P3109 writes "Binary8p3se",
  /// gfloat "p3109_k8p3se": both accepted).
  /// A plain "e<E>m0" is cpd::fn (an IEEE encoding needs M >= 1). A width prefix
  /// ("float8_", "float6_", "float4_") must equal the format's bits ("float4_e5m2" is an error).
  [[nodiscard]] static std::optional<format> try_parse(std::string_view name, std::string* why = nullptr);

  /// Like try_parse, throwing std::invalid_argument with the reason.
  [[nodiscard]] static format parse(std::string_view name) {
    std::string why;
    auto f = try_parse(name, &why);
    if (!f) fail(why.c_str());
    return *f;
  }

  [[nodiscard]] constexpr int exponent_bits() const noexcept { return spec_.E; }
  [[nodiscard]] constexpr int mantissa_bits() const noexcept { return spec_.M; }
  [[nodiscard]] constexpr int bias() const noexcept { return spec_.bias; }
  [[nodiscard]] constexpr encoding_kind encoding() const noexcept { return spec_.enc; }
  /// Total bits of a code.
  [[nodiscard]] constexpr int bits() const noexcept { return spec_.bits; }
  /// Every derived fact (emin, emax, max value, codes of inf/NaN...).
  [[nodiscard]] constexpr const detail::spec& spec() const noexcept { return spec_; }
  [[nodiscard]] constexpr double max() const noexcept { return spec_.max_value; }
  [[nodiscard]] constexpr double min_normal() const noexcept { return spec_.min_normal; }
  [[nodiscard]] constexpr double denorm_min() const noexcept { return spec_.min_positive; }

  /// A canonical name, e.g. "e4m3fn", "e5m2", "e4m3b11fnuz", "e8m0fnu", "e2m1finite",
  /// "binary8p3se"; parse(f.name()) == f.
  [[nodiscard]] std::string name() const {
    if (is_p3109(spec_.enc) && spec_.bias == detail::default_bias(spec_.E, spec_.enc)) {
      const bool u = !spec_.has_sign, x = spec_.has_inf;
      return "binary" + std::to_string(spec_.bits) + "p" + std::to_string(spec_.M + 1) + (u ? "u" : "s") +
             (x ? "e" : "f");
    }
    const std::string em = "e" + std::to_string(spec_.E) + "m" + std::to_string(spec_.M);
    const std::string suffix = spec_.enc != encoding_kind::ieee ? to_string(spec_.enc) : "";
    const std::string b = "b" + std::to_string(spec_.bias);
    if (spec_.bias != detail::default_bias(spec_.E, spec_.enc)) return em + b + suffix;
    // "e2m3fn" is the alias of float6_e2m3fn (encoding finite): cpd::fn's e2m3 says its bias.
    const std::optional<format> alias = try_parse(em + suffix);
    return alias && *alias == *this ? em + suffix : em + b + suffix;
  }

  friend constexpr bool operator==(const format& a, const format& b) noexcept {
    return a.spec_.E == b.spec_.E && a.spec_.M == b.spec_.M && a.spec_.enc == b.spec_.enc &&
           a.spec_.bias == b.spec_.bias;
  }
  friend constexpr bool operator!=(const format& a, const format& b) noexcept { return !(a == b); }

 private:
  constexpr format(int e, int m, encoding_kind enc, int bias, int) noexcept : spec_(detail::make_spec(e, m, enc, bias)) {}

  [[noreturn]] static void fail(const char* why) { detail::fail_invalid(std::string("cpd::format: ") + why); }

  static format checked(int e, int m, encoding_kind enc, std::optional<int> bias) {
    const char* why = nullptr;
    auto f = try_make(e, m, enc, bias, &why);
    if (!f) fail(why);
    return *f;
  }

  detail::spec spec_;
};

namespace detail {

/// A decimal number of 1 to 6 digits at the front of s (removed), else false.
inline bool parse_int(std::string_view& s, int& out) noexcept {
  std::size_t i = 0;
  long v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    if (i == 6) return false;  // no field of a format needs more; and no overflow
    v = v * 10 + (s[i++] - '0');
  }
  if (i == 0) return false;
  out = static_cast<int>(v);
  s.remove_prefix(i);
  return true;
}
}  // namespace detail

inline std::optional<format> format::try_parse(std::string_view name, std::string* why) {
  struct alias {
    const char* name;
    format f;
  };
  static const alias aliases[] = {
      {"fp32", of<float_t<8, 23>>()},        {"float32", of<float_t<8, 23>>()},
      {"fp64", of<float_t<11, 52>>()},       {"float64", of<float_t<11, 52>>()},
      {"fp16", of<float16>()},               {"float16", of<float16>()},
      {"half", of<float16>()},               {"bf16", of<bfloat16>()},
      {"bfloat16", of<bfloat16>()},          {"tf32", of<tfloat32>()},
      {"tfloat32", of<tfloat32>()},          {"e4m3fn", of<float8_e4m3fn>()},
      {"e4m3", of<float8_e4m3>()},           {"e5m2", of<float8_e5m2>()},
      {"e4m3fnuz", of<float8_e4m3fnuz>()},   {"e5m2fnuz", of<float8_e5m2fnuz>()},
      {"e4m3b11fnuz", of<float8_e4m3b11fnuz>()}, {"e3m4", of<float8_e3m4>()},
      {"e8m0fnu", of<float8_e8m0fnu>()},     {"e3m2fn", of<float6_e3m2fn>()},
      {"e2m3fn", of<float6_e2m3fn>()},       {"e2m1fn", of<float4_e2m1fn>()},
  };
  auto bad = [&](const std::string& msg) -> std::optional<format> {
    if (why) *why = "'" + detail::printable(name) + "': " + msg;
    return std::nullopt;
  };
  std::string_view s = name;
  int width = 0;  // the bits that a "floatN_" prefix promises
  for (std::string_view prefix : {"float8_", "float6_", "float4_"})
    if (s.substr(0, prefix.size()) == prefix) {
      s.remove_prefix(prefix.size());
      width = prefix[5] - '0';
      break;
    }
  auto with_width = [&](const format& f) -> std::optional<format> {
    if (width != 0 && f.bits() != width)
      return bad("the prefix float" + std::to_string(width) + "_ says " + std::to_string(width) + " bits, but " +
                 f.name() + " has " + std::to_string(f.bits()) + " bits" +
                 (f.spec().has_sign ? " (1 + E + M)" : " (E + M, unsigned)"));
    return f;
  };
  for (const auto& a : aliases)
    if (s == a.name) return with_width(a.f);
  for (std::string_view prefix : {"binary", "Binary", "p3109_k"})
    if (width == 0 && s.substr(0, prefix.size()) == prefix) {  // IEEE P3109: binary<K>p<P>{s|u}{e|f}
      s.remove_prefix(prefix.size());
      int k = 0, p = 0;
      if (!detail::parse_int(s, k)) return bad("expected the width K after '" + std::string(prefix) + "'");
      if (s.empty() || s[0] != 'p') return bad("expected 'p' and the precision P after the width");
      s.remove_prefix(1);
      if (!detail::parse_int(s, p)) return bad("expected the precision P after 'p'");
      if (s.size() != 2 || (s[0] != 's' && s[0] != 'u') || (s[1] != 'e' && s[1] != 'f'))
        return bad("expected the signedness and domain after the precision: se, sf, ue or uf");
      const bool u = s[0] == 'u', x = s[1] == 'e';
      if (k < 2 || k > 64) return bad("P3109 width K must be in [2, 64]");
      if (p < 1 || p > (u ? k : k - 1))
        return bad(std::string("P3109 precision P must be in [1, K") + (u ? "]" : " - 1]") + " for " +
                   (u ? "unsigned" : "signed") + " formats");
      const int ee = k - p + (u ? 1 : 0);
      if (ee > 11)
        return bad("the exponent field K - P" + std::string(u ? " + 1" : "") + " = " + std::to_string(ee) +
                   " exceeds 11 bits: the values would leave the range of double");
      const encoding_kind kind = u ? (x ? encoding_kind::p3109_ue : encoding_kind::p3109_uf)
                                   : (x ? encoding_kind::p3109_se : encoding_kind::p3109_sf);
      const char* err = nullptr;
      auto f = try_make(ee, p - 1, kind, std::nullopt, &err);
      if (!f) return bad(err);
      return *f;
    }
  int e = 0, m = 0;
  if (s.empty() || s[0] != 'e') return bad("unknown format (expected an alias such as e4m3fn or e<E>m<M>)");
  s.remove_prefix(1);
  if (!detail::parse_int(s, e)) return bad("expected the exponent bits (at most 6 digits) after 'e'");
  if (s.empty() || s[0] != 'm') return bad("expected 'm' and the mantissa bits");
  s.remove_prefix(1);
  if (!detail::parse_int(s, m)) return bad("expected the mantissa bits (at most 6 digits) after 'm'");
  std::optional<int> bias;
  if (!s.empty() && s[0] == 'b') {  // "b7", or "b-5" as name() writes a negative bias
    s.remove_prefix(1);
    const bool negative = !s.empty() && s[0] == '-';
    if (negative) s.remove_prefix(1);
    int b = 0;
    if (!detail::parse_int(s, b)) return bad("expected the bias (at most 6 digits) after 'b'");
    bias = negative ? -b : b;
  }
  encoding_kind enc = m == 0 ? encoding_kind::fn : encoding_kind::ieee;
  if (s == "fn") enc = encoding_kind::fn;
  else if (s == "fnuz") enc = encoding_kind::fnuz;
  else if (s == "fnu") enc = encoding_kind::fnu;
  else if (s == "finite") enc = encoding_kind::finite;
  else if (s == "p3109_sf") enc = encoding_kind::p3109_sf;
  else if (s == "p3109_se") enc = encoding_kind::p3109_se;
  else if (s == "p3109_uf") enc = encoding_kind::p3109_uf;
  else if (s == "p3109_ue") enc = encoding_kind::p3109_ue;
  else if (!s.empty())
    return bad("unknown encoding suffix '" + detail::printable(s) +
               "' (fn, fnuz, fnu, finite, p3109_sf, p3109_se, p3109_uf or p3109_ue)");
  const char* err = nullptr;
  auto f = try_make(e, m, enc, bias, &err);
  if (!f) return bad(err);
  return with_width(*f);
}

namespace detail {
/// Calls f(std::integral_constant<rounding, R>{}) for the runtime mode r; a value that is
/// no cpd::rounding (an int cast to it) is std::invalid_argument naming `who`.
template <class Fn>
constexpr decltype(auto) with_rounding(rounding r, Fn&& f, const char* who = "cpd") {
  switch (r) {
    case rounding::nearest_away: return f(std::integral_constant<rounding, rounding::nearest_away>{});
    case rounding::toward_zero: return f(std::integral_constant<rounding, rounding::toward_zero>{});
    case rounding::upward: return f(std::integral_constant<rounding, rounding::upward>{});
    case rounding::downward: return f(std::integral_constant<rounding, rounding::downward>{});
    case rounding::stochastic: return f(std::integral_constant<rounding, rounding::stochastic>{});
    case rounding::odd: return f(std::integral_constant<rounding, rounding::odd>{});
    case rounding::nearest_zero: return f(std::integral_constant<rounding, rounding::nearest_zero>{});
    case rounding::nearest_even: break;
    default: check_enum(who, r);  // throws
  }
  return f(std::integral_constant<rounding, rounding::nearest_even>{});
}

/// Calls f(std::integral_constant<overflow, O>{}) for the runtime mode o (checked as r above).
template <class Fn>
constexpr decltype(auto) with_overflow(overflow o, Fn&& f, const char* who = "cpd") {
  if (o == overflow::saturate) return f(std::integral_constant<overflow, overflow::saturate>{});
  if (o == overflow::propagate) return f(std::integral_constant<overflow, overflow::propagate>{});
  if (o != overflow::infinity) check_enum(who, o);  // throws
  return f(std::integral_constant<overflow, overflow::infinity>{});
}

/// Fails unless k, the random bits of a runtime stochastic rounding, is in [1, 32].
inline void check_random_bits(const char* who, int k) {
  if (k < 1 || k > 32)
    fail_invalid(std::string(who) + ": random_bits_used " + std::to_string(k) + " must be in [1, 32]");
}
}  // namespace detail

/// The compile-time formats that visit() can dispatch to (all aliases, fp32, and
/// every IEEE eXmY of 8 bits or fewer).
template <class... F>
struct format_list {};
using compiled_formats =
    format_list<float8_e4m3fn, float8_e4m3, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e4m3b11fnuz,
                float8_e3m4, float8_e8m0fnu, float6_e3m2fn, float6_e2m3fn, float4_e2m1fn, float16, bfloat16,
                tfloat32, float_t<8, 23>, float_t<2, 1>, float_t<2, 2>, float_t<2, 3>, float_t<2, 4>, float_t<2, 5>,
                float_t<3, 1>, float_t<3, 2>, float_t<3, 3>, float_t<4, 1>, float_t<4, 2>, float_t<5, 1>,
                float_t<6, 1>, float_t<3, 0, fn>, float_t<4, 0, fn>, float_t<5, 0, fn>, float_t<6, 0, fn>,
                float_t<7, 0, fn>>;

/// The formats of the exchanges whose format is chosen at run time: the gradient formats of
/// cpd-train, the Python package's exchange and scalers, cpd::make_scaler's default (every
/// scaler, simulate_allreduce and rank_exchange is a template over the format: each format of
/// the list is compiled in). float32, the OCP and ml_dtypes 8-, 6- and 4-bit formats, fp16,
/// bf16, and e3m0fn, e4m0fn, e3m2, e2m1.
using exchange_formats =
    format_list<float_t<8, 23>, float8_e4m3fn, float8_e4m3, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz,
                float8_e3m4, float16, bfloat16, float6_e3m2fn, float6_e2m3fn, float4_e2m1fn, float_t<3, 0, fn>,
                float_t<4, 0, fn>, float_t<3, 2>, float_t<2, 1>>;

namespace detail {
template <class Fn, class F0, class... Fs>
bool visit_list(const format& f, Fn& fn, format_list<F0, Fs...>) {
  if (f == format::of<F0>()) {
    fn(F0{});
    return true;
  }
  if constexpr (sizeof...(Fs) > 0) return visit_list(f, fn, format_list<Fs...>{});
  else return false;
}
}  // namespace detail

/// Calls fn(F{}) with the compile-time type F equal to f, if f is in List; returns
/// whether it did. Formats outside the list still work through the runtime calls below.
template <class List = compiled_formats, class Fn>
bool visit(const format& f, Fn&& fn) {
  return detail::visit_list(f, fn, List{});
}

/// Rounds x to the runtime format f (same bits as the compile-time quantize).
/// For float x every value of f must be a float (f.spec().fits_float), else
/// std::invalid_argument.
template <class T>
[[nodiscard]] T quantize(const format& f, rounding r, overflow o, T x, std::uint32_t random_bits = 0,
                         int random_bits_used = 32, stochastic_variant variant = stochastic_variant::a) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cpd::quantize: T must be float or double");
  if (std::is_same_v<T, float> && !f.spec().fits_float)
    detail::fail_invalid("cpd::quantize: format " + f.name() + " has values that are not floats; use double");
  detail::check_random_bits("cpd::quantize", random_bits_used);
  detail::check_variant("cpd::quantize", variant, random_bits_used);
  return detail::with_rounding(r, [&](auto rc) {
    return detail::with_overflow(o, [&](auto oc) {
      return detail::bit_cast<T>(
          detail::round_bits<decltype(rc)::value, decltype(oc)::value, T>(
              f.spec(), detail::bit_cast<detail::uint_of<T>>(x), random_bits, random_bits_used, variant)
              .value);
    }, "cpd::quantize");
  }, "cpd::quantize");
}

/// The code of x rounded to the runtime format f (std::invalid_argument for a mode that is
/// no enumerator, or random_bits_used outside [1, 32]).
template <class T>
[[nodiscard]] std::uint64_t encode(const format& f, rounding r, overflow o, T x, std::uint32_t random_bits = 0,
                                   int random_bits_used = 32, stochastic_variant variant = stochastic_variant::a) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cpd::encode: T must be float or double");
  detail::check_random_bits("cpd::encode", random_bits_used);
  detail::check_variant("cpd::encode", variant, random_bits_used);
  if constexpr (std::is_same_v<T, float>) {  // a float is exactly a double: round once from there
    if (f.exponent_bits() > 8 || f.mantissa_bits() > 23)
      return encode<double>(f, r, o, detail::widen(x), random_bits, random_bits_used,
                            variant);  // (exact, any environment)
  }
  return detail::with_rounding(r, [&](auto rc) {
    return detail::with_overflow(o, [&](auto oc) {
      return static_cast<std::uint64_t>(
          detail::round_bits<decltype(rc)::value, decltype(oc)::value, T>(
              f.spec(), detail::bit_cast<detail::uint_of<T>>(x), random_bits, random_bits_used, variant)
              .code);
    }, "cpd::encode");
  }, "cpd::encode");
}

/// The exact value of a code of the runtime format f, as a double; a code with bits set above
/// f.bits() is std::invalid_argument (it is no code of f).
[[nodiscard]] inline double decode(const format& f, std::uint64_t code) {
  if ((code & detail::stray_bits<std::uint64_t>(f.spec())) != 0)
    detail::fail_stray_code("cpd::decode", f.spec(), code, nullptr);
  return detail::bit_cast<double>(detail::decode_bits<double>(f.spec(), code));
}

}  // namespace cpd
