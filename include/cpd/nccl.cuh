// SPDX-License-Identifier: MIT
#pragma once

// An entry point of cpd: it includes <cpd/device/nccl.cuh>.

#include <cpd/device/nccl.cuh>
