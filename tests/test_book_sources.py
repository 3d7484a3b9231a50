"""The book's hand-written sources: no control characters (a "\\theta" written through a non-raw Python string
became a tab and "heta" on the front page)."""

import re

import pytest

from prh_lib import paths

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@pytest.mark.parametrize("path", sorted(paths.book_dir().glob("*.md")) + sorted(
    (paths.book_dir().parent / "notebooks").glob("*.py")), ids=lambda p: p.name)
def test_sources_hold_no_control_characters(path):
    text = path.read_text(encoding="utf-8")
    bad = [(text.count("\n", 0, m.start()) + 1, repr(m.group())) for m in _CONTROL.finditer(text)]
    assert not bad, f"{path.name}: control characters at (line, char) {bad[:5]}"
    if path.suffix == ".md":  # TeX commands keep their backslash
        assert "heta" not in text.replace("\\theta", "").replace("theta", "")
