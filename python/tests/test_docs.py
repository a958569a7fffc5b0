# SPDX-License-Identifier: MIT
"""Every ```python block of docs/python.md and README.md runs (in order, one namespace per
page), as the C++ blocks do under ctest docs.*; a block preceded by the comment
<!-- pytest: skip --> is shown only (it needs several processes or a long run)."""

import os
import pathlib
import re

import pytest

ROOT = pathlib.Path(os.environ.get("CPD_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
PAGES = ["docs/python.md", "README.md", "docs/formats.md"]


def blocks(page):
    text = (ROOT / page).read_text()
    out = []
    for m in re.finditer(r"(<!-- pytest: skip -->\s*)?```python\n(.*?)```", text, re.S):
        line = text.count("\n", 0, m.start(2)) + 1
        out.append((line, m.group(2), m.group(1) is not None))
    return out


def test_docs_python_page_has_blocks():
    assert any(not skip for _, _, skip in blocks("docs/python.md"))


@pytest.mark.parametrize("page", PAGES)
def test_python_blocks_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ns = {"__name__": "__doc_test__"}
    for line, code, skip in blocks(page):
        compiled = compile(code, f"{ROOT / page}:{line}", "exec")
        if not skip:
            exec(compiled, ns)
