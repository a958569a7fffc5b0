// SPDX-License-Identifier: MIT
#pragma once

// The threads of cpd-train: one pool, one parallel-for at a time.

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace train {

/// A fixed pool of threads running one parallel-for at a time; the work split
/// never changes results (each index is computed by exactly one thread, alone).
class thread_pool {
 public:
  explicit thread_pool(int n) : n_(n < 1 ? 1 : n) {}
  int size() const { return n_; }
  void parallel_for(std::size_t count, const std::function<void(std::size_t)>& f) const {
    if (n_ == 1 || count <= 1) {
      for (std::size_t i = 0; i < count; ++i) f(i);
      return;
    }
    std::atomic<std::size_t> next{0};
    std::exception_ptr error;  // the first exception of any thread, rethrown here (e.g. bad_alloc)
    std::mutex error_mutex;
    auto body = [&] {
      try {
        for (std::size_t i; (i = next.fetch_add(1)) < count;) f(i);
      } catch (...) {
        next = count;
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    };
    std::vector<std::thread> ts;
    try {
      for (int t = 1; t < n_; ++t) ts.emplace_back(body);
    } catch (...) {  // a thread that cannot be started: those there are do the work
    }
    body();
    for (auto& t : ts) t.join();
    if (error) std::rethrow_exception(error);
  }

 private:
  int n_;
};

}  // namespace train
