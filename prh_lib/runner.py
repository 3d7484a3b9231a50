"""Execute the notebooks with papermill into ``book/`` and build the Jupyter Book.

Usage (console script ``prh-run`` or ``python -m prh_lib.runner``)::

    prh-run                              # every notebook with the offline defaults, then build the book
    prh-run sec3_1_layerwise -p k=5      # one notebook with an override
    prh-run --params smoke --no-build    # small parameters, no book build
    prh-run --list                       # notebooks and their parameters

Notebook sources are jupytext percent-format ``notebooks/<name>.py`` files. Each is converted to an
``.ipynb`` and executed by papermill (kernel ``python3``) into ``book/<name>.ipynb``; the book is then
built with ``jupyter-book build book``.
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
            )
    return out


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


def build_book() -> None:
    """Run ``jupyter-book build book`` from the repository root."""
    exe = shutil.which("jupyter-book") or str(Path(sys.executable).with_name("jupyter-book"))
    subprocess.run([exe, "build", str(paths.book_dir())], cwd=paths.repo_root(), check=True)


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
        build_book()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
