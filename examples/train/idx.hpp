// SPDX-License-Identifier: MIT
#pragma once

// Reading IDX files (the format of MNIST and Fashion-MNIST), plain or
// gzip-compressed, with errors that say what is wrong instead of crashing.

#include <zlib.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace train {

/// A file that cannot be used, with a message naming the file and the problem.
struct data_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// An IDX array of unsigned bytes: its dimensions and its data.
struct idx_array {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;
};

/// Reads a whole file, inflating it when it is gzip-compressed (zlib reads both).
inline std::vector<std::uint8_t> read_maybe_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw data_error(path + ": cannot open");
  std::vector<std::uint8_t> out;
  std::uint8_t buf[1 << 16];
  for (;;) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int errnum = 0;
      const std::string msg = gzerror(f, &errnum);
      gzclose(f);
      throw data_error(path + ": corrupt or truncated gzip data (" + msg + ")");
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  // gzread reports a truncated gzip stream only through gzerror after EOF.
  int errnum = 0;
  const char* msg = gzerror(f, &errnum);
  if (errnum != Z_OK && errnum != Z_STREAM_END) {
    const std::string m = msg ? msg : "unknown error";
    gzclose(f);
    throw data_error(path + ": corrupt or truncated gzip data (" + m + ")");
  }
  if (gzclose(f) != Z_OK) throw data_error(path + ": corrupt or truncated gzip data");
  return out;
}

/// Parses an IDX array of unsigned bytes (type code 0x08) with the expected number of dimensions.
inline idx_array parse_idx(const std::vector<std::uint8_t>& bytes, int expected_dims, const std::string& path) {
  if (bytes.size() < 4) throw data_error(path + ": too short for an IDX header (" + std::to_string(bytes.size()) + " bytes)");
  if (bytes[0] != 0 || bytes[1] != 0) throw data_error(path + ": wrong magic number (not an IDX file)");
  if (bytes[2] != 0x08) throw data_error(path + ": IDX element type " + std::to_string(bytes[2]) + " is not unsigned byte (8)");
  const int ndims = bytes[3];
  if (ndims != expected_dims)
    throw data_error(path + ": has " + std::to_string(ndims) + " dimensions, expected " + std::to_string(expected_dims));
  if (bytes.size() < 4 + 4 * static_cast<std::size_t>(ndims)) throw data_error(path + ": truncated IDX header");
  idx_array a;
  std::uint64_t count = 1;
  for (int i = 0; i < ndims; ++i) {
    const std::uint8_t* p = bytes.data() + 4 + 4 * i;
    const std::uint32_t d = (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | p[3];
    if (d == 0) throw data_error(path + ": dimension " + std::to_string(i) + " is zero");
    a.dims.push_back(d);
    count *= d;
    if (count > (std::uint64_t(1) << 34)) throw data_error(path + ": implausibly large dimensions");
  }
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndims);
  if (bytes.size() - header != count)
    throw data_error(path + ": truncated or oversized: expected " + std::to_string(count) + " data bytes, found " +
                     std::to_string(bytes.size() - header));
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

/// Reads one IDX file (plain or .gz).
inline idx_array read_idx(const std::string& path, int expected_dims) {
  return parse_idx(read_maybe_gzip(path), expected_dims, path);
}

/// A labelled image set: n images of rows x cols bytes, n labels in [0, 10).
struct image_set {
  std::size_t n = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // n * rows * cols
  std::vector<std::uint8_t> labels;  // n
};

/// Reads an images file and a labels file and checks that they belong together.
inline image_set read_image_set(const std::string& images_path, const std::string& labels_path) {
  idx_array im = read_idx(images_path, 3);
  idx_array lb = read_idx(labels_path, 1);
  if (im.dims[0] != lb.dims[0])
    throw data_error(images_path + " has " + std::to_string(im.dims[0]) + " images but " + labels_path + " has " +
                     std::to_string(lb.dims[0]) + " labels");
  for (std::uint8_t l : lb.data)
    if (l > 9) throw data_error(labels_path + ": label " + std::to_string(l) + " is not in [0, 9]");
  image_set s;
  s.n = im.dims[0];
  s.rows = im.dims[1];
  s.cols = im.dims[2];
  s.pixels = std::move(im.data);
  s.labels = std::move(lb.data);
  return s;
}

}  // namespace train
