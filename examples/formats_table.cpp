// SPDX-License-Identifier: MIT
// Prints the table of cpd's named formats (docs/formats.md embeds its output;
// a test fails when the two differ, so the docs cannot drift from the code).
//
//   formats_table            the Markdown table
//   formats_table --check F  exit 1 unless file F contains the table verbatim

#include <cpd/cpd.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace {

// A value as "2^k" when it is a power of two, else as a short decimal.
std::string show(double v) {
  int e = 0;
  const double m = std::frexp(v, &e);
  char buf[64];
  if (m == 0.5) {
    std::snprintf(buf, sizeof buf, "2^%d", e - 1);
  } else {
    std::snprintf(buf, sizeof buf, "%.9g", v);
  }
  return buf;
}

template <class F>
void row(std::ostream& os, const char* alias) {
  const auto& s = F::spec;
  os << "| `" << alias << "` | " << s.bits << " | " << s.E << " | " << s.M << " | " << s.bias << " | "
     << cpd::to_string(s.enc) << " | " << (s.has_subnormals ? show(s.min_positive) : std::string("none")) << " | "
     << show(s.min_normal) << " | " << show(s.max_value) << " | " << (s.has_inf ? "yes" : "no") << " | "
     << (s.has_nan ? "yes" : "no") << " | " << (s.has_neg_zero ? "yes" : "no") << " |\n";
}

std::string table() {
  std::ostringstream os;
  os << "| alias | bits | E | M | bias | encoding | min subnormal | min normal | max | inf | NaN | -0 |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  row<cpd::float8_e4m3fn>(os, "float8_e4m3fn");
  row<cpd::float8_e4m3>(os, "float8_e4m3");
  row<cpd::float8_e5m2>(os, "float8_e5m2");
  row<cpd::float8_e4m3fnuz>(os, "float8_e4m3fnuz");
  row<cpd::float8_e5m2fnuz>(os, "float8_e5m2fnuz");
  row<cpd::float8_e4m3b11fnuz>(os, "float8_e4m3b11fnuz");
  row<cpd::float8_e3m4>(os, "float8_e3m4");
  row<cpd::float8_e8m0fnu>(os, "float8_e8m0fnu");
  row<cpd::float6_e3m2fn>(os, "float6_e3m2fn");
  row<cpd::float6_e2m3fn>(os, "float6_e2m3fn");
  row<cpd::float4_e2m1fn>(os, "float4_e2m1fn");
  row<cpd::float16>(os, "float16");
  row<cpd::bfloat16>(os, "bfloat16");
  row<cpd::tfloat32>(os, "tfloat32");
  return os.str();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string t = table();
  if (argc == 3 && std::string(argv[1]) == "--check") {
    std::ifstream in(argv[2]);
    if (!in) {
      std::cerr << "formats_table: cannot read " << argv[2] << "\n";
      return 2;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().find(t) == std::string::npos) {
      std::cerr << argv[2] << " does not contain the current table; regenerate it with formats_table:\n" << t;
      return 1;
    }
    return 0;
  }
  if (argc != 1) {
    std::cerr << "usage: formats_table [--check FILE]\n";
    return 2;
  }
  std::cout << t;
  return 0;
}
