// expect: Bias too small
#include <cpd/core/float.hpp>

cpd::float_t<8, 7, cpd::ieee, -800> x;
