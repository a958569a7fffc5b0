// SPDX-License-Identifier: MIT
//
// libFuzzer target: cpd::format::try_parse / parse / name() (runtime_format.hpp).
// Properties, for every input string:
//   - parse() and try_parse() agree: the same format, or std::invalid_argument carrying
//     try_parse's reason (which names the input); nothing else is thrown;
//   - an accepted name round-trips: parse(f.name()) == f, and its name() is name();
//   - the fields of f build the same format through the constructor;
//   - a width prefix "floatN_" names the format's width: N == f.bits();
//   - the derived facts are consistent: 0 < denorm_min <= min_normal <= max < inf,
//     bits == E + M + (1 unless unsigned), and max, min_normal and denorm_min encode
//     to codes that decode to themselves.

#include "fuzz_check.hpp"

#include <cpd/core/format.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace {

constexpr const char* target = "fuzz_format";

std::string hex(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

void check_value_round_trip(std::string_view input, const cpd::format& f, double v, const char* what) {
  const std::uint64_t code = cpd::encode(f, cpd::rounding::nearest_even, cpd::overflow::infinity, v);
  const double back = cpd::decode(f, code);
  if (back != v)
    cpd_fuzz::fail(target, input, f.name() + ": " + what + " " + hex(v) + " encodes to code " +
                                      std::to_string(code) + ", which decodes to " + hex(back));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);

  std::string why;
  const std::optional<cpd::format> f = cpd::format::try_parse(input, &why);
  try {
    const cpd::format g = cpd::format::parse(input);
    if (!f) cpd_fuzz::fail(target, input, "parse() accepts what try_parse() rejects: " + why);
    if (g != *f) cpd_fuzz::fail(target, input, "parse() and try_parse() give different formats");
  } catch (const std::invalid_argument& e) {
    if (f) cpd_fuzz::fail(target, input, std::string("parse() throws what try_parse() accepts: ") + e.what());
    if (why.empty() || std::string_view(e.what()).find(why) == std::string_view::npos)
      cpd_fuzz::fail(target, input, std::string("parse()'s reason '") + e.what() + "' is not try_parse()'s '" + why + "'");
  }
  if (!f) {
    if (why.empty()) cpd_fuzz::fail(target, input, "rejected without a reason");
    return 0;
  }

  // The canonical name round-trips.
  const std::string name = f->name();
  std::string why2;
  const std::optional<cpd::format> g = cpd::format::try_parse(name, &why2);
  if (!g) cpd_fuzz::fail(target, input, "its name() '" + name + "' does not parse: " + why2);
  if (*g != *f) cpd_fuzz::fail(target, input, "its name() '" + name + "' parses to another format, " + g->name());
  if (g->name() != name) cpd_fuzz::fail(target, input, "name() is not stable: '" + name + "' -> '" + g->name() + "'");

  // The fields make the same format.
  const char* bad = nullptr;
  const auto h = cpd::format::try_make(f->exponent_bits(), f->mantissa_bits(), f->encoding(), f->bias(), &bad);
  if (!h || *h != *f) cpd_fuzz::fail(target, input, name + ": its fields do not make the same format");

  // A width prefix names the width.
  for (const char* prefix : {"float4_", "float6_", "float8_"})
    if (input.substr(0, 7) == prefix && f->bits() != prefix[5] - '0')
      cpd_fuzz::fail(target, input, std::string("the prefix ") + prefix + " names a " + (prefix + 5)[0] +
                                        "-bit format, but " + name + " has " + std::to_string(f->bits()) + " bits");

  // Derived facts.
  // (unsigned formats, fnu and P3109's p3109_uf/p3109_ue, have no sign bit)
  const int sign = f->spec().has_sign ? 1 : 0;
  if (f->bits() != f->exponent_bits() + f->mantissa_bits() + sign)
    cpd_fuzz::fail(target, input, name + ": bits() " + std::to_string(f->bits()) + " is not " +
                                      (sign ? "1 + " : "") + "E + M");
  // A format may have no finite normal value: P3109's binary2p2ue has 0, 0.5 (subnormal), +inf
  // and NaN; its min_normal, 1 (gfloat's smallest_normal too), is the code of +inf there.
  const bool normals = f->min_normal() <= f->max();
  if (!(0.0 < f->denorm_min() && f->denorm_min() <= f->min_normal() && f->denorm_min() <= f->max() &&
        std::isfinite(f->max())))
    cpd_fuzz::fail(target, input, name + ": not 0 < denorm_min <= min_normal, denorm_min <= max < inf");
  check_value_round_trip(input, *f, f->max(), "max");
  if (normals) check_value_round_trip(input, *f, f->min_normal(), "min_normal");
  check_value_round_trip(input, *f, f->denorm_min(), "denorm_min");
  return 0;
}
