// expect: E must be in \[1, 11\]
#include <cpd/core/float.hpp>

cpd::float_t<12, 3> x;
