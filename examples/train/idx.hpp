// SPDX-License-Identifier: MIT
#pragma once

// Reading IDX files (the format of MNIST and Fashion-MNIST), plain or
// gzip-compressed, from a file or from memory, with errors that say what is
// wrong instead of crashing. The header is read and checked first (magic,
// element type, dimensions, and that it announces no more than idx_limits
// allow); then exactly the bytes it announces are read, decompressed as they
// arrive, into a buffer that grows with the data and never past what the
// header said. Short data, data after the announced bytes and corrupt or cut
// gzip streams are errors naming the file.

#include "files.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

namespace train {

/// A file that cannot be used, with a message naming the file and the problem.
struct data_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// What the IDX reader accepts at most.
struct idx_limits {
  /// Data bytes of one file (Fashion-MNIST's largest has 47 040 000).
  std::uint64_t max_bytes = std::uint64_t(1) << 30;
};

/// An IDX array of unsigned bytes: its dimensions and its data.
struct idx_array {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;
};

/// Raw bytes from a file or from a buffer.
class byte_source {
 public:
  /// The regular file at path; data_error when it cannot be opened or is not a regular file
  /// (a FIFO would block, /dev/zero never ends: open_regular refuses them without reading).
  static byte_source file(const std::string& path) {
    byte_source s;
    int fd = -1;
    try {
      fd = open_regular(path);
    } catch (const file_error& e) {
      throw data_error(e.what());
    }
    s.file_.reset(::fdopen(fd, "rb"));
    if (!s.file_) {
      const int e = errno;
      ::close(fd);
      throw data_error(path + ": cannot open (" + std::strerror(e) + ")");
    }
    return s;
  }
  /// The n bytes at p (not copied: they must outlive the source).
  static byte_source memory(const std::uint8_t* p, std::size_t n) {
    byte_source s;
    s.p_ = p;
    s.n_ = n;
    return s;
  }
  /// Up to n bytes into out; 0 at the end. name is for the error message.
  std::size_t read(std::uint8_t* out, std::size_t n, const std::string& name) {
    if (!file_) {
      const std::size_t k = std::min(n, n_);
      if (k) std::memcpy(out, p_, k);
      p_ += k;
      n_ -= k;
      return k;
    }
    const std::size_t k = std::fread(out, 1, n, file_.get());
    if (k < n && std::ferror(file_.get())) throw data_error(name + ": read error (" + std::strerror(errno) + ")");
    return k;
  }

 private:
  struct closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, closer> file_;
  const std::uint8_t* p_ = nullptr;
  std::size_t n_ = 0;
};

/// The bytes of a plain or gzip-compressed stream (gzip: its magic 1f 8b),
/// inflated as they are read. Concatenated gzip members are one stream (as gzip
/// writes them); anything else after the last member is an error.
class inflating_reader {
 public:
  inflating_reader(byte_source src, std::string name) : src_(std::move(src)), name_(std::move(name)) {
    have_ = src_.read(in_.get(), 2, name_);
    if (have_ == 2) have_ += src_.read(in_.get() + 2, chunk - 2, name_);
    gzip_ = have_ >= 2 && in_[0] == 0x1F && in_[1] == 0x8B;
    if (!gzip_) return;
    z_.next_in = in_.get();
    z_.avail_in = static_cast<uInt>(have_);
    const int rc = inflateInit2(&z_, 16 + MAX_WBITS);
    if (rc == Z_MEM_ERROR) throw std::bad_alloc();
    if (rc != Z_OK) throw data_error(name_ + ": cannot start zlib (" + std::to_string(rc) + ")");
    z_open_ = true;
  }
  inflating_reader(const inflating_reader&) = delete;
  inflating_reader& operator=(const inflating_reader&) = delete;
  ~inflating_reader() {
    if (z_open_) inflateEnd(&z_);
  }

  const std::string& name() const { return name_; }

  /// Up to n bytes into out; fewer only at the end of the data.
  std::size_t read(std::uint8_t* out, std::size_t n) {
    std::size_t got = 0;
    if (!gzip_) {
      const std::size_t k = std::min(n, have_ - used_);  // the bytes read to look for gzip's magic
      if (k) std::memcpy(out, in_.get() + used_, k);
      used_ += k;
      got = k;
      while (got < n) {
        const std::size_t r = src_.read(out + got, n - got, name_);
        if (r == 0) break;
        got += r;
      }
      return got;
    }
    while (got < n && !ended_) {
      if (z_.avail_in == 0 && !src_done_) refill();
      z_.next_out = out + got;
      const std::size_t want = std::min<std::size_t>(n - got, 1u << 30);
      z_.avail_out = static_cast<uInt>(want);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      got += want - z_.avail_out;
      if (rc == Z_STREAM_END) {
        member_end();
      } else if (rc == Z_MEM_ERROR) {
        throw std::bad_alloc();
      } else if (rc == Z_OK || rc == Z_BUF_ERROR) {
        // Output space left and no input to come: the stream ended before its end marker.
        if (z_.avail_out != 0 && z_.avail_in == 0 && src_done_)
          throw data_error(name_ + ": truncated gzip data (the file ends inside a compressed stream)");
        if (want != z_.avail_out) after_member_ = false;
      } else {
        throw data_error(name_ + (after_member_ ? ": data after the end of the gzip stream that is not gzip ("
                                               : ": corrupt gzip data (") +
                         (z_.msg ? z_.msg : "zlib error " + std::to_string(rc)) + ")");
      }
    }
    return got;
  }

 private:
  static constexpr std::size_t chunk = 1 << 16;

  void refill() {
    const std::size_t r = src_.read(in_.get(), chunk, name_);
    if (r == 0) src_done_ = true;
    z_.next_in = in_.get();
    z_.avail_in = static_cast<uInt>(r);
  }
  /// A gzip member ended (its CRC and length checked by zlib): another member follows, or nothing.
  void member_end() {
    if (z_.avail_in == 0 && !src_done_) refill();
    if (z_.avail_in == 0) {
      ended_ = true;
      return;
    }
    inflateReset(&z_);
    after_member_ = true;
  }

  byte_source src_;
  std::string name_;
  std::unique_ptr<std::uint8_t[]> in_{new std::uint8_t[chunk]};
  std::size_t have_ = 0, used_ = 0;
  bool gzip_ = false, z_open_ = false, src_done_ = false, ended_ = false, after_member_ = false;
  z_stream z_{};
};

namespace detail {

/// n bytes into out, or data_error saying what was expected.
inline void read_exact(inflating_reader& r, std::uint8_t* out, std::size_t n, const char* what) {
  const std::size_t got = r.read(out, n);
  if (got < n)
    throw data_error(r.name() + ": truncated " + what + " (" + std::to_string(got) + " of " + std::to_string(n) +
                     " bytes)");
}

inline std::string mib(std::uint64_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return s;
}

}  // namespace detail

/// Reads and checks an IDX header of unsigned bytes with expected_dims dimensions;
/// returns the dimensions. The data bytes they announce (their product) are at most limits.max_bytes.
inline std::vector<std::uint32_t> read_idx_header(inflating_reader& r, int expected_dims, const idx_limits& limits) {
  const std::string& path = r.name();
  std::uint8_t magic[4];
  const std::size_t got = r.read(magic, 4);
  if (got < 4) throw data_error(path + ": too short for an IDX header (" + std::to_string(got) + " bytes)");
  if (magic[0] != 0 || magic[1] != 0) throw data_error(path + ": wrong magic number (not an IDX file)");
  if (magic[2] != 0x08)
    throw data_error(path + ": IDX element type " + std::to_string(magic[2]) + " is not unsigned byte (8)");
  const int ndims = magic[3];
  if (ndims != expected_dims)
    throw data_error(path + ": has " + std::to_string(ndims) + " dimensions, expected " +
                     std::to_string(expected_dims));
  std::uint8_t raw[4 * 255];
  detail::read_exact(r, raw, 4 * static_cast<std::size_t>(ndims), "IDX header");
  std::vector<std::uint32_t> dims;
  std::uint64_t count = 1;
  for (int i = 0; i < ndims; ++i) {
    const std::uint8_t* p = raw + 4 * i;
    const std::uint32_t d =
        (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | p[3];
    if (d == 0) throw data_error(path + ": dimension " + std::to_string(i) + " is zero");
    dims.push_back(d);
    if (count > limits.max_bytes / d)  // also keeps the product from overflowing
      throw data_error(path + ": its header announces more than the " + detail::mib(limits.max_bytes) +
                       " of data cpd-train reads from one file (dimensions too large)");
    count *= d;
  }
  return dims;
}

/// Reads the data that dims announce (the header already read), then checks that nothing follows.
inline std::vector<std::uint8_t> read_idx_data(inflating_reader& r, const std::vector<std::uint32_t>& dims) {
  std::uint64_t count = 1;
  for (std::uint32_t d : dims) count *= d;
  std::vector<std::uint8_t> data;
  std::uint64_t got = 0;
  while (got < count) {
    // Grow with the data, not with the header's claim: a short file never costs what it claims.
    const std::uint64_t want = std::min<std::uint64_t>(count - got, std::max<std::uint64_t>(got, 1 << 20));
    data.resize(static_cast<std::size_t>(got + want));
    const std::size_t k = r.read(data.data() + got, static_cast<std::size_t>(want));
    got += k;
    if (k < want)
      throw data_error(r.name() + ": truncated: its header announces " + std::to_string(count) +
                       " data bytes, the file has " + std::to_string(got));
  }
  std::uint8_t extra = 0;
  if (r.read(&extra, 1) != 0)
    throw data_error(r.name() + ": more data than the " + std::to_string(count) + " bytes its header announces");
  return data;
}

/// Reads one IDX file (plain or .gz).
inline idx_array read_idx(const std::string& path, int expected_dims, const idx_limits& limits = {}) {
  inflating_reader r(byte_source::file(path), path);
  idx_array a;
  a.dims = read_idx_header(r, expected_dims, limits);
  a.data = read_idx_data(r, a.dims);
  return a;
}

/// Parses an IDX file held in memory (plain or gzip-compressed): bytes [p, p + n).
inline idx_array parse_idx(const std::uint8_t* p, std::size_t n, int expected_dims, const idx_limits& limits,
                           const std::string& name = "<memory>") {
  inflating_reader r(byte_source::memory(p, n), name);
  idx_array a;
  a.dims = read_idx_header(r, expected_dims, limits);
  a.data = read_idx_data(r, a.dims);
  return a;
}

/// A labelled image set: n images of rows x cols bytes, n labels in [0, 10).
struct image_set {
  std::size_t n = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // n * rows * cols
  std::vector<std::uint8_t> labels;  // n
};

/// Reads an images file (3 dimensions) and a labels file (1) and checks that they
/// belong together: both headers first, then the data.
inline image_set read_image_set(inflating_reader& images, inflating_reader& labels, const idx_limits& limits = {}) {
  const std::vector<std::uint32_t> im = read_idx_header(images, 3, limits);
  const std::vector<std::uint32_t> lb = read_idx_header(labels, 1, limits);
  if (im[0] != lb[0])
    throw data_error(images.name() + " has " + std::to_string(im[0]) + " images but " + labels.name() + " has " +
                     std::to_string(lb[0]) + " labels");
  image_set s;
  s.n = im[0];
  s.rows = im[1];
  s.cols = im[2];
  s.pixels = read_idx_data(images, im);
  s.labels = read_idx_data(labels, lb);
  for (std::uint8_t l : s.labels)
    if (l > 9) throw data_error(labels.name() + ": label " + std::to_string(l) + " is not in [0, 9]");
  return s;
}

/// read_image_set on two files (plain or .gz).
inline image_set read_image_set(const std::string& images_path, const std::string& labels_path,
                                const idx_limits& limits = {}) {
  inflating_reader images(byte_source::file(images_path), images_path);
  inflating_reader labels(byte_source::file(labels_path), labels_path);
  return read_image_set(images, labels, limits);
}

}  // namespace train
