// SPDX-License-Identifier: MIT
#pragma once

// What a run of cpd-train will allocate, known from its flags and the data's
// shape before anything is allocated, and what this process may allocate: so
// that --workers 4096 --batch 4096 or --hidden 65536,65536 are refused with the
// amount they need instead of dying of std::bad_alloc in the middle.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace train {

/// The shape of one run, as far as memory goes.
struct memory_plan {
  std::vector<std::size_t> widths;  ///< inputs, hidden layers, 10
  std::size_t workers = 1;          ///< gradients held by this process (W emulated, 1 per MPI rank)
  std::size_t batch = 1;            ///< global batch
  std::size_t worker_batch = 1;     ///< the largest share of one worker
  std::size_t threads = 1;          ///< workers computed at once
  bool codec = false;               ///< residual (and input) per worker
};

/// Bytes a run of this shape allocates, roughly but not less: the parameters and their
/// per-worker gradients (and codec residuals), the optimizer's copies, a batch, and the
/// activations of the workers computed at once. In double: the flags can ask for more than 2^64.
inline double memory_needed(const memory_plan& p) {
  double params = 0, units = 0;
  for (std::size_t l = 0; l + 1 < p.widths.size(); ++l) {
    params += (static_cast<double>(p.widths[l]) + 1) * static_cast<double>(p.widths[l + 1]) + 32;  // + alignment
    units += static_cast<double>(p.widths[l + 1]);
  }
  const double inputs = p.widths.empty() ? 0 : static_cast<double>(p.widths[0]);
  const double W = static_cast<double>(p.workers);
  // weights, Kahan compensation, initial copy, mean, velocity, update, exchange scratch (2)
  double floats = params * (8 + W * (p.codec ? 3 : 1));
  floats += static_cast<double>(p.batch) * inputs;
  // per worker at once: its inputs, pre-activations, activations, deltas (and their copies)
  const double at_once = static_cast<double>(std::min(p.threads, p.workers));
  floats += at_once * static_cast<double>(p.worker_batch) * (inputs + 5 * units);
  floats += 1000.0 * (inputs + 3 * units);  // test accuracy, 1000 images at a time
  return 4 * floats;
}

/// Bytes this process may still allocate: the smaller of physical memory and what
/// the address-space limit (ulimit -v) leaves beside what is mapped already; `bound`
/// says which applies, as in "<bound> <amount>".
inline double memory_available(std::string* bound = nullptr) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  double avail = pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 1e300;
  if (bound) *bound = "this machine has only";
  rlimit lim{};
  if (::getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY) {
    double mapped = 0;  // /proc/self/statm: the first field is the mapped size in pages
    std::ifstream statm("/proc/self/statm");
    if (statm >> mapped) mapped *= static_cast<double>(page);
    const double left = std::max(0.0, static_cast<double>(lim.rlim_cur) - mapped);
    if (left < avail) {
      avail = left;
      if (bound) *bound = "the address-space limit (ulimit -v) leaves only";
    }
  }
  return avail;
}

/// Bytes as "12.3 GiB" (or MiB).
inline std::string human_bytes(double b) {
  char s[48];
  if (b >= 1024.0 * 1024 * 1024) std::snprintf(s, sizeof s, "%.1f GiB", b / (1024.0 * 1024 * 1024));
  else std::snprintf(s, sizeof s, "%.1f MiB", b / (1024.0 * 1024));
  return s;
}

}  // namespace train
