// SPDX-License-Identifier: MIT
#pragma once

// Every tuning constant of cpd's host kernels, in one place (as CPFloat keeps its
// thresholds in one header). None changes a result bit: each only moves work
// between kernels, threads, blocks and stores that give the same bits.

#include <cstddef>

namespace cpd::detail::tuning {

/// Below this many values a call keeps the generic kernel: the fast kernel's plan
/// costs a few dozen scalar roundings (its bisection of the overflow threshold).
inline constexpr std::size_t fast_min_values = 256;

/// Output bytes from which the fast kernels store with non-temporal (streaming)
/// stores: an output this large is not read back from the cache anyway, and
/// streaming stores skip the read-for-ownership of each destination line.
inline constexpr std::size_t stream_threshold_bytes = std::size_t(4) << 20;

/// How many floats ahead the fast kernels prefetch their input (8 KiB): the hardware
/// prefetchers alone left a single core reading the L3 at a fraction of its
/// bandwidth (measured: 64 MiB quantize 0.99x memcpy without, 1.2-1.8x with).
inline constexpr std::size_t prefetch_distance = 2048;

/// Values scaled at once into a stack buffer before rounding (2 KiB of floats, 4 KiB
/// of doubles): the buffer stays in the L1 cache between the scale and the rounding.
inline constexpr std::size_t scale_block = 512;

/// Values per block of an in-place call whose input and output sizes differ: the
/// block goes through a stack buffer (at most 8 KiB), small enough to stay in L1.
inline constexpr std::size_t in_place_block = 1024;

/// Thread chunks are multiples of this many elements: whole 64-byte cache lines for
/// every element size, and whole groups of the 4- and 6-bit packings.
inline constexpr std::size_t chunk_granule = 64;

/// The default fewest elements per thread (execution::parallel_policy::min_chunk):
/// below it, starting a thread costs more than the rounding it would take over.
inline constexpr std::size_t min_chunk = std::size_t(1) << 16;

/// From this many 16-bit codes, decode of a compile-time format reads the shared
/// table of all 65536 values (built once); below, decoding arithmetic is cheaper
/// than the first touch of a 256 KiB table. 8-bit codes always use a table.
inline constexpr std::size_t table_min_codes16 = std::size_t(1) << 16;

/// Codes unpacked or packed at once by encode_packed / decode_packed: 4 KiB on the
/// stack, and a multiple of every packing group (2 and 4 codes).
inline constexpr std::size_t pack_block = 4096;

/// simulate_allreduce gives a thread at least this many element-additions (elements
/// times workers, times 4 with Kahan): below, starting a thread costs more than it saves.
inline constexpr std::size_t simulate_min_work = std::size_t(1) << 16;

}  // namespace cpd::detail::tuning
