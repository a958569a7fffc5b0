// expect: cpd::ieee needs E >= 2
#include <cpd/core/float.hpp>

cpd::float_t<1, 3> x;
