// SPDX-License-Identifier: MIT
// The library compiles and runs with -fno-exceptions -fno-rtti (as embedded
// simulators often build); runtime errors are then reported without throwing.

#include <cpd/cpd.hpp>

#include <cstdio>

int main() {
  const char* why = nullptr;
  const auto bad = cpd::format::try_make(4, 60, cpd::encoding_kind::ieee, std::nullopt, &why);
  if (bad || why == nullptr) return 1;
  const auto f = cpd::format::try_parse("e4m3fn");
  if (!f) return 1;
  const float q = cpd::quantize(*f, cpd::rounding::nearest_even, cpd::overflow::saturate, 1000.0f);
  const float r = cpd::quantize<cpd::float8_e4m3fn, cpd::rounding::nearest_even, cpd::overflow::saturate>(1000.0f);
  std::printf("%s; %g %g\n", why, static_cast<double>(q), static_cast<double>(r));
  return q == 448.0f && r == 448.0f ? 0 : 1;
}
