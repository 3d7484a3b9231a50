"""The schema of the results table: its columns and their kinds, and how rows are validated and coerced.

:data:`COLUMNS` (column -> kind, in table order), :data:`REQUIRED`, :data:`PROVENANCE` and :data:`RUN_KEY`
are documented with the table in :mod:`prh_lib.results`, which re-exports them; :func:`_validate_rows` turns
the rows given to :func:`prh_lib.results.write` into a frame of schema columns (extras packed into ``extra``
as canonical JSON) and raises ``ValueError`` quoting the offending column and value."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

_STR, _FLOAT, _INT, _TIME = "str", "float", "int", "time"

#: column -> kind, in table order
COLUMNS: dict[str, str] = {
    "model_x": _STR, "model_y": _STR, "layer_x": _STR, "layer_y": _STR, "depth_x": _FLOAT, "depth_y": _FLOAT,
    "metric": _STR, "k": _INT, "n": _INT, "dataset": _STR, "draw": _INT, "seed": _INT,
    "score": _FLOAT, "calibrated": _FLOAT, "tau": _FLOAT, "p": _FLOAT, "preprocessing": _STR, "quantity": _STR,
    "chapter": _STR, "lib_version": _STR, "commit": _STR, "params_hash": _STR, "params": _STR,
    "run_id": _STR, "created": _TIME, "extra": _STR,
}
#: columns every row must have (from ``rows`` or from a keyword of :func:`write`), never null
REQUIRED = ("dataset", "draw", "metric", "score", "quantity")
#: columns :func:`write` sets itself; ``rows`` must not carry them
PROVENANCE = ("chapter", "lib_version", "commit", "params_hash", "params", "run_id", "created", "extra")
#: a rerun replaces earlier runs' rows for the same values of these columns
RUN_KEY = ("chapter", "params_hash", "dataset", "draw")
_RANGES = {"depth_x": (0.0, 1.0), "depth_y": (0.0, 1.0), "p": (0.0, 1.0)}


def _arrow_schema():
    import pyarrow as pa

    kinds = {_STR: pa.string(), _FLOAT: pa.float64(), _INT: pa.int64(), _TIME: pa.timestamp("us", tz="UTC")}
    return pa.schema([(c, kinds[t]) for c, t in COLUMNS.items()])


def _canonical_json(obj) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_jsonable, allow_nan=True)


def _jsonable(obj):
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (Path, os.PathLike)):
        return os.fspath(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    return repr(obj)


def _validate_rows(rows, **constants) -> pd.DataFrame:
    """Rows as a DataFrame with every schema column (provenance still empty) and ``extra`` filled."""
    if isinstance(rows, pd.DataFrame):
        df = rows.reset_index(drop=True).copy()
    else:
        try:
            df = pd.DataFrame(rows)
        except (ValueError, TypeError) as err:
            raise ValueError(f"rows must be a DataFrame, a list of dicts or a dict of lists: {err}") from None
    df.columns = [str(c) for c in df.columns]
    carried = [c for c in PROVENANCE if c in df.columns]
    if carried:
        raise ValueError(f"rows carry column(s) {carried} that write() sets itself; drop them")
    for name, value in constants.items():
        if value is None:
            continue
        if name not in COLUMNS or name in PROVENANCE:
            valid = [c for c in COLUMNS if c not in PROVENANCE]
            raise ValueError(f"write() got an unknown keyword {name!r}; schema columns: {valid}")
        if name in df.columns:
            raise ValueError(f"column {name!r} is given both in rows and as a keyword; give it once")
        df[name] = [value] * len(df)
    if df.empty:
        return df
    extra_cols = [c for c in df.columns if c not in COLUMNS]
    columns = {}
    for col, kind in COLUMNS.items():
        if col in PROVENANCE:
            continue
        if col not in df.columns:
            if col in REQUIRED:
                raise ValueError(f"required column {col!r} is missing; give it in rows or as write({col}=...)")
            columns[col] = _empty(kind, len(df))
        else:
            columns[col] = _coerce(col, kind, df[col])
            if col in REQUIRED and col != "score":
                null = np.asarray(pd.isna(columns[col]), dtype=bool)
                if null.any():
                    raise ValueError(f"required column {col!r} has null values in rows {np.flatnonzero(null)[:5].tolist()}")
    if extra_cols:
        columns["extra"] = [_canonical_json({c: _plain(v) for c, v in r.items()})
                            for r in df[extra_cols].to_dict("records")]
    else:
        columns["extra"] = ["{}"] * len(df)
    return pd.DataFrame(columns, index=df.index)  # one frame built at once, not column by column


def _plain(v):
    if isinstance(v, float) and math.isnan(v):
        return None
    if v is pd.NA or v is pd.NaT:
        return None
    return v


def _empty(kind: str, n: int):
    if kind == _FLOAT:
        return np.full(n, np.nan)
    if kind == _INT:
        return pd.array([pd.NA] * n, dtype="Int64")
    return [None] * n


def _is_null(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, (float, np.floating)) and math.isnan(v))


def _check_range(col: str, arr: np.ndarray) -> None:
    if col in _RANGES:
        lo, hi = _RANGES[col]
        out = arr[~np.isnan(arr) & ((arr < lo) | (arr > hi))]
        if out.size:
            raise ValueError(f"column {col!r} must lie in [{lo}, {hi}]; got {out[:5].tolist()}")


def _numeric_dtype(values: pd.Series) -> str | None:
    """"float" or "int" when ``values`` has a numeric dtype (NumPy or pandas' nullable ones; bool is not
    numeric here), else None: then each value is checked on its own."""
    dtype = values.dtype
    if pd.api.types.is_bool_dtype(dtype) or not pd.api.types.is_numeric_dtype(dtype):
        return None
    return "int" if pd.api.types.is_integer_dtype(dtype) else "float" if pd.api.types.is_float_dtype(dtype) else None


def _coerce(col: str, kind: str, values: pd.Series):
    numeric = _numeric_dtype(values)
    if numeric is not None and kind in (_FLOAT, _INT):  # a numeric column: checked as one array
        if kind == _INT and numeric == "int":
            return pd.array(values, dtype="Int64")
        arr = values.to_numpy(dtype=np.float64, na_value=np.nan)
        if kind == _FLOAT:
            _check_range(col, arr)
            return arr
        nonnull = ~np.isnan(arr)
        bad = nonnull & ~(np.isfinite(arr) & (arr == np.floor(arr)) & (arr >= -(2.0 ** 63)) & (arr < 2.0 ** 63))
        if bad.any():
            v = float(arr[np.flatnonzero(bad)[0]])
            raise ValueError(f"column {col!r} must hold integers (int64); got {v!r} ({type(v).__name__})")
        return pd.arrays.IntegerArray(np.where(nonnull, arr, 0).astype(np.int64), mask=~nonnull)
    vals = list(values)
    bad = None
    if kind == _STR:
        bad = next((v for v in vals if not _is_null(v) and not isinstance(v, str)), None)
        if bad is not None:
            raise ValueError(f"column {col!r} must hold strings (or None); got {bad!r} ({type(bad).__name__})")
        return [None if _is_null(v) else v for v in vals]
    if kind == _FLOAT:
        for v in vals:
            if not _is_null(v) and (isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number))):
                raise ValueError(f"column {col!r} must hold numbers; got {v!r} ({type(v).__name__})")
        arr = np.array([np.nan if _is_null(v) else float(v) for v in vals], dtype=np.float64)
        _check_range(col, arr)
        return arr
    # integers: Python/NumPy ints, or floats that are whole numbers (a column with NaN becomes float)
    ints = []
    for v in vals:
        if _is_null(v):
            ints.append(pd.NA)
        elif isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number)) or (
                isinstance(v, (float, np.floating)) and not float(v).is_integer()) or not -(2 ** 63) <= v < 2 ** 63:
            raise ValueError(f"column {col!r} must hold integers (int64); got {v!r} ({type(v).__name__})")
        else:
            ints.append(int(v))
    return pd.array(ints, dtype="Int64")
