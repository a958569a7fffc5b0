// expect: exponent range is too wide
#include <cpd/core/float.hpp>

auto x = cpd::float_t<10, 5>(1.0) * cpd::float_t<10, 5>(2.0);
