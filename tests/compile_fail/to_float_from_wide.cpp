// expect: this format has values that are not floats
#include <cpd/core/float.hpp>

float x = static_cast<float>(cpd::float_t<11, 10>(1.0));
