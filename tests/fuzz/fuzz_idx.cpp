// SPDX-License-Identifier: MIT
// libFuzzer target: cpd-train's IDX reader (examples/train/idx.hpp) on arbitrary
// bytes, plain or gzip. It must end in an idx_array or a train::data_error, never
// crash, hang or allocate more than its limit allows; what it returns must be what
// the header announced.
//
//   clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude -Iexamples/train
//           tests/fuzz/fuzz_idx.cpp -lz -o fuzz_idx && ./fuzz_idx -max_total_time=60
// (or the `fuzz` preset: tests/fuzz/CMakeLists.txt)
//
// The first byte chooses what is read: an images file (3 dimensions), a labels file
// (1 dimension), or an image set, whose two files are the rest split at the second byte.

#include "idx.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

namespace {

/// The limit of the fuzzer: 1 MiB of data per file (the reader's own bound, made small).
train::idx_limits limits() {
  train::idx_limits l;
  l.max_bytes = 1 << 20;
  return l;
}

void check(bool ok) {
  if (!ok) std::abort();
}

void one_file(const std::uint8_t* p, std::size_t n, int dims) {
  try {
    const train::idx_array a = train::parse_idx(p, n, dims, limits());
    std::uint64_t count = 1;
    for (std::uint32_t d : a.dims) count *= d;
    check(a.dims.size() == static_cast<std::size_t>(dims) && a.data.size() == count && count <= limits().max_bytes);
  } catch (const train::data_error&) {
  }
}

void image_set(const std::uint8_t* p, std::size_t n) {
  if (n < 1) return;
  const std::size_t split = std::min<std::size_t>(p[0] * (n - 1) / 255, n - 1);
  try {
    train::inflating_reader images(train::byte_source::memory(p + 1, split), "images");
    train::inflating_reader labels(train::byte_source::memory(p + 1 + split, n - 1 - split), "labels");
    const train::image_set s = train::read_image_set(images, labels, limits());
    check(s.pixels.size() == s.n * s.rows * s.cols && s.labels.size() == s.n);
    for (std::uint8_t l : s.labels) check(l <= 9);
  } catch (const train::data_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  switch (data[0] % 3) {
    case 0: one_file(data + 1, size - 1, 3); break;
    case 1: one_file(data + 1, size - 1, 1); break;
    default: image_set(data + 1, size - 1); break;
  }
  return 0;
}
