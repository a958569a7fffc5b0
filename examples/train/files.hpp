// SPDX-License-Identifier: MIT
#pragma once

// The files cpd-train and cpd-model read: opened without blocking (a FIFO with no writer
// would block open() forever) and refused unless regular (a FIFO, /dev/zero, a directory),
// read whole only up to a bound, and compared by identity (device and inode, or for a file
// that does not exist yet the canonical path it would have), never by spelling.

#include <cpd/core/detail/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace train {

/// A file that cannot be used as asked; what() names the path and the reason.
struct file_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// s for a message: control bytes (NUL included) and DEL as \xNN, so that a message is one
/// line, shows what was given (UTF-8 as itself), and is not cut short by a NUL.
inline std::string escaped(std::string_view s) { return cpd::detail::printable(s, /*keep_utf8=*/true); }

/// What kind of file a mode describes, for messages: "a FIFO", "a directory"...
inline const char* file_kind(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a file";
}

/// A descriptor of the regular file at path, opened for reading (close-on-exec, blocking);
/// file_error "PATH: cannot open (reason)" or "PATH: not a regular file (a FIFO)". The open
/// itself does not block: O_NONBLOCK until fstat has said what the file is.
inline int open_regular(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) throw file_error(escaped(path) + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string kind = file_kind(st.st_mode);
    ::close(fd);
    throw file_error(escaped(path) + ": not a regular file (" + kind + ")");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

/// Bytes as "16 MiB", "512 KiB" or "300 bytes" (for bounds, which are round).
inline std::string bound_text(std::size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= (1u << 10) && b % (1u << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " bytes";
}

/// The whole of the regular file at path, when it holds at most max_bytes; file_error naming
/// the path and the bound when it holds more (read up to max_bytes + 1, whatever its size
/// claims: files in /proc say 0, and a file may grow while it is read).
inline std::string read_bounded(const std::string& path, std::size_t max_bytes) {
  const int fd = open_regular(path);
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const std::size_t want = std::min(sizeof buf, max_bytes + 1 - text.size());
    const ssize_t k = ::read(fd, buf, want);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) {
      const int e = errno;
      ::close(fd);
      throw file_error(escaped(path) + ": read error (" + std::strerror(e) + ")");
    }
    if (k == 0) break;
    text.append(buf, static_cast<std::size_t>(k));
    if (text.size() > max_bytes) {
      ::close(fd);
      throw file_error(escaped(path) + ": larger than " + bound_text(max_bytes) + ", the most read from this file");
    }
  }
  ::close(fd);
  return text;
}

/// Which file a path names, or would create: for an existing file its device and inode, for
/// one that does not exist yet the canonical path it would be created at (the parent's
/// symlinks resolved, and a dangling symlink followed to the file that opening it creates).
struct file_identity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string path;  ///< when it does not exist

  friend bool operator==(const file_identity& a, const file_identity& b) {
    if (a.exists != b.exists) return false;
    return a.exists ? a.dev == b.dev && a.ino == b.ino : a.path == b.path;
  }
  friend bool operator!=(const file_identity& a, const file_identity& b) { return !(a == b); }
};

inline file_identity identify(const std::string& path) {
  namespace fs = std::filesystem;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return {true, st.st_dev, st.st_ino, ""};
  fs::path p = path;
  for (int hops = 0; hops < 40; ++hops) {  // a dangling symlink: where would open() create the file?
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) break;
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) break;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  std::error_code ec;
  fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);
  if (ec) c = fs::absolute(p, ec).lexically_normal();
  return {false, 0, 0, c.string()};
}

/// Whether two paths name the same file (see identify).
inline bool same_file(const std::string& a, const std::string& b) { return identify(a) == identify(b); }

}  // namespace train
