"""The one place numbers become text: point estimates, intervals, means over draws and permutation p-values.

Every page, table, claim row and verdict formats through these four functions, so a number reads the same
wherever it appears (no negative zeros, the same digits, ``p ≤ 1/(K+1)`` at a permutation test's floor)."""

from __future__ import annotations

import math


def format_number(value: float, digits: int = 3, *, sign: bool = False) -> str:
    """``value`` with ``digits`` decimals, never a negative zero (``-0.0004`` prints as ``0.000``, or ``+0.000``
    with ``sign``)."""
    v = round(float(value), digits) + 0.0  # -0.0 + 0.0 is +0.0
    return f"{v:+.{digits}f}" if sign else f"{v:.{digits}f}"


def format_interval(estimate: float, low: float, high: float, digits: int = 3, *, sign: bool = False) -> str:
    """``"0.162 [0.138, 0.203]"``; ``"–"`` for a missing estimate, the point alone without an interval; no
    negative zeros (:func:`format_number`)."""
    if estimate is None or not math.isfinite(float(estimate)):
        return "–"
    f = lambda v: format_number(v, digits, sign=sign)  # noqa: E731
    if low is None or high is None or not (math.isfinite(float(low)) and math.isfinite(float(high))):
        return f(estimate)
    return f"{f(estimate)} [{f(low)}, {f(high)}]"


def format_mean_std(mean: float, std: float, n_draws: int, *, digits: int = 3, count: bool = True) -> str:
    """``"0.123 ± 0.004 (5 draws)"``, or ``"0.123 (one draw; cannot be repeated)"`` when ``n_draws < 2``.

    With ``count=False`` the short form of table cells: ``"0.123 ± 0.004"``, or ``"0.123"`` for one draw (or
    a non-finite std)."""
    if n_draws < 2 or not math.isfinite(float(std)):
        return f"{mean:.{digits}f}" if not count else f"{mean:.{digits}f} (one draw; cannot be repeated)"
    return f"{mean:.{digits}f} ± {std:.{digits}f}" + (f" ({n_draws} draws)" if count else "")


def format_p(p: float, n_permutations: int | None = None, *, digits: int = 3) -> str:
    """A permutation p-value as a reader should see it.

    At the floor of a permutation test with K permutations, p = 1/(K+1) says only that no permuted score
    reached the observed one, so it is written ``p ≤ 1/(K+1)`` (e.g. ``"p ≤ 0.005 (1/201)"``), never as
    the floor's decimal expansion. NaN gives ``"p = n/a"``."""
    if p is None or not math.isfinite(float(p)):
        return "p = n/a"
    if n_permutations:
        floor = 1.0 / (int(n_permutations) + 1)
        if float(p) <= floor * (1 + 1e-9):
            return f"p ≤ {floor:.{digits}f} (1/{int(n_permutations) + 1})"
    return f"p = {float(p):.{digits}f}"
