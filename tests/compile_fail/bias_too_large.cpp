// expect: Bias too large
#include <cpd/core/float.hpp>

cpd::float_t<8, 7, cpd::ieee, 1100> x;
