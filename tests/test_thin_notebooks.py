"""Notebooks are thin (issue 40): parameters, one set-up call, calls into ``prh_lib.analysis``/``prh_lib.pages``, prose.

Counted on the jupytext sources: ``prh_lib`` import statements (at most 3) and lines of code outside the
parameters cell and the markdown (at most 75, the issue's "about 60" with room for a long call's wrapped
arguments). A notebook that grows logic again fails here, naming itself and its count.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.py"))
MAX_IMPORTS, MAX_CODE_LINES = 3, 75


def code_cells(path: Path) -> list[str]:
    cells = re.split(r"^# %%", path.read_text(), flags=re.M)[1:]
    return [c.split("\n", 1)[1] if "\n" in c else "" for c in cells
            if not ("[markdown]" in c.split("\n", 1)[0] or "parameters" in c.split("\n", 1)[0])]


def prh_imports(source: str) -> int:
    tree = ast.parse(source)
    return sum(1 for n in ast.walk(tree)
               if (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("prh_lib"))
               or (isinstance(n, ast.Import) and any(a.name.startswith("prh_lib") for a in n.names)))


def code_lines(source: str) -> int:
    return sum(1 for line in source.splitlines() if line.strip() and not line.strip().startswith("#"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_thin(path):
    source = "\n".join(code_cells(path))
    assert prh_imports(source) <= MAX_IMPORTS, f"{path.name}: {prh_imports(source)} prh_lib imports"
    assert code_lines(source) <= MAX_CODE_LINES, f"{path.name}: {code_lines(source)} lines of code"
    assert "setup_page(" in source, f"{path.name}: no report.setup_page call"


def test_the_counts_can_fail():
    fat = "from prh_lib import a\nfrom prh_lib.b import c\nimport prh_lib.d\nfrom prh_lib.pages import e\n"
    assert prh_imports(fat) == 4 > MAX_IMPORTS
    assert code_lines("x = 1\n\n# a comment\ny = 2\n") == 2
