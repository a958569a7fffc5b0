// SPDX-License-Identifier: MIT
#include <cpd/cpd.hpp>
#include <cpd/version.hpp>

#include <cstdio>
#include <cstring>
#include <string>

int main() {
#ifdef CPD_EXPECTED_VERSION_STRING
  // The headers found are those of the expected version (not another copy of cpd).
  const std::string found = std::to_string(CPD_VERSION_MAJOR) + "." + std::to_string(CPD_VERSION_MINOR) + "." +
                            std::to_string(CPD_VERSION_PATCH);
  if (found != CPD_EXPECTED_VERSION_STRING) {
    std::fprintf(stderr, "cpd_consumer: found cpd %s, expected %s\n", found.c_str(), CPD_EXPECTED_VERSION_STRING);
    return 1;
  }
#endif
  cpd::float8_e4m3fn f(1.0f);
  return static_cast<float>(f) == 1.0f ? 0 : 1;
}
