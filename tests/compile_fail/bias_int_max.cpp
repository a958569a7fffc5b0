// expect: Bias too large
#include <climits>
#include <cpd/float.hpp>

cpd::float_t<4, 3, cpd::ieee, INT_MAX> x;
