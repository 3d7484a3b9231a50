"""Hand results from an executed notebook to the book and to the tests.

:func:`record` glues a JSON document into the notebook (myst-nb ``glue``), so the tests read exactly the
numbers a page showed, and the page's prose can cite them with ``{glue:text}``. :func:`read_record` reads
it back from an executed ``.ipynb``.
"""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import numpy as np


def _plain(obj):
    """JSON-ready copy of ``obj``: NumPy/torch scalars and arrays, DataFrames, tuples and dict keys made plain."""
    if hasattr(obj, "to_dict") and hasattr(obj, "columns"):  # pandas DataFrame: {index: {column: value}}
        return {str(k): _plain(v) for k, v in obj.to_dict(orient="index").items()}
    if hasattr(obj, "detach"):  # torch tensor
        obj = obj.detach().cpu().numpy()
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, np.generic):
        return _plain(obj.item())
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def record(name: str, obj, *, display: bool = False) -> dict:
    """Glue ``obj`` (dicts, lists, numbers, strings, arrays, DataFrames) as JSON under ``name``.

    Non-finite floats become ``null``. Returns the JSON-ready copy.
    """
    from myst_nb import glue

    plain = _plain(obj)
    glue(name, json.dumps(plain, sort_keys=True), display=display)
    return plain


def read_record(ipynb: str | Path, name: str):
    """The object :func:`record` glued under ``name`` in an executed notebook.

    Raises
    ------
    KeyError
        If the notebook has no record of that name (the message lists the names it has).
    """
    import nbformat

    nb = nbformat.read(str(ipynb), as_version=4)
    found = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            scrap = out.get("metadata", {}).get("scrapbook", {})
            if "name" in scrap:
                found[scrap["name"]] = out["data"][scrap.get("mime_prefix", "") + "text/plain"]
    if name not in found:
        raise KeyError(f"{ipynb} has no record {name!r}; it has {sorted(found)}")
    return json.loads(ast.literal_eval(found[name]))


def declared_parameters(chapter: str) -> list[str]:
    """Names assigned in the ``parameters`` cell of ``notebooks/<chapter>.py`` (jupytext percent format), in order.

    Raises
    ------
    FileNotFoundError
        If the notebook source does not exist.
    ValueError
        If the notebook has no ``parameters`` cell or more than one.
    """
    from . import paths

    src = paths.notebooks_dir() / f"{chapter}.py"
    if not src.is_file():
        raise FileNotFoundError(f"no notebook source {src}")
    cells, current = [], None
    for line in src.read_text(encoding="utf-8").splitlines():
        if line.startswith("# %%"):
            current = [] if "parameters" in line.split("tags=", 1)[-1] and "tags=" in line else None
            if current is not None:
                cells.append(current)
        elif current is not None:
            current.append(line)
    if len(cells) != 1:
        raise ValueError(f"{src.name} has {len(cells)} cells tagged 'parameters'; it needs exactly one")
    tree = ast.parse("\n".join(cells[0]))
    names = []
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names += [t.id for t in targets if isinstance(t, ast.Name)]
    return names


def page_parameters(chapter: str, namespace: dict) -> dict:
    """The values of a notebook's declared parameters as the kernel holds them (after papermill's injection).

    Use in a notebook as ``params = report.page_parameters("sec3_1_layerwise", globals())``; the dict is
    what :func:`prh_lib.results.write` hashes, so reruns with the same parameters replace their own rows.
    """
    return {name: namespace[name] for name in declared_parameters(chapter)}


def format_p(p: float, n_permutations: int | None = None, *, digits: int = 3) -> str:
    """A permutation p-value as a reader should see it.

    At the floor of a permutation test with K permutations, p = 1/(K+1) says only that no permuted score
    reached the observed one, so it is written ``p ≤ 1/(K+1)`` (e.g. ``"p ≤ 0.005 (1/201)"``), never as
    the floor's decimal expansion. NaN gives ``"p = n/a"``.
    """
    if p is None or not math.isfinite(float(p)):
        return "p = n/a"
    if n_permutations:
        floor = 1.0 / (int(n_permutations) + 1)
        if float(p) <= floor * (1 + 1e-9):
            return f"p ≤ {floor:.{digits}f} (1/{int(n_permutations) + 1})"
    return f"p = {float(p):.{digits}f}"


def provenance(chapter: str, params: dict | None = None) -> str:
    """One line to print under a figure: the notebook, its parameters' hash, the commit and the date (UTC).

    Example: ``"sec3_1_layerwise · parameters 3f2a… · commit 0942376 · 2026-12-01"``.
    """
    import datetime

    from . import results

    commit = results.source_commit()[:7] or "not a git checkout"
    parts = [f"notebook {chapter}.py"]
    if params is not None:
        parts.append(f"parameters {results.params_hash(params)[:10]}")
    parts += [f"commit {commit}", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")]
    return " · ".join(parts)


def caption(fig, chapter: str, params: dict | None = None, *, fontsize: float = 8.0) -> None:
    """Write :func:`provenance` under a matplotlib figure (bottom left, outside the axes)."""
    fig.text(0.0, -0.01, provenance(chapter, params), fontsize=fontsize, color="0.35", ha="left", va="top",
             transform=fig.transFigure)
