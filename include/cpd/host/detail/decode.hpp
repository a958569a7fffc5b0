// SPDX-License-Identifier: MIT
#pragma once

// The decode calls' work around the kernels: the statistics of a decode (codes of
// NaN and of +-inf, read off decode_bits), the check for codes with bits above the
// format's width, and the cached table of a compile-time format's values.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/checks.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/options.hpp>
#include <cpd/host/detail/kernels.hpp>
#include <cpd/host/detail/select.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace cpd::detail {

/// The statistics of decoding n codes of s: the codes that decode to +-0, NaN and +-inf.
template <class Code>
value_stats decode_stats(const spec& s, const Code* in, std::size_t n) noexcept {
  // 0: a number, 1: NaN, 2: +-inf, 3: +-0 (read off decode_bits, the one definition of a code's value).
  auto kind = [&](std::uint64_t c) {
    const std::uint64_t b = decode_bits<double>(s, c) & source<double>::abs_mask;
    return b > source<double>::inf_bits ? 1 : (b == source<double>::inf_bits ? 2 : (b == 0 ? 3 : 0));
  };
  value_stats st;
  st.count = n;
  if constexpr (sizeof(Code) == 1) {
    std::array<unsigned char, 256> k{};
    for (std::size_t c = 0; c < 256; ++c) k[c] = static_cast<unsigned char>(kind(c));
    for (std::size_t i = 0; i < n; ++i) {
      st.nan_inputs += k[in[i]] == 1;
      st.inf_inputs += k[in[i]] == 2;
      st.zeros += k[in[i]] == 3;
    }
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      const int k = kind(static_cast<std::uint64_t>(in[i]));
      st.nan_inputs += k == 1;
      st.inf_inputs += k == 2;
      st.zeros += k == 3;
    }
  }
  return st;
}

/// Decodes n codes of the (scaled) spec s to T. A code with bits above the format's width
/// is std::invalid_argument naming its index: the kernels OR the codes as they go (free),
/// and only when they saw such bits is the input searched for the first (before decoding
/// when in == out, as the codes are then overwritten).
template <class Code, class T, class Policy>
void decode_spec(Policy&& policy, const spec& s, const Code* in, T* out, std::size_t n, const bulk_options& o,
                 const uint_of<T>* cached_table, const char* who) {
  const Code stray = stray_bits<Code>(s);
  if (stray != 0 && static_cast<const void*>(in) == static_cast<const void*>(out)) check_codes(who, s, in, n, stray);
  if (o.stats) *o.stats = decode_stats(s, in, n);  // before decoding: in may be out
  std::atomic<std::uint64_t> seen{0};
  decode_call(policy, s, in, out, n, o, cached_table, stray, &seen);
  if (seen.load(std::memory_order_relaxed) != 0) check_codes(who, s, in, n, stray);
}

/// The cached table of a compile-time format with codes of at most 16 bits, shared by
/// every later call: built by integer arithmetic alone, whatever the environment of the
/// first call.
template <class F, class T>
const uint_of<T>* decode_table() {
  constexpr std::size_t size = std::size_t(1) << (8 * sizeof(typename F::storage_type));
  static const std::unique_ptr<uint_of<T>[]> table = [] {
    std::unique_ptr<uint_of<T>[]> t(new uint_of<T>[size]);
    fill_table<T>(t.get(), size, F::spec, T(1), false);
    return t;
  }();
  return table.get();
}

}  // namespace cpd::detail
