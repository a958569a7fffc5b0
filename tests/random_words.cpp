// SPDX-License-Identifier: MIT
// The words of cpd's generators as raw 32-bit little-endian integers on stdout, for
// statistical batteries that read a stream (Debian's dieharder: `-g 200`, stdin_input_raw;
// docs/random.md, "Quality"):
//
//   random_words [--generator v1|v2] [--seed S] [--stream T] [--layout L] [--count N] | dieharder -a -g 200
//
// layout counters (default): words of counters 0, 1, 2, ... of (seed, stream), the order
//   a bulk call draws them;
// layout streams: streams T .. T + 255 interleaved (word k: stream T + k % 256, counter
//   k / 256), which a battery sees as one stream only if neighbouring streams are unrelated;
// layout seeds: seeds S .. S + 255 interleaved likewise.
// Without --count the words go on until the reader closes the pipe.

#include <cpd/core/names.hpp>
#include <cpd/core/random.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

enum class layout { counters, streams, seeds };

struct args {
  cpd::random_generator generator = cpd::default_generator;
  std::uint64_t seed = 0, stream = 0, count = 0;  // count 0: no end
  layout how = layout::counters;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "random_words: %s\nusage: random_words [--generator v1|v2] [--seed S] [--stream T] "
               "[--layout counters|streams|seeds] [--count N]\n",
               why.c_str());
  std::exit(2);
}

std::uint64_t number(const char* flag, const char* v) {
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 0);
  if (end == v || *end != '\0') usage(std::string(flag) + ": '" + v + "' is not a number");
  return x;
}

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) usage(f + " needs a value");
    const char* v = argv[++i];
    if (f == "--generator") {
      const auto g = cpd::try_from_string<cpd::random_generator>(v);
      if (!g) usage(std::string("--generator: '") + v + "' is not v1 or v2");
      a.generator = *g;
    } else if (f == "--seed") {
      a.seed = number("--seed", v);
    } else if (f == "--stream") {
      a.stream = number("--stream", v);
    } else if (f == "--count") {
      a.count = number("--count", v);
    } else if (f == "--layout") {
      const std::string l = v;
      if (l == "counters") a.how = layout::counters;
      else if (l == "streams") a.how = layout::streams;
      else if (l == "seeds") a.how = layout::seeds;
      else usage("--layout: '" + l + "' is not counters, streams or seeds");
    } else {
      usage("unknown option '" + f + "'");
    }
  }
  return a;
}

/// Word k of the layout.
std::uint32_t word(const args& a, std::uint64_t k) {
  switch (a.how) {
    case layout::streams: return cpd::random_bits(a.seed, a.stream + k % 256, k / 256, a.generator);
    case layout::seeds: return cpd::random_bits(a.seed + k % 256, a.stream, k / 256, a.generator);
    case layout::counters: break;
  }
  return cpd::random_bits(a.seed, a.stream, k, a.generator);
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);
  constexpr std::size_t block = 1 << 14;
  static unsigned char buf[4 * block];
  for (std::uint64_t k = 0; a.count == 0 || k < a.count;) {
    const std::uint64_t left = a.count == 0 ? block : a.count - k;
    const std::size_t m = left < block ? static_cast<std::size_t>(left) : block;
    for (std::size_t j = 0; j < m; ++j) {
      const std::uint32_t w = word(a, k + j);
      for (int b = 0; b < 4; ++b) buf[4 * j + static_cast<std::size_t>(b)] = static_cast<unsigned char>(w >> (8 * b));
    }
    if (std::fwrite(buf, 4, m, stdout) != m) return 0;  // the reader is done
    k += m;
  }
  return 0;
}
