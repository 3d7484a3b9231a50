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
    return list(declared_defaults(chapter))


def declared_defaults(chapter: str) -> dict[str, str]:
    """The ``parameters`` cell of ``notebooks/<chapter>.py`` as ``{name: source text of its default}``, in order.

    Raises as :func:`declared_parameters` does.
    """
    from prh_lib import paths

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
    code = "\n".join(cells[0])
    defaults = {}
    for node in ast.parse(code).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name):
                defaults[t.id] = ast.get_source_segment(code, node.value) if node.value is not None else ""
    return defaults


def setup_page(chapter: str, namespace: dict, *, blas_threads: int | None = None, dpi: int | None = None,
               float_format: str | None = None) -> dict:
    """A notebook's one set-up call: quiet logs and warnings, page tables and display options; its parameters.

    Silences what is not for a reader (tqdm's "IProgress not found", the NaN scores of a ViT's constant
    embedding-output CLS token, which each page explains, and ``prh_lib``'s log below ERROR), shows every
    DataFrame through :func:`page_table` with three decimals and whole cells, and, with ``blas_threads``, limits
    BLAS to that many threads (small matrices on a shared CPU gain nothing from more). ``dpi`` sets
    matplotlib's figure resolution; ``float_format`` (e.g. ``"{:.3f}"``) replaces the three-decimal precision.

    Returns
    -------
    dict
        :func:`page_parameters` of ``chapter``: what :func:`prh_lib.results.write` hashes.
    """
    import logging
    import warnings

    import pandas as pd

    warnings.filterwarnings("ignore", message="IProgress not found")
    warnings.filterwarnings("ignore", message=".*degenerate.*")
    logging.getLogger("prh_lib").setLevel(logging.ERROR)
    pd.set_option("display.precision", 3)
    if float_format is not None:
        pd.set_option("display.float_format", float_format.format)
    pd.set_option("display.max_colwidth", None)
    use_page_tables()
    if blas_threads is not None:
        import threadpoolctl

        namespace["_blas_limits"] = threadpoolctl.threadpool_limits(blas_threads)
    if dpi is not None:
        import matplotlib

        matplotlib.rcParams["figure.dpi"] = dpi
    return page_parameters(chapter, namespace)


def page_parameters(chapter: str, namespace: dict) -> dict:
    """The values of a notebook's declared parameters as the kernel holds them (after papermill's injection).

    Use in a notebook as ``params = report.page_parameters("sec3_1_layerwise", globals())``; the dict is
    what :func:`prh_lib.results.write` hashes, so reruns with the same parameters replace their own rows.
    """
    return {name: namespace[name] for name in declared_parameters(chapter)}


def provenance(chapter: str, params: dict | None = None) -> str:
    """One line to print under a figure: the notebook, its parameters' hash, the commit and the date (UTC).

    Example: ``"sec3_1_layerwise · parameters 3f2a… · commit 0942376 · 2026-12-01"``.
    """
    import datetime

    from prh_lib import results

    commit = results.source_commit()[:7] or "not a git checkout"
    parts = [f"notebook {chapter}.py"]
    if params is not None:
        parts.append(f"parameters {results.params_hash(params)[:10]}")
    parts += [f"commit {commit}", datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")]
    return " · ".join(parts)


def caption(fig, chapter: str, params: dict | None = None) -> None:
    """Write :func:`provenance` under a matplotlib figure, below everything else (:func:`prh_lib.pages.plots.add_footer`)."""
    from prh_lib.pages import plots

    plots.add_footer(fig, provenance(chapter, params))


#: PNG text key under which :func:`show_figure` stores what :func:`prh_lib.pages.plots.readable` measured (JSON).
FIGURE_METADATA_KEY = "prh:readability"


#: Output metadata key under which :func:`show_figure` keeps a figure's data (``{"file": ..., "csv": ...}``);
#: the book's build writes each as ``_static/data/<chapter>/<file>`` (``book/_ext/prh_book.py``).
FIGURE_DATA_KEY = "prh:figure-data"
_FIGURES_SHOWN: dict[str, int] = {}


def show_figure(fig, chapter: str, params: dict | None = None) -> dict:
    """Put a figure on the page: provenance line, text readable at page width, PNG with its measurements, its data.

    Adds :func:`caption`, runs :func:`prh_lib.pages.plots.readable` (no text below 9 pt as rendered), saves the PNG
    exactly as IPython's inline backend would (``bbox_inches="tight"``, the figure's dpi) with the measurements
    in a PNG text chunk :data:`FIGURE_METADATA_KEY` (the browser test reads it back from the built page and
    compares it with the size the image is drawn at), displays it and closes the figure. Under it, a link to
    ``_static/data/<chapter>/figure-<n>.csv`` (the ``n``-th figure this kernel showed for ``chapter``): what the
    figure draws, read from it by :func:`prh_lib.pages.plots.figure_data`, kept with the link in the output's
    metadata (:data:`FIGURE_DATA_KEY`) and written out by the book's build, which serves the page.

    Returns
    -------
    dict
        What :func:`prh_lib.pages.plots.readable` returned, with ``data`` (the CSV's path from the book's root)
        and ``data_rows`` (its rows); the PNG holds the same.
    """
    import html
    import io

    import matplotlib.pyplot as plt
    from IPython.display import HTML, Image, display

    from prh_lib.pages import plots

    caption(fig, chapter, params)
    fit = plots.readable(fig)
    data = plots.figure_data(fig)
    n = _FIGURES_SHOWN[chapter] = _FIGURES_SHOWN.get(chapter, 0) + 1
    fit.update(data=f"_static/data/{chapter}/figure-{n}.csv", data_rows=len(data))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi, bbox_inches="tight", pad_inches=plots._TIGHT_PAD_IN,
                metadata={FIGURE_METADATA_KEY: json.dumps(fit, sort_keys=True)})
    plt.close(fig)
    display(Image(data=buf.getvalue(), format="png"))
    link = html.escape(fit["data"])
    display(HTML(f'<p class="figure-data">Data behind this figure: <a href="{link}">figure-{n}.csv</a></p>'),
            metadata={FIGURE_DATA_KEY: {"file": f"figure-{n}.csv", "csv": data.to_csv(index=False)}})
    return fit


def page_table(df) -> "pd.DataFrame":
    """``df`` laid out for a page: its index as ordinary columns under their names, one header row.

    pandas' HTML puts a named index's names on a second header row of their own and leaves an empty cell
    above the index (the "empty index header" a reader has to skip). Here a default ``RangeIndex`` is dropped;
    any other index becomes leading columns, and in those a value repeated from the row above (within the
    same outer group) is left blank, as pandas sparsifies a MultiIndex. Column levels of a MultiIndex are
    joined with " · ". A p-value column (named ``p`` or ``p …``) that reads the same permutation-floor bound
    (:func:`format_p`, "≤ … (1/K+1)") on every row is dropped and said once in ``attrs["notes"]``. Nothing
    else changes: the values, their order and the float formatting are ``df``'s.
    """
    import pandas as pd

    out = df.copy()
    notes = []
    for col in list(out.columns):
        name = " ".join(map(str, col)) if isinstance(col, tuple) else str(col)
        if not (name == "p" or name.startswith("p ")) or len(out) < 2:
            continue
        cells = [str(v) for v in out[col]]
        bounds = sorted({v for v in cells if "≤" in v and "(1/" in v})
        if len(bounds) != 1:
            continue
        bound = bounds[0]
        floor = int(bound.split("(1/")[1].rstrip(")"))
        short = bound.split("(1/")[0].strip()
        short = short if short.startswith("p") else "p " + short
        why = (f"no permutation of the pairing out of {floor - 1} reached the observed score, the smallest p the "
               f"test can give (1/{floor}); it does not rank such rows (their intervals over images do).")
        if all(v == bound for v in cells):  # every row at the permutation floor: say it once
            out = out.drop(columns=[col])
            notes.append(f"{name}: {short} on every row: {why}")
        else:  # some rows at the floor: the short bound in their cells, the reason once
            out[col] = [short.removeprefix("p ") if v == bound else v for v in cells]
            notes.append(f"{name}: {short.removeprefix('p ')} means {why}")
    out.attrs["notes"] = notes
    if isinstance(out.columns, pd.MultiIndex):
        out.columns = [" · ".join(str(p) for p in c if str(p)) for c in out.columns]
    plain = isinstance(out.index, pd.RangeIndex) and out.index.name is None
    if plain:
        out = out.reset_index(drop=True)
        out.attrs["notes"] = notes
        return out
    unnamed = out.columns.name if out.index.nlevels == 1 and out.columns.name else ""
    names = [n if n is not None else (unnamed if out.index.nlevels == 1 else f"level {i}")
             for i, n in enumerate(out.index.names)]
    out.columns.name = None
    out.index = out.index.set_names(names)
    out = out.reset_index()
    if len(names) > 1 and len(out) > 1:
        keys = out[names].astype(str)
        same = pd.Series(True, index=out.index)
        for name in names[:-1]:  # the innermost level repeats by design: each row is one of its values
            same &= keys[name].eq(keys[name].shift())
            out[name] = out[name].astype(object).where(~same, "")
    out.attrs["notes"] = notes
    return out


def page_table_html(df) -> str:
    """:func:`page_table` as HTML: the table without an index, then each of its notes as a paragraph."""
    import html

    t = page_table(df)
    notes = "".join(f'<p class="table-note"><em>{html.escape(n)}</em></p>' for n in t.attrs.get("notes", []))
    return t.to_html(index=False, border=0, classes="dataframe") + notes


def use_page_tables() -> None:
    """Show every DataFrame on this notebook's page through :func:`page_table` (one header row, no index).

    Registers an HTML formatter for ``pandas.DataFrame`` with the running IPython kernel; a notebook calls it
    in its set-up cell (the caller's choice of how its page looks; nothing global changes outside IPython).
    """
    import pandas as pd
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        return
    shell.display_formatter.formatters["text/html"].for_type(
        pd.DataFrame, page_table_html)


def draws_table(draws) -> "pd.DataFrame":
    """One row per dataset of a study (:func:`prh_lib.data.study.study_draws`): its draws, N, whether they repeat,
    what varies between them and draw 0's first caption."""
    import pandas as pd

    rows = {}
    for d in draws:
        r = rows.setdefault(d.dataset, {"draws": 0, "N": len(d.pairs), "repeatable": d.repeatable,
                                        "what varies": d.what_varies, "example caption": d.pairs.texts[0]})
        r["draws"] += 1
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("dataset")
