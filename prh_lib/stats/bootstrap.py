"""Bootstrap confidence intervals over samples for any alignment score.

Resampling rows with replacement puts several copies of a sample at different positions. Treated naively, a copy is the
perfect nearest neighbour of its twin in *both* representations, which inflates every k-NN score (for independent data
mutual k-NN would rise far above its chance level ``k/(N-1)``), and copies re-introduce the self-similarity terms that
the unbiased HSIC removes. What this module does about it, per metric family (``method="bootstrap"``):

- k-NN metrics (``mutual_knn``, ``jaccard_knn``, ``cycle_knn``, ``cknna``): neighbours are searched among the resampled
  rows, excluding every position that holds a copy of the *same original sample* (exclusion by sample identity, the
  resampling analogue of excluding the diagonal). Copies of *other* samples remain distinct positions and can both be
  neighbours; they tie exactly. A tie at the k-th place between copies of one sample is not a tie between samples: the
  first copy wins, identically in ``X`` and ``Y``. Ties between different samples follow the metric's tie semantics
  (:mod:`prh_lib.metrics.knn`: tie-averaged for mutual and Jaccard k-NN, lowest position for cycle k-NN and CKNNA, which
  the resampled positions, sorted by original index, make the lowest index).
- ``cka_linear_unbiased``: entries of the Gram matrix at pairs of positions holding the same sample are
  zeroed together with the diagonal before U-centring. This removes the duplicated self-similarity
  (without it the replicates drift towards the biased CKA); it is an approximation of the U-statistic,
  whose exact form would need all four indices to be distinct samples.
- ``cycle_knn`` asks whether a sample is found again; under resampling, finding *any copy* of it counts.
- ``cka_linear`` and ``cka_rbf`` (biased HSIC, a V-statistic that already includes self-pairs): the
  resampled Gram matrix is used as is, the textbook bootstrap. With ``bandwidth="median"`` the RBF
  bandwidth is recomputed on every resample, as part of the estimator. A resample holds only about
  ``0.63 N`` distinct samples and the biased estimators grow as the sample shrinks, so their replicates
  sit *above* the estimate (for independent data often entirely above it). The result reports this
  shift as ``bias``; ``interval="basic"`` corrects a constant shift, or use ``cka_linear_unbiased``.

``method="subsample"`` draws ``round(fraction * N)`` rows *without* replacement instead (no duplicates, no special
cases). The spread then describes scores at the smaller sample size and is wider than at ``N``; k-NN scores also shift
with ``N`` (their chance level is ``k/(N-1)``), so read such intervals as conservative.

Similarity or Gram matrices of the full sample are computed once; each replicate takes rows and columns from them
(positions sorted by original index, so the lowest-index tie-break keeps its meaning). For mutual, Jaccard and cycle
k-NN no resampled matrix is formed at all (:func:`prh_lib.metrics._neighbours.hoods_of_resamples`), with the same bits.

References
----------
Efron, Tibshirani (1993). "An Introduction to the Bootstrap", Chapman & Hall, Ch. 13 (percentile
interval). Politis, Romano, Wolf (1999). "Subsampling", Springer (sampling without replacement).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from prh_lib.metrics._parallel import ignoring
from prh_lib.metrics import _validation as V
from prh_lib.metrics._engines import resolve

__all__ = ["BootstrapCI", "bootstrap_ci", "replicate_size", "BOOTSTRAP_METHODS", "INTERVALS"]

BOOTSTRAP_METHODS = ("bootstrap", "subsample")
INTERVALS = ("percentile", "basic")


def replicate_size(n: int, method: str = "subsample", fraction: float = 0.5) -> int:
    """Rows in one replicate of :func:`bootstrap_ci`: ``n`` for ``"bootstrap"``, ``round(fraction * n)``
    (Python's round, half to even: 120 of 239 at 0.5) for ``"subsample"``.

    This is the size a replicate's chance level k / (m - 1) must use. The held-out peaks' half-samples
    (:func:`prh_lib.stats.selection.subsample_size`, ``n // 2``: 119 of 239) are another resampler.
    """
    return int(n) if method == "bootstrap" else int(round(float(fraction) * int(n)))


@dataclass(frozen=True)
class BootstrapCI:
    """Point estimate with a percentile confidence interval; unpacks as ``estimate, low, high``.

    Attributes
    ----------
    estimate : float
        The metric on all samples (the public pairwise function's value).
    low, high : float
        Interval at level ``ci`` (percentile or basic, see ``interval``).
    bias : float
        Mean of the replicates minus ``estimate`` (the bootstrap estimate of the estimator's bias).
    replicates : ndarray of shape (n_boot,)
        NaN for the (rare) resamples on which the metric is undefined.
    ci, interval, n_boot, seed, method, fraction, metric, options
        How it was computed (``fraction`` is None for ``method="bootstrap"``).
    """

    estimate: float
    low: float
    high: float
    bias: float
    replicates: np.ndarray = field(repr=False)
    ci: float
    interval: str
    n_boot: int
    seed: int
    method: str
    fraction: float | None
    metric: str
    options: dict

    def __iter__(self):
        return iter((self.estimate, self.low, self.high))


def _draw(rng, n, method, m):
    if method == "bootstrap":
        return np.sort(rng.integers(0, n, size=n))
    return np.sort(rng.choice(n, size=m, replace=False))


def bootstrap_ci(
    X, Y, *, metric="mutual_knn", k: int | None = None, n_boot: int = 1000, ci: float = 0.95,
    seed: int = 0, method: str = "bootstrap", fraction: float = 0.5, interval: str = "percentile",
    device=None, warn_outside: bool = True, **metric_options,
) -> BootstrapCI:
    """Percentile confidence interval of an alignment score, resampling samples (rows).

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)
        The same rows of ``X`` and ``Y`` are drawn together.
    metric : str or callable, default="mutual_knn"
        A name in :data:`prh_lib.metrics.METRICS`, or a function ``f(X, Y, **metric_options) -> float``.
        A callable is simply evaluated on the resampled rows, so it sees copies as distinct samples;
        use ``method="subsample"`` for neighbour-based callables.
    k : int, optional
        Neighbours for the k-NN metrics (default 10); None for the others.
    n_boot : int, default=1000
    ci : float in (0, 1), default=0.95
    seed : int, default=0
        Seeds ``numpy.random.default_rng``; the same inputs and seed give bit-identical results.
    method : {"bootstrap", "subsample"}, default="bootstrap"
        Resampling with replacement (duplicates handled as in the module docstring) or without.
    fraction : float in (0, 1), default=0.5
        Subsample size as a fraction of ``n_samples`` (``method="subsample"`` only).
    interval : {"percentile", "basic"}, default="percentile"
        Percentile interval ``[q_lo, q_hi]`` of the replicates or basic interval
        ``[2 estimate - q_hi, 2 estimate - q_lo]``.
    device : str or torch.device, optional
    warn_outside : bool, default=True
        Warn when the estimate lies outside its percentile interval. Callers that read only the replicates'
        spread (half-samples at a fixed k sit at their own, higher chance level by design, and the centred
        interval of :func:`prh_lib.stats.intervals.bootstrap_interval` is built from them) pass False.
    **metric_options
        Options of the metric (``sigma``, ``bandwidth``, ``unbiased`` for ``cka_rbf``).

    Returns
    -------
    BootstrapCI
        ``estimate, low, high = bootstrap_ci(...)`` works.

    Raises
    ------
    ValueError
        Unknown metric or method; bad data as for the metric; ``n_boot < 1``; ``ci`` or ``fraction``
        outside (0, 1); a subsample too small for ``k`` or for the estimator.
    TypeError
        Options the metric does not take.

    References
    ----------
    Efron & Tibshirani (1993), Ch. 13.
    """
    if not warn_outside:  # the same computation, without the warning about the percentile interval
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*lies outside its percentile interval")
            return bootstrap_ci(X, Y, metric=metric, k=k, n_boot=n_boot, ci=ci, seed=seed, method=method,
                                fraction=fraction, interval=interval, device=device, **metric_options)
    if method not in BOOTSTRAP_METHODS:
        raise ValueError(f"method must be one of {BOOTSTRAP_METHODS}; got {method!r}")
    if interval not in INTERVALS:
        raise ValueError(f"interval must be one of {INTERVALS}; got {interval!r}")
    n_boot = V.check_int(n_boot, "n_boot", low=1)
    ci = V.check_fraction(ci, "ci")
    seed = V.check_int(seed, "seed", low=0)
    frac = V.check_fraction(fraction, "fraction") if method == "subsample" else None
    rng = np.random.default_rng(seed)
    if callable(metric):
        return _bootstrap_callable(
            X, Y, metric, k, n_boot, (ci, interval), seed, method, frac, rng, metric_options
        )

    from prh_lib.metrics import METRICS  # the public pairwise functions (imported here: the package imports us)

    engine, Xt, Yt, opts = resolve(metric, X, Y, ndim=2, k=k, device=device, options=metric_options)
    n = Xt.shape[0]
    m = replicate_size(n, method, frac)
    _check_subsample(metric, m, n, engine, opts)
    estimate = METRICS[metric](Xt, Yt, **opts)
    Gx, vx = engine.gram(Xt[None])
    Gy, vy = engine.gram(Yt[None])
    draws = [_draw(rng, n, method, m) for _ in range(n_boot)]
    kk = opts.get("k")
    # fewer than k other samples left in a resample: that replicate is NaN
    ok = [b for b, idx in enumerate(draws)
          if not (kk is not None and method == "bootstrap" and n - np.bincount(idx).max() < kk)]
    reps = np.full(n_boot, np.nan)
    with ignoring(RuntimeWarning):  # thread-safe (._parallel): draws may be scored side by side
        if engine.resample_state is not None:
            reps[ok] = _stacked_replicates(engine, Gx, vx, Gy, vy, [draws[b] for b in ok], opts)
        else:
            for b in ok:
                it = torch.from_numpy(draws[b]).to(Gx.device)
                groups = it if method == "bootstrap" else None
                sx = engine.state(Gx[:, it][:, :, it], vx, groups=groups, **opts)
                sy = engine.state(Gy[:, it][:, :, it], vy, groups=groups, **opts)
                reps[b] = float(engine.score(sx, sy)[0, 0])
    return _finish(estimate, reps, (ci, interval), n_boot, seed, method, frac, metric, opts)


def _stacked_replicates(engine, Gx, vx, Gy, vy, draws, opts) -> np.ndarray:
    """Scores of the resamples ``draws`` (each an index array of length m), up to 63 at a time.

    A chunk's resamples form one state whose "layers" are the replicates
    (:func:`prh_lib.metrics._neighbours.hoods_of_resamples`), so one score call rates every replicate of
    X against every replicate of Y; replicate b's score is the diagonal entry (b, b). 63 layers fill one
    packed word, so the off-diagonal pairs cost almost nothing. The scores are exact integer counts of
    the same neighbourhoods, so this equals scoring the replicates one by one, bit for bit (tested).
    """
    from prh_lib.metrics._bits import WORD

    out = []
    for b0 in range(0, len(draws), WORD):
        it = torch.from_numpy(np.stack(draws[b0:b0 + WORD])).to(Gx.device)  # (B, m), rows sorted
        sx = engine.resample_state(Gx, vx, it, **opts)
        sy = engine.resample_state(Gy, vy, it, **opts)
        out.append(np.diagonal(engine.scores(sx, sy)[0]))
    return np.concatenate(out) if out else np.empty(0)


def _check_subsample(metric, m, n, engine, opts):
    min_n = 4 if opts.get("unbiased") else engine.min_n
    if m < min_n or ("k" in opts and opts["k"] > m - 1):
        raise ValueError(
            f"subsample of {m} of {n} samples is too small for {metric} "
            f"(needs >= {min_n} samples{' and k <= m - 1' if 'k' in opts else ''}); raise fraction"
        )


def _bootstrap_callable(X, Y, f, k, n_boot, ci, seed, method, frac, rng, opts):
    if k is not None:
        opts = {**opts, "k": k}
    Xa = X if isinstance(X, (np.ndarray, torch.Tensor)) else np.asarray(X)
    Ya = Y if isinstance(Y, (np.ndarray, torch.Tensor)) else np.asarray(Y)
    n = Xa.shape[0]
    if Ya.shape[0] != n:
        raise ValueError(f"X and Y must have the same number of samples: {tuple(Xa.shape)} vs {tuple(Ya.shape)}")
    m = replicate_size(n, method, frac)
    estimate = float(f(Xa, Ya, **opts))
    reps = np.empty(n_boot)
    for b in range(n_boot):
        idx = _draw(rng, n, method, m)
        ii = torch.from_numpy(idx) if isinstance(Xa, torch.Tensor) else idx
        jj = torch.from_numpy(idx) if isinstance(Ya, torch.Tensor) else idx
        reps[b] = float(f(Xa[ii], Ya[jj], **opts))
    name = getattr(f, "__name__", repr(f))
    return _finish(estimate, reps, ci, n_boot, seed, method, frac, name, opts)


def _finish(estimate, reps, ci_interval, n_boot, seed, method, frac, metric, opts):
    ci, interval = ci_interval
    n_bad = int(np.isnan(reps).sum())
    if n_bad == n_boot or np.isnan(estimate):
        low = high = bias = float("nan")
    else:
        if n_bad:
            warnings.warn(
                f"{metric}: {n_bad} of {n_boot} replicates are undefined (NaN) and left out of the interval",
                RuntimeWarning,
                stacklevel=3,
            )
        q_lo, q_hi = np.nanquantile(reps, [(1 - ci) / 2, (1 + ci) / 2])
        low, high = (q_lo, q_hi) if interval == "percentile" else (2 * estimate - q_hi, 2 * estimate - q_lo)
        bias = float(np.nanmean(reps) - estimate)
        if interval == "percentile" and not low <= estimate <= high:
            warnings.warn(
                f"{metric}: the estimate {estimate:.4g} lies outside its {interval} interval "
                f"[{low:.4g}, {high:.4g}] (bootstrap bias {bias:+.4g}); see the bootstrap module notes",
                RuntimeWarning,
                stacklevel=3,
            )
    return BootstrapCI(
        float(estimate), float(low), float(high), bias, reps, ci, interval, n_boot, seed, method, frac,
        metric, opts,
    )
