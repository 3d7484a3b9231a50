"""Every notebook executed on small parameters, then the Jupyter Book built from them (in a temporary copy)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from prh_lib import paths, runner


def _toc_files():
    toc = yaml.safe_load((paths.repo_root() / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [ch["file"] for ch in part.get("chapters", [])]
    return files


def test_toc_lists_every_notebook_and_nothing_missing():
    files = _toc_files()
    notebooks = runner.available_notebooks()
    assert sorted(set(notebooks) - set(files)) == []
    for f in files:
        assert f in notebooks or (paths.book_dir() / f"{f}.md").is_file(), f"_toc.yml names {f!r}, which has no source"


def test_book_builds_with_every_page_and_its_figures(executed_notebook, tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    for name in ("_config.yml", "_toc.yml"):
        shutil.copy(paths.repo_root() / name, book / name)
    for md in paths.book_dir().glob("*.md"):
        shutil.copy(md, book / md.name)
    for name in runner.available_notebooks():
        shutil.copy(executed_notebook(name), book / f"{name}.ipynb")
    exe = Path(sys.executable).with_name("jupyter-book")
    proc = subprocess.run([str(exe), "build", str(book)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    html = book / "_build" / "html"
    assert (html / "index.html").is_file()
    for name in runner.available_notebooks():
        page = (html / f"{name}.html").read_text()
        images = re.findall(r"<img[^>]+src=\"([^\"]+\.png)\"", page)
        assert images, f"{name}.html shows no figure"
        for src in images:
            assert (html / src).is_file(), f"{name}.html links a missing image {src}"
        assert "Traceback" not in page
