// expect: M must be in \[0, 52\]
#include <cpd/core/float.hpp>

cpd::float_t<5, 60> x;
