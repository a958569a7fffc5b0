// expect: Bias too large
#include <cpd/core/float.hpp>

// fnu has no subnormals, but its lowest binade still has steps of 2^(-Bias - M):
// 2^-1081 here, below double's 2^-1074 (found by tests/fuzz/fuzz_format).
cpd::float_t<1, 21, cpd::fnu, 1060> x;
