"""Execute the notebooks with papermill into ``book/`` and build the Jupyter Book.

Usage (console script ``prh-run`` or ``python -m prh_lib.run.runner``)::

    prh-run                              # every notebook with the offline defaults, then build the book
    prh-run sec3_1_layerwise -p k=5      # one notebook with an override
    prh-run --params smoke --no-build    # small parameters, no book build
    prh-run --list                       # notebooks and their parameters
    prh-run sec3_1_layerwise --sweep k=5,10 --sweep seed=0,1   # every combination, into runs/

Notebook sources are jupytext percent-format ``notebooks/<name>.py`` files. Each is converted to an
``.ipynb`` and executed by papermill (kernel ``python3``) into ``book/<name>.ipynb``, with its parameters
folded into one box (:func:`fold_parameters`); the book is then built with ``jupyter-book build -W book``
(warnings are errors), chapters not run yet showing a placeholder page that says how to run them.
"""

from __future__ import annotations

import argparse
import contextlib
import ast
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from prh_lib.run import freshness, schedule
from prh_lib import paths, progress
from prh_lib.run.profiles import PROFILES, get_profile
from prh_lib.pages.report import declared_defaults, declared_parameters
from prh_lib.run.book import BookBuildError, available_notebooks, build_book, fold_parameters


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


def check_overrides(names, overrides) -> None:
    """Check every override (``-p key=value``) against the notebooks ``names`` before any kernel starts.

    Parameters come from :func:`prh_lib.pages.report.declared_defaults` (the names assigned in the notebook's one
    ``parameters`` cell, with their defaults), as in :func:`run_notebook`; a value must have its default's type
    (:func:`override_type_error`). Profiles are not checked: each notebook receives only the keys it declares.

    Raises
    ------
    ValueError
        If a notebook has no ``parameters`` cell or more than one (naming the notebook), an override is declared
        by none of the notebooks (naming it and the valid parameters), or a value has the wrong type (naming the
        parameter, the notebook, the expected type and the default).
    """
    declared = {n: declared_defaults(n) for n in names}
    valid = sorted({p for params in declared.values() for p in params})
    unknown = [k for k in overrides if k not in valid]
    if unknown:
        which = f"notebook {names[0]!r}" if len(names) == 1 else f"any of the notebooks {', '.join(names)}"
        raise ValueError(f"parameter {', '.join(map(repr, unknown))} is not declared by {which}; "
                         f"valid parameters: {', '.join(valid)}")
    for n, defaults in declared.items():
        for key, value in overrides.items():
            if key in defaults and (err := override_type_error(key, value, defaults[key])):
                raise ValueError(f"notebook {n!r}: {err}")


def override_type_error(key: str, value: object, default_source: str) -> str | None:
    """Why ``value`` cannot stand for a parameter whose default is written ``default_source``, or None if it can.

    The default's literal type is expected (an int also stands for a float, a tuple for a list); ``None`` is
    accepted for every parameter (the notebooks read it as "off" or "automatic"), and any value for a default
    that is ``None`` or not a literal."""
    try:
        default = ast.literal_eval(default_source)
    except (ValueError, SyntaxError):
        return None
    if default is None or value is None:
        return None
    kinds = {bool: (bool,), int: (int,), float: (int, float), str: (str,), list: (list, tuple), tuple: (list, tuple),
             dict: (dict,)}.get(type(default))
    if kinds is None or (isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)):
        return None
    return (f"parameter {key!r} expects {type(default).__name__} (its default is {default_source}); "
            f"got {value!r} ({type(value).__name__})")


def run_notebook(name: str, params: dict[str, object], *, output_dir: Path | None = None, quiet: bool = False,
                 prefix: str = "") -> Path:
    """Execute one notebook with the parameters it declares; return the executed ``.ipynb`` path.

    Parameters the notebook does not declare are ignored (so a profile can serve every notebook; the CLI rejects
    overrides no selected notebook declares, :func:`check_overrides`). The output is renamed into place only if
    execution succeeds. Unless ``quiet``, the kernel's progress lines are copied to stderr (each starting with
    ``prefix`` and bars collapsed to lines, when one is given: notebooks run side by side).

    Killed and concurrent runs. The notebook runs as one run of the results table (``PRH_RUN_ID``: the caller's, e.g. a
    sweep's, else a fresh one), marked started before the kernel starts and complete only once the executed notebook is
    in place (:func:`prh_lib.results.start_run`, :func:`~prh_lib.results.complete_run`): a run killed or failed half-way
    leaves no rows that :func:`prh_lib.results.load` returns. Runs of the same notebook on one cache take turns
    (:func:`chapter_lock`), the second printing one line saying it waits.

    Raises
    ------
    ValueError
        If the notebook does not have exactly one ``parameters`` cell (it would silently ignore every parameter).
    """
    from prh_lib import results

    declared = declared_parameters(name)
    output_dir = paths.book_dir() if output_dir is None else Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    run_id = os.environ.get("PRH_RUN_ID") or results.new_run_id()
    with chapter_lock(name), _env("PRH_RUN_ID", run_id):  # the kernel inherits the run id
        # the inputs as they are before the kernel starts: a change while it runs makes the page stale
        inputs = {"digests": freshness.input_digests(name, {k: v for k, v in params.items() if k in declared}),
                  "run_id": run_id}
        results.start_run(run_id)
        out = _execute_notebook(name, params, declared, output_dir, quiet=quiet, prefix=prefix, inputs=inputs)
        results.complete_run(run_id)
    return out


def _execute_notebook(name: str, params: dict[str, object], declared, output_dir: Path, *, quiet: bool,
                      prefix: str, inputs: dict | None = None) -> Path:
    import papermill
    from traitlets.config import Config

    with tempfile.TemporaryDirectory() as tmp:
        src = notebook_to_ipynb(name, Path(tmp) / f"{name}.ipynb")
        used = {k: v for k, v in params.items() if k in declared}
        out = output_dir / f"{name}.ipynb"
        # not quiet: the kernel reports its steps (which model, which draw, bars) on a side channel that is
        # copied to this terminal, never into the page (prh_lib.progress)
        live = _progress_channel(Path(tmp) / "progress.log", prefix) if not quiet else contextlib.nullcontext()
        # executed into this run's private folder, then moved into place atomically: a chapter runs for up to half an
        # hour, and a temporary folder in book/ untouched that long would be removed as a killed write's
        # (paths.remove_stale_temporaries)
        executed = Path(tmp) / "executed" / f"{name}.ipynb"
        executed.parent.mkdir()
        # the kernel inherits MPLBACKEND; a non-inline one set for headless scripts (e.g. Agg) records no images
        with _env("MPLBACKEND", "module://matplotlib_inline.backend_inline"), live:
            papermill.execute_notebook(
                str(src), str(executed), parameters=used, kernel_name="python3",
                cwd=str(paths.repo_root()), progress_bar=False, log_output=False,
                # written once, at the end (or at the failing cell): saving after every cell costs 0.6-0.8 s a chapter,
                # and the terminal follows the progress channel, not the notebook
                request_save_on_cell_execute=False,
                # once the last cell has replied nothing is left to run (files are written atomically within a cell,
                # prh_lib registers no exit hooks), while a graceful shutdown waits 1-1.5 s for Python with torch to
                # finalise; a batch kernel keeps no IPython history (nothing to flush, no database shared by
                # side-by-side kernels)
                shutdown_kernel="immediate", extra_arguments=["--HistoryManager.enabled=False"],
                config=Config({"KernelManager": {**_KERNEL_CONFIG["KernelManager"], "ip": str(Path(tmp) / "kernel")}}),
            )
        fold_parameters(executed, source=f"notebooks/{name}.py")
        if inputs is not None:  # what prh-run's up-to-date check compares (prh_lib.run.freshness)
            import nbformat

            nb = nbformat.read(str(executed), as_version=4)
            nb.metadata[freshness.METADATA_KEY] = inputs
            nbformat.write(nb, str(executed))
        with paths.atomic_path(out) as tmp_out:
            shutil.move(executed, tmp_out)
    return out


@contextmanager
def chapter_lock(name: str, *, log=None):
    """Hold the lock of notebook ``name`` on this cache while the body runs; wait for it when another has it.

    The lock is ``fcntl.flock`` on ``PRH_CACHE_DIR/locks/<name>.lock``, released by the operating system when the
    holder's file is closed, also when the process is killed (``kill -9``), so no lock is left stale. Two ``prh-run`` of
    one chapter on one cache thus run one after the other, each complete (the second finds the first's features cached).
    Before waiting, one line naming the chapter and the lock file goes to ``log`` (default stderr).

    Yields
    ------
    Path
        The lock file.

    Raises
    ------
    prh_lib.paths.CacheWriteError
        If the lock file cannot be created because the cache is read-only or its disk is full (naming it).
    """
    import fcntl

    from prh_lib.paths import disk_error

    path = paths.cache_root() / "locks" / f"{name}.lock"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")
    except OSError as err:
        raise (disk_error(err, path) or err) from err
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"[prh-run] {name}: another prh-run of this notebook is running on this cache; waiting for it "
                  f"to finish (lock {path})", file=log or sys.stderr, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield path  # closing the file releases the lock


# The kernel talks to papermill over IPC sockets, not unencrypted TCP on localhost (which ipykernel warns about), with
# their files in the run's own temporary folder ("ip"): kernels side by side (prh_lib.run.schedule) would otherwise pick
# the same names.
_KERNEL_CONFIG = {"KernelManager": {"transport": "ipc"}}

@contextmanager
def _progress_channel(path: Path, prefix: str = ""):
    """Point the kernel (it inherits the environment) at the progress file ``path`` and follow it."""
    with _env(progress.ENV, str(path)), progress.follow(path, prefix=prefix):
        yield


# --------------------------------------------------------------------------------------------- sweeps
# ``prh-run NOTEBOOK --sweep k=5,10 --sweep seed=0,1`` executes every combination into
# ``runs/<notebook>/<slug>.ipynb`` (never into book/), each as its own run of the results table.


def parse_sweep(text: str) -> tuple[str, list[object]]:
    """Parse ``key=v1,v2,...`` into ``(key, [v1, v2, ...])``.

    Values are split at top-level commas and read as Python literals where they are ones (``clip_q=None,0.95`` ->
    ``[None, 0.95]``; ``fracs=[0.5,1.0],[1.0]`` -> two lists), else kept as strings (``device=cpu,cuda``).

    Raises
    ------
    ValueError
        If ``text`` is not of the form ``key=values``, or a value repeats.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not raw.strip():
        raise ValueError(f"sweep {text!r} is not of the form key=v1,v2,...")
    try:
        values = list(ast.literal_eval(f"({raw},)"))
    except (ValueError, SyntaxError):
        values = [parse_override(f"{key}={v}")[1] for v in raw.split(",")]
    return key, _check_sweep_values(key, values)


def _check_sweep_values(key: str, values: list[object]) -> list[object]:
    if not values:
        raise ValueError(f"sweep of {key!r} has no values")
    seen = [repr(v) for v in values]
    dup = sorted({v for v in seen if seen.count(v) > 1})
    if dup:
        raise ValueError(f"sweep of {key!r} repeats value(s) {', '.join(dup)}")
    return values


def read_sweep_file(path: str | Path) -> dict[str, list[object]]:
    """Read a YAML grid ``{key: [values], ...}`` (a scalar is one value).

    Raises
    ------
    ValueError
        If the file is not a mapping of parameter names to values, or a list is empty or repeats a value.
    """
    import yaml

    grid = yaml.safe_load(Path(path).read_text())
    if not isinstance(grid, dict) or not grid or not all(isinstance(k, str) for k in grid):
        raise ValueError(f"sweep file {path} must map parameter names to lists of values, "
                         f"e.g. {{k: [5, 10], seed: [0, 1]}}; got {grid!r}")
    return {k: _check_sweep_values(k, list(v) if isinstance(v, list) else [v]) for k, v in grid.items()}


def sweep_grid(sweeps: list[str], sweep_file: str | Path | None = None) -> dict[str, list[object]]:
    """The grid of ``--sweep`` texts and an optional ``--sweep-file``; a key may be given once.

    Raises
    ------
    ValueError
        If a key is swept twice, or a sweep is malformed.
    """
    grid = read_sweep_file(sweep_file) if sweep_file else {}
    for text in sweeps:
        key, values = parse_sweep(text)
        if key in grid:
            raise ValueError(f"parameter {key!r} is swept twice; give its values once")
        grid[key] = values
    return grid


def sweep_combinations(grid: dict[str, list[object]]) -> list[dict[str, object]]:
    """Every combination of the grid (cartesian product, first key slowest), as parameter dicts."""
    import itertools

    return [dict(zip(grid, values)) for values in itertools.product(*grid.values())]


def parameter_slug(combo: dict[str, object]) -> str:
    """A file-name-safe slug of a combination, ``k=5__seed=0``; long or unusual values are shortened with a hash."""
    import hashlib
    import re

    def text(v):
        return v if isinstance(v, str) else repr(v)

    parts = [f"{k}={re.sub(r'[^A-Za-z0-9._+-]+', '-', text(v)).strip('-') or '-'}" for k, v in combo.items()]
    slug = "__".join(parts)
    exact = "__".join(f"{k}={text(v)}" for k, v in combo.items())
    if slug != exact or len(slug) > 120:  # lossy: a hash of the exact values keeps slugs distinct
        slug = f"{slug[:100]}__{hashlib.sha256(exact.encode()).hexdigest()[:8]}"
    return slug


def check_sweep_keys(name: str, grid) -> None:
    """Check that notebook ``name`` declares every swept key of ``grid`` and each value has its default's type.

    Raises
    ------
    ValueError
        Naming the undeclared key(s) and the notebook's parameters, or a value of the wrong type
        (:func:`override_type_error`), or if the notebook does not have exactly one ``parameters`` cell.
    """
    declared = declared_defaults(name)
    unknown = [k for k in grid if k not in declared]
    if unknown:
        raise ValueError(f"notebook {name!r} declares no parameter {', '.join(map(repr, unknown))} to sweep; "
                         f"its parameters: {', '.join(sorted(declared))}")
    for key, values in (grid.items() if isinstance(grid, dict) else ()):
        for value in values:
            if err := override_type_error(key, value, declared[key]):
                raise ValueError(f"notebook {name!r}: {err}")


def list_parameters(names) -> str:
    """``prh-run --list``: each notebook, then its parameters one per line with their defaults as written."""
    lines = []
    for n in names:
        lines.append(n)
        for key, default in declared_defaults(n).items():
            text = " ".join(default.split())
            lines.append(f"  {key} = {text if len(text) <= 90 else text[:87] + '...'}")
    return "\n".join(lines)


@contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def run_sweep(name: str, params: dict[str, object], grid: dict[str, list[object]], *,
              runs_dir: Path | None = None, headline: str = "peak", log=print):
    """Execute notebook ``name`` for every combination of ``grid`` on top of ``params``.

    Each combination runs as its own run of the results table (``PRH_RUN_ID``) into ``<runs_dir>/<name>/<slug>.ipynb``
    (default ``paths.runs_dir()``), progress lines prefixed with the combination; a failing combination is recorded (its
    stale notebook removed) and the others still run.

    Returns
    -------
    runs : DataFrame
        One row per combination: the swept parameters, ``status`` (``"ok"`` / ``"failed"``), ``seconds``,
        ``rows`` (result rows the run wrote), ``run_id``, ``error`` and ``notebook``.
    scores : DataFrame
        :func:`sweep_scores` of the runs' rows: the headline the page reads, one row per comparison and
        dataset, one column per combination.

    Raises
    ------
    ValueError
        If the notebook does not declare a swept key or a value has the wrong type (checked before anything runs).
    """
    from prh_lib import results

    check_sweep_keys(name, grid)
    out_dir = Path(runs_dir if runs_dir is not None else paths.runs_dir()) / name
    out_dir.mkdir(parents=True, exist_ok=True)
    combos = sweep_combinations(grid)
    records = []
    for i, combo in enumerate(combos, 1):
        slug, run_id = parameter_slug(combo), results.new_run_id()
        final = out_dir / f"{slug}.ipynb"
        log(f"[prh-run] sweep {name} {i}/{len(combos)}: {slug} (run {run_id})", flush=True)
        t0 = time.perf_counter()
        tmp = Path(tempfile.mkdtemp(prefix=f".{slug}.", dir=out_dir))
        try:
            with _env("PRH_RUN_ID", run_id):
                out = run_notebook(name, {**params, **combo}, output_dir=tmp, prefix=f"[{slug}] ")
            os.replace(out, final)
            status, error = "ok", ""
        except Exception as err:  # noqa: BLE001 -- reported in the table; the other combinations still run
            final.unlink(missing_ok=True)
            status, error = "failed", f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}"
            log(f"[prh-run] {slug} failed: {error}", flush=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        records.append({**{k: repr(v) if isinstance(v, (list, dict, tuple)) else v for k, v in combo.items()},
                        "status": status, "seconds": round(time.perf_counter() - t0, 1), "run_id": run_id,
                        "combination": slug, "error": error, "notebook": str(final) if status == "ok" else ""})
    import pandas as pd

    runs = pd.DataFrame(records)
    rows = results.load(run_id=list(runs["run_id"]))
    runs["rows"] = runs["run_id"].map(rows.groupby("run_id").size()).fillna(0).astype(int)
    return runs, sweep_scores(rows, dict(zip(runs["run_id"], runs["combination"])), headline=headline)


def sweep_scores(rows, combinations: dict[str, str], *, headline: str = "peak"):
    """The score each run's page reads as its headline, one row per comparison and dataset, one column per run.

    Of each run's rows with ``quantity == headline`` only the page's preprocessing is kept: that of its ``"layer_pair"``
    rows (the heatmaps' and verdicts'), else its most frequent one (3.1's ``clip_compare`` writes other clipping
    choices' peaks beside it). Scores are averaged over the run's draws, as in the page's tables.

    Parameters
    ----------
    rows : DataFrame
        Rows of the results table (:func:`prh_lib.results.load`) of the runs.
    combinations : dict
        ``{run_id: column label}`` in column order (a sweep's combination slugs).
    headline : str, default "peak"

    Returns
    -------
    DataFrame
        Columns ``comparison`` (``"<model_x> × <model_y>"``, the metric first when several), ``dataset``,
        ``preprocessing``, then one column per run (NaN where a run wrote no such row).
    """
    import pandas as pd

    keep = []
    for run_id, run in rows.groupby("run_id"):
        head = run[run["quantity"] == headline]
        pre = run.loc[run["quantity"] == "layer_pair", "preprocessing"].dropna()
        pre = pre if len(pre) else head["preprocessing"].dropna()
        keep.append(head[head["preprocessing"] == pre.mode().iloc[0]] if len(pre) else head)
    head = pd.concat(keep) if keep else rows.iloc[:0]
    head = head[head["run_id"].isin(list(combinations))]
    columns = ["comparison", "dataset", "preprocessing", *combinations.values()]
    if head.empty:
        return pd.DataFrame(columns=columns)
    pair = head["model_x"].fillna("").astype(str) + " × " + head["model_y"].fillna("").astype(str)
    label = head["metric"].astype(str) + " " + pair if head["metric"].nunique() > 1 else pair
    wide = head.assign(comparison=label, column=head["run_id"].map(combinations),
                       preprocessing=head["preprocessing"].fillna("")).pivot_table(
        index=["comparison", "dataset", "preprocessing"], columns="column", values="score", aggfunc="mean")
    return wide.reindex(columns=list(combinations.values())).reset_index().reindex(columns=columns)


def format_sweep_table(runs, scores, *, headline: str = "peak") -> str:
    """:func:`run_sweep`'s two tables as terminal text: the runs (status, time, rows, run id, error), then the
    headline scores with one column per combination."""
    def left(df):  # words read left-aligned, numbers right-aligned
        words = [c for c in df.columns if c in ("combination", "status", "run_id", "error", "comparison", "dataset")]
        widths = {c: max(len(c), *(len(str(v)) for v in df[c])) for c in words}
        return df.to_string(index=False, justify="left", float_format=lambda x: f"{x:.4f}",
                            formatters={"seconds": "{:.1f}".format,
                                        **{c: (lambda w: lambda v: f"{v!s:<{w}}")(widths[c]) for c in words}})

    shown = runs[["combination", "status", "seconds", "rows", "run_id"] + (["error"] if (runs["error"] != "").any() else [])]
    text = left(shown)
    if not scores.empty:
        body = scores.drop(columns=["preprocessing"] if scores["preprocessing"].nunique() <= 1 else [])
        pre = scores["preprocessing"].iloc[0] if scores["preprocessing"].nunique() == 1 else ""
        text += f"\n\n{headline} score (mean over draws{', preprocessing ' + pre if pre else ''}):\n" + left(body)
    return text


def _add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("sweeps (executed notebooks go to runs/<notebook>/, never to book/)")
    g.add_argument("--sweep", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="sweep one parameter over values (repeatable; every combination runs)")
    g.add_argument("--sweep-file", type=Path, default=None, metavar="GRID.yaml",
                   help="YAML grid {key: [values], ...} to sweep")
    g.add_argument("--runs-dir", type=Path, default=None, help="where sweeps write (default: runs/, PRH_RUNS_DIR)")
    g.add_argument("--headline", default="peak", metavar="QUANTITY",
                   help="results-table quantity shown per combination (default: peak)")


def _sweep_main(parser: argparse.ArgumentParser, args, params: dict[str, object]) -> int:
    if not args.notebooks:
        parser.error("--sweep needs the notebook(s) to sweep, e.g. prh-run sec3_1_layerwise --sweep k=5,10")
    if args.output_dir is not None or args.build_only or args.list:
        parser.error("--sweep writes to --runs-dir and builds no book; drop --output-dir/--build-only/--list")
    try:
        grid = sweep_grid(args.sweep, args.sweep_file)
        for n in args.notebooks:  # every notebook is checked before any runs
            check_sweep_keys(n, grid)
    except (ValueError, OSError) as err:
        parser.error(str(err))
    failed = 0
    for n in args.notebooks:
        runs, scores = run_sweep(n, params, grid, runs_dir=args.runs_dir, headline=args.headline)
        failed += int((runs["status"] != "ok").sum())
        where = Path(args.runs_dir if args.runs_dir is not None else paths.runs_dir()) / n
        csv = where / f"sweep-{time.strftime('%Y%m%d-%H%M%S')}.csv"
        with paths.atomic_path(csv) as tmp:  # the whole table: both tables joined, one row per score and run
            scores.melt(id_vars=["comparison", "dataset", "preprocessing"], var_name="combination",
                        value_name=args.headline).merge(runs, on="combination").to_csv(tmp, index=False)
        print(f"\n[prh-run] sweep of {n} ({args.params} profile), notebooks in {where}:\n"
              f"{format_sweep_table(runs, scores, headline=args.headline)}\n[prh-run] the whole table: {csv}", flush=True)
    if failed:
        print(f"[prh-run] {failed} combination(s) failed", file=sys.stderr, flush=True)
    return 1 if failed else 0


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
    parser.add_argument("--force", action="store_true",
                        help="execute every named notebook, even those whose inputs are unchanged since their page "
                             "was written (by default these are skipped; see prh_lib.run.freshness)")
    parser.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                        help="notebooks executed side by side (default: PRH_JOBS, else from the cores this process "
                             "may use: 2 on up to 3 cores, one per 2 cores beyond; 1 on a GPU)")
    parser.add_argument("--no-plan", action="store_true",
                        help="skip extracting the notebooks' feature files over every core first (each notebook "
                             "then extracts what it misses; see prh_lib.run.extraction)")
    _add_sweep_arguments(parser)
    args = parser.parse_args(argv)

    names = args.notebooks or available_notebooks()
    unknown = [n for n in names if n not in available_notebooks()]
    if unknown:
        parser.error(f"unknown notebooks {unknown}; available: {available_notebooks()}")
    if args.list:
        print(list_parameters(names))
        return 0
    try:
        params = get_profile(args.params)
        overrides = dict(parse_override(o) for o in args.overrides)
        if not args.build_only:  # before anything runs: every notebook has one parameters cell, every -p is used
            check_overrides(names, overrides)
        params.update(overrides)
    except (ValueError, FileNotFoundError) as err:
        parser.error(str(err))
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    try:
        with schedule.stopping_on_signals():
            if args.sweep or args.sweep_file:
                return _sweep_main(parser, args, params)
            return _run_and_build(args, names, params, overrides)
    except schedule.RunStopped as stop:
        print(f"[prh-run] {stop}: its workers and notebook kernels were ended, no page or results part was written "
              "after the signal, and each notebook's last complete run stays the latest", file=sys.stderr, flush=True)
        return 128 + stop.signum


def _run_and_build(args, names, params, overrides) -> int:
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    if not args.build_only:
        what = args.params + "".join(f", {k}={v!r}" for k, v in overrides.items())
        stale = names if args.force else _stale_notebooks(names, params, args.params, args.output_dir)
        jobs = args.jobs if args.jobs is not None else schedule.default_jobs(params, len(stale))
        from prh_lib.extract.features import EXTRACTION_LOG
        from prh_lib.run import extraction  # imports torch: only when notebooks run

        if stale and not args.no_plan and (spent := extraction.extract_first(stale, params)) is not None:
            seconds["(extraction)"] = spent
        try:
            with tempfile.TemporaryDirectory() as tmp, _env(EXTRACTION_LOG, str(Path(tmp) / "log")):
                if stale:
                    seconds.update(schedule.run_notebooks(stale, params, run=run_notebook, what=what, jobs=jobs,
                                                           output_dir=args.output_dir))
                extraction.report_misses(Path(tmp) / "log")
        except schedule.NotebookFailed as err:
            print(f"[prh-run] {err}", file=sys.stderr)
            return 1
        from prh_lib import results

        results.compact(archive=True)  # superseded runs out of the way of every later load (kept, not deleted)
    if not args.no_build:
        t0 = time.perf_counter()
        try:
            html = build_book()
        except BookBuildError as err:
            print(f"[prh-run] {err}", file=sys.stderr)
            return 1
        seconds["(book build)"] = time.perf_counter() - t0
        print(f"[prh-run] book: {html / 'index.html'}", flush=True)
    if len(seconds) > 1:
        print(timing_table(seconds, total=time.perf_counter() - start), flush=True)
    return 0


def _stale_notebooks(names, params, profile: str, output_dir: Path | None) -> list[str]:
    """The notebooks of ``names`` to execute: all of them unless every input is local
    (:func:`prh_lib.run.freshness.skipping_allowed`), else those whose page is missing or was written from other
    inputs (:func:`prh_lib.run.freshness.up_to_date`). Prints one line per notebook saying which and why."""
    if not freshness.skipping_allowed(profile):
        return list(names)
    folder = paths.book_dir() if output_dir is None else Path(output_dir)
    stale = []
    for n in names:
        declared = declared_parameters(n)
        digests = freshness.input_digests(n, {k: v for k, v in params.items() if k in declared})
        fresh, why = freshness.up_to_date(folder / f"{n}.ipynb", digests)
        if fresh:
            print(f"[prh-run] {n}: up to date (no input changed since its page was written; --force executes it)",
                  flush=True)
        else:
            stale.append(n)
            print(f"[prh-run] {n}: to execute ({why})", flush=True)
    return stale


def timing_table(seconds: dict[str, float], *, total: float) -> str:
    """The wall time of each step of a ``prh-run``, slowest first, and the total, as aligned text."""
    width = max(map(len, seconds))
    lines = ["[prh-run] wall time per step:"]
    lines += [f"  {name:<{width}}  {s:7.1f} s" for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])]
    lines.append(f"  {'total':<{width}}  {total:7.1f} s")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
