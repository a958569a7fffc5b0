// SPDX-License-Identifier: MIT
#pragma once

// Function objects over the rounding core for std::transform, thrust::transform
// and CUDA kernels alike: trivially copyable, state by value, a const
// CPD_HOST_DEVICE operator(). Every one calls detail::round_bits (or
// detail::decode_bits), so each backend gives the bits of the scalar core.
// <cpd/device/thrust.hpp> and <cpd/device/cuda.cuh> build their algorithms on these.

#include <cpd/core/config.hpp>
#include <cpd/core/detail/bits.hpp>
#include <cpd/core/detail/round.hpp>
#include <cpd/core/float.hpp>
#include <cpd/core/encoding.hpp>
#include <cpd/core/random.hpp>
#include <cpd/reduce/reduce.hpp>
#include <cpd/core/rounding.hpp>

#include <cstdint>
#include <climits>
#include <tuple>
#include <type_traits>

namespace cpd {

namespace detail {

/// Checks shared by the functors: F is a format, T a source it can be rounded from.
template <class F, class T>
CPD_HOST_DEVICE constexpr void check_functor_source() noexcept {
  static_assert(is_float_format_v<F>, "cpd functors: F must be a cpd::float_t");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "cpd functors: the value must be float or double");
  static_assert(std::is_same_v<T, double> || F::fits_float,
                "cpd functors: from float, every value of F must be a float (E <= 8, M <= 23); use double");
}

/// Checks of the encoders: F is a format, T a source its codes can be computed from.
template <class F, class T>
CPD_HOST_DEVICE constexpr void check_functor_code() noexcept {
  static_assert(is_float_format_v<F>, "cpd encoders: F must be a cpd::float_t");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "cpd encoders: the value must be float or double");
  static_assert(std::is_same_v<T, double> || (F::exponent_bits <= 8 && F::mantissa_bits <= 23),
                "cpd encoders: from float, F needs E <= 8 and M <= 23; encode from double");
}

/// x * 2^k, exact whenever the product is a normal T or zero (k may exceed T's exponent range).
template <class T>
CPD_HOST_DEVICE constexpr T mul_pow2(T x, int k) noexcept {
  constexpr int lim = source<T>::emax;  // 2^lim and 2^-(lim - 1) are normal Ts
  if (k > lim) {
    x *= pow2<T>(lim);
    k -= lim;
    k = k > lim ? lim : k;
  } else if (k < 1 - lim) {
    x *= pow2<T>(1 - lim);
    k -= 1 - lim;
    k = k < 1 - lim ? 1 - lim : k;
  }
  return x * pow2<T>(k);
}

/// F with every value scaled by 2^-k (its bias plus k): rounding x to it gives
/// round(x * 2^k) * 2^-k exactly, whatever k, and the same code as x * 2^k in F.
/// k must keep the format within double's range (format_error says when it does not).
template <class F>
CPD_HOST_DEVICE constexpr spec scaled_spec_of(int k) noexcept {
  constexpr spec s = F::spec;  // a copy: device code may not refer to the host object F::spec
  return k == 0 ? s : make_spec(F::exponent_bits, F::mantissa_bits, F::encoding::kind, F::bias + k);
}

/// Why exponent k cannot scale F, or nullptr.
template <class F>
CPD_HOST_DEVICE constexpr const char* scale_error(int k) noexcept {
  return k < -4096 || k > 4096 ? "the scale exponent is out of range"
                               : format_error(F::exponent_bits, F::mantissa_bits, F::encoding::kind, F::bias + k);
}

/// The value of code c of the runtime spec s as a T (exact when s fits T).
template <class T>
CPD_HOST_DEVICE constexpr T decode_spec(const spec& s, std::uint64_t c) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    if (s.fits_float) return bit_cast<float>(decode_bits<float>(s, c));
    return bit_cast<float>(narrow_bits(decode_bits<double>(s, c)));  // (rounded: not a float format)
  } else {
    return bit_cast<double>(decode_bits<double>(s, c));
  }
}

/// Rounds x to F (unscaled): the value and the code.
template <class F, rounding R, overflow O, class T>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr rounded<T> round_fixed(T x, std::uint32_t rnd = 0,
                                                                   int rbits = 32) noexcept {
  constexpr spec s = F::spec;  // a copy: device code may not refer to the host object F::spec
  return round_bits<R, O, T>(s, bit_cast<uint_of<T>>(x), rnd, rbits);
}

/// 32 random bits keyed by (seed, stream, index) under generator g: cpd's counter-based
/// generator (cpd::random_bits of <cpd/core/random.hpp>), which the host bulk kernels draw from too.
CPD_HOST_DEVICE constexpr std::uint32_t random_bits_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index,
                                                       random_generator g = default_generator) noexcept {
  return cpd::random_bits(seed, stream, index, g);
}


/// get<0> and get<1> of a std::tuple, a thrust::tuple or a zip iterator's reference (found by ADL).
namespace tuple_access {
using std::get;
CPD_EXEC_CHECK_DISABLE
template <class Tuple>
CPD_HOST_DEVICE constexpr auto first(const Tuple& t) noexcept -> decltype(get<0>(t)) {
  return get<0>(t);
}
CPD_EXEC_CHECK_DISABLE
template <class Tuple>
CPD_HOST_DEVICE constexpr auto second(const Tuple& t) noexcept -> decltype(get<1>(t)) {
  return get<1>(t);
}
}  // namespace tuple_access

/// The scale of a converter: none (F itself, a constant)...
template <class F, bool Scaled>
struct converter_scale {
  CPD_HOST_DEVICE constexpr explicit converter_scale(int = 0) noexcept {}
  /// Always 0: no scale.
  [[nodiscard]] CPD_HOST_DEVICE static constexpr int exponent() noexcept { return 0; }
};
/// ... or 2^exponent, held as F with every value scaled by 2^-exponent (scaled_spec_of).
template <class F>
struct converter_scale<F, true> {
  CPD_HOST_DEVICE constexpr explicit converter_scale(int exponent = 0) noexcept
      : exponent_(exponent), spec_(scaled_spec_of<F>(exponent)) {}
  /// Values are multiplied by 2^exponent() before rounding, by 2^-exponent() after (quantize, decode).
  [[nodiscard]] CPD_HOST_DEVICE constexpr int exponent() const noexcept { return exponent_; }

 protected:
  int exponent_;
  spec spec_;
};

/// The random key of a converter: none...
template <bool Random>
struct converter_key {
  CPD_HOST_DEVICE constexpr explicit converter_key(std::uint64_t = 0, std::uint64_t = 0, int = 32,
                                                   random_generator = default_generator) noexcept {}
};
/// ... or cpd's generator keyed by (seed, stream, generator), and how many of its bits decide.
template <>
struct converter_key<true> : random_stream {
  int random_bits = 32;  ///< how many random bits decide (1..32)
  CPD_HOST_DEVICE constexpr explicit converter_key(std::uint64_t key_seed = 0, std::uint64_t key_stream = 0,
                                                   int bits = 32, random_generator g = default_generator) noexcept
      : random_stream{key_seed, key_stream, g}, random_bits(bits) {}
};

/// The type of a parameter that no argument converts to: an overload taking it is never
/// chosen, so a converter has exactly the call signatures of its operation.
template <int K>
class no_argument {
  no_argument() {}
};

}  // namespace detail

/// What a converter does: round to F and give the value (quantize) or the code (encode),
/// or give the value of a code (decode).
enum class conversion { quantize, encode, decode };

/// The one function object behind every functor, Thrust algorithm and CUDA kernel of cpd
/// (CUTLASS's NumericConverter is the model): Op applied with F, mode R and overflow O,
/// under a power-of-two scale when Scaled, with stochastic rounding keyed by (seed, stream,
/// element index) when Random (exactly when R is stochastic). T is what decode gives.
/// Trivially copyable, state by value, const CPD_HOST_DEVICE operator(), and nothing but
/// the rounding core inside. The names of the matrix below (quantizer, scaled_encoder,
/// stochastic_quantizer...) are aliases of it.
///
/// Calls: quantize and encode take a float or a double (two non-template overloads, so that
/// a proxy reference such as thrust::device_reference<float> converts to its value), or,
/// when Random, (x, i) or a tuple (x, i) from a zip of the data and a counting iterator;
/// decode takes a code.
template <conversion Op, class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity,
          bool Scaled = false, bool Random = false, class T = float>
class converter : public detail::converter_key<Random>, public detail::converter_scale<F, Scaled> {
  static_assert(is_float_format_v<F>, "cpd::converter: F must be a cpd::float_t");
  static_assert(Random || R != rounding::stochastic,
                "cpd::converter: stochastic rounding needs random bits; use cpd::stochastic_quantizer or "
                "cpd::stochastic_encoder");
  static_assert(!Random || R == rounding::stochastic, "cpd::converter: random bits are for rounding::stochastic only");
  static_assert(!Random || Op != conversion::decode, "cpd::converter: decoding draws no random bits");
  static_assert(Op != conversion::decode || std::is_same_v<T, double> ||
                    (std::is_same_v<T, float> && (Scaled || F::fits_float)),
                "cpd::decoder: T must be double, or float when every value of F is a float");

  using key_base = detail::converter_key<Random>;
  using scale_base = detail::converter_scale<F, Scaled>;
  static constexpr bool rounds = Op != conversion::decode;
  /// V when the condition holds, else a type no argument converts to.
  template <bool Takes, class V, int K>
  using param = std::conditional_t<Takes, V, detail::no_argument<K>>;
  /// What a call on a V gives: V (quantize), the code (encode) or T (decode).
  template <class V>
  using out_t = std::conditional_t<Op == conversion::quantize, V,
                                   std::conditional_t<Op == conversion::encode, typename F::storage_type, T>>;

 public:
  using storage_type = typename F::storage_type;

  /// No scale (2^0), key (0, 0).
  CPD_HOST_DEVICE constexpr converter() noexcept : key_base(), scale_base(0) {}
  /// Scaled: values are multiplied by 2^exponent before rounding (by 2^-exponent after, for
  /// quantize and decode), exactly, whatever the exponent (detail::scale_error says which keep F
  /// within double's range).
  template <bool S = Scaled && !Random, std::enable_if_t<S, int> = 0>
  CPD_HOST_DEVICE constexpr explicit converter(int exponent) noexcept : key_base(), scale_base(exponent) {}
  /// Stochastic: element i draws cpd::random_bits(seed, stream, i, generator), of which `bits` decide.
  template <bool K = Random, std::enable_if_t<K, int> = 0>
  CPD_HOST_DEVICE constexpr explicit converter(std::uint64_t key, std::uint64_t key_stream = 0, int exponent = 0,
                                               int bits = 32, random_generator generator = default_generator) noexcept
      : key_base(key, key_stream, bits, generator), scale_base(exponent) {}

  [[nodiscard]] CPD_HOST_DEVICE constexpr out_t<float> operator()(param<rounds && !Random, float, 0> x) const
      noexcept {
    return apply(x, 0u);
  }
  [[nodiscard]] CPD_HOST_DEVICE constexpr out_t<double> operator()(param<rounds && !Random, double, 1> x) const
      noexcept {
    return apply(x, 0u);
  }
  [[nodiscard]] CPD_HOST_DEVICE constexpr out_t<float> operator()(param<Random, float, 2> x,
                                                                        std::uint64_t i) const noexcept {
    return apply(x, detail::random_bits_at(this->seed, this->stream, i, this->generator));
  }
  [[nodiscard]] CPD_HOST_DEVICE constexpr out_t<double> operator()(param<Random, double, 3> x,
                                                                         std::uint64_t i) const noexcept {
    return apply(x, detail::random_bits_at(this->seed, this->stream, i, this->generator));
  }
  /// Stochastic: x rounded with the 32 random bits rnd (of which `bits` decide), which is
  /// what (x, i) gives with rnd = cpd::random_bits(seed, stream, i, generator); for callers that draw
  /// the bits themselves (the CUDA kernels compute a block's random key once).
  template <bool K = Random, std::enable_if_t<K, int> = 0>
  [[nodiscard]] CPD_HOST_DEVICE constexpr out_t<float> with_bits(float x, std::uint32_t rnd) const noexcept {
    return apply(x, rnd);
  }
  template <class Tuple, bool K = Random, std::enable_if_t<K, int> = 0>
  [[nodiscard]] CPD_HOST_DEVICE constexpr auto operator()(const Tuple& t) const noexcept {
    return (*this)(detail::tuple_access::first(t), detail::tuple_access::second(t));
  }
  [[nodiscard]] CPD_HOST_DEVICE constexpr T operator()(param<!rounds, storage_type, 4> code) const noexcept {
    if constexpr (Scaled) {
      return detail::decode_spec<T>(this->spec_, code);
    } else {
      constexpr detail::spec s = F::spec;  // a copy: device code may not refer to the host object F::spec
      return detail::bit_cast<T>(detail::decode_bits<T>(s, code));
    }
  }

 private:
  /// x rounded by the core (with random bits rnd): its value or its code.
  template <class V>
  CPD_HOST_DEVICE constexpr out_t<V> apply(V x, std::uint32_t rnd) const noexcept {
    if constexpr (Op == conversion::quantize) {
      detail::check_functor_source<F, V>();
    } else {
      detail::check_functor_code<F, V>();
    }
    int bits = 32;
    if constexpr (Random) bits = this->random_bits;
    if constexpr (Scaled) {
      const auto r = detail::round_spec<R, O, V>(this->spec_, x, rnd, bits);
      if constexpr (Op == conversion::quantize) return r.value;
      else return static_cast<storage_type>(r.code);
    } else {
      const auto r = detail::round_fixed<F, R, O>(x, rnd, bits);
      if constexpr (Op == conversion::quantize) return detail::bit_cast<V>(r.value);
      else return static_cast<storage_type>(r.code);
    }
  }
};

// --- the functor matrix: operation x (plain, scaled, stochastic) -----------------------

/// x -> x rounded to F in mode R ("fake quantization"), as the same type as x.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
using quantizer = converter<conversion::quantize, F, R, O>;

/// x -> the code of x rounded to F in mode R.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
using encoder = converter<conversion::encode, F, R, O>;

/// code -> its value as a T (float by default; exact).
template <class F, class T = float>
using decoder = converter<conversion::decode, F, rounding::nearest_even, overflow::infinity, false, false, T>;

/// x -> round(x * 2^exponent) * 2^-exponent, exactly: x rounded to F with every value
/// scaled by 2^-exponent (quantization under a power-of-two scale: APS, amax scaling).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
using scaled_quantizer = converter<conversion::quantize, F, R, O, true>;

/// x -> the code of round(x * 2^exponent) in F (exact, whatever the exponent).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
using scaled_encoder = converter<conversion::encode, F, R, O, true>;

/// code -> its value * 2^-exponent, exactly (undoes a scaled_encoder with the same exponent).
template <class F, class T = float>
using scaled_decoder = converter<conversion::decode, F, rounding::nearest_even, overflow::infinity, true, false, T>;

/// Stochastic rounding of element i with random bits keyed by (seed, stream, i): the same
/// seed gives the same bits on every backend, thread count and chunking. Call it with
/// (x, i), or with a tuple (x, i) from a zip of the data and a counting iterator. An
/// exponent k rounds x * 2^k and multiplies back by 2^-k, exactly (as scaled_quantizer).
template <class F, overflow O = overflow::infinity>
using stochastic_quantizer = converter<conversion::quantize, F, rounding::stochastic, O, true, true>;

/// The code of element i stochastically rounded with random bits keyed by (seed, stream, i)
/// (of x * 2^exponent, with an exponent).
template <class F, overflow O = overflow::infinity>
using stochastic_encoder = converter<conversion::encode, F, rounding::stochastic, O, true, true>;

/// (a, b) -> a + b rounded once to F in mode R: the low-precision accumulation step.
/// Floats go through cpd::rounded_add (<cpd/reduce/reduce.hpp>), the host reduction's own step,
/// so device sums equal cpd::accumulate bit for bit (NaN results are the canonical +NaN);
/// doubles are summed exactly (round-to-odd) and rounded by the core. For R == stochastic,
/// call it with (a, b, i): random bits cpd::random_bits(seed, stream, i, generator) (the key
/// is a cpd::random_stream: fields seed, stream and generator).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
struct accumulator : random_stream {
  CPD_HOST_DEVICE constexpr accumulator() noexcept : random_stream{} {}
  /// Stochastic rounding only: the generator's key, a second key, and the generator.
  CPD_HOST_DEVICE constexpr explicit accumulator(std::uint64_t key, std::uint64_t key_stream = 0,
                                                 random_generator g = default_generator) noexcept
      : random_stream{key, key_stream, g} {}

  [[nodiscard]] CPD_HOST_DEVICE float operator()(float a, float b) const noexcept {
    return add(a, b, 0u);
  }
  [[nodiscard]] CPD_HOST_DEVICE constexpr double operator()(double a, double b) const noexcept {
    return add(a, b, 0u);
  }
  [[nodiscard]] CPD_HOST_DEVICE float operator()(float a, float b, std::uint64_t i) const noexcept {
    return add(a, b, random_at(i));
  }
  [[nodiscard]] CPD_HOST_DEVICE constexpr double operator()(double a, double b, std::uint64_t i) const noexcept {
    return add(a, b, random_at(i));
  }

 private:
  CPD_HOST_DEVICE constexpr std::uint32_t random_at(std::uint64_t i) const noexcept {
    return R == rounding::stochastic ? detail::random_bits_at(seed, stream, i, generator) : 0u;
  }
  CPD_HOST_DEVICE static float add(float a, float b, std::uint32_t rnd) noexcept {
    detail::check_functor_source<F, float>();
    return rounded_add<F, R, O>(a, b, rnd);
  }
  CPD_HOST_DEVICE static constexpr double add(double a, double b, std::uint32_t rnd) noexcept {
    static_assert(F::mantissa_bits <= 50,
                  "cpd::accumulator: needs M <= 50 (the sum is rounded to odd in double, M + 3 <= 53 bits)");
    constexpr detail::spec s = F::spec;  // a copy: device code may not refer to the host object F::spec
    const double sum = detail::add_odd(a, b);
    return detail::bit_cast<double>(detail::round_bits<R, O, double>(s, detail::bit_cast<std::uint64_t>(sum), rnd).value);
  }
};

}  // namespace cpd
