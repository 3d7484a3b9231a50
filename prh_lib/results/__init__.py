"""One tidy results table: every score a chapter computes is one row, every parameter a column.

The table lives in the cache as Parquet files, one per *write* of a *run*, under ``paths.cache_dir("results")``::

    results/<chapter>/<chapter>__<params_hash>__<run_id>__<part>.parquet

A **run** is one execution of a notebook (one Python process, or one ``PRH_RUN_ID``); each :func:`write` call adds one
*part*, and all parts are kept. A **rerun** (same chapter and parameters) replaces, when the table is read, the rows of
earlier runs for every ``(chapter, params_hash, dataset, draw)`` it wrote, so rerunning never duplicates rows.

Concurrency. Each file is written under a temporary name and renamed into place (atomic on POSIX, NFS and Lustre
included); file names never collide (the run id holds a timestamp and a random token), so concurrent writers lose no
rows and a reader sees each file complete or not at all. :func:`load` drops superseded runs by content alone: per run
key the run whose first row there was created last wins (ties broken by run id).

Runs of ``prh-run``: all or nothing. A run killed between two parts would look like a complete rerun, so ``prh-run``
brackets every notebook with :func:`start_run` and :func:`complete_run` (markers in :data:`RUNS`). **A run with a
``.started`` marker is invisible** (supersedes nothing) to :func:`load` and :func:`compact`, except to itself (its
``PRH_RUN_ID``) and to ``load(include_superseded=True)``. Runs without a marker (plain papermill, a script) are visible
from their first part.

Columns (``COLUMNS``; types after :func:`load`):

============== ========= ===================================================================================
column         type      meaning
============== ========= ===================================================================================
model_x        str       first model (as the zoo / Hugging Face names it); None when the row has no model
model_y        str       second model
layer_x        str       layer label of ``model_x`` as the model labels it (``"embed"``, ``"layer.3"``, ...)
layer_y        str       layer label of ``model_y``
depth_x        float     relative depth of ``layer_x`` in [0, 1] (0: embedding output, 1: last layer)
depth_y        float     relative depth of ``layer_y`` in [0, 1]
metric         str       metric name as in ``prh_lib.metrics`` (``"mutual_knn"``, ``"cka_linear"``, ...)
k              Int64     neighbours of k-NN metrics; <NA> for metrics without k
n              Int64     number of image-caption pairs N the score was computed on
dataset        str       dataset label (source and options, e.g. ``"coco-mini/first"``)
draw           Int64     index of the independent draw of the pairs (0, 1, ...)
seed           Int64     seed that made the draw (or of the model / permutation), <NA> when none
score          float     the score (NaN allowed, e.g. for a degenerate layer)
calibrated     float     calibrated score (Section 2 of the paper), NaN when not computed
tau            float     calibration threshold tau (the permutation-null quantile), NaN when not computed
p              float     permutation p-value in [0, 1], NaN when not computed
preprocessing  str       named preprocessing applied before scoring, e.g. ``"clip_outliers(q=0.95)"``
quantity       str       what the row is: ``"peak"``, ``"final"``, ``"layer_pair"``, ``"control:shuffled"``,
                         ... (free-form; chapters document theirs)
chapter        str       notebook that wrote the row (set by :func:`write`)
lib_version    str       ``prh_lib.__version__`` (set by :func:`write`)
commit         str       git commit of the source checkout, ``""`` when unknown (set by :func:`write`)
params_hash    str       16 hex digits of the SHA-256 of the notebook parameters (set by :func:`write`)
params         str       the parameters as canonical JSON (set by :func:`write`)
run_id         str       the run that wrote the row (set by :func:`write`)
created        datetime  UTC time of the write (set by :func:`write`)
extra          str       JSON object of the row's columns that are not in this schema (``"{}"`` when none)
============== ========= ===================================================================================

Extra columns. Columns beyond the schema (``n_components``, ``ci_low``, ...) are stored per row in the ``extra`` JSON
column, so every file has the same Parquet schema; ``load(expand_extra=True)`` (or :func:`expand_extra`) unpacks them.
The schema (``COLUMNS``, ``REQUIRED``, ``PROVENANCE``, ``RUN_KEY``), row validation and type coercion live in
:mod:`prh_lib.results.schema`; the names are re-exported here."""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import subprocess
import uuid
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from prh_lib import __version__, paths
from prh_lib.paths import disk_error
from prh_lib.results.schema import (COLUMNS, PROVENANCE, REQUIRED, RUN_KEY, _arrow_schema, _canonical_json, _is_null,
    _validate_rows)

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


# --------------------------------------------------------------------------------------------- identity


def params_hash(params: Mapping[str, object]) -> str:
    """16 hex digits of the SHA-256 of ``params`` as canonical JSON (keys sorted; tuples as lists).

    Values JSON cannot hold are written as their ``repr`` (NumPy scalars as Python numbers, paths as strings)."""
    return hashlib.sha256(_canonical_json(params).encode()).hexdigest()[:16]


def new_run_id() -> str:
    """A fresh run id: UTC start time to the microsecond and a random token (``20250101T120000.123456Z-ab12cd34``); run
    ids sort in start order and are safe in file names."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S.%fZ") + "-" + secrets.token_hex(4)


_PROCESS_RUN_ID: str | None = None


def current_run_id() -> str:
    """The run id of this process: ``PRH_RUN_ID`` when set (the sweep runner sets it), else one fresh id per process
    (one papermill execution is one kernel process, so one run).

    Raises
    ------
    ValueError
        If ``PRH_RUN_ID`` is not safe in a file name.
    """
    global _PROCESS_RUN_ID
    env = os.environ.get("PRH_RUN_ID")
    if env:
        return _check_safe("PRH_RUN_ID", env)
    if _PROCESS_RUN_ID is None:
        _PROCESS_RUN_ID = new_run_id()
    return _PROCESS_RUN_ID


@lru_cache(maxsize=1)
def source_commit() -> str:
    """Git commit of the source checkout (``git rev-parse HEAD``), or ``""`` when it is not a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=paths.repo_root(), capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def _check_safe(what: str, value: str) -> str:
    if not isinstance(value, str) or not _SAFE.match(value):
        raise ValueError(f"{what}={value!r} must be a non-empty name of letters, digits and _.+- "
                         "(it is part of a file name)")
    return value


# --------------------------------------------------------------------------------------------- writing


def write(rows, *, chapter: str, params: Mapping[str, object], dataset: str | None = None,
          draw: int | None = None, run_id: str | None = None, root: str | Path | None = None,
          **constants) -> Path | None:
    """Add ``rows`` to the results table as one part of the current run; return the file written.

    Parameters
    ----------
    rows : DataFrame, list of dict or dict of lists
        One row per score. Columns named as in :data:`COLUMNS`; other columns go to ``extra``.
    chapter : str
        Notebook name (letters, digits, ``_.+-``).
    params : mapping
        The notebook's parameters; their hash identifies the run's configuration (:func:`params_hash`).
    dataset, draw : optional
        Values for every row, when ``rows`` has no such column.
    run_id : str, optional
        Run to write into (default :func:`current_run_id`); a later run with the same ``chapter``, ``params`` and
        dataset/draw supersedes its writes.
    root : path, optional
        Folder of the table (default ``paths.cache_dir("results")``).
    **constants
        Further schema columns with one value for every row (``k=10``, ``quantity="peak"``, ...), when ``rows`` has no
        such column.

    Returns
    -------
    Path or None
        The Parquet file written, or None when ``rows`` is empty (nothing is written).

    Raises
    ------
    ValueError
        If a required column (:data:`REQUIRED`) is missing or null, a value has the wrong type or is out of range (the
        message names the column), a column is given both in ``rows`` and as a keyword, ``rows`` carries a column
        :func:`write` sets itself, a keyword is not a schema column, or ``chapter`` / ``run_id`` is not safe in a file
        name.

    Examples
    --------
    >>> results.write([{"metric": "mutual_knn", "score": 0.12, "quantity": "peak"}],
    ...               chapter="demo", params={"k": 10}, dataset="coco-mini/first", draw=0, k=10)  # doctest: +SKIP
    """
    _check_safe("chapter", chapter)
    run_id = current_run_id() if run_id is None else _check_safe("run_id", run_id)
    df = _validate_rows(rows, dataset=dataset, draw=draw, **constants)
    if df.empty:
        return None
    p_json = _canonical_json(dict(params))
    p_hash = params_hash(dict(params))
    df["chapter"] = chapter
    df["lib_version"] = __version__
    df["commit"] = source_commit()
    df["params_hash"] = p_hash
    df["params"] = p_json
    df["run_id"] = run_id
    df["created"] = pd.Timestamp.now(tz="UTC").floor("us")
    df = df[list(COLUMNS)]
    # the part name is a hash of what the rows are, so re-executing a cell in the same run replaces its file
    ident = df[[c for c in COLUMNS if c not in PROVENANCE and c not in ("score", "calibrated", "tau", "p")]]
    part = hashlib.sha256(ident.to_json(orient="values").encode()).hexdigest()[:12]
    folder = (Path(root) if root is not None else paths.cache_dir("results")) / chapter
    final = folder / f"{chapter}__{p_hash}__{run_id}__{part}.parquet"
    _write_atomic(df, final)
    return final


def _write_atomic(df: pd.DataFrame, final: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, schema=_arrow_schema(), preserve_index=False)
    tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:  # on disk before the rename makes it visible
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException as err:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        clear = disk_error(err, final) if isinstance(err, Exception) else None
        if clear is not None and clear is not err:
            raise clear from err  # full disk or read-only: say so and name the file
        raise


# --------------------------------------------------------------------------------------------- runs of prh-run

#: Folder of the table that holds one marker per run started by ``prh-run``: ``<run_id>.started`` until the run finishes
#: (running, or killed), then ``<run_id>.complete`` (see the module docstring).
RUNS = ".runs"


def _marker(run_id: str, state: str, root) -> Path:
    folder = (Path(root) if root is not None else paths.cache_dir("results")) / RUNS
    return folder / f"{_check_safe('run_id', run_id)}.{state}"


def start_run(run_id: str, *, root: str | Path | None = None) -> Path:
    """Mark ``run_id`` as started: its parts stay out of :func:`load` until :func:`complete_run`.

    Called by ``prh-run`` before a notebook's kernel starts; starting a run id again (``PRH_RUN_ID`` reused) hides its
    parts again until it completes again.

    Returns
    -------
    Path
        The marker file ``<root>/.runs/<run_id>.started``.

    Raises
    ------
    ValueError
        If ``run_id`` is not safe in a file name.
    prh_lib.paths.CacheWriteError
        If the marker cannot be written because the disk is full or read-only (naming it).
    """
    started = _marker(run_id, "started", root)
    try:
        started.parent.mkdir(parents=True, exist_ok=True)
        started.touch()
        _marker(run_id, "complete", root).unlink(missing_ok=True)
    except OSError as err:
        raise (disk_error(err, started) or err) from err
    return started


def complete_run(run_id: str, *, root: str | Path | None = None) -> Path:
    """Mark ``run_id`` as complete (its ``.started`` marker renamed, atomically): its parts become visible.

    Returns
    -------
    Path
        The marker file ``<root>/.runs/<run_id>.complete``.

    Raises
    ------
    FileNotFoundError
        If the run was never started with :func:`start_run` (naming the marker).
    """
    started, complete = _marker(run_id, "started", root), _marker(run_id, "complete", root)
    try:
        os.replace(started, complete)
    except FileNotFoundError:
        raise FileNotFoundError(f"run {run_id} was never started: no marker {started}") from None
    return complete


def unfinished_runs(*, root: str | Path | None = None) -> set[str]:
    """Run ids that ``prh-run`` started and that have not completed (still running, killed or failed)."""
    folder = (Path(root) if root is not None else paths.cache_dir("results")) / RUNS
    if not folder.is_dir():
        return set()
    return {f.name[: -len(".started")] for f in folder.glob("*.started")}


def _hidden_runs(root: Path) -> set[str]:
    """Runs whose parts :func:`load` and :func:`compact` leave out: the unfinished ones, except this process's own run
    (a notebook reads the rows it has written so far)."""
    return unfinished_runs(root=root) - {os.environ.get("PRH_RUN_ID")}


# --------------------------------------------------------------------------------------------- reading


#: Subfolder of a chapter's folder that :func:`compact` moves superseded parts to (``archive=True``): out of the way of
#: every :func:`load`, still read by ``load(include_superseded=True)``.
SUPERSEDED = "superseded"


def _files(root: Path, chapter=None, *, superseded: bool = False) -> list[Path]:
    if not root.is_dir():
        return []
    if isinstance(chapter, str):
        folders = [root / chapter]
    else:
        folders = [p for p in root.iterdir() if p.is_dir()]
    def parts(folder: Path) -> list[Path]:
        return [f for f in folder.glob("*.parquet") if not f.name.startswith(".")] if folder.is_dir() else []

    found = [f for d in folders for f in parts(d)]
    if superseded:  # listed after the live parts: a part moved meanwhile is found in one of the two
        found += [f for d in folders for f in parts(d / SUPERSEDED)]
    return sorted(found)


def _name_fields(f: Path) -> tuple[str, str] | tuple[None, None]:
    """The params hash and run id in a part's file name (``<chapter>__<params hash>__<run id>__<part>.parquet``, as
    :func:`write` names it), or Nones for a name of another form (then the file is read and filtered)."""
    fields = f.name[: -len(".parquet")].rsplit("__", 3)  # from the right: a chapter may end in "_"
    if len(fields) == 4 and re.fullmatch(r"[0-9a-f]{16}", fields[1]):
        return fields[1], fields[2]
    return None, None


def _without_runs(files: list[Path], runs: set[str]) -> list[Path]:
    """``files`` less the parts whose file name says they belong to one of ``runs``."""
    return [f for f in files if _name_fields(f)[1] not in runs] if runs else files


def _read(files: Iterable[Path]) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _arrow_schema()
    tables = []
    for f in files:
        try:
            tables.append(pq.read_table(f, schema=schema))
        except FileNotFoundError:  # deleted by compact() between listing and reading
            continue
    table = pa.concat_tables(tables) if tables else schema.empty_table()
    return table.to_pandas(types_mapper={pa.int64(): pd.Int64Dtype()}.get)


def _latest_only(df: pd.DataFrame) -> pd.DataFrame:
    """Keep, for each RUN_KEY group, only the rows of the winning run (latest first write, then run id)."""
    if df.empty:
        return df
    key = list(RUN_KEY)
    first = df.groupby(key + ["run_id"], dropna=False, sort=False)["created"].min().reset_index()
    winner = first.sort_values(["created", "run_id"], kind="stable").drop_duplicates(subset=key, keep="last")
    return df.merge(winner[key + ["run_id"]], on=key + ["run_id"], how="inner")


def load(*, root: str | Path | None = None, include_superseded: bool = False, expand_extra: bool = False,
         **filters) -> pd.DataFrame:
    """The results table as a pandas DataFrame (one row per score, columns :data:`COLUMNS`).

    Parameters
    ----------
    root : path, optional
        Folder of the table (default ``paths.cache_dir("results")``).
    include_superseded : bool, default False
        Keep the rows of superseded runs and of ``prh-run`` runs that never completed (every part on disk).
    expand_extra : bool, default False
        Unpack the ``extra`` JSON column into one column per key (missing keys: NaN).
    **filters
        ``column=value`` keeps the rows equal to ``value`` (or to any of a list, tuple or set of values);
        ``params=<mapping>`` selects by the hash of those parameters.

    Returns
    -------
    DataFrame
        Rows in a stable order (chapter, params_hash, dataset, draw, run_id, then as written).

    Raises
    ------
    ValueError
        If a filter names no column of the table (the message lists the columns).

    Examples
    --------
    >>> df = results.load(chapter="sec3_1_layerwise", metric="mutual_knn", quantity="peak")  # doctest: +SKIP
    >>> results.aggregate(df, by=["dataset", "model_x", "model_y"])  # doctest: +SKIP
    """
    if "params" in filters and isinstance(filters["params"], Mapping):
        if "params_hash" in filters:
            raise ValueError("give params= or params_hash=, not both")
        filters["params_hash"] = params_hash(dict(filters.pop("params")))
    unknown = [c for c in filters if c not in COLUMNS]
    if unknown:
        raise ValueError(f"unknown filter column(s) {unknown}; columns: {list(COLUMNS)}")
    root = Path(root) if root is not None else paths.cache_dir("results")
    hidden = set() if include_superseded else _hidden_runs(root)  # read before the parts are listed
    files = _without_runs(_files(root, filters.get("chapter"), superseded=include_superseded), hidden)
    if isinstance(filters.get("params_hash"), str):  # every file holds one run's rows of one params hash
        files = [f for f in files if _name_fields(f)[0] in (None, filters["params_hash"])]
    df = _read(files)
    if not include_superseded:
        df = _latest_only(df[~df["run_id"].isin(hidden)] if hidden else df)
    for col, value in filters.items():
        if isinstance(value, (list, tuple, set, frozenset)):
            df = df[df[col].isin(list(value))]
        elif _is_null(value):
            df = df[df[col].isna()]
        else:
            df = df[df[col] == value]
    df = df.sort_values(["chapter", "params_hash", "dataset", "draw", "run_id", "created"], kind="stable")
    df = df.reset_index(drop=True)
    if expand_extra:
        df = expand_extra_columns(df)
    return df


def expand_extra_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the ``extra`` JSON column unpacked into one column per key (missing keys: NaN).

    Keys that are already columns of ``df`` (a table expanded before) are left as they are, so expanding twice changes
    nothing.

    Parameters
    ----------
    df : DataFrame
        Rows of the results table (from :func:`load`), with the ``extra`` column.

    Returns
    -------
    DataFrame
        A new frame (``df`` itself when empty or without ``extra``: rows not written yet), same rows and index.
    """
    if df.empty or "extra" not in df:
        return df
    codes, uniques = pd.factorize(df["extra"], use_na_sentinel=False)  # a few hundred texts in 10^5 rows
    extra = pd.DataFrame([json.loads(e) for e in uniques]).take(codes).set_axis(df.index)
    return pd.concat([df, extra[[c for c in extra.columns if c not in df.columns]]], axis=1)


def compact(*, root: str | Path | None = None, archive: bool = False) -> list[Path]:
    """Delete the files whose every row is superseded by a rerun (or, with ``archive``, move them to the chapter's
    :data:`SUPERSEDED` subfolder); return the files removed from the live table.

    ``prh-run`` archives after its notebooks ran, so a chapter's live folder holds the latest run of each configuration
    and :func:`load` reads only those, while ``load(include_superseded=True)`` still sees every run. Safe while others
    write or read: :func:`load` never returns a superseded file's rows and skips files that vanish while it reads. Parts
    of unfinished runs (:func:`unfinished_runs`) stay: they supersede nothing, and a run in progress must find them when
    it completes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = Path(root) if root is not None else paths.cache_dir("results")
    hidden = _hidden_runs(root)  # an unfinished run's parts neither win nor move: it may be running still
    files = _without_runs(_files(root), hidden)
    if not files:
        return []
    # Each part reduced, in Arrow, to one row per (run key, run id): its first write. A run's first write is the minimum
    # of these, so _latest_only picks the same winners from a few hundred rows as from the whole table.
    cols = list(RUN_KEY) + ["run_id", "created"]
    parts = []
    for f in files:
        try:
            table = pq.read_table(f, columns=cols)
        except FileNotFoundError:
            continue
        first = table.group_by(cols[:-1], use_threads=False).aggregate([("created", "min")]).rename_columns(cols)
        parts.append(first.append_column("_file", pa.array([str(f)] * first.num_rows, pa.string())))
    if not parts:
        return []
    df = pa.concat_tables(parts).to_pandas()
    df = df[~df["run_id"].isin(hidden)]
    kept = set(_latest_only(df)["_file"])
    gone = [Path(f) for f in df["_file"].unique() if f not in kept]
    for f in gone:
        if archive:
            (f.parent / SUPERSEDED).mkdir(exist_ok=True)
            try:
                os.replace(f, f.parent / SUPERSEDED / f.name)
            except FileNotFoundError:  # another process moved or deleted it first
                pass
        else:
            f.unlink(missing_ok=True)
    return gone


# --------------------------------------------------------------------------------------------- aggregation


def aggregate(df: pd.DataFrame, by: list[str], *, values: str | list[str] = "score") -> pd.DataFrame:
    """Mean and standard deviation over draws of each group of ``by``.

    Parameters
    ----------
    df : DataFrame
        Rows of the results table (e.g. from :func:`load`), with a ``draw`` column.
    by : list of str
        Columns that identify one quantity; within a group, rows must differ only by ``draw`` (one row per draw).
    values : str or list of str, default "score"
        Numeric columns to aggregate (e.g. ``["score", "calibrated", "p"]``).

    Returns
    -------
    DataFrame
        One row per group: the ``by`` columns, then for each value ``<value>_mean`` and ``<value>_std`` (sample standard
        deviation, ddof = 1, over the draws with a non-NaN value; NaN, not 0, when fewer than two have one), ``n_draws``
        (distinct draws in the group) and ``single_draw`` (``n_draws < 2``: show no band, say so).

    Raises
    ------
    ValueError
        If a column of ``by`` or ``values`` is missing, or a group holds two rows for the same draw (the message names
        the columns that vary within it, to add to ``by``).
    """
    values = [values] if isinstance(values, str) else list(values)
    by = list(by)
    missing = [c for c in by + values + ["draw"] if c not in df.columns]
    if missing:
        raise ValueError(f"aggregate: column(s) {missing} not in the table; columns: {list(df.columns)}")
    if "draw" in by:
        raise ValueError("aggregate: 'draw' is what is averaged over; leave it out of by")
    if df.empty:
        cols = by + [f"{v}_{s}" for v in values for s in ("mean", "std")] + ["n_draws", "single_draw"]
        return pd.DataFrame(columns=cols)
    dup = df.duplicated(subset=by + ["draw"], keep=False)
    if dup.any():
        sample = df[dup]
        varying = [c for c in df.columns if c not in by + values and c not in ("created", "run_id", "extra")
                   and sample.groupby(by + ["draw"], dropna=False)[c].nunique(dropna=False).gt(1).any()]
        raise ValueError(f"aggregate: {int(dup.sum())} rows share a draw within a group of {by}; "
                         f"columns that vary within the groups: {varying}")
    grouped = df.groupby(by, dropna=False, sort=True)
    out = grouped.agg(**{f"{v}_{s}": (v, fn) for v in values
                         for s, fn in (("mean", "mean"), ("std", lambda x: x.astype(float).std(ddof=1)))})
    out["n_draws"] = grouped["draw"].nunique()
    out["single_draw"] = out["n_draws"] < 2
    return out.reset_index()


