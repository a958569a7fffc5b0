// SPDX-License-Identifier: MIT
#pragma once

// An entry point of cpd: it includes <cpd/device/cuda.cuh> (the launchers) and
// <cpd/device/exchange.cuh> (cpd::cuda::rank_exchange, the exchange on a device).

#include <cpd/device/cuda.cuh>
#include <cpd/device/exchange.cuh>
#include <cpd/device/nvfp4.cuh>
