// expect: from float, F needs E <= 8 and M <= 23
#include <cpd/core/float.hpp>

auto x = cpd::convert<cpd::float_t<8, 30>>(1.0f);
