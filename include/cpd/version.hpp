// SPDX-License-Identifier: MIT
#pragma once

/// cpd's version, as major * 10000 + minor * 100 + patch.
#define CPD_VERSION_MAJOR 0
#define CPD_VERSION_MINOR 1
#define CPD_VERSION_PATCH 0
#define CPD_VERSION (CPD_VERSION_MAJOR * 10000 + CPD_VERSION_MINOR * 100 + CPD_VERSION_PATCH)
