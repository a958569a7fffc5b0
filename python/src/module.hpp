// SPDX-License-Identifier: MIT
#pragma once

// The parts of cpd._cpd, one translation unit each, so that they compile in parallel (each
// instantiates its own share of the library's kernels): module.cpp defines the module and
// calls each part's bind function, which registers that part's calls.

#include <pybind11/pybind11.h>

#include <string>

namespace cpd {
struct allreduce_options;
}

namespace cpd_python {

/// values.cpp: quantize (float16, bfloat16, float32, float64 in; the same dtype out), cast,
/// time_quantize, scalar_quantize.
void bind_values(pybind11::module_& m);

/// encode.cpp: encode (values -> integer codes).
void bind_encode(pybind11::module_& m);

/// decode.cpp: decode (integer codes -> values).
void bind_decode(pybind11::module_& m);

/// posits.cpp: posit_quantize, posit_encode, posit_decode, posit_info.
void bind_posits(pybind11::module_& m);

/// scalers.cpp: Scale, Scaler, make_scaler, exchange_scales, mx_quantize.
void bind_scalers(pybind11::module_& m);

/// exchange.cpp: simulate (the in-process allreduce) and Exchange (one rank's side).
void bind_exchange(pybind11::module_& m);

/// exchange.cpp: the options of an in-process allreduce, checked: an algorithm of
/// cpd::simulated_algorithms (two_step without Kahan), a format of cpd::exchange_formats,
/// nearest_even or stochastic; std::invalid_argument naming `who` and the problem. The Python
/// layer checks them (check_simulation) before a scaler's select, which moves a stateful
/// scaler on.
cpd::allreduce_options simulation_options(const std::string& fmt, const std::string& rounding,
                                          const std::string& algorithm, bool kahan, const char* who);

/// blocks.cpp: simulate_blocks (the in-process allreduce with OCP MX's or NVFP4's block
/// scales), simulate_codec (through a gradient codec) and Codec (one rank's side of it).
void bind_blocks(pybind11::module_& m);
/// block_exchange.cpp: BlockExchange (one rank's side of an exchange with OCP MX's or NVFP4's
/// block scales: cpd.torch with scaler="mx32"/"nvfp4"); after bind_exchange (its base).
void bind_block_exchange(pybind11::module_& m);

}  // namespace cpd_python
