// expect: cpd::fn and cpd::fnu need E \+ M >= 2
#include <cpd/core/float.hpp>

cpd::float_t<1, 0, cpd::fn> x;
