// expect: F must be a cpd::float_t
#include <cpd/core/float.hpp>

auto x = cpd::convert<int>(1.0f);
