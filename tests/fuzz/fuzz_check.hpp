// SPDX-License-Identifier: MIT
#pragma once

// What cpd's libFuzzer targets share: a failed property prints the input and the
// property, then aborts, so that libFuzzer saves the input as a crash-* file.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace cpd_fuzz {

/// The input, printable: other bytes as \xNN.
inline std::string shown(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    }
  }
  return out;
}

/// Reports a broken property of `input` and aborts.
[[noreturn]] inline void fail(const char* target, std::string_view input, const std::string& what) {
  std::fprintf(stderr, "%s: input '%s': %s\n", target, shown(input).c_str(), what.c_str());
  std::abort();
}

}  // namespace cpd_fuzz
