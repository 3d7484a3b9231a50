"""The fitted steps of the displacement measures: train/test split, PCA whitening, orthogonal Procrustes.

Re-exported by :mod:`prh_lib.metrics.displacement` (documented there, with the method's references), whose
measures call the private implementations (:func:`_split`, :func:`_fit_whitening`, :func:`_procrustes`) after
validating once at their public boundary.

References
----------
.. [1] "Displacement geometry captures platonic shared reality across models and
   modalities", arXiv:2609.24209, Sec. "Method" (whitening, Procrustes).
.. [2] Schönemann, P. H. (1966). A generalized solution of the orthogonal Procrustes
   problem. Psychometrika 31, 1-10.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import orthogonal_procrustes
from sklearn.decomposition import PCA

from prh_lib.metrics._validation import as_float64 as _as_float64
from prh_lib.metrics._validation import check_fraction, check_int

_SPLIT_STREAM = 0  # random stream of the train/test split (the pairs': displacement._PAIR_STREAM)


# --------------------------------------------------------------------------- validation
class _ZeroVariance(ValueError):
    """Raised by :func:`_fit_whitening` for training rows with zero variance (a ``ValueError``)."""


def _split_sizes(n: int, test_fraction: float) -> tuple[int, int]:
    n_test = int(round(n * check_fraction(test_fraction, "test_fraction")))
    if n_test < 2 or n - n_test < 2:
        raise ValueError(f"n_samples={n} is too small for test_fraction={test_fraction}: the split gives "
                         f"{n - n_test} train and {n_test} test samples, and both need at least 2")
    return n - n_test, n_test


# --------------------------------------------------------------------------- split
def split_indices(n: int, *, test_fraction: float = 0.5, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded random partition of ``range(n)`` into train and test indices.

    Parameters
    ----------
    n : int
        Number of samples (rows shared by all representations).
    test_fraction : float in (0, 1), default 0.5
        Fraction of samples held out; ``n_test = round(n * test_fraction)``.
    seed : int >= 0, default 0
        Seed; the generator is ``np.random.default_rng([seed, 0])``.

    Returns
    -------
    train_idx : ndarray of int, shape (n - n_test,)
        Sorted training indices.
    test_idx : ndarray of int, shape (n_test,)
        Sorted test indices, disjoint from ``train_idx``; together they cover ``range(n)``.

    Raises
    ------
    ValueError
        If ``test_fraction`` is outside (0, 1) or either part would have fewer than 2 samples.
    """
    n = check_int(n, "n", low=1)
    seed = check_int(seed, "seed", low=0)
    n_train, _ = _split_sizes(n, test_fraction)
    return _split(n, n_train, seed)


def _split(n: int, n_train: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng([seed, _SPLIT_STREAM]).permutation(n)
    return np.sort(order[:n_train]), np.sort(order[n_train:])


# --------------------------------------------------------------------------- whitening
@dataclass(frozen=True, eq=False)
class Whitening:
    """PCA whitening fitted on training rows: ``Z = (X - mean) @ components.T / scale``.

    Attributes
    ----------
    mean : ndarray of shape (d,)
        Training mean.
    components : ndarray of shape (r, d)
        Orthonormal principal axes, by decreasing variance.
    scale : ndarray of shape (r,)
        Standard deviation (``ddof=1``) along each kept axis; all ``> sqrt(eps) * scale[0]``.
    n_dropped : int
        Components of the first ``min(n_components, n_train, d)`` dropped as near-zero.
    """

    mean: np.ndarray
    components: np.ndarray
    scale: np.ndarray
    n_dropped: int

    @property
    def n_components(self) -> int:
        """Number of kept (whitened) components ``r``."""
        return int(self.scale.shape[0])

    def transform(self, X) -> np.ndarray:
        """Whiten ``X`` of shape (n, d) -> ndarray of shape (n, r), float64.

        Raises ``ValueError`` if ``X`` is not 2-D with ``d`` columns or is not finite.
        """
        X = _as_float64(X, "X", 2, "(n_samples, d)")
        if X.shape[1] != self.mean.shape[0]:
            raise ValueError(f"X has {X.shape[1]} features but the whitening was fitted on {self.mean.shape[0]}")
        return self._transform(X)

    def _transform(self, X: np.ndarray) -> np.ndarray:
        return (X - self.mean) @ self.components.T / self.scale


def fit_whitening(X_train, *, n_components: int = 100, eps: float = 1e-10) -> Whitening:
    """Fit centring + PCA + whitening on training rows.

    :class:`sklearn.decomposition.PCA` with the exact (``"full"``) solver keeps
    ``q = min(n_components, n_train, d)`` components; those with variance ``<= eps *
    (largest variance)`` are **dropped**, not floored (a floored direction carries only
    rounding noise, inflated by whitening, into the Procrustes fit). Centring leaves rank at
    most ``n_train - 1``. The default ``eps = 1e-10`` separates the rounding floor of
    float32-stored features (``~1e-14``) from real structure; raise it (e.g. ``1e-6``) for
    half-precision features.

    Parameters
    ----------
    X_train : ndarray or torch.Tensor of shape (n_train, d)
        Training features only. Computation is in float64.
    n_components : int >= 1, default 100
        Upper bound on the whitened dimension ``r``.
    eps : float in [0, 1), default 1e-10
        Relative variance threshold below which components are dropped.

    Returns
    -------
    Whitening
        With ``r <= min(n_components, n_train - 1, d)`` components for ``eps`` above the float64 rounding floor;
        whitened training rows have zero mean and identity covariance (``ddof=1``).

    Raises
    ------
    ValueError
        If ``X_train`` is not 2-D, has fewer than 2 rows, contains NaN/inf, or has zero
        variance; if ``n_components < 1`` or ``eps`` is outside [0, 1).
    """
    X = _as_float64(X_train, "X_train", 2, "(n_train, d)")
    n_components = check_int(n_components, "n_components", low=1)
    if not 0.0 <= float(eps) < 1.0:
        raise ValueError(f"eps must be in [0, 1), got {eps!r}")
    if X.shape[0] < 2:
        raise ValueError(f"X_train needs at least 2 rows to estimate a covariance, got shape {X.shape}")
    return _fit_whitening(X, n_components, float(eps))


def _fit_whitening(X: np.ndarray, n_components: int, eps: float, name: str = "X_train") -> Whitening:
    if not np.ptp(X, axis=0).any():  # exact constants: centring may leave rounding dust
        raise _ZeroVariance(f"{name} of shape {X.shape} has zero variance; nothing to whiten")
    q = min(n_components, *X.shape)
    pca = PCA(n_components=q, svd_solver="full").fit(X)
    var = pca.explained_variance_
    if not var[0] > 0.0:
        raise _ZeroVariance(f"{name} of shape {X.shape} has zero variance; nothing to whiten")
    keep = var > eps * var[0]
    return Whitening(mean=pca.mean_.copy(), components=pca.components_[keep].copy(), scale=np.sqrt(var[keep]),
                     n_dropped=int(q - keep.sum()))


# --------------------------------------------------------------------------- procrustes
def procrustes(A, B) -> np.ndarray:
    """Orthogonal ``R`` minimising ``||A @ R - B||_F`` (rotation and reflection).

    Closed form ``R = U @ Vt`` from the SVD ``A.T @ B = U S Vt`` [2]_, computed by
    :func:`scipy.linalg.orthogonal_procrustes`. No scaling or translation: centre and
    whiten first (:func:`fit_whitening`).

    Parameters
    ----------
    A, B : ndarray or torch.Tensor of shape (n_samples, r)
        Paired rows (row ``i`` of both is sample ``i``), same shape.

    Returns
    -------
    R : ndarray of shape (r, r)
        Orthogonal: ``R.T @ R = I`` to rounding. Swapping the arguments gives ``R.T``.

    Raises
    ------
    ValueError
        If the inputs are not 2-D, differ in shape, or contain NaN/inf.
    """
    A = _as_float64(A, "A", 2, "(n_samples, r)")
    B = _as_float64(B, "B", 2, "(n_samples, r)")
    if A.shape != B.shape:
        raise ValueError(f"A and B must have the same shape, got {A.shape} and {B.shape}")
    return _procrustes(A, B)


def _procrustes(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    return orthogonal_procrustes(A, B, check_finite=False)[0]
