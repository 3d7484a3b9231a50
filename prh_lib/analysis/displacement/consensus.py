"""Consensus decomposition: shared and private subspaces of ``M >= 2`` models.

The companion result [1]_ diagonalises the symmetric cross-model covariance of whitened, aligned representations: its
top eigenvectors span a subspace the models share, its bottom ones a subspace private to each. This module fits that
decomposition on training rows (:func:`consensus_subspaces`, with :func:`cross_covariance`), projects features onto a
subspace (:func:`project`), scores model pairs in the full, shared, private and random subspaces on held-out rows
(:func:`subspace_alignment`), and gives the displacement chapter its table and figure (:func:`consensus_summary`; its
figure and bullet are :mod:`prh_lib.pages.ch_displacement`'s).

The steps it builds on (split, whitening, Procrustes, the cosine measures) are the pure array
functions of :mod:`prh_lib.metrics.displacement`; everything here is computed in float64 as there.

References
----------
.. [1] "Displacement geometry captures platonic shared reality across models and modalities",
   arXiv:2609.24209, Sec. "Method" (cross-model consensus decomposition, the matrix ``S_cross``).
.. [2] Gower, J. C. (1975). Generalized Procrustes analysis. Psychometrika 40, 33-51.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from prh_lib.extract.features import LayerFeatures, check_aligned
from prh_lib.metrics import displacement as D
from prh_lib.metrics._whitening import fit_whitening, procrustes, split_indices
from prh_lib.metrics.knn import mutual_knn, mutual_knn_chance
from prh_lib.metrics._validation import as_float64 as _as_float64, check_int, check_k

#: Subspaces reported by :func:`consensus_summary`, in order.
SUBSPACES = ("full", "shared", "random", "private")
_VIEWS = (("mutual k-NN", "mutual_knn"), ("Cross-Model", "cross_model"))
_RANDOM_STREAM = 2  # random subspaces of :func:`subspace_alignment`: np.random.default_rng([seed, 2])

@dataclass(frozen=True, eq=False)
class ConsensusResult:
    """Shared/private decomposition of ``M`` models (see :func:`consensus_subspaces`).

    Attributes
    ----------
    eigenvalues : ndarray of shape (r,)
        Eigenvalues of ``S_cross``, descending, in [-1, 1]: ~1 where all models agree.
    eigenvectors : ndarray of shape (r, r)
        Orthonormal columns matching ``eigenvalues``.
    shared_basis : ndarray of shape (r, n_shared)
        Top ``n_shared`` eigenvectors.
    private_basis : ndarray of shape (r, n_private)
        Bottom ``n_private`` eigenvectors (lowest eigenvalues last).
    features : tuple of M ndarrays of shape (n_samples, r)
        All samples, whitened and aligned into the common frame (model 0's whitened axes).
    rotations : tuple of M ndarrays of shape (r, r)
        Orthogonal alignment of each model's whitened features; ``rotations[0]`` is ``I``.
    whitenings : tuple of M :class:`~prh_lib.metrics.displacement.Whitening`
    train_idx, test_idx : ndarray of int
        The split; everything above was fitted on ``train_idx`` only.
    n_iter : int
        Generalized Procrustes iterations used.
    """

    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    shared_basis: np.ndarray
    private_basis: np.ndarray
    features: tuple
    rotations: tuple
    whitenings: tuple
    train_idx: np.ndarray
    test_idx: np.ndarray
    n_iter: int


def _generalized_procrustes(Z: list, max_iter: int, tol: float) -> tuple[list, int]:
    """Gower's GPA [2]_: rotate each ``Z[m]`` towards the running mean until the loss settles."""
    Q = [np.eye(Z[0].shape[1])] + [procrustes(z, Z[0]) for z in Z[1:]]
    total = sum(float(np.sum(z * z)) for z in Z)
    prev = np.inf
    for it in range(1, max_iter + 1):
        G = sum(z @ q for z, q in zip(Z, Q)) / len(Z)
        Q = [procrustes(z, G) for z in Z]
        loss = sum(float(np.sum((z @ q - G) ** 2)) for z, q in zip(Z, Q))
        if prev - loss <= tol * total:
            break
        prev = loss
    else:
        warnings.warn(f"generalized Procrustes did not converge in {max_iter} iterations", RuntimeWarning, stacklevel=3)
    Q0t = Q[0].T
    return [q @ Q0t for q in Q], it  # pin the frame to model 0's whitened axes


def _cross_covariance(Z: list) -> np.ndarray:
    T = sum(Z)
    M, n = len(Z), Z[0].shape[0]
    S = (T.T @ T - sum(z.T @ z for z in Z)) / (M * (M - 1) * (n - 1))
    return 0.5 * (S + S.T)


def cross_covariance(features: Sequence) -> np.ndarray:
    """Symmetric cross-model covariance ``S_cross`` of ``M >= 2`` aligned representations [1]_.

    ``S_cross = 1 / (M (M - 1)) * sum_{m != n} (Z_m.T Z_n + Z_n.T Z_m) / (2 (n_samples - 1))``: the mean over ordered
    model pairs of the symmetrised cross-covariances. Rows are *not* re-centred: pass features centred on the statistics
    that defined the frame (whitened training rows have zero mean; held-out rows of the same frame are used as they are,
    so ``v.T @ cross_covariance(test rows) @ v`` is the held-out value of a direction ``v`` fitted on training rows).

    Parameters
    ----------
    features : sequence of M ndarrays or torch.Tensors of shape (n_samples, r)
        Same samples, same common frame (e.g. ``ConsensusResult.features``); ``n_samples >= 2``.

    Returns
    -------
    ndarray of shape (r, r)
        Symmetric. For whitened, aligned features its eigenvalues lie in [-1, 1] on the rows
        the whitening was fitted on: 1 where all models coincide, ~0 where they are unrelated.

    Raises
    ------
    ValueError
        If fewer than 2 models, shapes differ, fewer than 2 rows, or NaN/inf.
    """
    if isinstance(features, np.ndarray) or not isinstance(features, Sequence):
        raise TypeError(f"features must be a list of (n_samples, r) arrays, got {type(features).__name__}")
    if len(features) < 2:
        raise ValueError(f"need at least 2 models, got {len(features)}")
    Z = [_as_float64(f, f"features[{m}]", 2, "(n_samples, r)") for m, f in enumerate(features)]
    if len({z.shape for z in Z}) != 1:
        raise ValueError(f"all features must have the same shape (n_samples, r), got {[z.shape for z in Z]}")
    if Z[0].shape[0] < 2:
        raise ValueError(f"need at least 2 samples, got shape {Z[0].shape}")
    return _cross_covariance(Z)


def consensus_subspaces(
    features: Sequence,
    *,
    n_components: int = 100,
    n_shared: int = 10,
    n_private: int | None = None,
    test_fraction: float = 0.5,
    seed: int = 0,
    eps: float = 1e-10,
    max_iter: int = 1000,
    tol: float = 1e-10,
) -> ConsensusResult:
    """Shared and private subspaces of ``M >= 2`` models from the cross-model covariance [1]_.

    On the training rows: whiten each model (:func:`~prh_lib.metrics.displacement.fit_whitening`), truncate all to the
    common dimension ``r``, align them by generalized Procrustes [2]_ (for ``M = 2`` this is
    exactly :func:`~prh_lib.metrics.displacement.procrustes` of model 1 onto model 0), then form

    ``S_cross = 1 / (M (M - 1)) * sum_{m != n} (Z_m.T Z_n + Z_n.T Z_m) / (2 (n_train - 1))``

    with ``Z_m`` the whitened, aligned training features. Its top eigenvectors span the shared subspace, its bottom ones
    the private subspace. Eigenvector signs are fixed so the largest-magnitude entry is positive (deterministic output).

    Parameters
    ----------
    features : sequence of M ndarrays or torch.Tensors of shape (n_samples, d_m)
        Rows are the same samples in the same order; ``d_m`` may differ.
    n_components : int >= 1, default 100
        Upper bound on ``r``.
    n_shared : int >= 1, default 10
    n_private : int >= 1, optional
        Defaults to ``n_shared``. Requires ``n_shared + n_private <= r``.
    test_fraction, seed, eps
        As in :func:`~prh_lib.metrics.displacement.displacement_similarity`.
    max_iter : int, default 1000
    tol : float, default 1e-10
        GPA stops when the loss decreases by at most ``tol`` times the total sum of squares (a ``RuntimeWarning`` if
        ``max_iter`` is reached). Convergence is linear and slow in directions where models are unrelated (the loss is
        flat there), typically 50-200 iterations of ``M`` ``r x r`` SVDs each - cheap next to the whitening.

    Raises
    ------
    ValueError
        If fewer than 2 models, inputs not 2-D, differing ``n_samples``, NaN/inf, too few
        samples for the split, or ``n_shared + n_private > r``.
    """
    if isinstance(features, np.ndarray) or not isinstance(features, Sequence):
        raise TypeError(f"features must be a list of (n_samples, d_m) arrays, got {type(features).__name__}")
    if len(features) < 2:
        raise ValueError(f"need at least 2 models, got {len(features)}")
    F = [_as_float64(f, f"features[{m}]", 2, "(n_samples, d_m)") for m, f in enumerate(features)]
    shapes = [f.shape for f in F]
    if len({s[0] for s in shapes}) != 1:
        raise ValueError(f"all models must have the same n_samples, got shapes {shapes}")
    n = shapes[0][0]
    n_components = check_int(n_components, "n_components", low=1)
    n_shared = check_int(n_shared, "n_shared", low=1)
    n_private = n_shared if n_private is None else check_int(n_private, "n_private", low=1)
    max_iter = check_int(max_iter, "max_iter", low=1)
    train, test = split_indices(n, test_fraction=test_fraction, seed=seed)

    whitenings = []
    for m, f in enumerate(F):
        try:
            whitenings.append(fit_whitening(f[train], n_components=n_components, eps=eps))
        except ValueError as err:  # name the model: the message only knows "X_train"
            raise ValueError(f"training rows of features[{m}]: {err}") from None
    r = min(w.n_components for w in whitenings)
    if n_shared + n_private > r:
        raise ValueError(f"n_shared + n_private = {n_shared} + {n_private} exceeds the common whitened dimension r={r}")
    Z = [w._transform(f)[:, :r] for w, f in zip(whitenings, F)]
    Q, n_iter = _generalized_procrustes([z[train] for z in Z], max_iter, float(tol))
    aligned = [z @ q for z, q in zip(Z, Q)]

    S = _cross_covariance([a[train] for a in aligned])
    evals, evecs = np.linalg.eigh(S)
    evals, evecs = evals[::-1], evecs[:, ::-1]
    big = np.argmax(np.abs(evecs), axis=0)
    evecs = evecs * np.sign(evecs[big, np.arange(r)])
    return ConsensusResult(
        eigenvalues=evals,
        eigenvectors=evecs,
        shared_basis=evecs[:, :n_shared].copy(),
        private_basis=evecs[:, r - n_private :].copy(),
        features=tuple(aligned),
        rotations=tuple(Q),
        whitenings=tuple(whitenings),
        train_idx=train,
        test_idx=test,
        n_iter=n_iter,
    )


def project(features, basis) -> np.ndarray | list:
    """Coordinates of features in an orthonormal basis: ``features @ basis``.

    Parameters
    ----------
    features : ndarray of shape (n_samples, r), or a list of them
        Features in the common frame (e.g. ``ConsensusResult.features``).
    basis : ndarray of shape (r, k)
        Orthonormal columns (e.g. ``ConsensusResult.shared_basis``). Distances and
        displacement directions within the subspace are preserved.

    Returns
    -------
    ndarray of shape (n_samples, k), or a list of them for list input

    Raises
    ------
    ValueError
        If shapes do not match or inputs contain NaN/inf.
    """
    basis = _as_float64(basis, "basis", 2, "(r, k)")
    single = not isinstance(features, (list, tuple))
    out = []
    for m, f in enumerate([features] if single else features):
        f = _as_float64(f, "features" if single else f"features[{m}]", 2, "(n_samples, r)")
        if f.shape[1] != basis.shape[0]:
            raise ValueError(f"features have r={f.shape[1]} columns but basis has shape {basis.shape}")
        out.append(f @ basis)
    return out[0] if single else out


def subspace_alignment(
    result: ConsensusResult, *, k: int = 10, n_pairs: int = 10_000, seed: int = 0, n_random: int = 0
) -> dict:
    """Mutual k-NN and Cross-Model similarity in the full, shared and private subspaces.

    For every pair of models ``m < n`` in ``result``, on the held-out rows (``result.test_idx``) of ``result.features``
    projected onto each subspace (:func:`project`), compute :func:`prh_lib.metrics.knn.mutual_knn` and the
    ``cross_model`` measure of :func:`~prh_lib.metrics.displacement.cosine_measures`. Features are already aligned, so
    nothing is refitted. Mutual k-NN here is computed in the whitened, aligned frame (the ``"full"`` entry is its
    reference), not on the raw features.

    Parameters
    ----------
    result : ConsensusResult
    k : int >= 1, default 10
        Neighbours for mutual k-NN; must be below the number of test samples.
    n_pairs, seed
        As in :func:`~prh_lib.metrics.displacement.cosine_measures`.
    n_random : int >= 0, default 0
        If positive, add a ``"random"`` control: the mean over ``n_random`` random subspaces of the shared subspace's
        dimension (orthonormal bases from the QR decomposition of Gaussian matrices,
        ``np.random.default_rng([seed, 2])``). A shared subspace that beats it is more aligned than an arbitrary one of
        its size; a private subspace should fall below it.

    Returns
    -------
    dict
        ``{"full" | "shared" | "private" [| "random"]: {"mutual_knn": ndarray (M, M),
        "cross_model": ndarray (M, M)}}``; symmetric, diagonal NaN (no self-comparison).

    Raises
    ------
    ValueError
        If ``k >= n_test`` or ``n_random < 0``.
    """
    if not isinstance(result, ConsensusResult):
        raise TypeError(f"result must be a ConsensusResult, got {type(result).__name__}")
    n_test = len(result.test_idx)
    k = check_k(k, n_test)
    n_pairs = check_int(n_pairs, "n_pairs", low=1)
    seed = check_int(seed, "seed", low=0)
    n_random = check_int(n_random, "n_random", low=0)
    test = [f[result.test_idx] for f in result.features]
    M = len(test)
    r, n_sh = result.shared_basis.shape
    rng = np.random.default_rng([seed, _RANDOM_STREAM])
    random_bases = [np.linalg.qr(rng.standard_normal((r, n_sh)))[0] for _ in range(n_random)]
    subspaces = {"full": [None], "shared": [result.shared_basis], "private": [result.private_basis]}
    if n_random:
        subspaces["random"] = random_bases
    out = {}
    for name, bases in subspaces.items():
        mk, cm = np.full((M, M), np.nan), np.full((M, M), np.nan)
        for a in range(M):
            for b in range(a + 1, M):
                vals = []
                for basis in bases:
                    Pa, Pb = (test[a], test[b]) if basis is None else (test[a] @ basis, test[b] @ basis)
                    cm_ab = D.cosine_measures(Pa, Pb, n_pairs=n_pairs, seed=seed)["cross_model"]
                    vals.append((float(mutual_knn(Pa, Pb, k=k)), cm_ab))
                mk[a, b] = mk[b, a] = float(np.mean([v[0] for v in vals]))
                cm[a, b] = cm[b, a] = float(np.mean([v[1] for v in vals]))
        out[name] = {"mutual_knn": mk, "cross_model": cm}
    return out


# --------------------------------------------------------------------------- the chapter's table and figure
@dataclass(frozen=True)
class ConsensusSummary:
    """Shared/private decomposition of several models at one layer each.

    Attributes
    ----------
    layers : dict of str to str
        Model -> layer used, in the order of the decomposition (model 0 fixes the frame).
    result : ConsensusResult
    table : DataFrame
        One row per model pair; columns ``(measure, subspace)`` for measure ``"mutual k-NN"`` (on
        the whitened, aligned held-out rows) and ``"Cross-Model"``, subspaces in the order of
        :data:`SUBSPACES`.
    chance : float
        Mutual k-NN chance level ``k / (n_test - 1)`` on the held-out rows.
    held_out_eigenvalues : ndarray of shape (r,)
        ``v.T @ S_cross(test rows) @ v`` for each eigenvector ``v`` (fitted on training rows): what each direction's
        cross-model agreement is on samples no fit has seen. The fitted eigenvalues are biased upward (Procrustes and
        the eigenvectors are fitted to the same training rows); these are not.
    """

    layers: dict
    result: ConsensusResult
    table: pd.DataFrame
    chance: float
    held_out_eigenvalues: np.ndarray


def consensus_summary(features: dict[str, LayerFeatures], layers: dict[str, str], *, n_components: int = 100,
                      n_shared: int = 10, n_private: int | None = None, k: int = 10, test_fraction: float = 0.5,
                      n_pairs: int = 10_000, seed: int = 0, n_random: int = 20) -> ConsensusSummary:
    """:func:`consensus_subspaces` of ``layers`` and its subspace scores.

    Parameters
    ----------
    features : dict of str to LayerFeatures
        All on the same samples in the same order.
    layers : dict of str to str
        Model -> layer label (e.g. from :func:`prh_lib.pages.ch_displacement.best_layers`); at least two models.
    n_components, n_shared, n_private, test_fraction, seed
        As in :func:`consensus_subspaces`.
    k, n_pairs, n_random
        As in :func:`subspace_alignment` (``n_random`` random
        subspaces of the shared dimension form the ``"random"`` control).

    Raises
    ------
    FeatureMismatchError
        If the models' rows are not the same samples in the same order.
    """
    names = list(layers)
    for name in names[1:]:
        check_aligned(features[names[0]], features[name])
    res = consensus_subspaces([features[m].layer(layers[m]) for m in names], n_components=n_components,
                              n_shared=n_shared, n_private=n_private, test_fraction=test_fraction, seed=seed)
    scores = subspace_alignment(res, k=k, n_pairs=n_pairs, seed=seed, n_random=n_random)
    subs = [sub for sub in SUBSPACES if sub in scores]
    rows = {}
    for a in range(len(names)):
        for b in range(a + 1, len(names)):
            rows[f"{names[a]} × {names[b]}"] = {(col, sub): scores[sub][key][a, b] for col, key in _VIEWS
                                                 for sub in subs}
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.columns = pd.MultiIndex.from_tuples(table.columns, names=["measure", "subspace"])
    table.index.name = "pair"
    V = res.eigenvectors
    held_out = np.diag(V.T @ cross_covariance([f[res.test_idx] for f in res.features]) @ V)
    return ConsensusSummary(dict(layers), res, table, mutual_knn_chance(len(res.test_idx), k), held_out)
