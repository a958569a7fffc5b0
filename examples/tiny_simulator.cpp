// SPDX-License-Identifier: MIT
// cpd embedded in a tiny simulator that reads its number format at run time.
//
// The "simulator" runs a long accumulation, sum_{i=1..n} 1/i, with every partial
// sum rounded to the format given on the command line — the classic way to see
// stagnation: once the sum is large, 1/i is below half an ulp and round-to-nearest
// stops adding anything, while stochastic rounding keeps the expected value.
//
//   tiny_simulator --format e5m10 --rounding nearest_even --terms 100000
//   tiny_simulator --format bf16 --rounding stochastic --seed 7
//   tiny_simulator --exp 4 --man 3 --encoding fn --saturate

#include <cpd/cpd.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

namespace {

// A small counter-based generator (splitmix64) for the example's random bits.
std::uint32_t random_bits(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return static_cast<std::uint32_t>((z ^ (z >> 31)) >> 32);
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "tiny_simulator: %s\n"
               "usage: tiny_simulator [--format NAME | --exp E --man M [--encoding ieee|fn|fnuz|finite|fnu]]\n"
               "                      [--rounding MODE] [--saturate] [--terms N] [--seed S]\n",
               why.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string name = "e5m10";
  int exp_bits = -1, man_bits = -1;
  cpd::encoding_kind enc = cpd::encoding_kind::ieee;
  cpd::rounding mode = cpd::rounding::nearest_even;
  cpd::overflow ovf = cpd::overflow::infinity;
  long terms = 100000;
  std::uint64_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value after " + a);
      return argv[++i];
    };
    if (a == "--format") name = value();
    else if (a == "--exp") exp_bits = std::atoi(value().c_str());
    else if (a == "--man") man_bits = std::atoi(value().c_str());
    else if (a == "--encoding" || a == "--rounding") {
      try {  // cpd's names of the choices (cpd::from_string): the message lists them
        if (a == "--encoding") enc = cpd::from_string<cpd::encoding_kind>(value());
        else mode = cpd::from_string<cpd::rounding>(value());
      } catch (const std::invalid_argument& e) {
        usage(a + ": " + e.what());
      }
    } else if (a == "--saturate") ovf = cpd::overflow::saturate;
    else if (a == "--terms") terms = std::atol(value().c_str());
    else if (a == "--seed") seed = std::strtoull(value().c_str(), nullptr, 10);
    else usage("unknown option " + a);
  }

  std::optional<cpd::format> fmt;
  try {
    fmt = (exp_bits >= 0 || man_bits >= 0) ? cpd::format(exp_bits, man_bits, enc) : cpd::format::parse(name);
  } catch (const std::invalid_argument& e) {
    usage(e.what());
  }

  double exact = 0;
  double acc = 0;  // always a value of the format
  for (long i = 1; i <= terms; ++i) {
    exact += 1.0 / static_cast<double>(i);
    acc = cpd::quantize(*fmt, mode, ovf, acc + 1.0 / static_cast<double>(i),
                        random_bits(seed, static_cast<std::uint64_t>(i)));
  }
  std::printf("format %s (%d bits, max %g), rounding %s, overflow %s\n", fmt->name().c_str(), fmt->bits(), fmt->max(),
              cpd::to_string(mode), cpd::to_string(ovf));
  std::printf("sum of 1/i for i = 1..%ld: exact %.6f, in the format %.6f (relative error %.2e)\n", terms, exact, acc,
              std::fabs(acc - exact) / exact);
  return 0;
}
