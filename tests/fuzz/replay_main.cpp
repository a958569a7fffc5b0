// SPDX-License-Identifier: MIT
//
// Runs a libFuzzer target's LLVMFuzzerTestOneInput once on every file of the
// directories (or files) given, without libFuzzer: the committed corpus of each
// target is a regression test of every build (g++, clang++, ASan + UBSan), where
// a broken property aborts.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

int run_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz replay: cannot read %s\n", path.string().c_str());
    return 1;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <corpus directory or file>...\n", argv[0]);
    return 2;
  }
  int failures = 0;
  std::size_t count = 0;
  for (int a = 1; a < argc; ++a) {
    const std::filesystem::path p(argv[a]);
    if (std::filesystem::is_directory(p)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(p))
        if (entry.is_regular_file()) files.push_back(entry.path());
      if (files.empty()) {
        std::fprintf(stderr, "fuzz replay: %s holds no inputs\n", argv[a]);
        ++failures;
      }
      for (const auto& f : files) failures += run_file(f), ++count;
    } else {
      failures += run_file(p);
      ++count;
    }
  }
  std::printf("fuzz replay: %zu inputs, %d unreadable\n", count, failures);
  return failures == 0 ? 0 : 1;
}
