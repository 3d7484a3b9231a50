"""Checks of user input shared by the models, language-model and analysis layers (``prh_lib.metrics`` has its own).

Each check raises ``TypeError`` or ``ValueError`` whose message quotes the offending value, and returns the
value in its canonical form; callers validate once at their public boundary.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` as an int (bools are refused).

    Raises
    ------
    TypeError
        If ``seed`` is not an int.
    """
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"{name} must be an int, got {seed!r}")
    return int(seed)


def check_seeds(seeds: Sequence[int], name: str = "seeds") -> list[int]:
    """A non-empty list of distinct non-negative int seeds.

    Raises
    ------
    ValueError
        If ``seeds`` is empty, holds a repeated, negative or non-int value.
    """
    seeds = list(seeds)
    if not seeds or any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in seeds) \
            or len(set(seeds)) != len(seeds):
        raise ValueError(f"{name} must be distinct non-negative ints; got {seeds!r}")
    return seeds


def check_texts(texts, *, what: str = "texts", why: str = "") -> list[str]:
    """A non-empty list of non-empty str.

    Raises
    ------
    TypeError
        If ``texts`` is a str or holds something that is not a str.
    ValueError
        If ``texts`` is empty or holds an empty (whitespace-only) text.
    """
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError(f"{what} must be a sequence of str")
    texts = list(texts)
    if not texts:
        raise ValueError(f"{what} is empty")
    empty = [i for i, t in enumerate(texts) if not t.strip()]
    if empty:
        raise ValueError(f"{what} {empty[:5]} are empty" + (f"; {why}" if why else ""))
    return texts


def check_model_pairs(pairs, what: str = "comparisons", *, distinct: bool = False) -> list[tuple[str, str]]:
    """``(x, y)`` pairs of model names, as a list of tuples.

    Parameters
    ----------
    pairs : sequence of (str, str)
    what : str
        Name of the argument, for messages.
    distinct : bool
        Refuse a model compared with itself (it scores 1 by definition).

    Raises
    ------
    ValueError
        If an entry is not two non-empty str, or (``distinct``) names the same model twice.
    """
    out = []
    for pair in pairs:
        if isinstance(pair, str) or len(pair) != 2 or not all(isinstance(m, str) and m for m in pair):
            raise ValueError(f"{what} must be (x, y) pairs of model names; got {pair!r}")
        if distinct and pair[0] == pair[1]:
            raise ValueError(f"{what}: a model compared with itself scores 1 by definition; got {pair!r}")
        out.append((pair[0], pair[1]))
    return out


def check_columns(table, columns) -> None:
    """Raise unless every name of ``columns`` is a column of the DataFrame ``table``.

    Raises
    ------
    ValueError
        If a named column is missing; the message lists the missing ones and the table's columns.
    """
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"columns {missing} are not in the table; it has {list(table.columns)}")


def as_float64_matrix(X, name: str = "X") -> np.ndarray:
    """``X`` (ndarray or torch tensor of shape (n_samples, n_features)) as a finite float64 ndarray
    (:func:`prh_lib.metrics._validation.as_float64`, which raises ``TypeError`` and ``ValueError``)."""
    from prh_lib.metrics._validation import as_float64

    return as_float64(X, name, 2, "(n_samples, n_features)")
