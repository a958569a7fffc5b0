// SPDX-License-Identifier: MIT
#include <cpd/cpd.hpp>

int main() {
  cpd::float8_e4m3fn f(1.0f);
  return static_cast<float>(f) == 1.0f ? 0 : 1;
}
