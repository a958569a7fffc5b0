// SPDX-License-Identifier: MIT
//
// libFuzzer target: cpd::make_codec's names (codec.hpp, codecs/interface.hpp).
// Properties, for every input string:
//   - make_codec returns a codec or throws std::invalid_argument that starts with
//     "cpd::" and names the problem; nothing else escapes (no other exception, no
//     crash, no unbounded allocation: libFuzzer's -rss_limit_mb and -malloc_limit_mb);
//   - an accepted name round-trips: make_codec(c.name()) has the same name(),
//     payload_size() and stochastic();
//   - the two codecs encode the same values to the same payload bytes (with the
//     same key), and decode it to the same floats.

#include "fuzz_check.hpp"

#include <cpd/exchange/codec.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr const char* target = "fuzz_codec_name";

std::unique_ptr<cpd::codec> make(std::string_view input, std::string_view spec, bool must_succeed) {
  try {
    return cpd::make_codec(spec);
  } catch (const std::invalid_argument& e) {
    if (must_succeed)
      cpd_fuzz::fail(target, input, "its name() '" + std::string(spec) + "' is rejected: " + e.what());
    if (std::strncmp(e.what(), "cpd::", 5) != 0)
      cpd_fuzz::fail(target, input, std::string("the error does not say where it comes from: ") + e.what());
    return nullptr;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::unique_ptr<cpd::codec> c = make(input, input, false);
  if (!c) return 0;

  const std::string name = c->name();
  const std::unique_ptr<cpd::codec> d = make(input, name, true);
  if (d->name() != name) cpd_fuzz::fail(target, input, "name() is not stable: '" + name + "' -> '" + d->name() + "'");
  if (d->stochastic() != c->stochastic()) cpd_fuzz::fail(target, input, name + ": stochastic() differs");
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{1} << 40})
    if (d->payload_size(n) != c->payload_size(n))
      cpd_fuzz::fail(target, input, name + ": payload_size(" + std::to_string(n) + ") differs");

  // Same payload and same decoded values, for a small tensor with a few magnitudes.
  constexpr std::size_t n = 37;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = (i % 3 == 0 ? -1.0f : 1.0f) * static_cast<float>(i * i + 1) * 0x1p-8f;
  const std::size_t bytes = c->payload_size(n);
  std::vector<std::uint8_t> pc(bytes + 1, 0xA5), pd(bytes + 1, 0xA5);
  c->encode(x.data(), n, pc.data(), {1, 2});
  d->encode(x.data(), n, pd.data(), {1, 2});
  if (pc != pd) cpd_fuzz::fail(target, input, name + ": the two codecs' payloads differ");
  if (pc[bytes] != 0xA5) cpd_fuzz::fail(target, input, name + ": encode wrote past payload_size(n)");
  std::vector<float> yc(n), yd(n);
  c->decode(pc.data(), n, yc.data());
  d->decode(pd.data(), n, yd.data());
  if (std::memcmp(yc.data(), yd.data(), n * sizeof(float)) != 0)
    cpd_fuzz::fail(target, input, name + ": the two codecs decode differently");
  return 0;
}
