// SPDX-License-Identifier: MIT
#pragma once

// Kept so that existing code compiles: the header moved to <cpd/scaling/scaling.hpp>
// (docs/architecture.md lists the old and new names).

#include <cpd/scaling/scaling.hpp>
