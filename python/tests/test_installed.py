# SPDX-License-Identifier: MIT
"""The package as pip installs it (ctest python.install puts this checkout into the tests'
virtual environment; docs/python.md): imported from that environment's site-packages, never
from the checkout or a build tree, with the headers' version, its native module and every
file of python/cpd, all recorded by pip."""

import importlib.metadata
import os
import pathlib
import re
import sysconfig

import cpd

ROOT = pathlib.Path(os.environ.get("CPD_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
PACKAGE = pathlib.Path(cpd.__file__).resolve().parent


def header_version():
    text = (ROOT / "include" / "cpd" / "version.hpp").read_text()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^#define CPD_VERSION_{part} +([0-9]+)", text, re.M)
        assert m, f"CPD_VERSION_{part} not found in include/cpd/version.hpp"
        parts.append(m.group(1))
    return ".".join(parts)


def test_imported_from_site_packages_without_pythonpath():
    assert "PYTHONPATH" not in os.environ, f"PYTHONPATH={os.environ['PYTHONPATH']}"
    site = {pathlib.Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    assert PACKAGE.parent in site, f"cpd was imported from {PACKAGE}, not from site-packages {sorted(map(str, site))}"
    assert PACKAGE != (ROOT / "python" / "cpd").resolve()


def test_version_is_the_headers():
    assert cpd.__version__ == header_version()
    assert importlib.metadata.version("cpd") == cpd.__version__


def test_native_module_inside_the_package():
    native = pathlib.Path(cpd._cpd.__file__).resolve()
    assert native.parent == PACKAGE, f"cpd._cpd is {native}, outside {PACKAGE}"


def test_every_file_of_python_cpd_installed_and_recorded():
    sources = sorted(p.name for p in (ROOT / "python" / "cpd").glob("*.py"))
    installed = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert installed == sources, "python/CMakeLists.txt's cpd_python_files must list every file of python/cpd"
    dist = importlib.metadata.distribution("cpd")
    recorded = {pathlib.Path(dist.locate_file(f)).resolve() for f in dist.files}
    for name in sources:
        assert PACKAGE / name in recorded, f"{name} is not in pip's RECORD of cpd"
    assert pathlib.Path(cpd._cpd.__file__).resolve() in recorded


def test_requirements_met_by_what_is_installed():
    # Where numpy or torch is there (Debian's, in a venv with --system-site-packages), pip must
    # take it: a requirement it fails (Debian's torch is 1.13.0a0, below ">=1.13") makes
    # `pip install cpd[torch]` fetch PyPI's torch with gigabytes of CUDA libraries instead.
    from packaging.requirements import Requirement

    requirements = [Requirement(r) for r in importlib.metadata.requires("cpd")]
    names = {r.name: r for r in requirements}
    assert "numpy" in names and 'extra == "torch"' in str(names["torch"].marker)
    for r in requirements:
        try:
            have = importlib.metadata.version(r.name)
        except importlib.metadata.PackageNotFoundError:
            continue
        assert r.specifier.contains(have, prereleases=True), f"installed {r.name} {have} fails cpd's {r}"
