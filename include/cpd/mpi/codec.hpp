// SPDX-License-Identifier: MIT
#pragma once

// <cpd/mpi/codec.hpp>: kept so that existing code compiles; cpd::mpi::codec_allreduce is in
// <cpd/mpi/codec_allreduce.hpp>, the codecs and make_codec in <cpd/exchange/codec.hpp>.

#include <cpd/exchange/codec.hpp>
#include <cpd/mpi/codec_allreduce.hpp>
