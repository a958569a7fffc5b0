// SPDX-License-Identifier: MIT
// cpd's side of the cross-check against ml_dtypes (tests/ml_dtypes/check_ml_dtypes.py):
//   cpd_dump DIR
// reads DIR/inputs.f32 and DIR/inputs.f64 (raw little-endian arrays) and writes, for
// every format ml_dtypes also has, DIR/NAME.decode.f32 (the value of every code,
// 0 .. 2^bits - 1), DIR/NAME.encode_f32.u8|u16 and DIR/NAME.encode_f64.u8|u16 (the
// code of each input, nearest-even, overflow::infinity: the defaults of cpd's bulk
// calls). The script computes the same with ml_dtypes and compares; the two share
// no code. Exit 2 on bad use, 1 when a file cannot be read or written.

#include <cpd/cpd.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

template <class T>
bool read_all(const std::string& path, std::vector<T>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  out.resize(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return true;
}

template <class T>
bool write_all(const std::string& path, const std::vector<T>& v) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  return static_cast<bool>(out);
}

template <class F>
bool dump(const std::string& dir, const char* name, const std::vector<float>& x32, const std::vector<double>& x64) {
  using code = typename F::storage_type;
  const char* ext = sizeof(code) == 1 ? ".u8" : ".u16";
  std::vector<code> codes(std::size_t(1) << F::spec.bits);
  for (std::size_t c = 0; c < codes.size(); ++c) codes[c] = static_cast<code>(c);
  std::vector<float> values(codes.size());
  cpd::decode<F>(codes.data(), values.data(), codes.size());
  std::vector<code> e32(x32.size()), e64(x64.size());
  cpd::encode<F>(x32.data(), e32.data(), x32.size());
  cpd::encode<F>(x64.data(), e64.data(), x64.size());
  return write_all(dir + "/" + name + ".decode.f32", values) &&
         write_all(dir + "/" + name + ".encode_f32" + ext, e32) &&
         write_all(dir + "/" + name + ".encode_f64" + ext, e64);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR (with DIR/inputs.f32 and DIR/inputs.f64)\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::vector<float> x32;
  std::vector<double> x64;
  if (!read_all(dir + "/inputs.f32", x32) || !read_all(dir + "/inputs.f64", x64)) {
    std::fprintf(stderr, "cpd_dump: cannot read %s/inputs.f32 and %s/inputs.f64\n", dir.c_str(), dir.c_str());
    return 1;
  }
  const bool ok = dump<cpd::float8_e4m3fn>(dir, "float8_e4m3fn", x32, x64) &&
                  dump<cpd::float8_e4m3>(dir, "float8_e4m3", x32, x64) &&
                  dump<cpd::float8_e5m2>(dir, "float8_e5m2", x32, x64) &&
                  dump<cpd::float8_e4m3fnuz>(dir, "float8_e4m3fnuz", x32, x64) &&
                  dump<cpd::float8_e5m2fnuz>(dir, "float8_e5m2fnuz", x32, x64) &&
                  dump<cpd::float8_e4m3b11fnuz>(dir, "float8_e4m3b11fnuz", x32, x64) &&
                  dump<cpd::float8_e3m4>(dir, "float8_e3m4", x32, x64) &&
                  dump<cpd::float8_e8m0fnu>(dir, "float8_e8m0fnu", x32, x64) &&
                  dump<cpd::float6_e3m2fn>(dir, "float6_e3m2fn", x32, x64) &&
                  dump<cpd::float6_e2m3fn>(dir, "float6_e2m3fn", x32, x64) &&
                  dump<cpd::float4_e2m1fn>(dir, "float4_e2m1fn", x32, x64) &&
                  dump<cpd::bfloat16>(dir, "bfloat16", x32, x64) && dump<cpd::float16>(dir, "float16", x32, x64);
  if (!ok) {
    std::fprintf(stderr, "cpd_dump: cannot write into %s\n", dir.c_str());
    return 1;
  }
  std::printf("cpd_dump: %zu float and %zu double inputs, 13 formats, written to %s\n", x32.size(), x64.size(),
              dir.c_str());
  return 0;
}
