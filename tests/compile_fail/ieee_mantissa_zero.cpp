// expect: cpd::ieee needs M >= 1 to encode NaN
#include <cpd/float.hpp>

cpd::float_t<4, 0> x;
