# SPDX-License-Identifier: MIT
"""The tests' access to their oracles: packages Debian lacks (ml_dtypes, softposit), which
scripts/venv.sh installs from scripts/oracles.txt into build/venv. They are never dependencies
of cpd. A missing oracle skips its test, except under CI=true, where it fails."""

import importlib
import os

import pytest


def oracle(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        msg = f"the test oracle {name} is not installed (scripts/venv.sh installs scripts/oracles.txt into build/venv)"
        if os.environ.get("CI") == "true":
            pytest.fail("under CI=true: " + msg)
        pytest.skip(msg)
