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

/// The value (as a T) and the code of x rounded to the runtime spec s: in T when s is a
/// format of normal Ts (the core rounds a float directly), else in double, as the host
/// bulk kernels do.
template <class T>
struct rounded_as {
  T value;            ///< the rounded value
  std::uint64_t code;  ///< its code
};
template <rounding R, overflow O, class T>
CPD_HOST_DEVICE CPD_ALWAYS_INLINE constexpr rounded_as<T> round_spec(const spec& s, T x, std::uint32_t rnd,
                                                                         int rbits) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    if (vector_kernel_takes<float>(s)) {
      const auto r = round_bits<R, O, float>(s, bit_cast<std::uint32_t>(x), rnd, rbits);
      return {bit_cast<float>(r.value), r.code};
    }
    // (float <-> double by integer arithmetic: FTZ and DAZ would flush subnormals)
    const auto r = round_bits<R, O, double>(s, widen_bits(bit_cast<std::uint32_t>(x)), rnd, rbits);
    return {bit_cast<float>(narrow_bits(r.value)), r.code};
  } else {
    const auto r = round_bits<R, O, double>(s, bit_cast<std::uint64_t>(x), rnd, rbits);
    return {bit_cast<double>(r.value), r.code};
  }
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

/// 32 random bits keyed by (seed, stream, index): cpd's counter-based generator
/// (cpd::random_bits of <cpd/core/random.hpp>), which the host bulk kernels draw from too.
CPD_HOST_DEVICE constexpr std::uint32_t random_bits_at(std::uint64_t seed, std::uint64_t stream,
                                                       std::uint64_t index) noexcept {
  return cpd::random_bits(seed, stream, index);
}

/// The bits of |x| as an unsigned integer: ordered like |x|, with every NaN above +inf.
template <class T>
CPD_HOST_DEVICE constexpr uint_of<T> abs_bits(T x) noexcept {
  return bit_cast<uint_of<T>>(x) & source<T>::abs_mask;
}

/// The APS statistic ceil(log2(amax * world_size)) of an amax given by its bits, exactly,
/// with the conventions of cpd::aps (include/cpd/scaling/scaling.hpp): INT32_MIN for an all-zero
/// tensor (the identity of max), INT32_MAX when amax is inf or NaN. amax = m * 2^e with an
/// integer m < 2^24, so amax * world_size = (m * world_size) * 2^e, an exact 64-bit product.
CPD_HOST_DEVICE constexpr std::int32_t aps_statistic_of_amax_bits(std::uint32_t bits, int world_size) noexcept {
  const std::uint32_t a = bits & 0x7FFFFFFFu;
  if (a == 0) return INT32_MIN;
  if (a >= 0x7F800000u) return INT32_MAX;
  const int field = static_cast<int>(a >> 23);
  const std::uint64_t m = field != 0 ? (a & 0x7FFFFFu) | 0x800000u : a;
  const int e = (field != 0 ? field : 1) - 150;
  const std::uint64_t p = m * static_cast<std::uint64_t>(world_size < 1 ? 1 : world_size);
  const int ceil_log2_p = p == 1 ? 0 : 64 - countl_zero(p - 1);
  return e + ceil_log2_p;
}

/// The bits of the largest |x| as reduced by max_op: any NaN becomes the canonical +NaN.
template <class U>
CPD_HOST_DEVICE constexpr U canonical_amax_bits(U bits) noexcept {
  using T = std::conditional_t<sizeof(U) == 4, float, double>;
  return bits > source<T>::inf_bits ? source<T>::qnan_bits : bits;
}

/// x -> the bits of |x| (max over them is the bits of amax; see cpd::amax).
struct abs_bits_op {
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t operator()(float x) const noexcept { return abs_bits(x); }
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint64_t operator()(double x) const noexcept { return abs_bits(x); }
};

/// The larger of two unsigned integers: an exact, order-independent reduction.
struct max_op {
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint32_t operator()(std::uint32_t a, std::uint32_t b) const noexcept {
    return a < b ? b : a;
  }
  [[nodiscard]] CPD_HOST_DEVICE constexpr std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const noexcept {
    return a < b ? b : a;
  }
};

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

}  // namespace detail

// The functors take float and double through two non-template overloads, so that a
// proxy reference (thrust::device_reference<float>) converts to the value it refers to.

/// x -> x rounded to F in mode R ("fake quantization"), as the same type as x.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
struct quantizer {
  static_assert(R != rounding::stochastic,
                "cpd::quantizer: stochastic rounding needs random bits; use cpd::stochastic_quantizer");

  [[nodiscard]] CPD_HOST_DEVICE constexpr float operator()(float x) const noexcept { return apply(x); }
  [[nodiscard]] CPD_HOST_DEVICE constexpr double operator()(double x) const noexcept { return apply(x); }

 private:
  template <class T>
  CPD_HOST_DEVICE static constexpr T apply(T x) noexcept {
    detail::check_functor_source<F, T>();
    return detail::bit_cast<T>(detail::round_fixed<F, R, O>(x).value);
  }
};

/// x -> the code of x rounded to F in mode R.
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
struct encoder {
  static_assert(R != rounding::stochastic,
                "cpd::encoder: stochastic rounding needs random bits; use cpd::stochastic_encoder");
  using storage_type = typename F::storage_type;

  [[nodiscard]] CPD_HOST_DEVICE constexpr storage_type operator()(float x) const noexcept { return apply(x); }
  [[nodiscard]] CPD_HOST_DEVICE constexpr storage_type operator()(double x) const noexcept { return apply(x); }

 private:
  template <class T>
  CPD_HOST_DEVICE static constexpr storage_type apply(T x) noexcept {
    detail::check_functor_code<F, T>();
    return static_cast<storage_type>(detail::round_fixed<F, R, O>(x).code);
  }
};

/// code -> its value as a T (float by default; exact).
template <class F, class T = float>
struct decoder {
  static_assert(is_float_format_v<F>, "cpd::decoder: F must be a cpd::float_t");
  static_assert(std::is_same_v<T, double> || (std::is_same_v<T, float> && F::fits_float),
                "cpd::decoder: T must be double, or float when every value of F is a float");
  using storage_type = typename F::storage_type;

  [[nodiscard]] CPD_HOST_DEVICE constexpr T operator()(storage_type code) const noexcept {
    constexpr detail::spec s = F::spec;  // a copy: device code may not refer to the host object F::spec
    return detail::bit_cast<T>(detail::decode_bits<T>(s, code));
  }
};

/// x -> round(x * 2^exponent) * 2^-exponent, exactly: x rounded to F with every value
/// scaled by 2^-exponent (quantization under a power-of-two scale: APS, amax scaling).
/// The exponent must keep the scaled format within double's range (detail::scale_error).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
class scaled_quantizer {
  static_assert(R != rounding::stochastic,
                "cpd::scaled_quantizer: stochastic rounding needs random bits; use cpd::stochastic_quantizer");

 public:
  CPD_HOST_DEVICE constexpr scaled_quantizer() noexcept : scaled_quantizer(0) {}
  CPD_HOST_DEVICE constexpr explicit scaled_quantizer(int exponent) noexcept
      : exponent_(exponent), spec_(detail::scaled_spec_of<F>(exponent)) {}
  /// Values are multiplied by 2^exponent() before rounding, by 2^-exponent() after.
  [[nodiscard]] CPD_HOST_DEVICE constexpr int exponent() const noexcept { return exponent_; }

  [[nodiscard]] CPD_HOST_DEVICE constexpr float operator()(float x) const noexcept { return apply(x); }
  [[nodiscard]] CPD_HOST_DEVICE constexpr double operator()(double x) const noexcept { return apply(x); }

 private:
  template <class T>
  CPD_HOST_DEVICE constexpr T apply(T x) const noexcept {
    detail::check_functor_source<F, T>();
    return detail::round_spec<R, O, T>(spec_, x, 0, 32).value;
  }
  int exponent_;
  detail::spec spec_;
};

/// x -> the code of round(x * 2^exponent) in F (exact, whatever the exponent).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
class scaled_encoder {
  static_assert(R != rounding::stochastic,
                "cpd::scaled_encoder: stochastic rounding needs random bits; use cpd::stochastic_encoder");

 public:
  using storage_type = typename F::storage_type;
  CPD_HOST_DEVICE constexpr scaled_encoder() noexcept : scaled_encoder(0) {}
  CPD_HOST_DEVICE constexpr explicit scaled_encoder(int exponent) noexcept
      : exponent_(exponent), spec_(detail::scaled_spec_of<F>(exponent)) {}
  /// Values are multiplied by 2^exponent() before rounding.
  [[nodiscard]] CPD_HOST_DEVICE constexpr int exponent() const noexcept { return exponent_; }

  [[nodiscard]] CPD_HOST_DEVICE constexpr storage_type operator()(float x) const noexcept { return apply(x); }
  [[nodiscard]] CPD_HOST_DEVICE constexpr storage_type operator()(double x) const noexcept { return apply(x); }

 private:
  template <class T>
  CPD_HOST_DEVICE constexpr storage_type apply(T x) const noexcept {
    detail::check_functor_code<F, T>();
    return static_cast<storage_type>(detail::round_spec<R, O, T>(spec_, x, 0, 32).code);
  }
  int exponent_;
  detail::spec spec_;
};

/// code -> its value * 2^-exponent, exactly (undoes a scaled_encoder with the same exponent).
template <class F, class T = float>
class scaled_decoder {
  static_assert(is_float_format_v<F>, "cpd::scaled_decoder: F must be a cpd::float_t");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "cpd::scaled_decoder: T must be float or double");

 public:
  using storage_type = typename F::storage_type;
  CPD_HOST_DEVICE constexpr scaled_decoder() noexcept : scaled_decoder(0) {}
  CPD_HOST_DEVICE constexpr explicit scaled_decoder(int exponent) noexcept
      : exponent_(exponent), spec_(detail::scaled_spec_of<F>(exponent)) {}
  /// Decoded values are multiplied by 2^-exponent().
  [[nodiscard]] CPD_HOST_DEVICE constexpr int exponent() const noexcept { return exponent_; }

  [[nodiscard]] CPD_HOST_DEVICE constexpr T operator()(storage_type code) const noexcept {
    return detail::decode_spec<T>(spec_, code);
  }

 private:
  int exponent_;
  detail::spec spec_;
};

/// Stochastic rounding of element i with random bits keyed by (seed, stream, i): the same
/// seed gives the same bits on every backend, thread count and chunking. Call it with
/// (x, i), or with a tuple (x, i) from a zip of the data and a counting iterator. An
/// exponent k rounds x * 2^k and multiplies back by 2^-k, exactly (as scaled_quantizer).
template <class F, overflow O = overflow::infinity>
class stochastic_quantizer {
 public:
  std::uint64_t seed = 0;    ///< the generator's key
  std::uint64_t stream = 0;  ///< a second key (e.g. the training step or the tensor)
  int random_bits = 32;      ///< how many random bits decide (1..32)

  CPD_HOST_DEVICE constexpr stochastic_quantizer() noexcept : stochastic_quantizer(0) {}
  CPD_HOST_DEVICE constexpr explicit stochastic_quantizer(std::uint64_t key, std::uint64_t key_stream = 0,
                                                          int exponent = 0, int bits = 32) noexcept
      : seed(key), stream(key_stream), random_bits(bits), exponent_(exponent),
        spec_(detail::scaled_spec_of<F>(exponent)) {}
  /// Values are multiplied by 2^exponent() before rounding, by 2^-exponent() after.
  [[nodiscard]] CPD_HOST_DEVICE constexpr int exponent() const noexcept { return exponent_; }

  [[nodiscard]] CPD_HOST_DEVICE constexpr float operator()(float x, std::uint64_t i) const noexcept {
    return apply(x, i);
  }
  [[nodiscard]] CPD_HOST_DEVICE constexpr double operator()(double x, std::uint64_t i) const noexcept {
    return apply(x, i);
  }
  template <class Tuple>
  [[nodiscard]] CPD_HOST_DEVICE constexpr auto operator()(const Tuple& t) const noexcept {
    return (*this)(detail::tuple_access::first(t), detail::tuple_access::second(t));
  }

 private:
  template <class T>
  CPD_HOST_DEVICE constexpr T apply(T x, std::uint64_t i) const noexcept {
    detail::check_functor_source<F, T>();
    const std::uint32_t rnd = detail::random_bits_at(seed, stream, i);
    return detail::round_spec<rounding::stochastic, O, T>(spec_, x, rnd, random_bits).value;
  }
  int exponent_;
  detail::spec spec_;
};

/// The code of element i stochastically rounded with random bits keyed by (seed, stream, i)
/// (of x * 2^exponent, with an exponent).
template <class F, overflow O = overflow::infinity>
class stochastic_encoder {
 public:
  using storage_type = typename F::storage_type;
  std::uint64_t seed = 0;    ///< the generator's key
  std::uint64_t stream = 0;  ///< a second key (e.g. the training step or the tensor)
  int random_bits = 32;      ///< how many random bits decide (1..32)

  CPD_HOST_DEVICE constexpr stochastic_encoder() noexcept : stochastic_encoder(0) {}
  CPD_HOST_DEVICE constexpr explicit stochastic_encoder(std::uint64_t key, std::uint64_t key_stream = 0,
                                                        int exponent = 0, int bits = 32) noexcept
      : seed(key), stream(key_stream), random_bits(bits), exponent_(exponent),
        spec_(detail::scaled_spec_of<F>(exponent)) {}
  /// Values are multiplied by 2^exponent() before rounding.
  [[nodiscard]] CPD_HOST_DEVICE constexpr int exponent() const noexcept { return exponent_; }

  [[nodiscard]] CPD_HOST_DEVICE constexpr storage_type operator()(float x, std::uint64_t i) const noexcept {
    return apply(x, i);
  }
  [[nodiscard]] CPD_HOST_DEVICE constexpr storage_type operator()(double x, std::uint64_t i) const noexcept {
    return apply(x, i);
  }
  template <class Tuple>
  [[nodiscard]] CPD_HOST_DEVICE constexpr auto operator()(const Tuple& t) const noexcept {
    return (*this)(detail::tuple_access::first(t), detail::tuple_access::second(t));
  }

 private:
  template <class T>
  CPD_HOST_DEVICE constexpr storage_type apply(T x, std::uint64_t i) const noexcept {
    detail::check_functor_code<F, T>();
    const std::uint32_t rnd = detail::random_bits_at(seed, stream, i);
    return static_cast<storage_type>(detail::round_spec<rounding::stochastic, O, T>(spec_, x, rnd, random_bits).code);
  }
  int exponent_;
  detail::spec spec_;
};

/// (a, b) -> a + b rounded once to F in mode R: the low-precision accumulation step.
/// Floats go through cpd::rounded_add (<cpd/reduce/reduce.hpp>), the host reduction's own step,
/// so device sums equal cpd::accumulate bit for bit (NaN results are the canonical +NaN);
/// doubles are summed exactly (round-to-odd) and rounded by the core. For R == stochastic,
/// call it with (a, b, i): random bits cpd::random_bits(seed, stream, i).
template <class F, rounding R = rounding::nearest_even, overflow O = overflow::infinity>
struct accumulator {
  std::uint64_t seed = 0;    ///< stochastic rounding only: the generator's key
  std::uint64_t stream = 0;  ///< stochastic rounding only: a second key

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
    return R == rounding::stochastic ? detail::random_bits_at(seed, stream, i) : 0u;
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
