// SPDX-License-Identifier: MIT
#pragma once

// Kept so that existing code compiles: the header moved to <cpd/reduce/reduce.hpp>
// (docs/architecture.md lists the old and new names).

#include <cpd/reduce/reduce.hpp>
