// SPDX-License-Identifier: MIT
// The float codecs' encodes, compiled once for every test (<cpd/host/instances.hpp>; the
// tests are compiled with CPD_EXTERN_RUNTIME_CALLS).
#define CPD_INSTANTIATE_RUNTIME_CALLS
#include <cpd/cpd.hpp>

CPD_RUNTIME_CALLS(codecs)
