"""Principal component analysis of one layer's features: scikit-learn's exact PCA and the grids swept over it.

PCA is scikit-learn's (``svd_solver="full"``: exact, deterministic signs via ``svd_flip``), fitted on each
layer's features alone, in float64. One fit per layer serves every number of components: the projection on
the first ``m`` components of a full fit equals a fit with ``n_components=m`` (tested).

References
----------
Herbst et al., Section 3.1 and Appendix C (PCA compression of each model's features).
"""

from __future__ import annotations

import numpy as np

from prh_lib.validation import as_float64_matrix

#: Every number of components up to this is swept by default; beyond it a geometric grid (:func:`default_dims`).
DENSE_DIMS = 32


def max_components(n_samples: int, n_features: int) -> int:
    """Largest number of principal components scikit-learn's PCA accepts: ``min(n_samples, n_features)``.

    The centred data have rank at most ``n_samples - 1``, so with ``n_features >= n_samples`` the last component carries
    zero variance; it is allowed (and harmless) so that "full" means the same as in scikit-learn.
    """
    return int(min(n_samples, n_features))


def fit_pca(X, *, n_components: int | None = None):
    """scikit-learn PCA of one layer's features, exact and deterministic.

    Parameters
    ----------
    X : ndarray or Tensor of shape (n_samples, n_features)
    n_components : int in [1, min(n_samples, n_features)], optional
        Default: all, ``min(n_samples, n_features)``.

    Returns
    -------
    sklearn.decomposition.PCA
        Fitted with ``svd_solver="full"`` on ``X`` in float64; component signs are fixed by ``svd_flip``.

    Raises
    ------
    ValueError
        If ``n_components`` exceeds ``min(n_samples, n_features)`` or is below 1 (never silently capped),
        or ``X`` is not a finite 2-D array.

    References
    ----------
    Herbst et al., Section 3.1 and Appendix C (PCA compression of each model's features).
    """
    from sklearn.decomposition import PCA

    X = as_float64_matrix(X, "X")
    top = max_components(*X.shape)
    if n_components is None:
        n_components = top
    if isinstance(n_components, bool) or not isinstance(n_components, (int, np.integer)):
        raise TypeError(f"n_components must be an int; got {n_components!r}")
    if not 1 <= n_components <= top:
        raise ValueError(f"n_components={n_components} is out of range [1, min(n_samples, n_features)] = "
                         f"[1, {top}] for features of shape {X.shape}")
    return PCA(n_components=int(n_components), svd_solver="full").fit(X)


def default_dims(top: int, *, dense: int = DENSE_DIMS, ratio: float = 1.25) -> np.ndarray:
    """Default grid of the dimension sweep: every integer from 1 to ``dense``, then a geometric grid to ``top``.

    Parameters
    ----------
    top : int >= 1
        The largest number of components (:func:`max_components`); always the last grid point.
    dense : int
        Up to here every number is swept, so a smallest sufficient dimension up to ``dense`` is exact.
    ratio : float > 1
        Step of the geometric part.

    Returns
    -------
    ndarray of int, strictly increasing, from 1 to ``top``
    """
    if top < 1 or dense < 1 or ratio <= 1:
        raise ValueError(f"need top >= 1, dense >= 1 and ratio > 1; got top={top}, dense={dense}, ratio={ratio}")
    grid = list(range(1, min(dense, top) + 1))
    m = float(grid[-1])
    while grid[-1] < top:
        m *= ratio
        grid.append(min(top, max(grid[-1] + 1, int(round(m)))))
    return np.asarray(grid, dtype=int)


def components_for_variance(explained_variance_ratio, fractions) -> np.ndarray:
    """Smallest number of components whose cumulative explained variance reaches each fraction.

    Parameters
    ----------
    explained_variance_ratio : ndarray of shape (n_components,)
        ``PCA.explained_variance_ratio_`` of a full fit (sums to 1 up to rounding).
    fractions : float or sequence of float in (0, 1]

    Returns
    -------
    ndarray of int, shape (n_fractions,)
        ``m`` with ``cumsum(ratio)[m - 1] >= fraction`` for the smallest such ``m``, compared with a tolerance
        of 1e-9 so that ``fraction=1`` means "all the variance" despite rounding (the rank of the centred data,
        at most ``n_components``).

    Raises
    ------
    ValueError
        If a fraction is outside (0, 1] or the ratios are not a non-increasing non-negative vector.
    """
    ratio = np.asarray(explained_variance_ratio, dtype=np.float64)
    if ratio.ndim != 1 or ratio.size == 0 or (ratio < -1e-12).any() or (np.diff(ratio) > 1e-12).any():
        raise ValueError("explained_variance_ratio must be a non-empty, non-negative, non-increasing 1-D array")
    f = np.atleast_1d(np.asarray(fractions, dtype=np.float64))
    bad = f[(f <= 0) | (f > 1) | ~np.isfinite(f)]
    if bad.size:
        raise ValueError(f"variance fractions must lie in (0, 1]; got {bad.tolist()}")
    cum = np.cumsum(ratio) / max(ratio.sum(), 1e-300)
    m = np.searchsorted(cum, f - 1e-9, side="left") + 1
    return np.minimum(m, ratio.size).astype(int)
