// SPDX-License-Identifier: MIT
#pragma once

// What the tests of cpd-train share: a temporary directory, IDX and gzip files
// written on the spot (a learnable synthetic data set among them), and running
// the cpd-train executable through the shell to read its output and exit status.

#include "../examples/train/cli.hpp"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef CPD_TRAIN_EXE
#error "CPD_TRAIN_EXE must name the cpd-train executable"
#endif

namespace train_test {

/// This process's scratch directory, removed with everything in it when the process exits
/// (CPD_KEEP_TEST_FILES=1 keeps it, for looking at what a failed test wrote).
inline std::string temp_dir() {
  struct scratch {
    std::string path;
    scratch() {
      char tmpl[] = "/tmp/cpd-train-test-XXXXXX";
      const char* d = mkdtemp(tmpl);
      REQUIRE(d != nullptr);
      path = d;
    }
    ~scratch() {
      const char* keep = std::getenv("CPD_KEEP_TEST_FILES");
      std::error_code ec;
      if (!(keep && std::string(keep) == "1")) std::filesystem::remove_all(path, ec);
    }
  };
  static const scratch dir;
  return dir.path;
}

inline std::vector<std::uint8_t> idx_bytes(const std::vector<std::uint32_t>& dims,
                                           const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> b = {0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
  for (std::uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(d >> s));
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

inline void write_plain(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_gzip(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  gzclose(f);
}

/// A learnable synthetic set: class c lights up a band of rows around 2c, plus noise.
inline void write_synthetic(const std::string& dir, const std::string& prefix, std::size_t n, std::uint32_t seed) {
  std::vector<std::uint8_t> pixels(n * 28 * 28), labels(n);
  std::uint32_t s = seed;
  auto next = [&] { return s = s * 1664525u + 1013904223u; };
  for (std::size_t i = 0; i < n; ++i) {
    const int c = static_cast<int>(next() >> 28) % 10;
    labels[i] = static_cast<std::uint8_t>(c);
    for (int r = 0; r < 28; ++r)
      for (int k = 0; k < 28; ++k) {
        const bool on = r >= 2 * c + 2 && r < 2 * c + 6;
        pixels[i * 784 + r * 28 + k] = static_cast<std::uint8_t>((on ? 160 : 0) + (next() >> 27));
      }
  }
  write_gzip(dir + "/" + prefix + "-images-idx3-ubyte.gz", idx_bytes({static_cast<std::uint32_t>(n), 28, 28}, pixels));
  write_gzip(dir + "/" + prefix + "-labels-idx1-ubyte.gz", idx_bytes({static_cast<std::uint32_t>(n)}, labels));
}

struct run_output {
  int status = 0;
  std::string out;
};

/// s as one word of sh: in single quotes, each ' written '\''.
inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs `<prefix> cpd-train --no-progress <args> <redirect>` in sh (prefix: e.g. "ulimit -v N;"
/// or "cd DIR &&" or "PATH=... "); what it writes to the pipe (stdout and stderr by default).
inline run_output run_with(const std::string& prefix, const std::string& args, const std::string& redirect = "2>&1") {
  const std::string cmd = prefix + " " + CPD_TRAIN_EXE + " --no-progress " + args + " " + redirect;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  run_output r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) r.out += buf;
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

inline run_output run(const std::string& args) { return run_with("", args); }

/// The bytes of one gzip member holding `bytes` (members concatenate into one gzip stream).
inline std::vector<std::uint8_t> gzip_member(const std::vector<std::uint8_t>& bytes) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY) == Z_OK);
  std::vector<std::uint8_t> out(deflateBound(&z, static_cast<uLong>(bytes.size())));
  z.next_in = const_cast<Bytef*>(bytes.data());
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

inline std::vector<std::string> hashes(const std::string& out) {
  std::vector<std::string> h;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("weights-hash: ", 0) == 0) h.push_back(line.substr(14, 16));
  return h;
}

/// The rows of a CSV file written by --csv, split at the commas (header checked, not returned).
inline std::vector<std::vector<std::string>> csv_rows(const std::string& csv) {
  std::ifstream f(csv);
  std::string line;
  std::getline(f, line);
  CHECK(line == "run,grad_format,aps,epoch,train_loss,test_accuracy");
  std::vector<std::vector<std::string>> rows;
  while (std::getline(f, line)) rows.push_back(train::split(line, ','));
  return rows;
}

/// train_loss of each epoch of run 1 from a CSV file.
inline std::vector<double> losses(const std::string& csv) {
  std::ifstream f(csv);
  std::string line;
  std::getline(f, line);
  CHECK(line == "run,grad_format,aps,epoch,train_loss,test_accuracy");
  std::vector<double> l;
  while (std::getline(f, line)) {
    std::vector<std::string> cols = train::split(line, ',');
    REQUIRE(cols.size() == 6);
    if (cols[0] == "1") l.push_back(std::stod(cols[4]));
    const double acc = std::stod(cols[5]);
    CHECK(acc >= 0.0);
    CHECK(acc <= 1.0);
  }
  return l;
}

inline std::string data_dir() {
  static std::string dir = [] {
    const std::string d = temp_dir() + "/data";
    std::system(("mkdir -p " + d).c_str());
    write_synthetic(d, "train", 1536, 1);
    write_synthetic(d, "t10k", 500, 2);
    return d;
  }();
  return dir;
}

}  // namespace train_test
