// expect: Bias too large
#include <cpd/float.hpp>

cpd::float_t<8, 7, cpd::ieee, 1100> x;
