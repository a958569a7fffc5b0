// SPDX-License-Identifier: MIT
//
// cpd._cpd: encode's kernels for float inputs (float32; float16 and bfloat16 widened to it).

#include "encode.hpp"

template void cpd_python::encode_codes<float>(const bulk_args&, const float*, const view&);
