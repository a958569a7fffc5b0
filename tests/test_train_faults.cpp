// SPDX-License-Identifier: MIT
// cpd-train against hostile input and failing output: crafted IDX and gzip files
// (a header that claims more than the file has, absurd dimensions, a truncated
// file, trailing data, /dev/zero behind a symlink (not a regular file), a gzip that
// holds far more than its header says), flags that need more memory than there is (under ulimit -v in
// a child shell), values that cannot train, outputs that cannot be written
// (/dev/full, a missing directory), a --plot path made to inject a shell command,
// a gnuplot that fails or is missing, and runs that diverge. Each must give one
// clear line and the documented exit status (cli.hpp: 1 failure, 2 usage, 3 diverged).

#include "../examples/train/cli.hpp"
#include "../examples/train/exchange.hpp"
#include "../examples/train/idx.hpp"
#include "train_test_support.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

using namespace train_test;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// The message of the data_error that reading this image set throws, or "".
std::string read_error(const std::string& images, const std::string& labels, const train::idx_limits& lim = {}) {
  try {
    (void)train::read_image_set(images, labels, lim);
  } catch (const train::data_error& e) {
    return e.what();
  }
  return "";
}

/// The message of the data_error that parse_idx throws on these bytes, or "".
std::string parse_error(const std::vector<std::uint8_t>& bytes, int dims, const train::idx_limits& lim = {}) {
  try {
    (void)train::parse_idx(bytes.data(), bytes.size(), dims, lim);
  } catch (const train::data_error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::uint8_t> cat(std::vector<std::uint8_t> a, const std::vector<std::uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// A gzip file: the IDX header of dims, then `mib` MiB of zeros as one gzip member per MiB
/// (a few hundred bytes each: a file of 1 KB per MiB it holds).
void write_zero_gzip(const std::string& path, const std::vector<std::uint32_t>& dims, std::size_t mib) {
  std::vector<std::uint8_t> file = gzip_member(idx_bytes(dims, {}));
  const std::vector<std::uint8_t> zeros = gzip_member(std::vector<std::uint8_t>(1 << 20, 0));
  for (std::size_t i = 0; i < mib; ++i) file.insert(file.end(), zeros.begin(), zeros.end());
  write_plain(path, file);
}

/// A data directory with the synthetic t10k files and a train-labels file announcing `labels`
/// labels (none there past 16): the test puts in the training images.
std::string data_dir_for(const std::string& name, std::uint32_t labels) {
  const std::string d = temp_dir() + "/" + name;
  REQUIRE(std::system(("mkdir -p " + d).c_str()) == 0);
  write_synthetic(d, "t10k", 100, 2);
  const std::vector<std::uint8_t> some(std::min(labels, 16u), 1);
  write_gzip(d + "/train-labels-idx1-ubyte.gz", idx_bytes({labels}, some));
  return d;
}

/// A larger synthetic set: 4096 training images (for --batch 4096).
std::string big_data_dir() {
  static const std::string d = [] {
    const std::string dir = temp_dir() + "/big";
    REQUIRE(std::system(("mkdir -p " + dir).c_str()) == 0);
    write_synthetic(dir, "train", 4096, 3);
    write_synthetic(dir, "t10k", 100, 4);
    return dir;
  }();
  return d;
}

const std::string quick = "--epochs 1 --batch 64 --workers 2 --hidden 8 --grad-formats fp32 --aps off";

}  // namespace

TEST_CASE("IDX reader: the header is checked first and bounds every allocation") {
  const std::string d = temp_dir() + "/idx";
  REQUIRE(std::system(("mkdir -p " + d).c_str()) == 0);
  const std::vector<std::uint8_t> img(3 * 2 * 2, 7), lab = {1, 2, 3};
  write_gzip(d + "/lab.gz", idx_bytes({3}, lab));

  SUBCASE("a gzip whose header claims more than it holds") {
    write_gzip(d + "/claims.gz", idx_bytes({1000, 28, 28}, std::vector<std::uint8_t>(10 * 28 * 28, 1)));
    write_gzip(d + "/lab1000.gz", idx_bytes({1000}, std::vector<std::uint8_t>(1000, 1)));
    const std::string e = read_error(d + "/claims.gz", d + "/lab1000.gz");
    CHECK(contains(e, "claims.gz: truncated: its header announces 784000 data bytes, the file has 7840"));
  }
  SUBCASE("absurd dimensions are refused before any data is read") {
    write_plain(d + "/absurd", idx_bytes({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}, {}));
    CHECK(contains(read_error(d + "/absurd", d + "/lab.gz"), "more than the 1024.0 MiB of data"));
    write_plain(d + "/huge", idx_bytes({100000, 100, 200}, {}));  // 2 GB: over the default limit
    CHECK(contains(read_error(d + "/huge", d + "/lab.gz"), "huge: its header announces more than"));
    write_plain(d + "/zero_dim", idx_bytes({3, 0, 2}, {}));
    CHECK(contains(read_error(d + "/zero_dim", d + "/lab.gz"), "dimension 1 is zero"));
    train::idx_limits small;
    small.max_bytes = 11;  // one byte short of 3 x 2 x 2
    write_plain(d + "/img", idx_bytes({3, 2, 2}, img));
    CHECK(contains(read_error(d + "/img", d + "/lab.gz", small), "more than the 0.0 MiB"));
    small.max_bytes = 12;
    CHECK(read_error(d + "/img", d + "/lab.gz", small).empty());
  }
  SUBCASE("truncated header, truncated data, data after the announced bytes") {
    std::vector<std::uint8_t> b = idx_bytes({3, 2, 2}, img);
    CHECK(contains(parse_error({b.begin(), b.begin() + 9}, 3), "truncated IDX header (5 of 12 bytes)"));
    CHECK(contains(parse_error({b.begin(), b.end() - 1}, 3), "header announces 12 data bytes, the file has 11"));
    CHECK(contains(parse_error(cat(b, {0}), 3), "more data than the 12 bytes its header announces"));
    CHECK(contains(parse_error({0, 0}, 3), "too short for an IDX header (2 bytes)"));
    CHECK(contains(parse_error({}, 3), "too short for an IDX header (0 bytes)"));
  }
  SUBCASE("gzip: members concatenate, anything else after the stream is an error, a cut stream too") {
    const std::vector<std::uint8_t> b = idx_bytes({3, 2, 2}, img);
    const std::vector<std::uint8_t> two =
        cat(gzip_member({b.begin(), b.begin() + 10}), gzip_member({b.begin() + 10, b.end()}));
    const train::idx_array a = train::parse_idx(two.data(), two.size(), 3, {});
    CHECK(a.dims == std::vector<std::uint32_t>{3, 2, 2});
    CHECK(a.data == img);
    CHECK(contains(parse_error(cat(gzip_member(b), {'x', 'y', 'z'}), 3), "data after the end of the gzip stream"));
    const std::vector<std::uint8_t> g = gzip_member(b);
    CHECK(contains(parse_error({g.begin(), g.end() - 4}, 3), "truncated gzip data"));  // no length field
    CHECK(contains(parse_error({g.begin(), g.begin() + 12}, 3), "truncated"));
    std::vector<std::uint8_t> bad_crc = g;
    bad_crc[bad_crc.size() - 6] ^= 0xFF;
    CHECK(contains(parse_error(bad_crc, 3), "corrupt gzip data"));
  }
  SUBCASE("a gzip that holds far more than its header says is not inflated past the announced size") {
    write_zero_gzip(d + "/bomb.gz", {3, 2, 2}, 256);  // 256 MiB of zeros in a 260 KB file
    CHECK(contains(read_error(d + "/bomb.gz", d + "/lab.gz"), "more data than the 12 bytes its header announces"));
  }
  SUBCASE("/dev/zero behind a symlink is refused before it is read (not a regular file)") {
    const std::string link = d + "/zero-link";
    ::unlink(link.c_str());
    REQUIRE(::symlink("/dev/zero", link.c_str()) == 0);
    CHECK(contains(read_error(link, d + "/lab.gz"), "zero-link: not a regular file (a character device)"));
  }
  SUBCASE("in memory, plain or gzip, as from a file") {
    const std::vector<std::uint8_t> b = idx_bytes({3}, lab), g = gzip_member(b);
    CHECK(train::parse_idx(b.data(), b.size(), 1, {}).data == lab);
    CHECK(train::parse_idx(g.data(), g.size(), 1, {}).data == lab);
    CHECK(train::read_idx(d + "/lab.gz", 1).data == lab);
  }
}

TEST_CASE("cpd-train: crafted data files give one line and exit 1, even under ulimit -v") {
  SUBCASE("/dev/zero as the training images") {
    const std::string d = data_dir_for("zero", 10);
    ::unlink((d + "/train-images-idx3-ubyte").c_str());
    REQUIRE(::symlink("/dev/zero", (d + "/train-images-idx3-ubyte").c_str()) == 0);
    const run_output r = run_with("ulimit -v 400000;", "--data " + d + " " + quick);
    CHECK(r.status == 1);
    CHECK(contains(r.out, "train-images-idx3-ubyte: not a regular file (a character device)\n"));
  }
  SUBCASE("a 400 KB gzip holding 400 MiB after a header that announces 10 images") {
    const std::string d = data_dir_for("bomb", 10);
    write_zero_gzip(d + "/train-images-idx3-ubyte.gz", {10, 28, 28}, 400);
    const run_output r = run_with("ulimit -v 300000;", "--data " + d + " " + quick);
    CHECK(r.status == 1);
    CHECK(contains(r.out, "more data than the 7840 bytes its header announces"));
  }
  SUBCASE("a header that announces 4 GiB") {
    const std::string d = data_dir_for("absurd", 65536);
    write_gzip(d + "/train-images-idx3-ubyte.gz", idx_bytes({65536, 256, 256}, {}));
    const run_output r = run_with("ulimit -v 400000;", "--data " + d + " " + quick);
    CHECK(r.status == 1);
    CHECK(contains(r.out, "its header announces more than the 1024.0 MiB of data cpd-train reads from one file"));
  }
  SUBCASE("784 MB that are really there, under a 400 MB limit: out of memory, said so") {
    const std::string d = data_dir_for("oom", 1000000);
    write_zero_gzip(d + "/train-images-idx3-ubyte.gz", {1000000, 28, 28}, 748);  // 784 000 000 bytes
    const run_output r = run_with("ulimit -v 400000;", "--data " + d + " " + quick);
    CHECK(r.status == 1);
    CHECK(contains(r.out, "cpd-train: out of memory while reading the data in " + d + "\n"));
  }
}

TEST_CASE("cpd-train: flags that need more memory than there is are refused with the amount") {
  const std::string data = "--data " + big_data_dir() + " --epochs 1 --grad-formats fp32 --aps off ";
  const run_output a = run_with("ulimit -v 2000000;", data + "--workers 4096 --batch 4096");
  CHECK(a.status == 2);
  CHECK(contains(a.out, "cpd-train: these flags need about 3.6 GiB of memory (MLP 784-256-128-10, 4096 worker"));
  CHECK(contains(a.out, "the address-space limit (ulimit -v) leaves only"));
  const run_output b = run_with("ulimit -v 2000000;", data + "--hidden 65536,65536");
  CHECK(b.status == 2);
  CHECK(contains(b.out, "cpd-train: these flags need about 2"));  // 260.7 GiB
  CHECK(contains(b.out, "MLP 784-65536-65536-10"));
}

TEST_CASE("command line: values that cannot train, and malformed values, are rejected with one line") {
  struct bad {
    const char* args;
    const char* message;
  };
  const bad cases[] = {
      {"--lr nan", "--lr: 'nan' is not a finite number"},
      {"--lr inf", "--lr: 'inf' is not a finite number"},
      {"--lr -0.1", "--lr: -0.1 is not > 0"},
      {"--lr 0", "--lr: 0 is not > 0"},
      {"--lr 1e39", "--lr: 1e39 does not fit a float"},
      {"--lr 1e-50", "--lr: 1e-50 is 0 as a float"},
      {"--lr 0.1x", "--lr: '0.1x' is not a number"},
      {"--lr ' 0.1'", "--lr: ' 0.1' is not a number"},
      {"--momentum nan", "--momentum: 'nan' is not a finite number"},
      {"--momentum -0.5", "--momentum: -0.5 is negative"},
      {"--momentum 1", "--momentum: 1 is not below 1"},
      {"--weight-decay -1", "--weight-decay: -1 is negative"},
      {"--weight-decay inf", "--weight-decay: 'inf' is not a finite number"},
      {"--weights e8m0fnu", "--weights: e8m0fnu has no sign bit (it cannot hold a negative value)"},
      {"--grad-formats e8m0fnu", "--grad-formats: e8m0fnu has no sign bit"},
      {"--threads 99999999999999999999", "--threads: 99999999999999999999 is out of range [0, 1024]"},
      {"--threads 4x", "--threads: '4x' is not an integer"},
      {"--generator v3", "--generator: 'v3' is not v1, v2"},
      {"--threads ''", "--threads: '' is not an integer"},
      {"--hidden ''", "--hidden: empty list"},
      {"--hidden 32,,16", "--hidden: empty item in '32,,16'"},
      {"--hidden 0", "--hidden: 0 is out of range [1, 65536]"},
      {"--aps on,on", "--aps: on twice"},
      {"--aps ''", "--aps: empty list"},
      {"--grad-formats e4m3,e4m3", "--grad-formats: e4m3 twice"},
      {"--grad-formats e4m3fn,float8_e4m3fn", "--grad-formats: float8_e4m3fn is the same format as e4m3fn"},
      {"--codec ''", "--codec: empty list"},
      {"--codec onebit,onebit:512", "--codec: onebit:512 twice"},
      {"--lr 0.1 --lr 0.2", "--lr given twice"},
      {"--error-feedback on", "--error-feedback on without --codec"},
      {"--csv ''", "--csv: empty path"},
      {"--csv /nonexistent/same --plot /nonexistent/same", "--csv and --plot name the same file /nonexistent/same"},
  };
  // Small enough to finish quickly where a value is (wrongly) accepted.
  const std::string base = "--data " + data_dir() + " --train-limit 128 --batch 64 --workers 2 --epochs 1 ";
  for (const bad& b : cases) {
    const std::string args = b.args;
    CAPTURE(args);
    const run_output r = run(base + b.args);
    CHECK(r.status == 2);
    CHECK(r.out.rfind(std::string("cpd-train: ") + b.message, 0) == 0);
    CHECK(r.out.find('\n') == r.out.size() - 1);  // one line
  }
}

TEST_CASE("outputs: opened before training, every write checked") {
  const std::string data = "--data " + data_dir() + " " + quick;
  const run_output full = run(data + " --csv /dev/full");
  CHECK(full.status == 1);
  CHECK(contains(full.out, "cpd-train: --csv /dev/full: write failed (No space left on device)\n"));
  const run_output missing = run(data + " --csv /nonexistent/x.csv");
  CHECK(missing.status == 1);
  CHECK(missing.out == "cpd-train: --csv /nonexistent/x.csv: cannot open for writing (No such file or directory)\n");
  const run_output dir = run(data + " --csv " + temp_dir());
  CHECK(dir.status == 1);
  CHECK(contains(dir.out, "cannot open for writing (Is a directory)"));
  const run_output plot = run(data + " --plot /nonexistent/d/x.png");
  CHECK(plot.status == 1);
  CHECK(!contains(plot.out, "weights-hash"));  // refused before training
  const run_output table = run_with("", data, "2>&1 >/dev/full");  // stdout full; stderr to the pipe
  CHECK(table.status == 1);
  CHECK(contains(table.out, "writing the table to standard output failed (No space left on device)"));
}

TEST_CASE("--plot: gnuplot runs without a shell; its failure or absence is an error") {
  const std::string data = "--data " + data_dir() + " " + quick;
  const std::string dir = temp_dir() + "/plot";
  REQUIRE(std::system(("mkdir -p " + dir + "/fake").c_str()) == 0);
  {
    std::ofstream f(dir + "/fake/gnuplot");
    f << "#!/bin/sh\ncat >/dev/null\necho 'fake gnuplot: failing' >&2\nexit 3\n";
  }
  REQUIRE(::chmod((dir + "/fake/gnuplot").c_str(), 0755) == 0);

  // Missing: refused before training.
  const run_output none = run_with("PATH=" + dir + "/nowhere", data + " --plot " + dir + "/a.png");
  CHECK(none.status == 1);
  CHECK(none.out == "cpd-train: --plot needs gnuplot, which is not on PATH (Debian: apt-get install gnuplot-nox)\n");
  // Failing: said so, exit 1.
  const run_output fails = run_with("PATH=" + dir + "/fake:$PATH", data + " --plot " + dir + "/b.png");
  CHECK(fails.status == 1);
  CHECK(contains(fails.out, "cpd-train: --plot " + dir + "/b.png: gnuplot exited with status 3; no plot written\n"));

  // A path made to inject a command into a shell: written as it is, nothing run.
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    MESSAGE("gnuplot is not installed: the injection test needs it (Debian: gnuplot-nox)");
    return;
  }
  const std::string evil = "x';touch pwned;'.png";
  const run_output r = run_with("cd " + dir + " &&", data + " --plot " + shell_quote(evil));
  CHECK(r.status == 0);
  struct stat st {};
  CHECK(::stat((dir + "/pwned").c_str(), &st) != 0);  // the marker was not created
  std::ifstream png(dir + "/" + evil, std::ios::binary);
  std::string head(8, '\0');
  png.read(head.data(), 8);
  CHECK(head == "\x89PNG\r\n\x1a\n");
}

TEST_CASE("diverged runs are marked in the table, and the exit status says so") {
  const std::string data = "--data " + data_dir() + " --epochs 2 --batch 64 --workers 2 --hidden 8 --aps off";
  const std::string csv = temp_dir() + "/diverged.csv";
  const run_output r = run(data + " --grad-formats fp32,e4m3 --lr 1e30 --csv " + csv);
  CHECK(r.status == 3);
  CHECK(contains(r.out, "final loss"));
  CHECK(contains(r.out, "cpd-train: 2 of 2 runs diverged (a loss or weight became NaN or infinite): fp32 (aps off)"));
  std::size_t marked = 0;
  for (std::size_t p = 0; (p = r.out.find("  diverged\n", p)) != std::string::npos; ++p) ++marked;
  CHECK(marked == 2);
  const std::vector<std::vector<std::string>> rows = csv_rows(csv);  // the CSV is written all the same
  REQUIRE(rows.size() == 4);
  CHECK(rows[1][4] == "nan");

  const run_output ok = run(data + " --grad-formats fp32");
  CHECK(ok.status == 0);
  CHECK(!contains(ok.out, "diverged"));
}

TEST_CASE("values clipped to max in a format without inf count as overflowed") {
  // e2m1fn (OCP FP4: no inf, no NaN, max 6) clips 10 to 6 and -7 to -6: the table's
  // `overflowed` must count them, as it counts values that became inf in formats with inf.
  struct one_thread {
    std::size_t size() const { return 1; }
  };
  const std::vector<train::tensor_view> tensors = {{"g", 0, 1, 4}};
  train::exchanger ex(cpd::format::parse("e2m1fn"), cpd::scaler_kind::none, /*kahan=*/false, 2, tensors);
  std::vector<train::aligned_vector<float>> grads(2, train::aligned_vector<float>(4, 0.0f));
  grads[0] = {10.0f, 0.5f, 0.0f, 1.0f};
  grads[1] = {-7.0f, 0.5f, 0.0f, 1.0f};
  train::aligned_vector<float> mean(4);
  ex.allreduce_mean(grads, mean.data(), /*step=*/0, one_thread{});
  CHECK(ex.stats().count == 8);
  CHECK(ex.stats().overflow == 2);
  CHECK(ex.stats().nonfinite_inputs() == 0);
}
