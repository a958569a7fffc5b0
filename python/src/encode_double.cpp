// SPDX-License-Identifier: MIT
//
// cpd._cpd: encode's kernels for float64 inputs (rounded from the double, never through float).

#include "encode.hpp"

template void cpd_python::encode_codes<double>(const bulk_args&, const double*, const view&);
