// SPDX-License-Identifier: MIT
// The library compiles and runs with -fno-exceptions -fno-rtti (as embedded
// simulators often build); runtime errors are then reported without throwing:
// the message that would have been thrown goes to stderr, then abort(). Each
// failing call below runs in a child process (fork), whose stderr is read back
// and must hold the message, and which must die of SIGABRT.

#include <cpd/cpd.hpp>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

/// Runs fn in a child; true when it died of SIGABRT with `expect` in its stderr.
template <class Fn>
bool aborts_with(const char* name, const char* expect, Fn fn) {
  int fd[2];
  if (pipe(fd) != 0) return false;
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    close(fd[0]);
    dup2(fd[1], 2);
    fn();
    _exit(0);  // not reached when fn fails as it should
  }
  close(fd[1]);
  std::string err;
  char buf[512];
  for (ssize_t k; (k = read(fd[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<std::size_t>(k));
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  const bool aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  const bool said = err.find(expect) != std::string::npos;
  std::printf("%-28s %s, stderr: %s", name, aborted ? "aborted" : "did not abort", err.empty() ? "(empty)\n" : err.c_str());
  if (!said) std::printf("  expected in stderr: %s\n", expect);
  return aborted && said;
}

}  // namespace

int main() {
  const char* why = nullptr;
  const auto bad = cpd::format::try_make(4, 60, cpd::encoding_kind::ieee, std::nullopt, &why);
  if (bad || why == nullptr) return 1;
  const auto f = cpd::format::try_parse("e4m3fn");
  if (!f) return 1;
  const float q = cpd::quantize(*f, cpd::rounding::nearest_even, cpd::overflow::saturate, 1000.0f);
  const float r = cpd::quantize<cpd::float8_e4m3fn, cpd::rounding::nearest_even, cpd::overflow::saturate>(1000.0f);
  std::printf("%s; %g %g\n", why, static_cast<double>(q), static_cast<double>(r));
  if (q != 448.0f || r != 448.0f) return 1;

  // One failing call per error helper of the library; each must print its message.
  int failed = 0;
  failed += !aborts_with("make_codec", "cpd::make_codec: unknown codec 'nope'", [] { (void)cpd::make_codec("nope"); });
  failed += !aborts_with("qsgd_codec", "cpd::qsgd_codec: bits must be 2, 4 or 8", [] { cpd::qsgd_codec c(3); });
  failed += !aborts_with("format::parse", "cpd::format: 'e4m3x'", [] { (void)cpd::format::parse("e4m3x"); });
  failed += !aborts_with("format", "cpd::format: mantissa bits M", [] { cpd::format g(4, 60); });
  failed += !aborts_with("aps", "cpd::aps: world_size must be >= 1", [] { cpd::aps<cpd::float8_e4m3fn> a(0); });
  failed += !aborts_with("bulk quantize", "cpd::quantize: bulk_options::random_bits", [] {
    float x = 1.0f;
    cpd::bulk_options o;
    o.random_bits = 0;
    cpd::quantize<cpd::float8_e4m3fn>(&x, &x, 1, o);
  });
  failed += !aborts_with("mx_quantize", "cpd::mx_quantize: mx_options::block_size", [] {
    float x = 1.0f;
    cpd::mx_options o;
    o.block_size = 0;
    cpd::mx_quantize<cpd::float8_e4m3fn>(&x, &x, 1, o);
  });
  std::printf("%d of 7 failing calls did not report their message\n", failed);
  return failed == 0 ? 0 : 1;
}
