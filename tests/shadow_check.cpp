// SPDX-License-Identifier: MIT
// Compiled with -Wshadow -Werror and cpd found through a plain -I (not a system
// include directory), as a user's build sees the headers: a warning in any of
// them fails the build (tests/CMakeLists.txt, target cpd_shadow_check). A few
// calls instantiate the bulk kernels, the fast AVX-512 loops included.

#include <cpd/cpd.hpp>

#include <cstdint>
#include <vector>

int cpd_shadow_check() {
  std::vector<float> x(1024, 0.5f), q(1024);
  std::vector<std::uint8_t> c(1024);
  cpd::quantize<cpd::float8_e4m3fn>(x.data(), q.data(), x.size());
  cpd::encode<cpd::float8_e4m3fn, cpd::rounding::stochastic>(x.data(), c.data(), x.size());
  cpd::decode<cpd::float8_e4m3fn>(c.data(), q.data(), c.size());
  return static_cast<int>(q[0]);
}
