// SPDX-License-Identifier: MIT
// The host bulk kernels against the scalar core, bit for bit: every rounding mode,
// both overflow modes, one format per encoding and width, from float; on every
// instruction-set path, on random and special inputs (tests/test_bulk_more.cpp:
// double, scales, lengths, alignment, in place, threads, runtime formats).

#include "bulk_test_support.hpp"

#include <doctest/doctest.h>

#include <tuple>

namespace {
using namespace bulk_test;

// One format per encoding (and the widths that matter), plus a format whose
// range reaches below float's: it runs the general (one value at a time) kernel.
using float_formats = std::tuple<cpd::float8_e4m3fn, cpd::float8_e5m2, cpd::float8_e4m3fnuz, cpd::float4_e2m1fn,
                                 cpd::float8_e8m0fnu, cpd::float16, cpd::bfloat16, cpd::float_t<8, 3, cpd::ieee, 140>>;
}  // namespace

TEST_CASE_TEMPLATE_DEFINE("bulk quantize and encode equal the scalar core, float", F, bulk_float) {
  const auto in = test_inputs<F, float>(3001, 1);
  cpd::bulk_options o;
  o.seed = 42;
  o.stream = 7;
  check_all_modes<F, overflow::infinity>(in, o);
  check_all_modes<F, overflow::saturate>(in, o);
}
TEST_CASE_TEMPLATE_APPLY(bulk_float, float_formats);

