// SPDX-License-Identifier: MIT
#pragma once

// Gradient codecs, all of them (docs/codecs.md): the interface and its implementations
// (exchange/codecs/: float formats, integers with block scales, Dettmers' dynamic tree and linear 8-bit, QSGD,
// 1-bit SGD), cpd::make_codec from a name (exchange/codecs/make_codec.hpp), and
// cpd::simulate_codec_allreduce (exchange/codec_allreduce.hpp).

#include <cpd/exchange/codec_allreduce.hpp>
#include <cpd/exchange/codecs/dettmers.hpp>
#include <cpd/exchange/codecs/float_codec.hpp>
#include <cpd/exchange/codecs/integer.hpp>
#include <cpd/exchange/codecs/interface.hpp>
#include <cpd/exchange/codecs/make_codec.hpp>
#include <cpd/exchange/codecs/onebit.hpp>
#include <cpd/exchange/codecs/posit_codec.hpp>
#include <cpd/exchange/codecs/qsgd.hpp>
