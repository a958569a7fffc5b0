// SPDX-License-Identifier: MIT
#pragma once

// The one way cpd reports a runtime error. With exceptions, throw_error<E>(args)
// throws E(args); under -fno-exceptions it builds the same E, prints its what() to
// stderr and aborts, so that the message is never lost. Every throw site of cpd
// goes through here (docs/reliability.md lists what each bad input gets).

#include <cpd/core/config.hpp>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace cpd::detail {

/// Throws E(args...); without exceptions prints E(args...).what() to stderr and aborts.
template <class E, class... A>
[[noreturn]] void throw_error(A&&... args) {
#if CPD_HAS_EXCEPTIONS
  throw E(std::forward<A>(args)...);
#else
  const E e(std::forward<A>(args)...);
  std::fprintf(stderr, "%s\n", e.what());
  std::fflush(stderr);
  std::abort();
#endif
}

/// A bad argument: std::invalid_argument(what).
[[noreturn]] inline void fail_invalid(const std::string& what) { throw_error<std::invalid_argument>(what); }

/// s for an error message: control bytes (NUL included) and DEL as \xNN, so that a message is
/// one line and no NUL ends what(); the bytes above 0x7f too, unless keep_utf8 (text whose
/// UTF-8 should show as itself).
inline std::string printable(std::string_view s, bool keep_utf8 = false) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f && (u < 0x80 || keep_utf8)) {
      out += c;
    } else {
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

/// A size that does not fit (an element count times a width overflows): std::length_error(what).
[[noreturn]] inline void fail_length(const std::string& what) { throw_error<std::length_error>(what); }

/// A broken invariant of cpd itself (a bug, never bad input): the message to stderr, then abort().
[[noreturn]] inline void internal_error(const char* what) noexcept {
  std::fprintf(stderr, "cpd: internal error: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

}  // namespace cpd::detail
