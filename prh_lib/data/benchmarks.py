"""Published benchmark scores of the paper's language models (Herbst et al., Section 3.2, Appendix D).

:func:`load_capability_table` reads a CSV of benchmark scores (one row per model, every value with its source; empty
cells read as NaN); the packaged table is ``prh_lib/resources/capability_scores.csv`` (:func:`capability_table_path`).

Regenerating the benchmark columns
----------------------------------
The CSV holds published numbers. To measure them instead, run the LM Evaluation Harness (``pip install
lm-eval``) on a machine that reaches the Hugging Face Hub and the benchmark datasets, once per model::

    lm_eval --model hf --model_args pretrained=<hf-id>,dtype=bfloat16 --tasks mmlu --num_fewshot 5 \\
        --batch_size auto --output_path results/<hf-id>
    lm_eval --model hf --model_args pretrained=<hf-id>,dtype=bfloat16 --tasks arc_challenge --num_fewshot 4 \\
        --batch_size auto --output_path results/<hf-id>
    lm_eval --model hf --model_args pretrained=<hf-id>,dtype=bfloat16 --tasks gsm8k --num_fewshot 5 \\
        --batch_size auto --output_path results/<hf-id>

and copy ``mmlu`` ``acc``, ``arc_challenge`` ``acc_norm`` and ``gsm8k`` ``exact_match,strict-match``
(times 100) into the row, with the source ``"lm-eval <version>, <n>-shot, <metric>, <date>"``. ARC is run
4-shot here as in the paper's protocol; the Open LLM Leaderboard v1 used 25 shots, so published ARC
numbers (and those in the packaged table, whose source column names the shot count) are not directly
comparable with a 4-shot run.

References
----------
Herbst et al., Section 3.2 and Appendix D. Gao et al. "A framework for few-shot language model evaluation"
(LM Evaluation Harness), Zenodo.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

#: Benchmark columns of the capability table (percent, 0-100) and the column naming each value's source.
BENCHMARKS = ("mmlu_5shot", "arc_challenge", "gsm8k_5shot")
#: The benchmarks as pages name them (prose and table headers).
BENCHMARK_LABELS = {"mmlu_5shot": "MMLU (5-shot)", "arc_challenge": "ARC-Challenge", "gsm8k_5shot": "GSM8K (5-shot)"}
SOURCE_COLUMNS = {"mmlu_5shot": "mmlu_source", "arc_challenge": "arc_source", "gsm8k_5shot": "gsm8k_source"}
_REQUIRED = ("model",) + tuple(c for b in BENCHMARKS for c in (b, SOURCE_COLUMNS[b]))

# --------------------------------------------------------------------------------------------------------
# capability table


def capability_table_path() -> Path:
    """Path of the packaged capability table ``prh_lib/resources/capability_scores.csv``."""
    from importlib import resources

    return Path(str(resources.files("prh_lib") / "resources" / "capability_scores.csv"))


def load_capability_table(path: str | Path | None = None) -> pd.DataFrame:
    """Read and validate a capability table.

    Parameters
    ----------
    path : path, optional
        A CSV with the columns ``model``, ``mmlu_5shot``, ``mmlu_source``, ``arc_challenge``, ``arc_source``,
        ``gsm8k_5shot``, ``gsm8k_source`` (further columns are kept; ``arc_shots``, the ARC shot count, is read as a
        number). Lines starting with ``#`` are comments. Default: :func:`capability_table_path`.

    Returns
    -------
    pandas.DataFrame
        Indexed by ``model`` (unique), benchmark columns float64 in [0, 100] (NaN for empty cells), source columns str
        ("" where the value is missing).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If a required column is missing (the message names it), a model is listed twice or has no name, a value is not a
        number or lies outside [0, 100], or a value has no source.

    References
    ----------
    Herbst et al., Section 3.2 and Appendix D (capability scores of the 21 language models).
    """
    path = capability_table_path() if path is None else Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no capability table at {path}")
    import io

    # lines starting with "#" are comments (a "#" inside a cell, e.g. in a URL, is kept)
    text = "".join(line for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                   if not line.lstrip().startswith("#"))
    raw = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False)
    raw.columns = [c.strip() for c in raw.columns]
    missing = [c for c in _REQUIRED if c not in raw.columns]
    if missing:
        raise ValueError(f"capability table {path} lacks the column(s) {missing}; required: {list(_REQUIRED)}")
    raw = raw.apply(lambda col: col.str.strip())
    if (raw["model"] == "").any():
        rows = [int(i) + 2 for i in np.flatnonzero(raw["model"] == "")]
        raise ValueError(f"capability table {path}: rows {rows} (1 = header) have no model name")
    dupes = sorted(raw["model"][raw["model"].duplicated()].unique())
    if dupes:
        raise ValueError(f"capability table {path} lists these models more than once: {dupes}")
    table = raw.set_index("model")
    for bench in BENCHMARKS:
        source = SOURCE_COLUMNS[bench]
        values = pd.to_numeric(table[bench].replace("", np.nan), errors="coerce")
        bad = table.index[values.isna() & (table[bench] != "")]
        if len(bad):
            raise ValueError(f"capability table {path}: {bench} is not a number for {list(bad)}: "
                             f"{list(table.loc[bad, bench])}")
        out = values[(values < 0) | (values > 100)]
        if len(out):
            raise ValueError(f"capability table {path}: {bench} must be a percentage in [0, 100]; got "
                             f"{out.to_dict()}")
        unsourced = table.index[values.notna() & (table[source] == "")]
        if len(unsourced):
            raise ValueError(f"capability table {path}: {bench} values without a {source}: {list(unsourced)}")
        table[bench] = values.astype(np.float64)
    if "arc_shots" in table.columns:
        shots = pd.to_numeric(table["arc_shots"].replace("", np.nan), errors="coerce")
        bad = table.index[(shots.isna() & (table["arc_shots"] != "")) | (shots < 0)]
        if len(bad):
            raise ValueError(f"capability table {path}: arc_shots must be a non-negative number for {list(bad)}")
        table["arc_shots"] = shots
    return table


def capability_scores(table: pd.DataFrame, models: Sequence[str], *,
                      benchmarks: Sequence[str] = BENCHMARKS) -> pd.DataFrame:
    """Benchmark scores of ``models`` in the given order.

    Parameters
    ----------
    table : DataFrame
        From :func:`load_capability_table`.
    models : sequence of str
        Model ids (the table's index).
    benchmarks : sequence of str
        Columns to return (default :data:`BENCHMARKS`).

    Returns
    -------
    DataFrame of shape (len(models), len(benchmarks))
        NaN where the table has no value.

    Raises
    ------
    ValueError
        If a model is not in the table or a benchmark is not one of :data:`BENCHMARKS` (the message lists
        the unknown names and the valid ones).
    """
    unknown_b = [b for b in benchmarks if b not in BENCHMARKS]
    if unknown_b:
        raise ValueError(f"unknown benchmarks {unknown_b}; valid: {list(BENCHMARKS)}")
    unknown = [m for m in models if m not in table.index]
    if unknown:
        raise ValueError(f"models not in the capability table: {unknown}; the table has {list(table.index)}")
    return table.loc[list(models), list(benchmarks)].astype(np.float64)


def missing_counts(table: pd.DataFrame, models: Sequence[str] | None = None) -> dict[str, int]:
    """Number of missing (NaN) values per benchmark, over ``models`` (default: every row)."""
    sub = table if models is None else capability_scores(table, models)
    return {b: int(sub[b].isna().sum()) for b in BENCHMARKS}


def describe_missing(table: pd.DataFrame, models: Sequence[str] | None = None) -> str:
    """One Markdown sentence: how many values of each benchmark are missing over ``models`` (default: all rows); models
    not in the table count as missing everywhere and are named."""
    models = list(table.index) if models is None else list(models)
    known = [m for m in models if m in table.index]
    unknown = [m for m in models if m not in table.index]
    counts = missing_counts(table, known)
    parts = ", ".join(f"{BENCHMARK_LABELS[b]} {m + len(unknown)} of {len(models)}" for b, m in counts.items())
    scope = "in the table" if models == list(table.index) else "among the models of this run"
    extra = f" Not in the table: {', '.join(unknown)}." if unknown else ""
    return f"Missing values {scope} (no citable source with a matching protocol): {parts}.{extra}"


def display_table(table: pd.DataFrame) -> pd.DataFrame:
    """The capability table as a page shows it: benchmarks in percent with one decimal, ARC's shot count an integer,
    missing values in words ("not published", "not stated"), never NaN.

    Parameters
    ----------
    table : DataFrame
        :func:`load_capability_table`.

    Returns
    -------
    DataFrame
        Indexed by model; columns ``MMLU (5-shot)``, ``ARC-Challenge``, ``ARC shots``, ``GSM8K (5-shot)``.
    """
    def pct(v):
        return "not published" if pd.isna(v) else f"{float(v):.1f}"

    shots = table["arc_shots"] if "arc_shots" in table else pd.Series(np.nan, index=table.index)
    out = pd.DataFrame({
        "MMLU (5-shot)": [pct(v) for v in table["mmlu_5shot"]],
        "ARC-Challenge": [pct(v) for v in table["arc_challenge"]],
        "ARC shots": ["–" if pd.isna(a) else "not stated" if pd.isna(s) else str(int(s))
                      for a, s in zip(table["arc_challenge"], shots)],
        "GSM8K (5-shot)": [pct(v) for v in table["gsm8k_5shot"]],
    }, index=table.index)
    out.index.name = "model"  # a page shows it as the first column, under this header (report.page_table)
    return out
