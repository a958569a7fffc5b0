// SPDX-License-Identifier: MIT
// doctest's main(), compiled once and linked into every test executable.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
