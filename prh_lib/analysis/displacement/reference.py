"""The public reference code's steps for the displacement measures, each with a switch to ours.

Split (:func:`reference_split`), whitening (:func:`reference_whitening`), pairing (:func:`predecessor_pairs`)
and the whole procedure (:func:`reference_procedure`, :class:`ReferenceResult`); the large-``r`` prediction of
the measures (:func:`predicted_measures`) and a synthetic pair with known canonical correlation
(:func:`synthetic_pair`). The steps are described, and compared with ours, in
:mod:`prh_lib.analysis.displacement.procedures`, which re-exports them.

References
----------
.. [1] "Displacement geometry captures platonic shared reality across models and modalities",
   arXiv:2609.24209, Sec. "Method" (whitening, Procrustes, the three cosine measures).
.. [2] HelloSCM/Representation_Displacements on GitHub, ``metric/parallel`` at commit
   a9cee8aa6cb22e948cd4390c547d23e69cb61eac.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.decomposition import PCA

from prh_lib.metrics import displacement as D
from prh_lib.metrics._whitening import procrustes
from prh_lib.metrics._validation import as_float64 as _as_float64, check_int

#: Pairings of step 5: ``"predecessor"`` (the reference's), ``"random"`` (ours: sampled pairs).
PAIRINGS = ("predecessor", "random")
#: Rows the whitening of step 2 is fitted on: ``"all"`` (the reference's) or ``"train"`` (ours).
WHITEN_ROWS = ("all", "train")
_MAIN = ("pointwise", "cross_model", "cross_object")


def _choice(value, name: str, valid: tuple) -> str:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(map(repr, valid))}")
    return value


# --------------------------------------------------------------------------- the steps
def reference_split(n: int, *, train_size: int = 10_000, seed: int = 42) -> tuple[np.ndarray, np.ndarray]:
    """Step 1: ``np.random.default_rng(seed).permutation(n)`` cut after ``train_size`` [2]_.

    Parameters
    ----------
    n : int >= 4
        Number of samples.
    train_size : int in [2, n - 2], default 10000
        Training rows (the reference's command-line default; pass a size that fits ``n``).
    seed : int >= 0, default 42

    Returns
    -------
    train_idx : ndarray of int, shape (train_size,)
    eval_idx : ndarray of int, shape (n - train_size,)
        Both in permutation order, *not sorted*: step 5 pairs evaluation rows in this order.

    Raises
    ------
    ValueError
        If either part would have fewer than 2 rows.
    """
    n = check_int(n, "n", low=4)
    train_size = check_int(train_size, "train_size", low=2, high=n - 2, why=f" for n={n} samples")
    perm = np.random.default_rng(check_int(seed, "seed", low=0)).permutation(n)
    return perm[:train_size], perm[train_size:]


def reference_whitening(X, *, n_components: int = 100, seed: int = 42, fit_rows=None) -> tuple[np.ndarray, np.ndarray]:
    """Step 2: scikit-learn PCA with ``whiten=True``, and the projected mean [2]_.

    Parameters
    ----------
    X : ndarray or torch.Tensor of shape (n_samples, d)
    n_components : int in [1, d - 1], default 100
        The reference requires fewer components than features; PCA needs at most as many as fitted rows.
    seed : int >= 0, default 42
        ``random_state`` of the PCA (used by its randomized solver, which the default ``"auto"``
        solver picks for large inputs).
    fit_rows : ndarray of int, optional
        Rows the PCA is fitted on; ``None`` (the reference): all rows.

    Returns
    -------
    Z : ndarray of shape (n_samples, n_components)
        All rows, centred on the fitted rows' mean and whitened: ``(X - mean) @ components.T /
        sqrt(explained_variance)``; over the fitted rows, zero mean and identity covariance
        (``ddof=1``).
    mean_proj : ndarray of shape (n_components,)
        ``mean @ components.T / sqrt(explained_variance)``, so ``Z + mean_proj`` is the whitened
        projection of ``X`` without centring.

    Raises
    ------
    ValueError
        If ``n_components >= d`` or exceeds the fitted rows, or a kept component has zero variance.
    """
    X = _as_float64(X, "X", 2, "(n_samples, d)")
    n_components = check_int(n_components, "n_components", low=1, high=X.shape[1] - 1,
                             why=f" (fewer than the {X.shape[1]} features, as the reference requires)")
    fit = X if fit_rows is None else X[np.asarray(fit_rows)]
    if n_components > fit.shape[0]:
        raise ValueError(f"n_components={n_components} exceeds the {fit.shape[0]} rows the whitening is fitted on")
    if not np.ptp(fit, axis=0).any():
        raise ValueError(f"X of shape {X.shape} has zero variance on the fitted rows; nothing to whiten")
    pca = PCA(n_components=n_components, whiten=True, random_state=check_int(seed, "seed", low=0)).fit(fit)
    scale = np.sqrt(pca.explained_variance_)
    if not np.all(scale > 1e-12 * max(scale[0], 1e-300)):
        raise ValueError(f"X of shape {X.shape}: {int(np.sum(~(scale > 0)))} of {n_components} components have "
                         "zero variance on the fitted rows; the reference whitening divides by it")
    return (X - pca.mean_) @ pca.components_.T / scale, pca.mean_ @ pca.components_.T / scale


def predecessor_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Step 5's pairing: row ``i`` with row ``i - 1``, cyclically (``torch.roll(idx, 1)`` in [2]_).

    Returns ``(i, j)``, two int arrays of shape (n,), for
    :func:`prh_lib.metrics.displacement.cosine_measures` (``pairs=``). Every row enters two pairs.
    """
    n = check_int(n, "n", low=2)
    i = np.arange(n)
    return i, np.roll(i, 1)


@dataclass(frozen=True, eq=False)
class ReferenceResult:
    """The reference procedure's measures for one pair, with what the derivation needs.

    Attributes
    ----------
    pointwise, cross_model, cross_object : float in [-1, 1]
    n_components, n_train, n_eval, seed : int
    whiten_rows, pairing : str
    add_means : bool
    mean_a, mean_b : ndarray of shape (n_components,)
        Projected means ``m_a``, ``m_b`` (whitened units), whether or not they were added back.
    rho : float in [-1, 1]
        ``mean(a_i . R b_i) / sqrt(mean|a_i|^2 mean|R b_i|^2)`` on the centred evaluation rows: the
        mean canonical correlation the fitted rotation realises on samples it was not fitted to.
    norm2_a, norm2_b : float
        Mean squared norms of the centred evaluation rows (``~ r`` when whitened on them).
    """

    pointwise: float
    cross_model: float
    cross_object: float
    n_components: int
    n_train: int
    n_eval: int
    seed: int
    whiten_rows: str
    add_means: bool
    pairing: str
    mean_a: np.ndarray
    mean_b: np.ndarray
    rho: float
    norm2_a: float
    norm2_b: float

    def measures(self) -> dict[str, float]:
        """``{"pointwise", "cross_model", "cross_object"}`` as measured."""
        return {k: getattr(self, k) for k in _MAIN}

    def predicted(self) -> dict[str, float]:
        """:func:`predicted_measures` from ``rho``, the norms and the means added back (none: zero)."""
        ma, mb = (self.mean_a, self.mean_b) if self.add_means else (0 * self.mean_a, 0 * self.mean_b)
        return predicted_measures(self.rho, ma, mb, norm2_a=self.norm2_a, norm2_b=self.norm2_b)


def reference_procedure(X, Y, *, n_components: int = 100, train_size: int = 10_000, seed: int = 42,
                        whiten_rows: str = "all", add_means: bool = True, pairing: str = "predecessor",
                        n_pairs: int = 10_000) -> ReferenceResult:
    """The reference code's steps 1-5 for one pair of representations [2]_, with switches.

    The defaults are the reference's. ``whiten_rows="train"``, ``add_means=False`` and
    ``pairing="random"`` each replace one step by ours; all three together give our procedure
    on the reference's split (up to our whitening's solver and component dropping).

    Parameters
    ----------
    X : ndarray or torch.Tensor of shape (n_samples, d_x)
    Y : ndarray or torch.Tensor of shape (n_samples, d_y)
        Rows are the same samples in the same order; ``Y`` is rotated onto ``X``.
    n_components : int, default 100
        Whitened dimension ``r`` of both models (below ``d_x`` and ``d_y``).
    train_size : int, default 10000
        Rows of the training split (step 1).
    seed : int >= 0, default 42
        Split, PCA ``random_state`` and, with ``pairing="random"``, the sampled pairs.
    whiten_rows : {"all", "train"}, default "all"
    add_means : bool, default True
    pairing : {"predecessor", "random"}, default "predecessor"
    n_pairs : int >= 1, default 10000
        Sampled pairs when ``pairing="random"``.

    Raises
    ------
    ValueError
        If shapes disagree, an option is unknown or out of range (the message lists valid values),
        or a whitening is impossible (:func:`reference_whitening`).
    """
    X = _as_float64(X, "X", 2, "(n_samples, d_x)")
    Y = _as_float64(Y, "Y", 2, "(n_samples, d_y)")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must have the same n_samples, got shapes {X.shape} and {Y.shape}")
    whiten_rows = _choice(whiten_rows, "whiten_rows", WHITEN_ROWS)
    pairing = _choice(pairing, "pairing", PAIRINGS)
    if not isinstance(add_means, (bool, np.bool_)):
        raise TypeError(f"add_means must be a bool, got {add_means!r}")
    train, ev = reference_split(X.shape[0], train_size=train_size, seed=seed)
    fit_rows = None if whiten_rows == "all" else train
    Za, ma = reference_whitening(X, n_components=n_components, seed=seed, fit_rows=fit_rows)
    Zb, mb = reference_whitening(Y, n_components=n_components, seed=seed, fit_rows=fit_rows)
    R = procrustes(Zb[train], Za[train])
    A, B = Za[ev], Zb[ev] @ R
    na, nb = float(np.mean(np.sum(A * A, 1))), float(np.mean(np.sum(B * B, 1)))
    rho = float(np.mean(np.sum(A * B, 1))) / np.sqrt(na * nb)
    if add_means:
        A, B = A + ma, B + mb  # m_b in the second model's own PCA frame, after the rotation
    pairs = predecessor_pairs(len(ev)) if pairing == "predecessor" else None
    m = D.cosine_measures(A, B, n_pairs=n_pairs, seed=seed, pairs=pairs)
    return ReferenceResult(**{k: m[k] for k in _MAIN}, n_components=n_components, n_train=len(train),
                           n_eval=len(ev), seed=seed, whiten_rows=whiten_rows, add_means=bool(add_means),
                           pairing=pairing, mean_a=ma, mean_b=mb, rho=rho, norm2_a=na, norm2_b=nb)


def predicted_measures(rho: float, mean_a, mean_b, *, norm2_a: float, norm2_b: float | None = None) -> dict[str, float]:
    """The three measures predicted from ``rho``, the norms and the offsets (the chapter's derivation).

    With ``s_a = E|a|^2``, ``s_b = E|b|^2`` of the centred, aligned rows, ``c = rho sqrt(s_a s_b)``
    and offsets ``m_a``, ``m_b`` added to every row of each model, concentrated norms give

    * Pointwise    ``(c + m_a.m_b) / sqrt((s_a + |m_a|^2)(s_b + |m_b|^2))``,
    * Cross-Model  ``rho`` (offsets cancel in ``a_i - a_j``),
    * Cross-Object ``|m_a - m_b|^2 / (s_a + s_b - 2c + |m_a - m_b|^2)``,

    which for ``s_a = s_b = r`` (whitened on the evaluated rows) are the forms
    ``(r rho + m_a.m_b) / sqrt((r + |m_a|^2)(r + |m_b|^2))`` and ``|m_a - m_b|^2 / (2 r (1 - rho) + |m_a - m_b|^2)``;
    with no offsets, Pointwise = Cross-Model = ``rho`` and Cross-Object = 0.

    Parameters
    ----------
    rho : float in [-1, 1]
        Mean canonical correlation of the centred rows (e.g. :attr:`ReferenceResult.rho`).
    mean_a, mean_b : array-like of shape (r,)
        Offsets in the common frame the cosines are taken in.
    norm2_a : float > 0
    norm2_b : float > 0, optional
        Defaults to ``norm2_a``.

    Returns
    -------
    dict of str to float
        ``pointwise``, ``cross_model``, ``cross_object``.

    Raises
    ------
    ValueError
        If the offsets are not 1-D of one shape or a norm is not positive.
    """
    ma, mb = np.asarray(mean_a, dtype=float), np.asarray(mean_b, dtype=float)
    if ma.ndim != 1 or ma.shape != mb.shape:
        raise ValueError(f"mean_a and mean_b must be 1-D of one shape, got {ma.shape} and {mb.shape}")
    sa = float(norm2_a)
    sb = sa if norm2_b is None else float(norm2_b)
    if not (sa > 0 and sb > 0):
        raise ValueError(f"norm2_a and norm2_b must be positive, got {sa} and {sb}")
    c = float(rho) * np.sqrt(sa * sb)
    dm = float(np.sum((ma - mb) ** 2))
    return {"pointwise": float((c + ma @ mb) / np.sqrt((sa + ma @ ma) * (sb + mb @ mb))),
            "cross_model": float(rho),
            "cross_object": float(dm / (sa + sb - 2 * c + dm))}


def synthetic_pair(n: int = 2000, *, r: int = 32, n_shared: int = 16, correlation: float = 0.9,
                   offset_a: float = 0.0, offset_b: float = 0.0, dims: tuple[int, int] = (64, 80),
                   seed: int = 0) -> tuple[np.ndarray, np.ndarray, float]:
    """Two representations with a known shared component and controlled mean offsets.

    Each model has ``r`` unit-variance latent coordinates: the first ``n_shared`` are ``sqrt(c) s + sqrt(1 - c) u``
    (``s`` shared by both models, ``u`` the model's own), the rest the model's own noise; so its canonical correlations
    with the other model are ``c`` (``n_shared`` times) and 0, and their mean is ``rho = c n_shared / r``. The
    coordinates are scaled by distinct random standard deviations (log-uniform in [0.2, 5]) and embedded by a random
    orthonormal map into ``d`` features (``d > r``; the other ``d - r`` directions carry nothing). The mean is
    ``offset`` times a random unit direction, in whitened units: a PCA whitening to ``r`` components gives the projected
    mean a norm of about ``offset``.

    Returns
    -------
    X : ndarray of shape (n, dims[0])
    Y : ndarray of shape (n, dims[1])
    rho : float
        ``correlation * n_shared / r``.

    Raises
    ------
    ValueError
        If ``n_shared > r``, ``r >= min(dims)`` or ``correlation`` is outside [0, 1].
    """
    r = check_int(r, "r", low=1, high=min(dims) - 1, why=" (below both feature dimensions)")
    n_shared = check_int(n_shared, "n_shared", low=0, high=r)
    if not 0.0 <= correlation <= 1.0:
        raise ValueError(f"correlation must be in [0, 1], got {correlation}")
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((n, n_shared))
    out = []
    for d, offset in zip(dims, (offset_a, offset_b)):
        L = rng.standard_normal((n, r))
        L[:, :n_shared] = np.sqrt(correlation) * S + np.sqrt(1.0 - correlation) * L[:, :n_shared]
        sd = np.exp(rng.uniform(np.log(0.2), np.log(5.0), r))
        Q = np.linalg.qr(rng.standard_normal((d, r)))[0].T  # (r, d), orthonormal rows
        u = rng.standard_normal(r)
        out.append((L * sd) @ Q + (float(offset) * u / np.linalg.norm(u) * sd) @ Q)
    return out[0], out[1], correlation * n_shared / r
