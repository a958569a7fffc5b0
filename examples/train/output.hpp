// SPDX-License-Identifier: MIT
#pragma once

// cpd-train's output: the progress bar, the output files and the one helper
// program (gnuplot). An output file is opened when the program starts, so that a
// path that cannot be written fails before any training; every write, the flush
// and the close are checked. gnuplot
// is started without a shell (posix_spawnp with an argument vector): its script
// arrives on its standard input and the PNG comes back on its standard output, so
// no path or name is ever parsed by a shell or by gnuplot. It runs in a process group
// of its own, killed with its children after CPD_GNUPLOT_TIMEOUT seconds (60) or once it
// has written more than 64 MiB.

#include "files.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace train {

/// An output that cannot be written or a helper program that failed, with the message to print.
struct io_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A file that cpd-train writes, opened (and truncated) at once; `flag` names it in messages.
class output_file {
 public:
  output_file() = default;
  output_file(std::string flag, std::string path) : flag_(std::move(flag)), path_(std::move(path)) {
    f_ = std::fopen(path_.c_str(), "wb");
    if (!f_) fail("cannot open for writing");
  }
  output_file(output_file&& o) noexcept : flag_(std::move(o.flag_)), path_(std::move(o.path_)), f_(o.f_) {
    o.f_ = nullptr;
  }
  output_file& operator=(output_file&& o) noexcept {
    std::swap(flag_, o.flag_);
    std::swap(path_, o.path_);
    std::swap(f_, o.f_);
    return *this;
  }
  output_file(const output_file&) = delete;
  output_file& operator=(const output_file&) = delete;
  ~output_file() {
    if (f_) std::fclose(f_);
  }

  bool is_open() const { return f_ != nullptr; }
  const std::string& path() const { return path_; }

  void write(const void* p, std::size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) fail("write failed");
  }
  void write(const std::string& s) { write(s.data(), s.size()); }

  /// Flushes and closes; io_error if any of the data did not reach the file.
  void close() {
    std::FILE* f = f_;
    f_ = nullptr;
    errno = 0;
    const bool flushed = std::fflush(f) == 0 && !std::ferror(f);
    const int flush_errno = errno;
    const bool closed = std::fclose(f) == 0;
    if (!flushed) {
      errno = flush_errno;
      fail("write failed");
    }
    if (!closed) fail("close failed");
  }

 private:
  [[noreturn]] void fail(const char* what) const {
    const int e = errno;
    throw io_error(flag_ + " " + escaped(path_) + ": " + what + (e ? std::string(" (") + std::strerror(e) + ")" : ""));
  }

  std::string flag_, path_;
  std::FILE* f_ = nullptr;
};

/// The progress bar: redrawn in place on a terminal, a line per epoch otherwise.
class progress_bar {
 public:
  progress_bar(bool enabled, std::string label) : on_(enabled), tty_(isatty(2) != 0), label_(std::move(label)) {}
  void update(int epoch, int epochs, std::size_t step, std::size_t steps, double loss) {
    if (!on_ || !tty_) return;
    const int width = 30;
    const double frac = (static_cast<double>(epoch) + static_cast<double>(step) / static_cast<double>(steps)) / epochs;
    const int fill = static_cast<int>(frac * width);
    std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% epoch %d/%d loss %.4f ", label_.c_str(), fill,
                 "##############################", width - fill, "", static_cast<int>(frac * 100), epoch + 1, epochs,
                 loss);
    std::fflush(stderr);
  }
  void epoch_done(int epoch, int epochs, double train_loss, double test_accuracy, double seconds) {
    if (!on_) return;
    std::fprintf(stderr, "%s%s epoch %d/%d: train loss %.4f, test accuracy %.4f (%.1f s)\n", tty_ ? "\r" : "",
                 label_.c_str(), epoch + 1, epochs, train_loss, test_accuracy, seconds);
  }

 private:
  bool on_, tty_;
  std::string label_;
};

/// The path of program `name` on PATH (as posix_spawnp would find it), or "".
inline std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    const std::size_t end = dirs.find(':', start);
    std::string dir = dirs.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (end == std::string::npos) return "";
    start = end + 1;
  }
}

/// What a program wrote to its standard output, and how it ended.
struct program_result {
  std::string output;
  int status = 0;            ///< as waitpid gives it
  bool timed_out = false;    ///< killed at program_limits::seconds
  bool too_much = false;     ///< killed for writing more than program_limits::max_output
};

/// How long a program may run and how much it may write before it is killed.
struct program_limits {
  double seconds = 60;
  std::size_t max_output = std::size_t(64) << 20;
};

namespace detail {

/// Feeds `input` to fd `in` and drains fd `out` into r together, so that neither side waits on
/// a full pipe, until the program closes its output, the deadline passes or it writes too much.
inline void exchange_pipes(int in, int out, const std::string& input, const program_limits& lim,
                           std::chrono::steady_clock::time_point deadline, program_result& r) {
  std::size_t sent = 0;
  bool writing = !input.empty();
  if (!writing) ::close(in);
  for (;;) {
    using std::chrono::milliseconds;
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    pollfd fds[2] = {{out, POLLIN, 0}, {writing ? in : -1, POLLOUT, 0}};
    const int ready = ::poll(fds, 2, static_cast<int>(std::min<long long>(left.count() + 1, 1 << 30)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    if (writing && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      const ssize_t k = ::write(in, input.data() + sent, input.size() - sent);
      if (k > 0) sent += static_cast<std::size_t>(k);
      if ((k < 0 && errno != EAGAIN && errno != EINTR) || sent == input.size()) {
        ::close(in);
        writing = false;
      }
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char buf[1 << 16];
      const ssize_t k = ::read(out, buf, sizeof buf);
      if (k > 0) r.output.append(buf, static_cast<std::size_t>(k));
      else if (k == 0 || errno != EINTR) break;
      if (r.output.size() > lim.max_output) {
        r.too_much = true;
        break;
      }
    }
  }
  if (writing) ::close(in);
  ::close(out);
}

/// Reaps the program's process group leader pid, killing the group first when r says so or
/// when it is still running at the deadline.
inline void reap(pid_t pid, std::chrono::steady_clock::time_point deadline, program_result& r) {
  bool killed = r.timed_out || r.too_much;
  if (killed) ::kill(-pid, SIGKILL);
  for (;;) {
    const pid_t w = ::waitpid(pid, &r.status, killed ? 0 : WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) return;
    if (!killed && std::chrono::steady_clock::now() >= deadline) {
      r.timed_out = killed = true;
      ::kill(-pid, SIGKILL);
    } else if (!killed) {
      ::usleep(10000);
    }
  }
}

}  // namespace detail

/// Runs argv[0] (found on PATH) with `input` on its standard input, without a shell, in a
/// process group of its own; its standard error is ours. The whole group is killed when it runs
/// longer than lim.seconds or writes more than lim.max_output (program_result says which).
/// io_error if it cannot be started.
inline program_result run_program(const std::vector<std::string>& argv, const std::string& input,
                                  const program_limits& lim = {}) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw io_error("cannot create a pipe (" + std::string(std::strerror(errno)) + ")");
  if (::pipe2(out, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(in[0]);
    ::close(in[1]);
    throw io_error("cannot create a pipe (" + std::string(std::strerror(e)) + ")");
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attr, &defaults);  // the child gets SIGPIPE back, whatever ours is
  posix_spawnattr_setpgroup(&attr, 0);              // a group of its own: a timeout kills its children too
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]);
  ::close(out[1]);
  if (rc != 0) {
    ::close(in[1]);
    ::close(out[0]);
    throw io_error("cannot start " + argv[0] + " (" + std::strerror(rc) + ")");
  }
  // SIGPIPE is ignored meanwhile (a program that exits early gives EPIPE, and its status says why).
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);
  ::fcntl(in[1], F_SETFL, O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::milliseconds>(
                                                                 std::chrono::duration<double>(lim.seconds));
  program_result r;
  detail::exchange_pipes(in[1], out[0], input, lim, deadline, r);
  detail::reap(pid, deadline, r);
  sigaction(SIGPIPE, &old, nullptr);
  return r;
}

/// The seconds gnuplot may take: CPD_GNUPLOT_TIMEOUT (seconds, in (0, 86400]) or 60. A value
/// that is not such a number gives 0 and sets *error to the message.
inline double gnuplot_timeout(std::string* error) {
  const char* env = std::getenv("CPD_GNUPLOT_TIMEOUT");
  if (!env) return 60;
  const std::string v = env;
  char* end = nullptr;
  const double s = std::strtod(v.c_str(), &end);
  if (v.empty() || v[0] == ' ' || *end != '\0' || !(s > 0 && s <= 86400)) {
    if (error) *error = "CPD_GNUPLOT_TIMEOUT: '" + escaped(v) + "' is not a number of seconds in (0, 86400]";
    return 0;
  }
  return s;
}

/// The PNG gnuplot draws from `script`, killed after `seconds`; io_error "<what>gnuplot ...; no
/// plot written" when it cannot be started, fails, takes too long, writes too much or no PNG.
inline std::string gnuplot_png(const std::string& what, const std::string& script, double seconds) {
  program_limits lim;
  lim.seconds = seconds;
  const program_result r = run_program({"gnuplot"}, script, lim);
  char limit[32];
  std::snprintf(limit, sizeof limit, "%g", seconds);
  std::string why;
  if (r.timed_out) why = std::string("did not finish within ") + limit + " s (killed)";
  else if (r.too_much) why = "wrote more than " + std::to_string(lim.max_output >> 20) + " MiB (killed)";
  else if (!WIFEXITED(r.status)) why = "was killed by signal " + std::to_string(WTERMSIG(r.status));
  else if (WEXITSTATUS(r.status) != 0) why = "exited with status " + std::to_string(WEXITSTATUS(r.status));
  else if (r.output.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) why = "wrote no PNG";
  if (!why.empty()) throw io_error(what + "gnuplot " + why + "; no plot written");
  return r.output;
}

/// One curve of the plot: a title, a gnuplot dash type and a y value per epoch.
struct plot_curve {
  std::string title;
  int dash = 1;
  std::vector<double> y;
};

/// A string as a gnuplot single-quoted literal (where only ' is special, written '').
inline std::string gnuplot_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
  return q + "'";
}

/// The last finite value of a curve (NaN when it has none).
inline double final_value(const plot_curve& c) {
  for (std::size_t e = c.y.size(); e-- > 0;)
    if (std::isfinite(c.y[e])) return c.y[e];
  return std::nan("");
}

/// The gnuplot script of the test-accuracy plot: the data inline, the PNG to standard output.
/// Two panels: every run on an axis that holds them all, and the runs whose final accuracy is
/// within 3 points of the best one's zoomed in (on the first, fp32 and the 8-bit curves lie
/// on top of each other). A curve keeps its colour in both panels.
inline std::string plot_script(const std::vector<plot_curve>& curves) {
  double best = -1;
  for (const plot_curve& c : curves)
    if (final_value(c) > best) best = final_value(c);
  const bool any = best >= 0;  // (no run has a finite accuracy: the second panel shows them all)
  const double step = 0.005;
  const double lo = any ? std::floor((best - 0.03) / step) * step - step : 0, hi = any ? std::ceil(best / step) * step + step : 1;
  std::string s =
      "set terminal pngcairo size 1200,560 noenhanced\n"
      "set output\n"  // standard output
      "set multiplot layout 1,2 title 'Fashion-MNIST MLP: test accuracy with low-precision gradient exchange'\n"
      "set xlabel 'epoch'\nset ylabel 'test accuracy'\nset grid\nset xtics 1\n";
  std::size_t epochs = 1;
  for (const plot_curve& c : curves) epochs = std::max(epochs, c.y.size());
  s += "set xrange [0.9:" + std::to_string(epochs) + ".1]\n";
  for (std::size_t c = 0; c < curves.size(); ++c) {
    s += "$run" + std::to_string(c) + " << EOD\n";
    for (std::size_t e = 0; e < curves[c].y.size(); ++e) {
      char line[64];
      std::snprintf(line, sizeof line, "%zu %.6g\n", e + 1, curves[c].y[e]);
      s += line;
    }
    s += "EOD\n";
  }
  auto line = [&](std::size_t c, bool titled) {
    return "$run" + std::to_string(c) + " with linespoints lw 2 pt 7 ps 0.8 lc " + std::to_string(c % 8 + 1) +
           " dt " + std::to_string(curves[c].dash) + (titled ? " title " + gnuplot_quote(curves[c].title) : " notitle");
  };
  s += "set title 'all runs'\nset key bottom right\nset yrange [*:*]\nplot ";
  for (std::size_t c = 0; c < curves.size(); ++c) s += (c ? ", " : "") + line(c, true);
  char range[96];
  std::snprintf(range, sizeof range, "set yrange [%.3f:%.3f]\n", lo, hi);
  s += "\nset title 'zoom: the runs within 3 points of the best'\nunset key\n" + std::string(range) + "plot ";
  bool first = true;
  for (std::size_t c = 0; c < curves.size(); ++c)
    if (!any || final_value(curves[c]) >= best - 0.03) {
      s += (first ? "" : ", ") + line(c, false);
      first = false;
    }
  return s + "\nunset multiplot\n";
}

/// Draws the curves with gnuplot (killed after `seconds`) and writes the PNG to out (then
/// closes it); io_error naming what failed (gnuplot_png).
inline void write_plot(output_file& out, const std::vector<plot_curve>& curves, double seconds) {
  out.write(gnuplot_png("--plot " + escaped(out.path()) + ": ", plot_script(curves), seconds));
  out.close();
}

}  // namespace train
