"""Execute the notebooks with papermill into ``book/`` and build the Jupyter Book.

Usage (console script ``prh-run`` or ``python -m prh_lib.runner``)::

    prh-run                              # every notebook with the offline defaults, then build the book
    prh-run sec3_1_layerwise -p k=5      # one notebook with an override
    prh-run --params smoke --no-build    # small parameters, no book build
    prh-run --list                       # notebooks and their parameters

Notebook sources are jupytext percent-format ``notebooks/<name>.py`` files. Each is converted to an
``.ipynb`` and executed by papermill (kernel ``python3``) into ``book/<name>.ipynb``, with its parameters
folded into one box (:func:`fold_parameters`); the book is then built with ``jupyter-book build -W book``
(warnings are errors), chapters not run yet showing a placeholder page that says how to run them.
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from . import paths
from .profiles import PROFILES, get_profile


def available_notebooks() -> list[str]:
    """Names of the notebook sources in ``notebooks/`` (without ``.py``), sorted."""
    return sorted(p.stem for p in paths.notebooks_dir().glob("*.py") if not p.name.startswith("_"))


def parse_override(text: str) -> tuple[str, object]:
    """Parse ``key=value``; the value is read as a Python literal when it is one, else kept as a string.

    Raises
    ------
    ValueError
        If ``text`` has no ``=`` or an empty key.
    """
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {text!r} is not of the form key=value")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw
    return key.strip(), value


def notebook_to_ipynb(name: str, dest: Path) -> Path:
    """Convert ``notebooks/<name>.py`` (jupytext percent format) into an ``.ipynb`` at ``dest``."""
    import jupytext

    src = paths.notebooks_dir() / f"{name}.py"
    if not src.is_file():
        raise FileNotFoundError(f"no notebook {src}; available: {available_notebooks()}")
    nb = jupytext.read(src)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    jupytext.write(nb, dest, fmt="ipynb")
    return dest


def notebook_parameters(ipynb: Path) -> dict[str, object]:
    """Parameters declared in the notebook's ``parameters`` cell (name -> default as written)."""
    import papermill

    return {k: v["default"] for k, v in papermill.inspect_notebook(str(ipynb)).items()}


def run_notebook(name: str, params: dict[str, object], *, output_dir: Path | None = None, quiet: bool = False) -> Path:
    """Execute one notebook with the parameters it declares; return the executed ``.ipynb`` path.

    Parameters not declared by the notebook are ignored (so a profile can serve every notebook).
    The output is written to a temporary name and renamed into place only if execution succeeds.
    """
    import papermill
    from traitlets.config import Config

    output_dir = paths.book_dir() if output_dir is None else Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = notebook_to_ipynb(name, Path(tmp) / f"{name}.ipynb")
        declared = notebook_parameters(src)
        used = {k: v for k, v in params.items() if k in declared}
        out = output_dir / f"{name}.ipynb"
        with paths.atomic_path(out) as tmp_out, _inline_matplotlib():
            papermill.execute_notebook(
                str(src), str(tmp_out), parameters=used, kernel_name="python3",
                cwd=str(paths.repo_root()), progress_bar=not quiet, log_output=False,
                config=Config(_KERNEL_CONFIG),
            )
            fold_parameters(tmp_out, source=f"notebooks/{name}.py")
    return out


# The kernel talks to papermill over IPC sockets, not unencrypted TCP on localhost (which ipykernel warns
# about on every start).
_KERNEL_CONFIG = {"KernelManager": {"transport": "ipc"}}

PARAMETERS_PROMPT = "Parameters of this page"


def fold_parameters(ipynb: str | Path, *, source: str | None = None) -> None:
    """Show a page's parameters once, in one folded box: the notebook's defaults and what this run set.

    papermill leaves two cells: the notebook's ``parameters`` cell (its defaults) and, after it, an
    ``injected-parameters`` cell with the values passed for this run. The defaults are moved into the
    injected cell (above the values set, which still take precedence in the same order), the ``parameters``
    cell is removed from the page (``remove-cell``), and the one remaining cell is tagged ``hide-input``
    with the prompt :data:`PARAMETERS_PROMPT`, so Jupyter Book renders it collapsed. A notebook run with
    no values set keeps its ``parameters`` cell, folded the same way. Rewrites ``ipynb`` in place.
    """
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


@contextmanager
def _inline_matplotlib():
    """Let the kernel draw figures into the notebook even when ``MPLBACKEND`` (e.g. ``Agg``) is set for
    headless scripts: the kernel inherits the environment, and a non-inline backend records no images."""
    old = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MPLBACKEND", None)
        else:
            os.environ["MPLBACKEND"] = old


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
    metadata; running the notebook replaces them. Returns the names of the chapters that are placeholders.
    """
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
    proc = subprocess.run(cmd, cwd=paths.repo_root(), capture_output=quiet, text=True)
    if proc.returncode != 0:
        tail = ((proc.stdout or "") + (proc.stderr or ""))[-6000:] if quiet else "(see the output above)"
        raise BookBuildError(f"{' '.join(cmd)} failed with exit code {proc.returncode}\n{tail}")
    return book / "_build" / "html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prh-run", description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", help="notebook names (default: all)")
    parser.add_argument("--params", default="offline", help=f"named parameter set: {', '.join(PROFILES)}")
    parser.add_argument("-p", "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one parameter (repeatable)")
    parser.add_argument("--no-build", action="store_true", help="execute notebooks only")
    parser.add_argument("--build-only", action="store_true", help="only build the book")
    parser.add_argument("--output-dir", type=Path, default=None, help="where executed notebooks go (default: book/)")
    parser.add_argument("--list", action="store_true", help="list notebooks and their parameters")
    args = parser.parse_args(argv)

    names = args.notebooks or available_notebooks()
    unknown = [n for n in names if n not in available_notebooks()]
    if unknown:
        parser.error(f"unknown notebooks {unknown}; available: {available_notebooks()}")
    if args.list:
        with tempfile.TemporaryDirectory() as tmp:
            for n in names:
                print(n, notebook_parameters(notebook_to_ipynb(n, Path(tmp) / f"{n}.ipynb")))
        return 0
    try:
        params = get_profile(args.params)
        params.update(dict(parse_override(o) for o in args.overrides))
    except ValueError as err:
        parser.error(str(err))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    if not args.build_only:
        for n in names:
            t0 = time.perf_counter()
            print(f"[prh-run] executing {n} with {args.params} {params}", flush=True)
            out = run_notebook(n, params, output_dir=args.output_dir)
            print(f"[prh-run] wrote {out} in {time.perf_counter() - t0:.1f} s", flush=True)
    if not args.no_build:
        try:
            html = build_book()
        except BookBuildError as err:
            print(f"[prh-run] {err}", file=sys.stderr)
            return 1
        print(f"[prh-run] book: {html / 'index.html'}", flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
