// expect: Bias too small
#include <cpd/float.hpp>

cpd::float_t<8, 7, cpd::ieee, -800> x;
