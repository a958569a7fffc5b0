// expect: cpd::ieee needs M >= 1 to encode NaN
#include <cpd/core/float.hpp>

cpd::float_t<4, 0> x;
