"""Which dtype a model extracts features in on a CPU: the bf16 gate (issue 25, item 3).

bfloat16 is 2-3.5x faster than float32 on a CPU with native bf16 but moves the hidden states (1-7 % per layer). A model
uses bf16 on a CPU only where its row in ``prh_lib/resources/bf16_allowed.json`` (from
``benchmarks/bf16_extraction.py``) says ``allowed``, with the evidence: speed ratio, largest per-layer error, largest
change of a headline score and its threshold (a quarter of that score's image-level interval half-width, on both offline
datasets). Elsewhere: float32.

:func:`cpu_default_dtype` picks the dtype; :func:`feature_dtype` resolves ``dtype="auto"`` (``"float32"``
reproduces the float32 numbers bit for bit); :func:`check_cpu_dtype` refuses bf16 where the row does not allow it."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

#: The ``dtype`` that lets each model's benchmark row decide (:func:`feature_dtype`).
AUTO = "auto"

#: The committed table, under ``prh_lib/resources``.
BF16_TABLE = "bf16_allowed.json"
_EVIDENCE = ("speed_ratio", "max_rel_error", "max_score_change", "threshold", "benchmark")


def read_bf16_table(path: str | Path | None = None) -> dict[str, dict]:
    """The bf16 rows by model name, validated.

    Parameters
    ----------
    path : path, optional
        A table in the committed format (default: ``prh_lib/resources/bf16_allowed.json``).

    Returns
    -------
    dict of str to dict
        Per model: ``allowed`` (bool) and the evidence ``speed_ratio``, ``max_rel_error``, ``max_score_change``,
        ``threshold`` (floats or None) and ``benchmark`` (str or None: what was run).

    Raises
    ------
    ValueError
        If the file is not in that format, or a row allows bf16 without the evidence: numbers for every evidence field,
        ``threshold <= 0.005`` and ``max_score_change < threshold``.
    """
    if path is None:
        text = resources.files("prh_lib").joinpath("resources", BF16_TABLE).read_text(encoding="utf-8")
        label = f"prh_lib/resources/{BF16_TABLE}"
    else:
        text, label = Path(path).read_text(encoding="utf-8"), str(path)
    try:
        rows = json.loads(text)["models"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"{label} is not a bf16 table (a JSON object with a 'models' mapping): {err!r}") from err
    if not isinstance(rows, dict):
        raise ValueError(f"{label}: 'models' must map model names to rows, got {type(rows).__name__}")
    for model, row in rows.items():
        missing = [k for k in ("allowed", *_EVIDENCE) if not isinstance(row, dict) or k not in row]
        if missing:
            raise ValueError(f"{label}: the row of {model!r} lacks {missing}")
        if not isinstance(row["allowed"], bool):
            raise ValueError(f"{label}: 'allowed' of {model!r} must be true or false, got {row['allowed']!r}")
        if row["allowed"]:
            numbers = [k for k in _EVIDENCE[:4] if not isinstance(row[k], (int, float)) or isinstance(row[k], bool)]
            if numbers or not row["benchmark"]:
                raise ValueError(f"{label}: {model!r} allows bf16 without the benchmark's evidence "
                                 f"(missing: {numbers + ([] if row['benchmark'] else ['benchmark'])})")
            if not 0 < row["threshold"] or not row["max_score_change"] < row["threshold"]:
                raise ValueError(f"{label}: {model!r} allows bf16 but its largest score change "
                                 f"{row['max_score_change']} is not below its threshold {row['threshold']} "
                                 "(which must be positive)")
    return rows


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bf16 natively (Linux ``/proc/cpuinfo`` flag ``avx512_bf16`` or ``amx_bf16``); False
    where the flags cannot be read (other systems: bf16 is then emulated and slow)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[-1].split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def cpu_default_dtype(model: str, *, table: dict[str, dict] | None = None, native_bf16: bool | None = None) -> str:
    """The dtype ``model`` extracts features in on a CPU: ``"bfloat16"`` only where its row allows it.

    Parameters
    ----------
    model : str
        A model name as the notebooks write it (zoo name, e.g. ``"dinov2-small"``).
    table : dict, optional
        Rows as from :func:`read_bf16_table` (default: the committed table).
    native_bf16 : bool, optional
        Whether the CPU has native bf16 (default: :func:`cpu_has_native_bf16`).

    Returns
    -------
    {"float32", "bfloat16"}
        ``"bfloat16"`` when the model's row allows it and the CPU has native bf16, else ``"float32"``
        (a model without a row included).
    """
    rows = read_bf16_table() if table is None else table
    if not rows.get(model, {}).get("allowed", False):
        return "float32"
    native = cpu_has_native_bf16() if native_bf16 is None else native_bf16
    return "bfloat16" if native else "float32"


def feature_dtype(model: str, dtype: str, device: str = "cpu", *, table: dict[str, dict] | None = None,
                  native_bf16: bool | None = None) -> str:
    """The dtype the features of ``model`` are extracted in, for a requested ``dtype``.

    Parameters
    ----------
    model : str
        A model name: a zoo name, optionally with ``@pool:<pooling>`` and ``@random-init:<seed>`` (they follow the
        model's row: the benchmark measured the twin, and pooling does not change the forward pass), or any other name.
    dtype : str
        ``"auto"``: on a CPU :func:`cpu_default_dtype` of the model (bf16 only where its row allows it and the CPU has
        native bf16), else (a GPU) ``"float32"``; variants such as ``@interp:...`` and models without a row are float32.
        Any other value is returned unchanged.
    device : str, default "cpu"
    table, native_bf16
        As in :func:`cpu_default_dtype`.

    Returns
    -------
    str
        A dtype name.
    """
    if dtype != AUTO:
        return dtype
    if str(device) != "cpu":
        return "float32"
    base, _, variant = str(model).partition("@")
    if variant and not variant.startswith(("random-init:", "pool:")):
        return "float32"
    return cpu_default_dtype(base, table=table, native_bf16=native_bf16)


def check_cpu_dtype(model: str, dtype: str, *, table: dict[str, dict] | None = None) -> None:
    """Refuse bf16 on a CPU for a model whose benchmark row does not allow it.

    Raises
    ------
    ValueError
        If ``dtype`` is ``"bfloat16"`` and ``model``'s row in the table (default: the committed one) is missing or does
        not allow it; the message says how a row comes to allow it.
    """
    if dtype != "bfloat16":
        return
    rows = read_bf16_table() if table is None else table
    if not rows.get(model, {}).get("allowed", False):
        raise ValueError(f"bfloat16 on a CPU is not allowed for {model!r}: its row in prh_lib/resources/{BF16_TABLE} "
                         f"{'does not allow it' if model in rows else 'is missing'}; run benchmarks/bf16_extraction.py "
                         "on both datasets and allow it only if every headline score moves by less than its threshold")


def dtype_statement(model_names, dtype: str, device: str = "cpu", *, table: dict[str, dict] | None = None,
                    native_bf16: bool | None = None) -> str:
    """One paragraph for a page: the dtype each of its models' features were extracted in, and the evidence.

    Parameters
    ----------
    model_names : iterable of str
        The models whose features the page reads (``@random-init`` twins included).
    dtype, device, table, native_bf16
        As in :func:`feature_dtype`.

    Returns
    -------
    str
        Markdown: for ``dtype="auto"``, the models in bfloat16 with their rows' speed-up and largest headline-score
        change against its threshold, then the float32 ones; otherwise the one dtype asked for.
    """
    names = list(dict.fromkeys(model_names))
    if dtype != AUTO:
        return f"Features of every model in {dtype} (`dtype = \"{dtype}\"`)."
    rows = read_bf16_table() if table is None else table
    # a random-init twin follows its model (the benchmark measured both): one entry per model
    def twin_of(m):
        base, _, variant = m.partition("@")
        return base if variant.startswith("random-init:") else None

    twins = {twin_of(m) for m in names} - {None}
    shown = list(dict.fromkeys(twin_of(m) or m for m in names))
    half = [m for m in shown if feature_dtype(m, dtype, device, table=rows, native_bf16=native_bf16) == "bfloat16"]
    full = [m for m in shown if m not in half]
    if not half:
        allowed = [m for m in shown if rows.get(m, {}).get("allowed", False)]
        why = ("off a CPU the rows do not apply" if str(device) != "cpu" else f"this CPU has no native bfloat16, so the "
               f"rows that allow it ({', '.join(allowed)}) do not apply" if allowed else "no model of this page has a row "
               "that allows bfloat16")
        return f"Features of every model in float32 (`dtype = \"auto\"`: {why}; `prh_lib/resources/bf16_allowed.json`)."
    evidence = []
    for base in half:
        r = rows[base]
        evidence.append(f"{base}: {r['speed_ratio']:.1f}x faster, largest headline-score change "
                        f"{r['max_score_change']:.4f} against its threshold {r['threshold']:.4f}")
    one = len(half) == 1
    with_twins = ((" (with its random-init twin)" if one else " (with their random-init twins)")
                  if twins & set(half) else "")
    return (f"Features in **bfloat16** for {', '.join(half)}{with_twins} (`dtype = \"auto\"`: "
            f"{'its row' if one else 'their rows'} in "
            f"`prh_lib/resources/bf16_allowed.json` {'allows' if one else 'allow'} it, as measured by "
            "`benchmarks/bf16_extraction.py` on both offline datasets: " + "; ".join(evidence) + "; every headline score moved by less than a quarter of "
            "its own image-level interval half-width); float32 for "
            + (", ".join(full) if full else "no other model") + ". `dtype = \"float32\"` gives the float32 numbers.")
