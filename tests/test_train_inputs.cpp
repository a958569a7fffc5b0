// SPDX-License-Identifier: MIT
// cpd-train's inputs and outputs beyond their contents (issue 30): files compared by identity
// (--csv, --plot, the data, a policy file: the same file under two spellings, a symlink or a
// hard link is refused), inputs that are not regular files or are too large (a FIFO, /dev/zero,
// a directory: refused without blocking or reading them), a gnuplot that never exits (killed
// after CPD_GNUPLOT_TIMEOUT seconds), a policy's phases in epochs and in steps (ordered by the
// real steps of an epoch), user text in messages (control bytes and NUL escaped), and what
// MPI ranks must agree on (every flag of --help changes the computation and is agreed on, or
// may differ; test_train_mpi runs the ranks).

#include "../examples/train/agreement.hpp"
#include "../examples/train/cli.hpp"
#include "../examples/train/files.hpp"
#include "../examples/train/usage.hpp"
#include "train_flag_variants.hpp"
#include "train_test_support.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace train_test;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// Tiny runs: 128 images, 2 steps.
const std::string quick = "--epochs 1 --batch 64 --workers 2 --hidden 8 --grad-formats fp32 --aps off --train-limit 128";

/// A fresh directory under the test's scratch directory.
std::string fresh_dir(const std::string& name) {
  const std::string d = temp_dir() + "/" + name;
  REQUIRE(std::system(("rm -rf " + d + " && mkdir -p " + d).c_str()) == 0);
  return d;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

/// An executable shell script at path.
void write_script(const std::string& path, const std::string& body) {
  write_text(path, "#!/bin/sh\n" + body);
  REQUIRE(::chmod(path.c_str(), 0755) == 0);
}

/// A bound on every run here: a regression that hangs fails (status 124) instead of hanging CI.
const std::string bounded = "timeout -k 5 60";

}  // namespace

TEST_CASE("outputs and inputs are compared by identity, not by spelling") {
  const std::string d = fresh_dir("identity");
  const std::string data = "--data " + data_dir() + " " + quick;
  struct same {
    const char* what;
    std::string args;
  };
  write_text(d + "/existing", "keep\n");
  REQUIRE(::link((d + "/existing").c_str(), (d + "/hardlink").c_str()) == 0);
  REQUIRE(::symlink("target", (d + "/dangling").c_str()) == 0);
  const same cases[] = {
      {"relative and ./relative", "--csv r --plot ./r"},
      {"absolute and relative", "--csv " + d + "/r --plot r"},
      {"a dangling symlink and its target", "--csv dangling --plot target"},
      {"through a directory's ..", "--csv ../identity/r --plot r"},
      {"two hard links of one file", "--csv existing --plot hardlink"},
  };
  for (const same& c : cases) {
    CAPTURE(c.what);
    const run_output r = run_with("cd " + d + " && " + bounded, data + " " + c.args);
    CHECK(r.status == 2);
    CHECK(contains(r.out, "cpd-train: --csv and --plot name the same file"));
    CHECK(!contains(r.out, "weights-hash"));
  }
  CHECK(read_text(d + "/existing") == "keep\n");  // neither output opened
  struct stat st {};
  CHECK(::stat((d + "/r").c_str(), &st) != 0);

  // An output that is an input: a data file, the policy file. The input is left as it was.
  const std::string copy = fresh_dir("identity-data");
  REQUIRE(std::system(("cp " + data_dir() + "/* " + copy).c_str()) == 0);
  const std::string images = read_text(copy + "/train-images-idx3-ubyte.gz");
  const run_output onto_data = run_with(bounded, "--data " + copy + " " + quick + " --csv " + copy +
                                                     "/../identity-data/train-images-idx3-ubyte.gz");
  CHECK(onto_data.status == 2);
  CHECK(contains(onto_data.out, "cpd-train: --csv " + copy + "/../identity-data/train-images-idx3-ubyte.gz is the "
                                "data file " + copy + "/train-images-idx3-ubyte.gz"));
  CHECK(read_text(copy + "/train-images-idx3-ubyte.gz") == images);
  write_text(d + "/policy", "from step 1 e4m3\n");
  const run_output onto_policy = run_with("cd " + d + " && " + bounded, data + " --policy @policy --plot ./policy");
  CHECK(onto_policy.status == 2);
  CHECK(contains(onto_policy.out, "cpd-train: --plot ./policy is the --policy file policy"));
  CHECK(read_text(d + "/policy") == "from step 1 e4m3\n");
}

TEST_CASE("inputs that are not regular files, or too large, are refused without blocking") {
  const std::string d = fresh_dir("special");
  REQUIRE(::mkfifo((d + "/fifo").c_str(), 0600) == 0);
  const std::string data = "--data " + data_dir() + " " + quick;
  struct bad {
    std::string prefix, args, message;
    int status;
  };
  write_text(d + "/big", std::string((1 << 20) + 1, ' '));
  const bad cases[] = {
      // read until memory ran out, and then blamed --workers
      {"ulimit -v 400000;", "--policy @/dev/zero", "--policy: /dev/zero: not a regular file (a character device)", 2},
      {"", "--policy @" + d + "/fifo", "--policy: " + d + "/fifo: not a regular file (a FIFO)", 2},
      {"", "--policy @" + d, "--policy: " + d + ": not a regular file (a directory)", 2},
      {"", "--policy @" + d + "/big", "--policy: " + d + "/big: larger than 1 MiB, the most read from this file", 2},
  };
  for (const bad& b : cases) {
    CAPTURE(b.args);
    const run_output r = run_with(b.prefix + bounded, data + " " + b.args);
    CHECK(r.status == b.status);
    CHECK(r.out == "cpd-train: " + b.message + "\n");
  }
  // A FIFO among the data files blocked forever.
  const std::string fifo_data = fresh_dir("fifo-data");
  REQUIRE(std::system(("cp " + data_dir() + "/* " + fifo_data).c_str()) == 0);
  ::unlink((fifo_data + "/train-labels-idx1-ubyte.gz").c_str());
  REQUIRE(::mkfifo((fifo_data + "/train-labels-idx1-ubyte.gz").c_str(), 0600) == 0);
  const run_output fifo = run_with(bounded, "--data " + fifo_data + " " + quick);
  CHECK(fifo.status == 1);
  CHECK(fifo.out == "cpd-train: " + fifo_data + "/train-labels-idx1-ubyte.gz: not a regular file (a FIFO)\n");
}

TEST_CASE("--plot: a gnuplot that never exits is killed after CPD_GNUPLOT_TIMEOUT seconds") {
  const std::string d = fresh_dir("gnuplot");
  REQUIRE(std::system(("mkdir -p " + d + "/sleeps " + d + "/floods " + d + "/fails").c_str()) == 0);
  // A child that sleeps (the whole group must be killed), and no hold on our standard error.
  const std::string nap = "sleep 599." + std::to_string(::getpid());
  write_script(d + "/sleeps/gnuplot", "exec 2>/dev/null\n" + nap + "\n");
  write_script(d + "/floods/gnuplot", "cat >/dev/null\nexec cat /dev/zero\n");
  write_script(d + "/fails/gnuplot", "cat >/dev/null\nexit 3\n");
  const std::string data = "--data " + data_dir() + " " + quick;

  const auto t0 = std::chrono::steady_clock::now();
  const run_output sleeps =
      run_with("PATH=" + d + "/sleeps:$PATH CPD_GNUPLOT_TIMEOUT=1 " + bounded, data + " --plot " + d + "/a.png");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(sleeps.status == 1);
  CHECK(contains(sleeps.out, "cpd-train: --plot " + d + "/a.png: gnuplot did not finish within 1 s (killed); no "
                             "plot written\n"));
  CHECK(seconds < 30);
  // its child too ("[s]": pgrep must not find the shell that runs it)
  CHECK(std::system(("pgrep -f '[s]" + nap.substr(1) + "' >/dev/null").c_str()) != 0);

  const run_output floods =
      run_with("ulimit -v 2000000; PATH=" + d + "/floods:$PATH " + bounded, data + " --plot " + d + "/b.png");
  CHECK(floods.status == 1);
  CHECK(contains(floods.out, "cpd-train: --plot " + d + "/b.png: gnuplot wrote more than 64 MiB (killed); no plot "
                             "written\n"));

  for (const char* bad : {"0", "abc", "-1", "1e9", ""}) {
    CAPTURE(bad);
    const run_output r = run_with("PATH=" + d + "/fails:$PATH CPD_GNUPLOT_TIMEOUT='" + std::string(bad) + "' " +
                                      bounded,
                                  data + " --plot " + d + "/c.png");
    CHECK(r.status == 2);
    CHECK(r.out == "cpd-train: CPD_GNUPLOT_TIMEOUT: '" + std::string(bad) +
                       "' is not a number of seconds in (0, 86400]\n");  // before training
  }
}

TEST_CASE("--policy: phases in epochs and in steps are ordered by the real steps of an epoch") {
  // 1024 images in batches of 64: 16 steps an epoch, so epoch 1 is step 16.
  const std::string data = "--data " + data_dir() + " --epochs 2 --batch 64 --workers 2 --hidden 8 --aps off "
                           "--train-limit 1024 --grad-formats fp32";
  const run_output late = run_with(bounded, data + " --policy 'from epoch 1 e4m3; from step 5 e5m2'");
  CHECK(late.status == 2);
  CHECK(late.out == "cpd-train: --policy: 'from step 5 e5m2' (step 5) is not after 'from epoch 1 e4m3' (step 16): "
                    "phases must come in increasing order of their steps (16 steps an epoch)\n");
  const run_output ordered = run_with(bounded, data + " --policy 'from step 5 e5m2; from epoch 1 e4m3'");
  CHECK(ordered.status == 0);
  CHECK(hashes(ordered.out).size() == 1);
  const run_output steps = run_with(bounded, data + " --policy 'from step 9 e5m2; from step 5 e4m3'");
  CHECK(steps.status == 2);  // known from the command line: before the data is read
  CHECK(steps.out == "cpd-train: --policy: 'from step 5 e4m3' (step 5) is not after 'from step 9 e5m2' (step 9): "
                     "phases must come in increasing order of their steps\n");
}

TEST_CASE("user text in messages: control bytes and NUL escaped, nothing after a NUL lost") {
  const std::string d = fresh_dir("text");
  const std::string data = "--data " + data_dir() + " " + quick;
  const char nul_rule[] = "tensors 0 e4m3\0zz after the NUL\n";
  write_text(d + "/nul", std::string(nul_rule, sizeof nul_rule - 1));
  const run_output nul = run_with(bounded, data + " --policy @" + d + "/nul");
  CHECK(nul.status == 2);
  CHECK(nul.out == "cpd-train: --policy: 'tensors 0 e4m3\\x00zz after the NUL': tensors I[,I...] FORMAT [scaler S] "
                   "[algorithm A]\n");
  write_text(d + "/escape", "tensors 0 e4m3\x1b[31mred\n");
  const run_output esc = run_with(bounded, data + " --policy @" + d + "/escape");
  CHECK(esc.status == 2);
  CHECK(contains(esc.out, "'tensors 0 e4m3\\x1b[31mred'"));
  CHECK(!contains(esc.out, "\x1b"));
  // flag values and unknown flags from the command line
  const run_output lr = run_with(bounded, data + " --lr \"$(printf '0.1\\033[2J')\"");
  CHECK(lr.status == 2);
  CHECK(lr.out == "cpd-train: --lr: '0.1\\x1b[2J' is not a number\n");
  const run_output flag = run_with(bounded, data + " \"$(printf -- '--x\\ny')\"");
  CHECK(flag.status == 2);
  CHECK(flag.out == "cpd-train: unknown option '--x\\x0ay' (see --help)\n");
  // A policy file's rules are printed one a line apart by "; ", without its control bytes.
  write_text(d + "/lines", "tensors 0 e4m3\r\n\tfrom step 1   e5m2\n\n");
  const run_output lines = run_with(bounded, data + " --policy @" + d + "/lines");
  CHECK(lines.status == 0);
  CHECK(contains(lines.out, "\nprecision policy (+policy runs): tensors 0 e4m3; from step 1 e5m2\n"));
}

namespace {

/// train::parse of these arguments (as argv), which must succeed.
train::options parse_args(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"cpd-train"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  const std::optional<train::options> o = train::parse(static_cast<int>(argv.size()), argv.data());
  REQUIRE(o.has_value());
  return *o;
}

bool same_value(const train::agreed_option& a, const train::agreed_option& b) {
  return a.how == b.how && a.integer == b.integer && a.real == b.real && a.text == b.text;
}

}  // namespace

TEST_CASE("MPI ranks agree on every flag that changes the computation; the others are listed") {
  const std::vector<std::string>& local = train::local_flags();
  const std::vector<flag_variant>& variants = flag_variants(temp_dir() + "/other-data");
  for (const std::string& flag : help_flags(train::usage_text())) {
    CAPTURE(flag);
    const bool is_local = std::find(local.begin(), local.end(), flag) != local.end();
    const auto v = std::find_if(variants.begin(), variants.end(), [&](const flag_variant& x) { return x.flag == flag; });
    REQUIRE_MESSAGE(is_local != (v != variants.end()),
                    "every flag of --help either changes the computation (add it to train::agreement() in "
                    "examples/train/agreement.hpp and to tests/train_flag_variants.hpp) or may differ between "
                    "ranks (train::local_flags()), not both");
    if (is_local || flag == "--data") continue;  // (the data is agreed on by its contents: test_train_mpi)
    const std::vector<train::agreed_option> a = train::agreement(parse_args(variant_args(*v, false, "d")));
    const std::vector<train::agreed_option> b = train::agreement(parse_args(variant_args(*v, true, "d")));
    REQUIRE(a.size() == b.size());
    std::vector<std::string> differ;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!same_value(a[i], b[i])) differ.push_back(a[i].flags);
    CAPTURE(differ);
    REQUIRE(!differ.empty());
    for (const std::string& d : differ) CHECK(contains(d, flag));
  }
  // every agreed option is named by flags of --help, so a mismatch message names a flag
  const std::vector<std::string> help = help_flags(train::usage_text());
  for (const train::agreed_option& a : train::agreement(parse_args({}))) {
    CAPTURE(a.flags);
    CHECK(std::any_of(help.begin(), help.end(), [&](const std::string& f) { return a.flags.rfind(f, 0) == 0; }));
  }
}
