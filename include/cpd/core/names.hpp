// SPDX-License-Identifier: MIT
#pragma once

// The names of cpd's choices, both ways: to_string(value) (beside each enumeration) and
// cpd::from_string<E>(name), its inverse (try_from_string: an optional, no exception), with
// one message for a name that is not one:
// "cpd::from_string<cpd::rounding>: 'x' is not one of nearest_even, ..., odd". Command lines
// (cpd-train, cpd-model, the examples) and the Python package read every choice with it.
//
// enum_names<E> lists the values of E in declaration order: here for rounding, overflow,
// stochastic_variant, subnormal_mode, exponent_range, encoding_kind and random_generator;
// beside their enumerations for allreduce_algorithm (exchange/algorithm.hpp), scaler_kind
// and amax_algorithm (scaling/registry.hpp) and mx_scale_rule (core/mx.hpp).

#include <cpd/core/detail/error.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/random.hpp>
#include <cpd/core/rounding.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cpd {

/// The values of an enumeration E that has names (`values`, in declaration order) and the
/// name of E in messages (`type`); specialized beside E.
template <class E>
struct enum_names;

template <>
struct enum_names<rounding> {
  static constexpr const char* type = "cpd::rounding";
  static constexpr rounding values[] = {rounding::nearest_even, rounding::nearest_away, rounding::toward_zero,
                                        rounding::upward,       rounding::downward,     rounding::stochastic,
                                        rounding::odd,          rounding::nearest_zero};
};

template <>
struct enum_names<overflow> {
  static constexpr const char* type = "cpd::overflow";
  static constexpr overflow values[] = {overflow::infinity, overflow::saturate, overflow::propagate};
};

template <>
struct enum_names<stochastic_variant> {
  static constexpr const char* type = "cpd::stochastic_variant";
  static constexpr stochastic_variant values[] = {stochastic_variant::a, stochastic_variant::b,
                                                  stochastic_variant::c, stochastic_variant::equal};
};

template <>
struct enum_names<subnormal_mode> {
  static constexpr const char* type = "cpd::subnormal_mode";
  static constexpr subnormal_mode values[] = {subnormal_mode::keep, subnormal_mode::flush};
};

template <>
struct enum_names<exponent_range> {
  static constexpr const char* type = "cpd::exponent_range";
  static constexpr exponent_range values[] = {exponent_range::format, exponent_range::unbounded};
};

template <>
struct enum_names<encoding_kind> {
  static constexpr const char* type = "cpd::encoding_kind";
  static constexpr encoding_kind values[] = {encoding_kind::ieee,     encoding_kind::fn,       encoding_kind::fnuz,
                                             encoding_kind::finite,   encoding_kind::fnu,      encoding_kind::p3109_sf,
                                             encoding_kind::p3109_se, encoding_kind::p3109_uf, encoding_kind::p3109_ue};
};

template <>
struct enum_names<random_generator> {
  static constexpr const char* type = "cpd::random_generator";
  static constexpr random_generator values[] = {random_generator::v1, random_generator::v2};
};

/// The names of `values`, joined by ", " ("ring, two_step").
template <class E, std::size_t N>
[[nodiscard]] std::string names_of(const E (&values)[N]) {
  std::string s;
  for (std::size_t i = 0; i < N; ++i) s += (i ? ", " : "") + std::string(to_string(values[i]));
  return s;
}

/// The names of every value of E, joined by ", ".
template <class E>
[[nodiscard]] std::string names_of() {
  return names_of(enum_names<E>::values);
}

/// Whether v is one of `values`.
template <class E, std::size_t N>
[[nodiscard]] constexpr bool is_one_of(E v, const E (&values)[N]) noexcept {
  for (std::size_t i = 0; i < N; ++i)
    if (values[i] == v) return true;
  return false;
}

/// The value among `accepted` whose to_string is `name`, or nothing (never throws).
template <class E, std::size_t N>
[[nodiscard]] std::optional<E> try_from_string(std::string_view name, const E (&accepted)[N]) noexcept {
  for (std::size_t i = 0; i < N; ++i)
    if (name == to_string(accepted[i])) return accepted[i];
  return std::nullopt;
}

/// The value of E whose to_string is `name`, or nothing.
template <class E>
[[nodiscard]] std::optional<E> try_from_string(std::string_view name) noexcept {
  return try_from_string(name, enum_names<E>::values);
}

/// The value among `accepted` whose to_string is `name`; else std::invalid_argument
/// "cpd::from_string<E>: 'name' is not one of a, b, c" (name's control bytes escaped).
template <class E, std::size_t N>
[[nodiscard]] E from_string(std::string_view name, const E (&accepted)[N]) {
  if (const std::optional<E> v = try_from_string(name, accepted)) return *v;
  detail::fail_invalid(std::string("cpd::from_string<") + enum_names<E>::type + ">: '" + detail::printable(name) +
                       "' is not one of " + names_of(accepted));
}

/// The value of E whose to_string is `name` (e.g. from_string<rounding>("stochastic")); else
/// std::invalid_argument listing every name of E.
template <class E>
[[nodiscard]] E from_string(std::string_view name) {
  return from_string(name, enum_names<E>::values);
}

namespace detail {

/// The name of v, or its number when v is none of E's values (an integer cast to E).
template <class E>
[[nodiscard]] std::string name_or_number(E v) {
  if (is_one_of(v, enum_names<E>::values)) return to_string(v);
  return std::to_string(static_cast<long long>(v));
}

/// Fails with "who: what X is not one `role` (a, b, c)" unless v is one of `accepted` (role:
/// e.g. "simulate_allreduce runs"; X the name of v, or its number).
template <class E, std::size_t N>
void check_one_of(const std::string& who, const char* what, E v, const E (&accepted)[N], const char* role) {
  if (!is_one_of(v, accepted))
    fail_invalid(who + ": " + what + " " + name_or_number(v) + " is not one " + role + " (" + names_of(accepted) + ")");
}

}  // namespace detail

}  // namespace cpd
