// expect: arithmetic: needs M <= 25
#include <cpd/core/float.hpp>

auto x = cpd::float_t<8, 30>(1.0) + cpd::float_t<8, 30>(2.0);
