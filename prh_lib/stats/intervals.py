"""Intervals of a statistic from its point estimate and its resampling replicates (the held-out peaks' image
half-samples and every other half-sampling in the book): centred, basic, bias-corrected and percentile intervals,
paired intervals of a difference or ratio on shared replicates, and the smallest difference an interval can detect.

Split from :mod:`prh_lib.stats.selection` (which re-exports every name); its module docstring says why the
centred interval is the default for half-sampled replicates.
"""

from __future__ import annotations

import numpy as np

__all__ = ["INTERVAL_METHODS", "bootstrap_interval", "detectable_difference", "paired_interval", "percentile_interval"]


#: Interval methods of :func:`bootstrap_interval`.
INTERVAL_METHODS = ("centred", "basic", "bc", "percentile")


def percentile_interval(reps, ci: float = 0.95) -> tuple[float, float]:
    """Percentile interval ``(low, high)`` of bootstrap replicates, NaN replicates left out
    (``(nan, nan)`` when none is finite). Not bias-aware: see :func:`bootstrap_interval`."""
    reps = np.asarray(reps, dtype=np.float64)
    ok = reps[np.isfinite(reps)]
    if ok.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.quantile(ok, [(1 - ci) / 2, (1 + ci) / 2])
    return float(lo), float(hi)


def bootstrap_interval(estimate: float, reps, ci: float = 0.95, *, method: str = "centred",
                       bounds: tuple[float, float] | None = None) -> tuple[float, float]:
    """Interval ``(low, high)`` of a statistic from its point estimate and its replicates.

    ``"centred"`` (default; for half-sampled replicates, :func:`resampled_halves`)
        ``(θ̂ + q_{(1-ci)/2} − med, θ̂ + q_{(1+ci)/2} − med)``, ``q`` the replicates' quantiles and ``med`` their
        median: the replicates' spread (their level differs at the smaller size) placed around the estimate
        (:mod:`prh_lib.stats.selection`). No bias correction: an in-sample maximum keeps its upward bias.
    ``"basic"`` (the "reverse percentile" interval)
        ``(2 θ̂ − q_{(1+ci)/2}, 2 θ̂ − q_{(1-ci)/2})``: the distribution of ``θ* − θ̂`` stands in for that of ``θ̂ − θ``
        (Davison & Hinkley 1997, Sec. 5.2, eq. 5.6). With bootstrap replicates *with replacement* of a k-NN score this
        reads the resampling's own downward shift (duplicates thin the neighbourhoods; seen on final layers, which
        nothing selects) as the estimator's bias and moves the interval up by it: kept for comparison only.
    ``"bc"`` (bias-corrected percentile)
        The percentile interval at the levels ``Φ(2 z0 ± z_{(1+ci)/2})`` with ``z0 = Φ⁻¹(share of replicates below θ̂)``
        (Efron & Tibshirani 1993, Sec. 14.3 with acceleration 0). Same caveat as "basic".
    ``"percentile"``
        :func:`percentile_interval` (Efron & Tibshirani 1993, Sec. 13.3).

    Parameters
    ----------
    estimate : float
        The point estimate on the original sample (the same quantity the replicates estimate).
    reps : array-like of shape (n_boot,)
        Replicates; NaN replicates are left out.
    ci : float, default=0.95
        Coverage, in (0, 1).
    method : {"centred", "basic", "bc", "percentile"}
    bounds : (float, float), optional
        The statistic's range (e.g. ``(-1, 1)`` for a correlation): the interval is clipped to it.

    Returns
    -------
    (float, float)
        ``(nan, nan)`` when no replicate or the estimate is not finite (for "percentile": no replicate).

    Raises
    ------
    ValueError
        For an unknown ``method`` (the message lists the valid ones) or ``ci`` outside (0, 1).

    References
    ----------
    Politis, Romano & Wolf (1999), "Subsampling", Springer, Ch. 2; Davison & Hinkley (1997), "Bootstrap
    Methods and their Application", Sec. 5.2; Efron & Tibshirani (1993), "An Introduction to the Bootstrap",
    Sec. 10.6 (bias), 13.3 and 14.3.
    """
    lo, hi = _interval(estimate, reps, ci, method)
    if bounds is not None and np.isfinite(lo) and np.isfinite(hi):
        lo, hi = float(np.clip(lo, *bounds)), float(np.clip(hi, *bounds))
    return lo, hi


def _interval(estimate: float, reps, ci: float, method: str) -> tuple[float, float]:
    if method not in INTERVAL_METHODS:
        raise ValueError(f"unknown interval method {method!r}; valid: {INTERVAL_METHODS}")
    if not 0 < ci < 1:
        raise ValueError(f"ci must be in (0, 1); got {ci}")
    if method == "percentile":
        return percentile_interval(reps, ci=ci)
    reps = np.asarray(reps, dtype=np.float64)
    ok = reps[np.isfinite(reps)]
    if ok.size == 0 or estimate is None or not np.isfinite(estimate):
        return float("nan"), float("nan")
    if method == "centred":
        q_lo, med, q_hi = np.quantile(ok, [(1 - ci) / 2, 0.5, (1 + ci) / 2])
        return float(estimate + q_lo - med), float(estimate + q_hi - med)
    if method == "basic":
        q_lo, q_hi = np.quantile(ok, [(1 - ci) / 2, (1 + ci) / 2])
        return float(2 * estimate - q_hi), float(2 * estimate - q_lo)
    from scipy.stats import norm

    below = (np.sum(ok < estimate) + 0.5 * np.sum(ok == estimate)) / ok.size
    below = np.clip(below, 0.5 / ok.size, 1 - 0.5 / ok.size)  # all replicates on one side: z0 stays finite
    z0, z = norm.ppf(below), norm.ppf((1 + ci) / 2)
    lo, hi = np.quantile(ok, norm.cdf([2 * z0 - z, 2 * z0 + z]))
    return float(lo), float(hi)


def paired_interval(a_reps, b_reps, ci: float = 0.95, *, ratio: bool = False, estimates=None,
                    method: str = "centred") -> tuple[float, float]:
    """Interval of ``a - b`` (or ``a / b``) over *paired* replicates (the same image subsamples).

    Parameters
    ----------
    a_reps, b_reps : array-like of shape (n_boot,)
        Replicates of ``a`` and ``b`` on the same subsamples.
    ci : float, default=0.95
    ratio : bool, default=False
        The ratio ``a / b`` instead of the difference. With a positive estimate and ``method`` "centred" or "basic", the
        interval of ``log(a / b)``, exponentiated (replicates that are not positive are left out), so it stays positive
        and the long upper tail of a ratio is not mirrored below 0 (Davison & Hinkley 1997, Sec. 5.2.1).
    estimates : (float, float)
        The point estimates of ``a`` and ``b``: the difference (ratio) of the two is the statistic's estimate,
        around which the interval is placed. Required unless ``method="percentile"``.
    method : {"centred", "basic", "bc", "percentile"}, default="centred"
        As in :func:`bootstrap_interval`.

    Raises
    ------
    ValueError
        If the two replicate vectors differ in length (they cannot be paired), or ``estimates`` is missing for
        a method that needs it.
    """
    a, b = np.asarray(a_reps, dtype=np.float64), np.asarray(b_reps, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired replicates must have one length; got {a.shape} and {b.shape}")
    if estimates is None and method != "percentile":
        raise ValueError(f"the {method!r} interval needs the point estimates of a and b (estimates=(a, b))")
    with np.errstate(divide="ignore", invalid="ignore"):
        reps = a / b if ratio else a - b
        est = np.nan if estimates is None else (
            float(np.float64(estimates[0]) / np.float64(estimates[1])) if ratio
            else float(estimates[0]) - float(estimates[1]))
        if ratio and method in ("centred", "basic") and np.isfinite(est) and est > 0:
            lo, hi = bootstrap_interval(np.log(est), np.where(reps > 0, np.log(np.where(reps > 0, reps, 1.0)),
                                                              np.nan), ci=ci, method=method)
            return float(np.exp(lo)), float(np.exp(hi))
    return bootstrap_interval(est, reps, ci=ci, method=method)


def detectable_difference(low: float, high: float, *, ci: float = 0.95, power: float = 0.8) -> float:
    """Smallest true difference a two-sided test at level ``1 - ci`` detects with probability ``power``.

    With the interval's half-width read as ``z_{(1+ci)/2}`` standard errors (normal approximation),
    the minimal detectable difference is ``(z_{(1+ci)/2} + z_power) * SE`` (e.g. 2.80 SE at 95 % / 80 %).

    References
    ----------
    Cohen (1988), "Statistical Power Analysis for the Behavioral Sciences", Ch. 2.
    """
    from scipy.stats import norm

    if not (np.isfinite(low) and np.isfinite(high)):
        return float("nan")
    z = norm.ppf((1 + ci) / 2)
    se = (high - low) / (2 * z)
    return float((z + norm.ppf(power)) * se)
