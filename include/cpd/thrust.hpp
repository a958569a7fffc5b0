// SPDX-License-Identifier: MIT
#pragma once

// An entry point of cpd: it includes <cpd/device/thrust.hpp>.

#include <cpd/device/thrust.hpp>
