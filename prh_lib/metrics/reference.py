"""The textbook mutual k-NN, written to be read: the definition the engine (:mod:`.knn`) is tested against.

References
----------
Huh, Cheung, Wang, Isola (2024). "The Platonic Representation Hypothesis", ICML, Sec. 3.1 and App. A,
Eq. (11); ``AlignmentMetrics.mutual_knn`` in github.com/minyoungg/platonic-rep.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

__all__ = ["mutual_knn"]


def _unit(Z: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(Z, axis=1)
    return Z / np.where(norms > 0, norms, 1.0)[:, None]


def _memberships(Z: np.ndarray, k: int) -> list[dict[int, Fraction]]:
    """Per sample ``i`` of ``Z``, ``{j: P(j in N(i))}`` under a uniformly random choice among tied samples."""
    n = len(Z)
    norm = np.linalg.norm(Z, axis=1)
    norm[norm == 0] = 1.0  # an all-zero row: cosine 0 to every sample
    out = []
    for i in range(n):
        # cosine from the raw dot product (exact for small integers, so exact ties stay ties); self excluded
        sim = {j: float(np.dot(Z[i], Z[j])) / (norm[i] * norm[j]) for j in range(n) if j != i}
        kth = sorted(sim.values(), reverse=True)[k - 1]
        above = [j for j, s in sim.items() if s > kth]
        tied = [j for j, s in sim.items() if s == kth]
        w = Fraction(k - len(above), len(tied))  # r of the t tied samples are neighbours
        out.append({**{j: Fraction(1) for j in above}, **{j: w for j in tied}})
    return out


def mutual_knn(X, Y, *, k: int = 10) -> float:
    """Mutual k-NN alignment: mean over samples of ``|N_X(i) ∩ N_Y(i)| / k``, with plain loops.

    ``N_X(i)`` holds the ``k`` samples ``j != i`` with the largest cosine similarity to ``i`` in ``X``
    (float64, ``<x_i, x_j> / (||x_i|| ||x_j||)``; an all-zero row has cosine 0 to every sample). Ties: let
    ``v`` be the ``k``-th largest similarity of row ``i``; the ``t`` samples equal to ``v`` share the ``r``
    places left after those strictly above it. Each is a neighbour with probability ``r / t``, independently in ``X`` and
    ``Y``, so the counted overlap is its expectation ``sum_j P(j in N_X(i)) P(j in N_Y(i))``, computed
    exactly in rationals. A tie is an exact equality of the float64 similarities (duplicated rows and rows of
    small integers tie exactly; normalising the rows before the dot product would break such ties by rounding).

    Parameters
    ----------
    X : array_like of shape (n_samples, d_x)
    Y : array_like of shape (n_samples, d_y)
    k : int in [1, n_samples - 1], default=10

    Returns
    -------
    score : float in [0, 1]
        NaN if all rows of ``X`` or of ``Y`` are identical after normalisation (the engine's convention).

    Raises
    ------
    ValueError
        Different numbers of samples, or ``k`` out of range.
    """
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    n = len(X)
    if len(Y) != n or not 1 <= k <= n - 1:
        raise ValueError(f"need the same n_samples and 1 <= k <= n_samples - 1; got X {X.shape}, Y {Y.shape}, k={k}")
    UX, UY = _unit(X), _unit(Y)
    if (UX == UX[0]).all() or (UY == UY[0]).all():
        return float("nan")
    wx, wy = _memberships(X, k), _memberships(Y, k)
    overlap = sum(sum(p * wy[i].get(j, 0) for j, p in wx[i].items()) for i in range(n))
    return float(overlap / (n * k))
