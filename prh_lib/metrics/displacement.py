"""Displacement geometry: do models share the *directions between* samples?

The companion result [1]_ argues that what vision and language models share is the direction of differences
between samples rather than where samples sit. Pipeline (each step public, so a caller can compose it):

1. :func:`split_indices` - seeded train/test split of the shared sample axis.
2. :func:`fit_whitening` - centre, PCA to at most ``n_components`` and whiten, fitted on the training rows
   only; near-zero-variance components are *dropped* (see there).
3. :func:`procrustes` - orthogonal map (rotation and reflection) fitted on training rows.
4. :func:`cosine_measures` - Pointwise, Cross-Model and Cross-Object cosines on the held-out rows, with
   shuffled-pairing controls.

:func:`displacement_similarity` runs 1-4 for one pair, :func:`displacement_layerwise` for all layer pairs
(each layer's whitening fitted once). The consensus decomposition is
:mod:`prh_lib.analysis.displacement.consensus`; the public reference code's procedure (projected means added
back) is :mod:`prh_lib.analysis.displacement.procedures`.

A representation with zero variance on the training rows (a ViT's CLS token at hidden state 0) has nothing
to whiten: :func:`fit_whitening` raises ``ValueError``; the two drivers return NaN for every measure
involving it and warn once (``RuntimeWarning``), as the k-NN family does.

Whitening gives every kept component unit variance, so a measure is roughly (shared dimensions) / (kept
dimensions ``r``) once ``r`` exceeds the shared dimension (16 shared: ``cross_model`` 0.99 at
``n_components=16``, 0.24 at 100): compare values only at the same ``r`` (``DisplacementResult`` records it).
Everything is float64 on purpose (whitening divides by square roots of variances down to ``1e-6`` of the
largest). ``seed`` feeds ``np.random.default_rng([seed, 0])`` for the split and ``[seed, 1]`` for pairs and
the shuffled pairing, so the steps with a seed reproduce what :func:`displacement_similarity` uses.

References
----------
.. [1] "Displacement geometry captures platonic shared reality across models and
   modalities", arXiv:2609.24209, Sec. "Method" (whitening, Procrustes, the three
   cosine measures).
.. [2] Schönemann, P. H. (1966). A generalized solution of the orthogonal Procrustes
   problem. Psychometrika 31, 1-10.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from prh_lib.metrics._validation import as_float64 as _as_float64, check_int

# the fitted steps (split, whitening, Procrustes), re-exported: this module is the family's one namespace, and
# the private names are looked up here by the measures (tests patch ``_fit_whitening`` on this module)
from prh_lib.metrics._whitening import (Whitening, _ZeroVariance, _fit_whitening, _procrustes, _split, _split_sizes,  # noqa: F401
    fit_whitening, procrustes, split_indices)

__all__ = ["MEASURES", "Whitening", "DisplacementResult", "split_indices", "fit_whitening", "procrustes",
           "cosine_measures", "displacement_similarity", "displacement_layerwise"]

#: Names of the measures returned by :func:`cosine_measures` (and the keys of
#: :func:`displacement_layerwise`), in a fixed order.
MEASURES = ("pointwise", "cross_model", "cross_object",
            "pointwise_shuffled", "cross_model_shuffled", "cross_object_shuffled")

#: A vector whose norm is at most this fraction of the RMS sample norm is treated as
#: exactly zero, so its cosine is undefined (float64 Procrustes residuals of an exact
#: copy are ~1e-14 of the sample norm; genuine differences are many orders larger).
ZERO_NORM_RTOL = 1e-8

_PAIR_STREAM = 1  # random stream of the pair draws (the split's is _whitening._SPLIT_STREAM)
_CHUNK = 65536  # pairs per block in the cosine kernel (bounds memory for huge n_pairs)


# --------------------------------------------------------------------------- cosines
def _draw_pairs(n: int, n_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ordered pairs ``i != j`` uniform with replacement, and a derangement of ``range(n)``."""
    rng = np.random.default_rng([seed, _PAIR_STREAM])
    i = rng.integers(0, n, size=n_pairs)
    j = (i + rng.integers(1, n, size=n_pairs)) % n
    order = rng.permutation(n)  # one n-cycle through a random order: no fixed points
    perm = np.empty(n, dtype=np.intp)
    perm[order] = np.roll(order, -1)
    return i, j, perm


def _add_cosines(num: np.ndarray, nu: np.ndarray, nv: np.ndarray, tol: float, acc: list) -> None:
    """Accumulate [sum of cosines, number defined] into ``acc``; norms ``<= tol`` are undefined."""
    ok = (nu > tol) & (nv > tol)
    acc[0] += float(np.clip(num[ok] / (nu[ok] * nv[ok]), -1.0, 1.0).sum())
    acc[1] += int(ok.sum())


def _finish(acc: list, name: str) -> float:
    if acc[1] == 0:
        warnings.warn(f"{name}: every vector pair has (numerically) zero norm, so the cosine is undefined; "
                      "returning NaN (for cross_object this means the aligned representations are identical)",
                      RuntimeWarning, stacklevel=3)
        return float("nan")
    return acc[0] / acc[1]


def _cosine_measures(A: np.ndarray, B: np.ndarray, i: np.ndarray, j: np.ndarray, perm: np.ndarray) -> dict[str, float]:
    tol = ZERO_NORM_RTOL * float(np.sqrt(0.5 * (np.mean(np.sum(A * A, 1)) + np.mean(np.sum(B * B, 1)))))
    n, r = A.shape
    acc = {k: [0.0, 0] for k in MEASURES}
    passes = []
    for suffix, Bp in (("", B), ("_shuffled", B[perm])):
        norm = np.linalg.norm
        _add_cosines(np.einsum("ij,ij->i", A, Bp), norm(A, axis=1), norm(Bp, axis=1), tol, acc["pointwise" + suffix])
        E = A - Bp  # residuals, formed directly (no cancellation): their inner products may use a Gram
        gram = E @ E.T if n * n <= len(i) * r else None
        passes.append((suffix, Bp, E, norm(E, axis=1), gram))
    for s in range(0, len(i), _CHUNK):
        ii, jj = i[s : s + _CHUNK], j[s : s + _CHUNK]
        dA = A[ii] - A[jj]  # displacements, formed directly: near-duplicate samples stay exact
        ndA = np.linalg.norm(dA, axis=1)
        for suffix, Bp, E, nE, gram in passes:
            dB = Bp[ii] - Bp[jj]
            ndB = np.linalg.norm(dB, axis=1)
            _add_cosines(np.einsum("ij,ij->i", dA, dB), ndA, ndB, tol, acc["cross_model" + suffix])
            num = gram[ii, jj] if gram is not None else np.einsum("ij,ij->i", E[ii], E[jj])
            _add_cosines(num, nE[ii], nE[jj], tol, acc["cross_object" + suffix])
    return {k: _finish(acc[k], k) for k in MEASURES}


def cosine_measures(A, B, *, n_pairs: int = 10_000, seed: int = 0, pairs=None) -> dict[str, float]:
    """Pointwise, Cross-Model and Cross-Object cosines of aligned representations.

    With ``a_i`` = row ``i`` of ``A`` and ``b_i`` = row ``i`` of ``B`` (already in a common,
    aligned frame, e.g. held-out rows after whitening and Procrustes), following [1]_:

    * ``pointwise``    = mean over all ``i`` of ``cos(a_i, b_i)``;
    * ``cross_model``  = mean over sampled pairs of ``cos(a_i - a_j, b_i - b_j)``: do the
      two models move in the same direction from sample ``j`` to sample ``i``?
    * ``cross_object`` = mean over sampled pairs of ``cos(a_i - b_i, a_j - b_j)``: is the residual between the models
      (the "modality gap" of an object) the same for different objects?

    Pairs ``(i, j)``, ``i != j``, are drawn uniformly with replacement (or given as ``pairs``). Each ``*_shuffled``
    control recomputes its measure with ``b_i`` replaced by ``b_pi(i)``, where ``pi`` is a random derangement (a single
    cycle, so no sample keeps its partner).

    **Undefined cosines.** A vector whose norm is ``<= ZERO_NORM_RTOL`` (1e-8) times the RMS row norm of ``A`` and ``B``
    is treated as exactly zero and its pair is left out of the mean; if every pair is left out the measure is NaN with a
    ``RuntimeWarning``. So ``cross_object`` of identical inputs (or of an exactly rotated copy after Procrustes) is NaN:
    every residual ``a_i - b_i`` is zero, and no residual direction can be shared.

    Parameters
    ----------
    A, B : ndarray or torch.Tensor of shape (n_samples, r)
        Aligned representations of the same samples; ``n_samples >= 2``.
    n_pairs : int >= 1, default 10000
        Number of sampled ordered pairs for the two pairwise measures.
    seed : int >= 0, default 0
        Seed for pairs and the derangement (``np.random.default_rng([seed, 1])``).
    pairs : tuple of two int arrays of shape (n_pairs,), optional
        Explicit ordered pairs ``(i, j)`` with ``i != j``, used instead of sampled ones (and
        ``n_pairs`` ignored), e.g. each sample with its predecessor as in the public reference
        code (:func:`prh_lib.analysis.displacement.reference.predecessor_pairs`).

    Returns
    -------
    dict of str to float
        Keys :data:`MEASURES`; each value in [-1, 1], or NaN when undefined (see above).

    Raises
    ------
    ValueError
        If the inputs are not 2-D, differ in shape, contain NaN/inf or have fewer than 2 rows; if ``pairs`` are not two
        equal-length integer arrays of indices in ``[0, n_samples)`` with ``i != j``.
    """
    A = _as_float64(A, "A", 2, "(n_samples, r)")
    B = _as_float64(B, "B", 2, "(n_samples, r)")
    if A.shape != B.shape:
        raise ValueError(f"A and B must have the same shape, got {A.shape} and {B.shape}")
    if A.shape[0] < 2:
        raise ValueError(f"need at least 2 samples to form pairs, got shape {A.shape}")
    n_pairs = check_int(n_pairs, "n_pairs", low=1)
    seed = check_int(seed, "seed", low=0)
    i, j, perm = _draw_pairs(A.shape[0], n_pairs, seed)
    if pairs is not None:
        i, j = _check_pairs(pairs, A.shape[0])
    return _cosine_measures(A, B, i, j, perm)


def _check_pairs(pairs, n: int) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(pairs, (tuple, list)) or len(pairs) != 2:
        raise TypeError(f"pairs must be a tuple (i, j) of two index arrays, got {type(pairs).__name__}")
    i, j = (np.asarray(p) for p in pairs)
    if i.dtype.kind not in "iu" or j.dtype.kind not in "iu" or i.ndim != 1 or i.shape != j.shape or not i.size:
        raise ValueError(f"pairs must be two non-empty 1-D integer arrays of equal length, got {i.dtype} "
                         f"{i.shape} and {j.dtype} {j.shape}")
    if min(i.min(), j.min()) < 0 or max(i.max(), j.max()) >= n or np.any(i == j):
        raise ValueError(f"pairs must index [0, {n}) with i != j; got i in [{i.min()}, {i.max()}], "
                         f"j in [{j.min()}, {j.max()}], {int(np.sum(i == j))} pairs with i == j")
    return i.astype(np.intp), j.astype(np.intp)


# --------------------------------------------------------------------------- one pair
@dataclass(frozen=True)
class DisplacementResult:
    """Held-out displacement measures for one pair of representations (see :func:`cosine_measures`).

    ``n_components`` is the common whitened dimension ``r`` actually used
    (``min`` of both models' kept components); ``n_train``/``n_test`` the split sizes.
    """

    pointwise: float
    cross_model: float
    cross_object: float
    pointwise_shuffled: float
    cross_model_shuffled: float
    cross_object_shuffled: float
    n_components: int
    n_train: int
    n_test: int
    n_pairs: int
    seed: int

    def measures(self) -> dict[str, float]:
        """The six measures as a dict keyed by :data:`MEASURES`."""
        return {k: getattr(self, k) for k in MEASURES}


def _plan(n: int, n_components, test_fraction, n_pairs, seed, eps) -> tuple:
    """The options checked, then the seeded split and pair draws that every layer pair shares.

    Returns ``(n_components, n_pairs, seed, eps, train, test, draws)``.
    """
    n_components = check_int(n_components, "n_components", low=1)
    n_pairs = check_int(n_pairs, "n_pairs", low=1)
    seed = check_int(seed, "seed", low=0)
    if not 0.0 <= float(eps) < 1.0:
        raise ValueError(f"eps must be in [0, 1), got {eps!r}")
    n_train, _ = _split_sizes(n, test_fraction)
    train, test = _split(n, n_train, seed)
    return n_components, n_pairs, seed, float(eps), train, test, _draw_pairs(len(test), n_pairs, seed)


def _whiten_split(X: np.ndarray, train: np.ndarray, test: np.ndarray, n_components: int, eps: float, name: str):
    """Whitened (train rows, test rows), or None when the training rows have zero variance."""
    try:
        w = _fit_whitening(X[train], n_components, eps, name=f"training rows of {name}")
    except _ZeroVariance:
        return None
    return w._transform(X[train]), w._transform(X[test])


def _warn_degenerate(layers: list, name: str, metric: str, single: bool) -> None:
    """One RuntimeWarning naming the zero-variance inputs (same wording as the k-NN family)."""
    if layers:
        where = "the representation" if single else f"layers {layers}"
        warnings.warn(f"{metric}: {name} is degenerate (zero variance on the training rows, nothing to whiten) "
                      f"in {where}; their scores are NaN", RuntimeWarning, stacklevel=3)


_NAN_MEASURES = dict.fromkeys(MEASURES, float("nan"))


def _pair_measures(x: tuple | None, y: tuple | None, draws: tuple) -> tuple[dict[str, float], int]:
    """Align whitened ``y`` to whitened ``x`` on train rows; measure on test rows (NaN, r=0 if degenerate)."""
    if x is None or y is None:
        return dict(_NAN_MEASURES), 0
    (xtr, xte), (ytr, yte) = x, y
    r = min(xtr.shape[1], ytr.shape[1])  # leading PCA axes: truncation == refit with r components
    R = _procrustes(ytr[:, :r], xtr[:, :r])
    return _cosine_measures(xte[:, :r], yte[:, :r] @ R, *draws), r


def displacement_similarity(X, Y, *, n_components: int = 100, test_fraction: float = 0.5, n_pairs: int = 10_000,
                            seed: int = 0, eps: float = 1e-10) -> DisplacementResult:
    """Displacement-geometry similarity of two representations of the same samples [1]_.

    Split the samples (:func:`split_indices`); on the training rows whiten each model (:func:`fit_whitening`), truncate
    both to the common dimension ``r = min(r_x, r_y)`` and fit :func:`procrustes` mapping ``Y``'s whitened training rows
    onto ``X``'s; on the held-out rows compute :func:`cosine_measures`. Nothing fitted sees a test row. The three main
    measures are symmetric in ``X`` and ``Y``.

    Parameters
    ----------
    X : ndarray or torch.Tensor of shape (n_samples, d_x)
    Y : ndarray or torch.Tensor of shape (n_samples, d_y)
        Rows are the same samples in the same order.
    n_components : int >= 1, default 100
        Upper bound on the common whitened dimension.
    test_fraction : float in (0, 1), default 0.5
    n_pairs : int >= 1, default 10000
        Sampled pairs for Cross-Model and Cross-Object.
    seed : int >= 0, default 0
        Seeds the split and the pair sampling; the same seed gives identical output.
    eps : float in [0, 1), default 1e-10
        Relative variance below which PCA components are dropped (:func:`fit_whitening`).

    Returns
    -------
    DisplacementResult
        Measures in [-1, 1] (``cross_object`` NaN for exactly identical aligned inputs). If
        ``X`` or ``Y`` has zero variance on the training rows, every measure is NaN,
        ``n_components`` is 0 and a ``RuntimeWarning`` names the input.

    Raises
    ------
    ValueError
        If inputs are not 2-D, have different ``n_samples``, contain NaN/inf, or
        ``n_samples`` is too small for the split.
    """
    X = _as_float64(X, "X", 2, "(n_samples, d_x)")
    Y = _as_float64(Y, "Y", 2, "(n_samples, d_y)")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must have the same n_samples, got shapes {X.shape} and {Y.shape}")
    n = X.shape[0]
    n_components, n_pairs, seed, eps, train, test, draws = _plan(n, n_components, test_fraction, n_pairs, seed, eps)
    wx = _whiten_split(X, train, test, n_components, eps, "X")
    wy = _whiten_split(Y, train, test, n_components, eps, "Y")
    _warn_degenerate([0] if wx is None else [], "X", "displacement_similarity", True)
    _warn_degenerate([0] if wy is None else [], "Y", "displacement_similarity", True)
    m, r = _pair_measures(wx, wy, draws)
    return DisplacementResult(**m, n_components=r, n_train=len(train), n_test=len(test), n_pairs=n_pairs, seed=seed)


def displacement_layerwise(XL, YL, *, n_components: int = 100, test_fraction: float = 0.5, n_pairs: int = 10_000,
                           seed: int = 0, eps: float = 1e-10) -> dict[str, np.ndarray]:
    """:func:`displacement_similarity` for every pair of layers.

    Each layer's whitening is fitted once (``L_x + L_y`` PCA fits, not ``L_x * L_y``); one
    split and one set of pairs is shared by all layer pairs, so entry ``[l, m]`` equals
    ``displacement_similarity(XL[l], YL[m], ...)`` with the same options.

    Parameters
    ----------
    XL : ndarray or torch.Tensor of shape (L_x, n_samples, d_x)
    YL : ndarray or torch.Tensor of shape (L_y, n_samples, d_y)
        Stacked layer features; rows are the same samples in the same order.
    n_components, test_fraction, n_pairs, seed, eps
        As in :func:`displacement_similarity`.

    Returns
    -------
    dict of str to ndarray of shape (L_x, L_y)
        One float array per name in :data:`MEASURES` (values in [-1, 1] or NaN), plus ``"n_components"``: the int array
        of common whitened dimensions used. A layer with zero variance on the training rows gets NaN in its whole row or
        column and ``n_components`` 0 (one ``RuntimeWarning`` lists such layers). Zero-padded columns (narrow CNN stages
        in a padded stack) change nothing: PCA ignores them.

    Raises
    ------
    ValueError
        As :func:`displacement_similarity`, for 3-D inputs.
    """
    XL = _as_float64(XL, "XL", 3, "(L_x, n_samples, d_x)")
    YL = _as_float64(YL, "YL", 3, "(L_y, n_samples, d_y)")
    if XL.shape[1] != YL.shape[1]:
        raise ValueError(f"XL and YL must have the same n_samples (axis 1), got shapes {XL.shape} and {YL.shape}")
    n = XL.shape[1]
    n_components, n_pairs, seed, eps, train, test, draws = _plan(n, n_components, test_fraction, n_pairs, seed, eps)
    wx = [_whiten_split(X, train, test, n_components, eps, f"XL[{l}]") for l, X in enumerate(XL)]
    wy = [_whiten_split(Y, train, test, n_components, eps, f"YL[{m}]") for m, Y in enumerate(YL)]
    _warn_degenerate([l for l, w in enumerate(wx) if w is None], "XL", "displacement_layerwise", False)
    _warn_degenerate([m for m, w in enumerate(wy) if w is None], "YL", "displacement_layerwise", False)
    out = {k: np.empty((len(wx), len(wy))) for k in MEASURES}
    out["n_components"] = np.empty((len(wx), len(wy)), dtype=int)
    for l, x in enumerate(wx):
        for m, y in enumerate(wy):
            res, r = _pair_measures(x, y, draws)
            for k, v in res.items():
                out[k][l, m] = v
            out["n_components"][l, m] = r
    return out
