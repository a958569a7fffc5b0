// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/check.hpp>: the errors of cpd's MPI integration, and the one check that the
// ranks of a collective call pass the same arguments (docs/mpi.md). allreduce_plan,
// dynamic_plan and codec_allreduce all make it: one MPI_Allreduce(MPI_MAX) of a few words,
// after which every rank knows the smallest and the largest value of every field and
// throws the same mismatch_error, naming the fields that differ, when any do. Every rank
// enters it whatever it found, so it never hangs.
//
// Requires an MPI library (mpi.h); not included by <cpd/cpd.hpp>.

#include <cpd/core/detail/error.hpp>

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cpd::mpi {

/// An MPI call failed, or ranks disagreed; what() names the call and carries MPI's message.
class error : public std::runtime_error {
 public:
  error(const std::string& what, int code) : std::runtime_error(what), code_(code) {}
  /// The MPI error code (MPI_ERR_OTHER for errors found by cpd).
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

/// The ranks called with different tensor sizes, formats or options (thrown on every rank).
class mismatch_error : public error {
 public:
  explicit mismatch_error(const std::string& what) : error(what, MPI_ERR_OTHER) {}
};

namespace detail {

/// Throws cpd::mpi::error for an MPI return code other than MPI_SUCCESS.
inline void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) std::snprintf(text, sizeof text, "error code %d", rc);
  cpd::detail::throw_error<error>(std::string("cpd::mpi: ") + call + " failed: " + text, rc);
}

/// 64-bit FNV-1a, for fingerprints of a call's shape.
struct fingerprint {
  std::uint64_t h = 0xCBF29CE484222325ull;
  void add(std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xFFu;
      h *= 0x100000001B3ull;
    }
  }
  void add(std::string_view s) noexcept {
    add(s.size());
    for (char c : s) {
      h ^= static_cast<unsigned char>(c);
      h *= 0x100000001B3ull;
    }
  }
};

/// One argument of a collective call that every rank must pass alike.
struct agreed {
  std::string name;    ///< what the message calls it ("n", "the codec")
  std::uint64_t value;  ///< its value, or a fingerprint of it
  std::string shown;   ///< a fingerprint's value as text ("" for a number, shown as its range)
  /// How a number's range shows its ends (nullptr: as unsigned integers); real_field's shows
  /// the doubles.
  std::string (*show)(std::uint64_t) = nullptr;
};

/// A double's bits ordered as the numbers are (so that the allreduce's largest and smallest
/// are the largest and smallest number), and back.
[[nodiscard]] inline std::uint64_t ordered_bits(double d) noexcept {
  std::uint64_t b = 0;
  std::memcpy(&b, &d, sizeof b);
  return b >> 63 ? ~b : b | (std::uint64_t(1) << 63);
}
[[nodiscard]] inline double from_ordered_bits(std::uint64_t b) noexcept {
  b = b >> 63 ? b & ~(std::uint64_t(1) << 63) : ~b;
  double d = 0;
  std::memcpy(&d, &b, sizeof d);
  return d;
}

/// The shortest decimal that reads back as the double of ordered bits b.
inline std::string show_real(std::uint64_t b) {
  const double d = from_ordered_bits(b);
  char text[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, d);
    if (std::strtod(text, nullptr) == d) break;
  }
  return text;
}

/// A double that every rank must pass alike, its range shown as numbers ("from 0.05 to 0.5").
[[nodiscard]] inline agreed real_field(std::string name, double v) {
  return {std::move(name), ordered_bits(v), "", show_real};
}

/// Collective over comm: checks that every rank passes the same value for every field, with one
/// MPI_Allreduce(MPI_MAX) of (v, ~v) pairs (the largest v, and the complement of the smallest).
/// When any field differs, throws mismatch_error on every rank: "<who>: the ranks disagree on
/// n (from 99 to 100), the codec (this rank: dyntree8)".
inline void agree(MPI_Comm comm, const char* who, const std::vector<agreed>& fields) {
  std::vector<std::uint64_t> v;
  v.reserve(2 * fields.size());
  for (const agreed& f : fields) {
    v.push_back(f.value);
    v.push_back(~f.value);
  }
  check(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_UINT64_T, MPI_MAX, comm),
        "MPI_Allreduce (agreement check)");
  std::string what;
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const std::uint64_t hi = v[2 * i], lo = ~v[2 * i + 1];
    if (lo == hi) continue;
    what += what.empty() ? ": the ranks disagree on " : ", ";
    what += fields[i].name;
    const auto show = [&](std::uint64_t x) { return fields[i].show ? fields[i].show(x) : std::to_string(x); };
    what += fields[i].shown.empty() ? " (from " + show(lo) + " to " + show(hi) + ")"
                                    : " (this rank: " + fields[i].shown + ")";
  }
  if (!what.empty()) cpd::detail::throw_error<mismatch_error>(who + what);
}

}  // namespace detail

}  // namespace cpd::mpi
