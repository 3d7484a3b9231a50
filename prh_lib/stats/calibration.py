"""Permutation-calibrated alignment scores (Gröger et al. 2026) and multiple-comparison control.

The null hypothesis is that the pairing of rows between ``X`` and ``Y`` carries no information. It is
simulated by re-pairing: ``Y`` is replaced by ``Y[perm]`` for ``K`` random permutations ``perm`` of the
samples. With observed score ``s_obs`` and permuted scores ``s_1..s_K``:

- threshold ``tau`` = the ``ceil((1 - alpha)(K + 1))``-th smallest value of ``{s_obs, s_1, ..., s_K}``;
- p-value ``p = (1 + #{s_k >= s_obs}) / (K + 1)``;
- calibrated score ``clip((s_obs - tau) / (1 - tau), 0, 1)``: 0 unless the score clears the null's
  ``1 - alpha`` quantile, 1 for a perfect score.

When a reported score is the maximum over all layer pairs, the null must undergo the same selection: each permutation is
applied to every layer of ``Y`` at once and the maximum of each permuted ``(L_x, L_y)`` matrix forms the null of the
maximum (``selection_aware=True``). Comparing a selected maximum with a single pair's null is anti-conservative.

Permutations never recompute Gram matrices: k-NN metrics look up packed neighbour memberships at
permuted positions, all layer pairs and batches of permutations at once (see
:mod:`prh_lib.metrics._overlap`); kernel metrics permute the rows and columns of the stored centred
Gram matrices. The null equals recomputing the metric on ``Y[perm]``: bit for bit for the k-NN family,
whatever the ties (see the tie semantics in :mod:`prh_lib.metrics.knn`), and up to float32 rounding
of the centred Gram matrices for the kernel family. The test is then an exact permutation test: on
data whose pairing carries no information it rejects with probability at most ``alpha``.

References
----------
Gröger, Wen, Brbić (2026). "Revisiting the Platonic Representation Hypothesis: An Aristotelian View",
arXiv:2602.14486, Sec. 5 (null calibration; selection-aware null over layer pairs).
Phipson, Smyth (2010). "Permutation P-values Should Never Be Zero", Stat. Appl. Genet. Mol. Biol. 9(1)
(the ``(1 + b) / (K + 1)`` estimator).
Benjamini, Hochberg (1995). "Controlling the False Discovery Rate", JRSS-B 57(1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from prh_lib.metrics import _validation as V
from prh_lib.metrics._engines import resolve

__all__ = ["CalibratedScore", "LayerwiseCalibration", "calibrate", "permutation_test", "permutation_test_layerwise",
           "benjamini_hochberg", "min_permutations"]


@dataclass(frozen=True)
class CalibratedScore:
    """Result of :func:`permutation_test` for one pair of representations.

    Attributes
    ----------
    observed : float
        The metric on the true pairing.
    threshold : float
        ``tau``, the ``ceil((1 - alpha)(K + 1))``-th smallest of observed and null scores.
    p_value : float in [1/(K+1), 1]
    calibrated : float in [0, 1]
    null : ndarray of shape (n_permutations,)
        Scores under re-paired samples.
    n_permutations, alpha, seed, metric, options
        How it was computed (``seed`` is None when explicit permutations were given).
    """

    observed: float
    threshold: float
    p_value: float
    calibrated: float
    null: np.ndarray = field(repr=False)
    n_permutations: int
    alpha: float
    seed: int | None
    metric: str
    options: dict


@dataclass(frozen=True)
class LayerwiseCalibration:
    """Result of :func:`permutation_test_layerwise`.

    Attributes
    ----------
    observed : ndarray of shape (n_layers_x, n_layers_y)
    null : ndarray of shape (n_permutations, n_layers_x, n_layers_y)
        Every permutation is shared by all layer pairs.
    threshold, p_value, calibrated : ndarray of shape (n_layers_x, n_layers_y)
        Per pair, each against its own null (no correction for the number of pairs; see
        :func:`benjamini_hochberg`).
    observed_max : float
        Maximum of ``observed`` (NaN entries ignored), at layer pair ``argmax``.
    argmax : tuple of int
    null_max : ndarray of shape (n_permutations,)
        With ``selection_aware``, the maximum of each permuted matrix; otherwise the null of the pair
        ``argmax`` alone (anti-conservative; kept to show the difference).
    threshold_max, p_max, calibrated_max : float
        Calibration of ``observed_max`` against ``null_max``.
    selection_aware : bool
    n_permutations, alpha, seed, metric, options
    """

    observed: np.ndarray
    null: np.ndarray = field(repr=False)
    threshold: np.ndarray
    p_value: np.ndarray
    calibrated: np.ndarray
    observed_max: float
    argmax: tuple
    null_max: np.ndarray = field(repr=False)
    threshold_max: float
    p_max: float
    calibrated_max: float
    selection_aware: bool
    n_permutations: int
    alpha: float
    seed: int | None
    metric: str
    options: dict

    def at_alpha(self, alpha: float) -> "LayerwiseCalibration":
        """The same null calibrated at another level ``alpha`` (nothing is recomputed from the data).

        ``threshold``, ``calibrated`` and their maxima move with ``alpha``; the null, the observed
        scores and the p-values do not. The result equals :func:`permutation_test_layerwise` run with
        that ``alpha`` on the same permutations, bit for bit (the same :func:`calibrate`).

        Raises
        ------
        ValueError
            ``alpha`` outside (0, 1), or too small for ``n_permutations`` (:func:`min_permutations`).
        """
        alpha = _check_alpha_k(alpha, self.n_permutations)
        if alpha == self.alpha:
            return self
        tau, p, cal = calibrate(self.observed, self.null, alpha=alpha)
        tau_m, p_m, cal_m = calibrate(self.observed_max, self.null_max, alpha=alpha)
        return replace(self, threshold=tau, p_value=p, calibrated=cal, threshold_max=tau_m, p_max=p_m,
                       calibrated_max=cal_m, alpha=alpha)


def min_permutations(alpha: float) -> int:
    """Smallest ``K`` for which a permutation test at level ``alpha`` can reject: ``1/(K+1) <= alpha``."""
    alpha = V.check_fraction(alpha, "alpha")
    return max(1, math.ceil(1.0 / alpha - 1e-9) - 1)


def _check_alpha_k(alpha, K) -> float:
    alpha = V.check_fraction(alpha, "alpha")
    K = V.check_int(K, "n_permutations", low=1)
    if K < min_permutations(alpha):
        raise ValueError(
            f"n_permutations={K} is too small for alpha={alpha}: the smallest attainable p-value is "
            f"1/(K+1) = {1 / (K + 1):.4g} > alpha; use at least {min_permutations(alpha)} permutations"
        )
    return alpha


def calibrate(observed, null, *, alpha: float = 0.05):
    """Threshold, p-value and calibrated score of observed score(s) against a permutation null.

    Parameters
    ----------
    observed : float or array_like of shape S
    null : array_like of shape (n_permutations, *S)
    alpha : float in (0, 1), default=0.05

    Returns
    -------
    threshold : float or ndarray of shape S
        ``tau``, the ``ceil((1 - alpha)(K + 1))``-th smallest of ``{observed} ∪ null``.
    p_value : float or ndarray of shape S
        ``(1 + #{null >= observed}) / (K + 1)``, in ``[1/(K+1), 1]``.
    calibrated : float or ndarray of shape S
        ``clip((observed - tau) / (1 - tau), 0, 1)`` (0 when ``tau >= 1``). NaN where ``observed`` is NaN.

    Raises
    ------
    ValueError
        ``alpha`` outside (0, 1); shapes that do not match; NaN in ``null`` where ``observed`` is
        finite; ``K`` too small for ``alpha`` (see :func:`min_permutations`).

    References
    ----------
    Gröger et al. (2026), Sec. 5; Phipson & Smyth (2010).
    """
    obs = np.asarray(observed, dtype=np.float64)
    nul = np.asarray(null, dtype=np.float64)
    if nul.ndim != obs.ndim + 1 or nul.shape[1:] != obs.shape:
        raise ValueError(
            f"null must have shape (n_permutations, *observed.shape) = (K, {', '.join(map(str, obs.shape))}); "
            f"got observed shape {obs.shape} and null shape {nul.shape}"
        )
    K = nul.shape[0]
    alpha = _check_alpha_k(alpha, K)
    fin = np.isfinite(obs)
    if np.any(~np.isfinite(nul) & fin):
        raise ValueError("null contains NaN or infinite values where the observed score is finite")
    r = math.ceil((1.0 - alpha) * (K + 1) - 1e-9)  # 1-based rank, <= K by the check above
    tau = np.sort(np.concatenate([obs[None], nul], 0), axis=0)[r - 1]
    p = (1.0 + np.sum(nul >= obs, axis=0)) / (K + 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        cal = np.where(tau < 1.0, np.clip((obs - tau) / (1.0 - tau), 0.0, 1.0), 0.0)
    tau, p, cal = (np.where(fin, a, np.nan) for a in (tau, p, cal))
    if obs.ndim == 0:
        return float(tau), float(p), float(cal)
    return tau, p, cal


def _permutations(n: int, n_permutations, seed, permutations):
    if permutations is not None:
        P = np.asarray(permutations)
        if P.ndim != 2 or P.shape[1] != n or P.dtype.kind not in "iu":
            raise ValueError(f"permutations must be an integer array of shape (K, {n}); got {P.shape} {P.dtype}")
        if not np.all(np.sort(P, axis=1) == np.arange(n)):
            raise ValueError("every row of permutations must be a permutation of range(n_samples)")
        return P.astype(np.int64), None
    K = V.check_int(n_permutations, "n_permutations", low=1)
    seed = V.check_int(seed, "seed", low=0)
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(n) for _ in range(K)]), seed


def _run(X, Y, *, ndim, metric, k, n_permutations, alpha, seed, permutations, device, options):
    Xin, Yin = X, Y
    engine, X, Y, opts = resolve(metric, X, Y, ndim=ndim, k=k, device=device, options=options)
    perms, seed = _permutations(X.shape[-2], n_permutations, seed, permutations)
    alpha = _check_alpha_k(alpha, perms.shape[0])
    XL, YL = (X, Y) if ndim == 3 else (X[None], Y[None])
    sx, sy = engine.prepare(XL, name="X", source=Xin, **opts), engine.prepare(YL, name="Y", source=Yin, **opts)
    V.warn_degenerate(torch.from_numpy(~engine.valid(sx)), "X", metric, "constant representation")
    V.warn_degenerate(torch.from_numpy(~engine.valid(sy)), "Y", metric, "constant representation")
    obs = engine.scores(sx, sy)[0]
    null = engine.scores(sx, sy, perms)  # (K, L_x, L_y): the same kernels as obs, re-paired
    return obs, null, perms.shape[0], alpha, seed, opts


def permutation_test(
    X, Y, *, metric: str = "mutual_knn", k: int | None = None, n_permutations: int = 200,
    alpha: float = 0.05, seed: int = 0, permutations=None, device=None, **metric_options,
) -> CalibratedScore:
    """Permutation-calibrated score of one pair of representations.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, d_x)
    Y : ndarray or Tensor of shape (n_samples, d_y)
    metric : str, default="mutual_knn"
        A name in :data:`prh_lib.metrics.METRICS`.
    k : int, optional
        Neighbours for k-NN metrics (default 10); must be None for the kernel metrics.
    n_permutations : int, default=200
        ``K``. Gröger et al. use 500. Must satisfy ``1/(K+1) <= alpha``.
    alpha : float in (0, 1), default=0.05
    seed : int, default=0
        Seeds ``numpy.random.default_rng`` that draws the permutations; same seed, same result bits.
    permutations : array_like of shape (K, n_samples), optional
        Explicit permutations (``Y`` is re-paired as ``Y[perm]``); overrides ``n_permutations``/``seed``.
    device : str or torch.device, optional
    **metric_options
        Further options of the metric (e.g. ``sigma``, ``bandwidth`` for ``"cka_rbf"``).

    Returns
    -------
    CalibratedScore
        ``observed`` equals ``METRICS[metric](X, Y)`` and ``null[t]`` equals ``METRICS[metric](X, Y[perm_t])`` bit for
        bit for the k-NN metrics (one code path); to float32 accuracy for the kernel metrics.

    Raises
    ------
    ValueError
        Unknown metric (listing valid names); bad data as for the metric; ``K`` too small for
        ``alpha``; malformed ``permutations``.
    TypeError
        Options the metric does not take.

    References
    ----------
    Gröger et al. (2026), Sec. 5.
    """
    obs, null, K, alpha, seed, opts = _run(
        X, Y, ndim=2, metric=metric, k=k, n_permutations=n_permutations, alpha=alpha, seed=seed,
        permutations=permutations, device=device, options=metric_options,
    )
    s_obs, s_null = float(obs[0, 0]), null[:, 0, 0]
    tau, p, cal = calibrate(s_obs, s_null, alpha=alpha)
    return CalibratedScore(s_obs, tau, p, cal, s_null, K, alpha, seed, metric, opts)


def permutation_test_layerwise(
    X, Y, *, metric: str = "mutual_knn", k: int | None = None, n_permutations: int = 200,
    alpha: float = 0.05, seed: int = 0, selection_aware: bool = True, permutations=None,
    device=None, **metric_options,
) -> LayerwiseCalibration:
    """Permutation-calibrated layer-pair matrix and its selection-aware maximum.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_layers_x, n_samples, d_x)
    Y : ndarray or Tensor of shape (n_layers_y, n_samples, d_y)
    metric, k, n_permutations, alpha, seed, permutations, device, **metric_options
        As in :func:`permutation_test`. One permutation re-pairs every layer of ``Y`` at once.
    selection_aware : bool, default=True
        Calibrate the maximum over layer pairs against the maximum of each permuted matrix. With
        False, against the selected pair's own null (the naive, anti-conservative choice).

    Raises
    ------
    ValueError, TypeError
        As :func:`permutation_test`, for 3-D inputs; also if every layer pair is NaN.

    Notes
    -----
    Cost: the ``L_x + L_y`` Gram matrices once, then per permutation, for mutual, Jaccard and cycle k-NN, ``L_y N k``
    look-ups of packed words holding 63 layers of ``X`` each and a bit-sliced count (all layer pairs at once; at the
    paper's size about a millisecond); for CKNNA ``O(L_x L_y N k)`` gathers in float64; for the kernel metrics an
    ``(L_x, N^2) @ (N^2, L_y)`` product. ``benchmarks/bench_metrics.py`` measures these against the Gram-matrix floor.

    References
    ----------
    Gröger et al. (2026), Sec. 5 (maximum over layers with a selection-aware null).
    """
    if not isinstance(selection_aware, bool):
        raise TypeError(f"selection_aware must be a bool; got {selection_aware!r}")
    obs, null, K, alpha, seed, opts = _run(
        X, Y, ndim=3, metric=metric, k=k, n_permutations=n_permutations, alpha=alpha, seed=seed,
        permutations=permutations, device=device, options=metric_options,
    )
    tau, p, cal = calibrate(obs, null, alpha=alpha)
    if np.all(np.isnan(obs)):
        raise ValueError(f"{metric}: every layer pair is NaN (degenerate layers); nothing to select")
    a, b = np.unravel_index(int(np.nanargmax(obs)), obs.shape)
    null_max = np.nanmax(null.reshape(K, -1), axis=1) if selection_aware else null[:, a, b]
    tau_m, p_m, cal_m = calibrate(float(obs[a, b]), null_max, alpha=alpha)
    return LayerwiseCalibration(
        observed=obs, null=null, threshold=tau, p_value=p, calibrated=cal,
        observed_max=float(obs[a, b]), argmax=(int(a), int(b)), null_max=null_max,
        threshold_max=tau_m, p_max=p_m, calibrated_max=cal_m, selection_aware=selection_aware,
        n_permutations=K, alpha=alpha, seed=seed, metric=metric, options=opts,
    )


def benjamini_hochberg(p_values) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (q-values) across many comparisons.

    Parameters
    ----------
    p_values : array_like of any shape
        Values in [0, 1]; NaN entries (e.g. degenerate layers) are left out and stay NaN.

    Returns
    -------
    q : ndarray of the same shape
        Reject at false discovery rate ``alpha`` where ``q <= alpha``.

    Raises
    ------
    ValueError
        Values outside [0, 1] or infinite.

    References
    ----------
    Benjamini & Hochberg (1995); computed by ``scipy.stats.false_discovery_control(method="bh")``.
    """
    from scipy.stats import false_discovery_control

    p = np.asarray(p_values, dtype=np.float64)
    ok = ~np.isnan(p)
    if np.any((p[ok] < 0) | (p[ok] > 1)):
        raise ValueError(f"p-values must lie in [0, 1]; got min {p[ok].min()}, max {p[ok].max()}")
    q = np.full(p.shape, np.nan)
    if ok.any():
        q[ok] = false_discovery_control(p[ok], method="bh")
    return q
