// expect: Bias too large
#include <climits>
#include <cpd/core/float.hpp>

cpd::float_t<4, 3, cpd::ieee, INT_MAX> x;
