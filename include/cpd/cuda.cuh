// SPDX-License-Identifier: MIT
#pragma once

// An entry point of cpd: it includes <cpd/device/cuda.cuh>.

#include <cpd/device/cuda.cuh>
