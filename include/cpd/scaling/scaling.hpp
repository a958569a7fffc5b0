// SPDX-License-Identifier: MIT
#pragma once

// Scale selection (docs/scaling.md). Every scaler follows one protocol:
//
//   auto st = scaler.statistic(data, n);      // local, cheap
//   st = Scaler::combine(st, other_st);       // associative; an allreduce of a few bytes
//   auto sc = scaler.select(st);              // the scale
//
// Statistics are 32-bit values that combine by `max`, so that any communication
// engine can combine them with one MPI_MAX over MPI_INT32_T (amax statistics are
// non-negative floats, whose bits order like their values, NaN above +inf).
// The multi-tensor form statistics() fills one statistic per tensor, so that one
// small allreduce covers a whole model.
//
// One header per family: scale.hpp (the scale types and the protocol's helpers),
// aps.hpp (APS, a fixed scale), transformer_engine.hpp (current and delayed amax
// scaling), loss.hpp (dynamic loss scaling), exchange_rules.hpp (MS-AMP's amax / sqrt(W),
// PyTorch's pre-division by W); mx.hpp (OCP MX blocks) and
// diagnostics.hpp (what a format does to a tensor) sit beside them.

#include <cpd/scaling/aps.hpp>
#include <cpd/scaling/exchange_rules.hpp>
#include <cpd/scaling/loss.hpp>
#include <cpd/scaling/scale.hpp>
#include <cpd/scaling/transformer_engine.hpp>
