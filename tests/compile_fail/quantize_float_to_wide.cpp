// expect: every value of F must be a float
#include <cpd/core/float.hpp>

float x = cpd::quantize<cpd::float_t<11, 10>>(1.0f);
