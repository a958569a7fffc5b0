// SPDX-License-Identifier: MIT
#pragma once

// 64-byte-aligned float buffers for cpd-train. Eigen's vectorized kernels peel
// a misaligned head off a buffer and sum it apart from the rest, so a GEMM's
// bits depend on where malloc placed its operands: a run's weights-hash then
// changed with the runs before it and between an MPI rank and the emulation.
// Every buffer that Eigen reads or writes starts on a 64-byte boundary (the
// widest vector, AVX-512), and so does every tensor inside one (mlp pads them).

#include <cstddef>
#include <limits>
#include <new>
#include <vector>

namespace train {

/// Bytes every buffer of cpd-train (and every tensor in one) is aligned to.
inline constexpr std::size_t buffer_alignment = 64;

/// std::allocator with buffer_alignment.
template <class T>
struct aligned_allocator {
  using value_type = T;
  aligned_allocator() = default;
  template <class U>
  aligned_allocator(const aligned_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{buffer_alignment}));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{buffer_alignment}); }
  template <class U>
  bool operator==(const aligned_allocator<U>&) const noexcept {
    return true;
  }
  template <class U>
  bool operator!=(const aligned_allocator<U>&) const noexcept {
    return false;
  }
};

/// A std::vector whose data() is aligned to buffer_alignment.
template <class T>
using aligned_vector = std::vector<T, aligned_allocator<T>>;

}  // namespace train
