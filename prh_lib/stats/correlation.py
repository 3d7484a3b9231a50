"""Correlation across models (Pearson or Spearman) with p-values and intervals that are honest about small n.

The capability chapter correlates one number per language model (alignment) with another (capability)
over a handful of models: 4 independently trained ones offline, 21 in the paper. With n = 4 an asymptotic
p-value means little, so :func:`correlate` offers the exact permutation p-value over all n! orderings
(``p_value="exact"``; the smallest two-sided p with n = 4 is 2/24 ≈ 0.083 for a perfect rank agreement),
a Fisher-z interval (``interval="fisher"``, wide at small n, as it should be) or a bootstrap interval.

Near-constant input. Pearson's r is undefined for a constant series, and numerically meaningless for a
series that is constant up to rounding. :func:`near_constant` is the one test, applied alike to the
observed series (r and p are NaN, with :class:`scipy.stats.ConstantInputWarning` or
:class:`scipy.stats.NearConstantInputWarning`) and to every bootstrap resample and permutation: the
SciPy rule ``norm(x - mean(x)) < eps**0.75 * |mean(x)|`` (``scipy.stats.pearsonr``, SciPy >= 1.14), plus exact equality.

References
----------
Fisher (1921), the z-transformation; Fieller, Hartley & Pearson (1957), Biometrika 44 (the variance
1.06 / (n - 3) of z for Spearman's rho); Efron & Tibshirani (1993), Ch. 13 (percentile interval);
Good (2005), "Permutation, Parametric and Bootstrap Tests of Hypotheses" (exact permutation tests).
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass

import numpy as np

__all__ = ["NEAR_CONSTANT_RTOL", "near_constant", "CorrelationResult", "correlate", "exact_permutation_p", "exact_p_floor",
           "fisher_interval", "METHODS", "P_VALUES", "INTERVALS", "EXACT_MAX_N"]

#: Relative tolerance of :func:`near_constant` (``scipy.stats.pearsonr``'s threshold, eps ** 0.75).
NEAR_CONSTANT_RTOL = float(np.finfo(np.float64).eps ** 0.75)
METHODS = ("pearson", "spearman")
P_VALUES = ("scipy", "exact", "auto")
INTERVALS = ("bootstrap", "fisher", "none")
#: Largest n for which ``p_value="exact"`` enumerates all n! orderings (8! = 40320).
EXACT_MAX_N = 8


def near_constant(a) -> np.ndarray:
    """Whether each row of ``a`` is constant or constant up to rounding.

    Parameters
    ----------
    a : array_like of shape (n,) or (B, n)

    Returns
    -------
    bool or ndarray of shape (B,)
        True where every value equals the first, or ``norm(row - mean) < NEAR_CONSTANT_RTOL * |mean|``.
    """
    a = np.asarray(a, dtype=np.float64)
    rows = np.atleast_2d(a)
    equal = np.all(rows == rows[:, :1], axis=1)
    mean = rows.mean(axis=1, keepdims=True)
    spread = np.linalg.norm(rows - mean, axis=1)
    out = equal | (spread < NEAR_CONSTANT_RTOL * np.abs(mean[:, 0]))
    return bool(out[0]) if a.ndim == 1 else out


def _r_rows(xb: np.ndarray, yb: np.ndarray, method: str) -> np.ndarray:
    """r of each row pair of two (B, n) arrays; NaN where either row is :func:`near_constant`."""
    bad = near_constant(xb) | near_constant(yb)
    if method == "spearman":
        from scipy.stats import rankdata

        xb, yb = rankdata(xb, axis=-1).astype(np.float64), rankdata(yb, axis=-1).astype(np.float64)
    xc = xb - xb.mean(axis=1, keepdims=True)
    yc = yb - yb.mean(axis=1, keepdims=True)
    den = np.sqrt((xc**2).sum(axis=1) * (yc**2).sum(axis=1))
    r = np.full(len(xb), np.nan)
    ok = ~bad & (den > 0)
    r[ok] = np.clip((xc[ok] * yc[ok]).sum(axis=1) / den[ok], -1.0, 1.0)
    return r


def exact_permutation_p(x, y, *, method: str = "pearson") -> float:
    """Two-sided exact permutation p-value of r: the share of all n! orderings of ``y`` with ``|r| >= |r_obs|``.

    The observed ordering is one of them, so p >= 1/n!. Orderings under which r is undefined cannot occur
    (a permutation does not change whether a series is constant).

    Parameters
    ----------
    x, y : array_like of shape (n,), 2 <= n <= :data:`EXACT_MAX_N`
    method : {"pearson", "spearman"}

    Returns
    -------
    float in (0, 1], NaN when r is undefined.

    Raises
    ------
    ValueError
        If n is outside [2, EXACT_MAX_N] or ``method`` is unknown.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.size
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use one of {METHODS}")
    if not 2 <= n <= EXACT_MAX_N:
        raise ValueError(f"exact permutation p needs 2 <= n <= {EXACT_MAX_N}, got n = {n}")
    obs = _r_rows(x[None], y[None], method)[0]
    if not np.isfinite(obs):
        return float("nan")
    perms = np.array(list(itertools.permutations(range(n))))
    null = _r_rows(np.broadcast_to(x, perms.shape).copy(), y[perms], method)
    return float(np.mean(np.abs(null) >= abs(obs) - 1e-12))


def exact_p_floor(n: int, method: str = "pearson") -> float:
    """The smallest value :func:`exact_permutation_p` can take for ``n`` distinct values.

    Pearson: 1/n! (the observed ordering always counts; for some data no other ordering reaches ``|r_obs|``).
    Spearman: 2/n! (reversing the ranks gives exactly ``-rho``, so two orderings always reach ``|rho_obs|``).
    NaN for n > :data:`EXACT_MAX_N`, where SciPy's p is used instead.

    Raises
    ------
    ValueError
        If n < 2 or ``method`` is unknown.
    """
    if n < 2:
        raise ValueError(f"a correlation needs n >= 2, got n = {n}")
    if method not in ("pearson", "spearman"):
        raise ValueError(f"method must be 'pearson' or 'spearman'; got {method!r}")
    if n > EXACT_MAX_N:
        return float("nan")
    return (1.0 if method == "pearson" else 2.0) / math.factorial(n)


def fisher_interval(r: float, n: int, *, ci: float = 0.95, method: str = "pearson") -> tuple[float, float]:
    """Fisher-z interval ``tanh(atanh(r) ± z_(1+ci)/2 · se)`` of a correlation over n points.

    ``se = 1/sqrt(n - 3)`` for Pearson, ``sqrt(1.06/(n - 3))`` for Spearman (Fieller et al. 1957). NaN when
    ``n <= 3`` or r is not finite, and when ``|r| = 1`` (z is infinite; no interval is defined).
    """
    from scipy.stats import norm

    if n <= 3 or not np.isfinite(r) or abs(r) >= 1.0 - 1e-12:
        return float("nan"), float("nan")
    se = math.sqrt((1.06 if method == "spearman" else 1.0) / (n - 3))
    z, half = math.atanh(r), float(norm.ppf(0.5 + ci / 2)) * se
    return math.tanh(z - half), math.tanh(z + half)


@dataclass(frozen=True)
class CorrelationResult:
    """A correlation across models with a p-value and an interval.

    Attributes
    ----------
    r : float in [-1, 1]
        Pearson's r or Spearman's rho. NaN when fewer than 2 pairs remain or an input is (near-)constant.
    p_value : float
        Two-sided; from SciPy (``"scipy"``: the t-distribution, exact under bivariate normality) or the exact
        permutation distribution (``"exact"``). NaN when ``n < 3`` or r is undefined; never 1 by convention.
    ci_low, ci_high : float
        Interval at level ``ci`` (bootstrap percentile or Fisher z), NaN when undefined.
    n : int
        Pairs used (pairs with a NaN are dropped).
    n_boot, n_boot_valid : int
        Bootstrap replicates drawn and those with a defined r (0 for other intervals).
    ci : float
    seed : int
    method, p_method, interval : str
    """

    r: float
    p_value: float
    ci_low: float
    ci_high: float
    n: int
    n_boot: int
    n_boot_valid: int
    ci: float
    seed: int
    method: str = "pearson"
    p_method: str = "scipy"
    interval: str = "bootstrap"


def correlate(x, y, *, method: str = "pearson", p_value: str = "scipy", interval: str = "bootstrap",
              n_boot: int = 1000, ci: float = 0.95, seed: int = 0) -> CorrelationResult:
    """Correlation between two per-model quantities, its p-value and an interval over models.

    Parameters
    ----------
    x, y : array_like of shape (n_models,)
        E.g. alignment scores and capability scores. Pairs where either is NaN are left out.
    method : {"pearson", "spearman"}, default="pearson"
    p_value : {"scipy", "exact", "auto"}, default="scipy"
        ``"scipy"``: :func:`scipy.stats.pearsonr` / :func:`scipy.stats.spearmanr`; ``"exact"``:
        :func:`exact_permutation_p` (all n! orderings; n <= :data:`EXACT_MAX_N`); ``"auto"``: exact when
        n <= EXACT_MAX_N, else SciPy.
    interval : {"bootstrap", "fisher", "none"}, default="bootstrap"
        Percentile bootstrap over models (resamples with a near-constant series are dropped) or
        :func:`fisher_interval`.
    n_boot : int, default=1000
        Bootstrap replicates (0: no interval).
    ci : float in (0, 1), default=0.95
    seed : int, default=0
        Seeds ``numpy.random.default_rng`` for the resamples.

    Returns
    -------
    CorrelationResult
        With fewer than 3 pairs no p-value or interval (NaN). A (near-)constant input gives NaN r, p and
        interval, with a :class:`scipy.stats.ConstantInputWarning` (exactly constant) or
        :class:`scipy.stats.NearConstantInputWarning` (constant up to rounding, :func:`near_constant`): the
        same test the bootstrap applies to its resamples, so the two never disagree.

    Raises
    ------
    ValueError
        If ``x`` and ``y`` are not 1-D of the same length, hold infinite values, or an option is out of range.

    References
    ----------
    Herbst et al., Section 3.2 and Figure 3 (Pearson r of alignment against capability);
    Efron & Tibshirani (1993), Ch. 13; Fisher (1921); Fieller et al. (1957).
    """
    from scipy import stats

    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 1 or y.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"x and y must be 1-D of the same length; got shapes {x.shape} and {y.shape}")
    if np.isinf(x).any() or np.isinf(y).any():
        raise ValueError("x and y must not hold infinite values")
    if method not in METHODS or p_value not in P_VALUES or interval not in INTERVALS:
        raise ValueError(f"method, p_value, interval must be in {METHODS}, {P_VALUES}, {INTERVALS}; "
                         f"got {method!r}, {p_value!r}, {interval!r}")
    if not isinstance(n_boot, (int, np.integer)) or isinstance(n_boot, bool) or n_boot < 0:
        raise ValueError(f"n_boot must be an int >= 0, got {n_boot!r}")
    if not 0.0 < float(ci) < 1.0:
        raise ValueError(f"ci must lie in (0, 1), got {ci}")
    keep = ~(np.isnan(x) | np.isnan(y))
    x, y = x[keep], y[keep]
    n = int(x.size)
    p_method = ("exact" if n <= EXACT_MAX_N else "scipy") if p_value == "auto" else p_value
    if p_method == "exact" and n > EXACT_MAX_N:
        raise ValueError(f"p_value='exact' enumerates n! orderings and needs n <= {EXACT_MAX_N}; got n = {n}")
    nan = float("nan")

    def result(r, p, lo=nan, hi=nan, valid=0):
        return CorrelationResult(float(r), float(p), float(lo), float(hi), n,
                                 int(n_boot) if interval == "bootstrap" else 0, int(valid), float(ci), int(seed),
                                 method, p_method, interval)

    if n < 2:
        return result(nan, nan)
    exact = [name for name, v in (("x", x), ("y", y)) if np.all(v == v[0])]
    near = [name for name, v in (("x", x), ("y", y)) if name not in exact and near_constant(v)]
    if exact or near:
        kind = stats.ConstantInputWarning if exact else stats.NearConstantInputWarning
        what = " and ".join(exact + near)
        warnings.warn(f"correlate: {what} is {'constant' if exact else 'constant up to rounding'} over the {n} "
                      f"models; the correlation is undefined (reported as NaN, no p-value)", kind, stacklevel=2)
        return result(nan, nan)
    r = float(_r_rows(x[None], y[None], method)[0])
    if n < 3:
        return result(r, nan)
    if p_method == "exact":
        p = exact_permutation_p(x, y, method=method)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", stats.NearConstantInputWarning)
            res = stats.pearsonr(x, y) if method == "pearson" else stats.spearmanr(x, y)
        p = float(res.pvalue)
    if interval == "fisher":
        lo, hi = fisher_interval(r, n, ci=ci, method=method)
        return result(r, p, lo, hi)
    if interval == "none" or n_boot == 0:
        return result(r, p)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(int(n_boot), n))
    reps = _r_rows(x[idx], y[idx], method)
    valid = reps[~np.isnan(reps)]
    if valid.size == 0:
        return result(r, p)
    a = (1.0 - float(ci)) / 2.0
    lo, hi = np.quantile(valid, [a, 1.0 - a])
    return result(r, p, lo, hi, valid.size)
