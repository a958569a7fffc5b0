// SPDX-License-Identifier: MIT
#pragma once

// Kept so that existing code compiles: the header moved to <cpd/core/random.hpp>
// (docs/architecture.md lists the old and new names).

#include <cpd/core/random.hpp>
