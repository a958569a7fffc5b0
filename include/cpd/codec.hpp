// SPDX-License-Identifier: MIT
#pragma once

// Kept so that existing code compiles: the header moved to <cpd/exchange/codec.hpp>
// (docs/architecture.md lists the old and new names).

#include <cpd/exchange/codec.hpp>
