"""The book's pages as ``prh-run`` leaves them, and the Jupyter Book build.

- :func:`available_notebooks`: the notebook sources in ``notebooks/``;
- :func:`fold_parameters`: a page's parameters shown once, folded;
- :func:`write_placeholders` / :func:`is_placeholder`: a page for every chapter not run yet, so the book
  builds with warnings as errors whatever was run;
- :func:`build_book`: ``jupyter-book build -W``, with :class:`BookBuildError` naming what failed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from prh_lib import paths


def available_notebooks() -> list[str]:
    """Names of the notebook sources in ``notebooks/`` (without ``.py``), sorted."""
    return sorted(p.stem for p in paths.notebooks_dir().glob("*.py") if not p.name.startswith("_"))


PARAMETERS_PROMPT = "Parameters of this page"


def fold_parameters(ipynb: str | Path, *, source: str | None = None) -> None:
    """Show a page's parameters once, in one folded box: the notebook's defaults and what this run set.

    papermill leaves two cells: the notebook's ``parameters`` cell (its defaults) and, after it, an
    ``injected-parameters`` cell with the values passed for this run. The defaults are moved into the
    injected cell (above the values set, which still take precedence in the same order), the ``parameters``
    cell is removed from the page (``remove-cell``), and the one remaining cell is tagged ``hide-input``
    with the prompt :data:`PARAMETERS_PROMPT`, so Jupyter Book renders it collapsed. A notebook run with
    no values set keeps its ``parameters`` cell, folded the same way. Rewrites ``ipynb`` in place."""
    import nbformat

    nb = nbformat.read(str(ipynb), as_version=4)
    defaults = next((c for c in nb.cells if "parameters" in c.metadata.get("tags", [])), None)
    injected = next((c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])), None)
    if defaults is None and injected is None:
        return
    if any(c is not None and c.metadata.get("mystnb", {}).get("code_prompt_show") == PARAMETERS_PROMPT
           for c in (defaults, injected)):
        return  # folded already
    where = f" ({source})" if source else ""
    if injected is not None:
        set_lines = [ln for ln in injected.source.splitlines() if ln.strip() != "# Parameters"]
        parts = [f"# The notebook's defaults{where}:", defaults.source.strip()] if defaults is not None else []
        parts += ["", "# Set for this run (papermill):", "\n".join(set_lines).strip()]
        injected.source = "\n".join(parts) + "\n"
        if defaults is not None:
            _add_tags(defaults, "remove-cell")
        shown = injected
    else:
        defaults.source = f"# The notebook's defaults{where}; nothing was set for this run:\n" + defaults.source
        shown = defaults
    _add_tags(shown, "hide-input")
    shown.metadata.setdefault("mystnb", {})["code_prompt_show"] = PARAMETERS_PROMPT
    shown.metadata["mystnb"]["code_prompt_hide"] = PARAMETERS_PROMPT
    nbformat.write(nb, str(ipynb))


def _add_tags(cell, *tags: str) -> None:
    have = list(cell.metadata.get("tags", []))
    cell.metadata["tags"] = have + [t for t in tags if t not in have]


PLACEHOLDER_KEY = "prh_placeholder"


def toc_notebooks(book: Path | None = None) -> list[str]:
    """Notebook pages the book's ``_toc.yml`` names (those with a source in ``notebooks/``), in toc order."""
    import yaml

    book = paths.book_dir() if book is None else Path(book)
    toc = yaml.safe_load((book / "_toc.yml").read_text())
    files = [toc["root"]] + [ch["file"] for part in toc.get("parts", []) for ch in part.get("chapters", [])]
    known = set(available_notebooks())
    return [f for f in files if f in known]


def is_placeholder(ipynb: str | Path) -> bool:
    """Whether ``ipynb`` is a page written by :func:`write_placeholders` (not an executed notebook)."""
    import nbformat

    return bool(nbformat.read(str(ipynb), as_version=4).metadata.get(PLACEHOLDER_KEY))


def write_placeholders(book: Path | None = None) -> list[str]:
    """Give every notebook page of the toc that has not been run a short page saying how to run it.

    A build after running only some notebooks then has a page for each chapter (no toctree warnings) and
    tells the reader which ones are missing. Placeholders are ``book/<name>.ipynb`` files marked in their
    metadata; running the notebook replaces them. Returns the names of the chapters that are placeholders."""
    import nbformat

    book = paths.book_dir() if book is None else Path(book)
    missing = []
    for name in toc_notebooks(book):
        out = book / f"{name}.ipynb"
        if out.is_file():
            if is_placeholder(out):
                missing.append(name)
            continue
        missing.append(name)
        title = _notebook_title(name)
        nb = nbformat.v4.new_notebook()
        nb.metadata[PLACEHOLDER_KEY] = True
        nb.cells = [nbformat.v4.new_markdown_cell(
            f"# {title}\n\n"
            "```{note}\n"
            f"This chapter has not been run in this build of the book. Run `prh-run {name}` (or `prh-run` for "
            f"every chapter) from the repository root to execute `notebooks/{name}.py` and rebuild the book.\n"
            "```\n"
        )]
        with paths.atomic_path(out) as tmp:
            nbformat.write(nb, str(tmp))
    return missing


def _notebook_title(name: str) -> str:
    """The first Markdown heading of ``notebooks/<name>.py`` (jupytext ``# # Title``), else the name."""
    src = paths.notebooks_dir() / f"{name}.py"
    for line in src.read_text().splitlines() if src.is_file() else []:
        if line.startswith("# # "):
            return line[4:].strip()
    return name


class BookBuildError(RuntimeError):
    """``jupyter-book build`` failed (with ``-W``: also on any Sphinx warning); the message has its output."""


def build_book(book: Path | None = None, *, strict: bool = True, quiet: bool = False) -> Path:
    """Build the Jupyter Book in ``book`` (default ``book/``); return its HTML folder.

    Chapters not run yet get a placeholder page first (:func:`write_placeholders`), so the build never
    refers to a missing document. With ``strict`` (the default) Sphinx warnings are errors
    (``jupyter-book build -W``). With ``quiet`` the build's output is captured and shown only on failure.

    Raises
    ------
    BookBuildError
        If the build fails.
    """
    book = paths.book_dir() if book is None else Path(book)
    missing = write_placeholders(book)
    if missing:
        print(f"[prh-run] not run yet, shown as a placeholder page: {', '.join(missing)} "
              f"(run them with: prh-run {' '.join(missing)})", flush=True)
    exe = shutil.which("jupyter-book") or str(Path(sys.executable).with_name("jupyter-book"))
    cmd = [exe, "build", str(book)] + (["-W", "--keep-going"] if strict else [])
    # placeholders are intended here (they were just announced); a plain `jupyter-book build book` refuses them
    env = {**os.environ, "PRH_PLACEHOLDERS_OK": "1"}
    proc = subprocess.run(cmd, cwd=paths.repo_root(), capture_output=quiet, text=True, env=env)
    if proc.returncode != 0:
        tail = ((proc.stdout or "") + (proc.stderr or ""))[-6000:] if quiet else "(see the output above)"
        raise BookBuildError(f"{' '.join(cmd)} failed with exit code {proc.returncode}\n{tail}")
    return book / "_build" / "html"
