"""HSIC and linear probes on the shared and private consensus subspaces (arXiv:2609.24209 [1]_).

The paper checks that the shared (consensus) and private subspaces carry independent information:
HSIC with Gaussian (RBF) kernels between a concept set's projections on the two is near zero, and a
linear probe of WordNet categories works on each. The projections come from
:func:`prh_lib.analysis.displacement.consensus.consensus_subspaces` / ``project``.

References
----------
.. [1] "Displacement geometry captures platonic shared reality across models and modalities",
   arXiv:2609.24209, Sec. "Consensus subspaces".
.. [2] A. Gretton et al., "Measuring statistical dependence with Hilbert-Schmidt norms", ALT 2005
   (the biased estimator ``tr(K H L H) / (n - 1)^2``).
"""

from __future__ import annotations

import numpy as np


def rbf_kernel(X, *, sigma: float | None = None) -> np.ndarray:
    """Gaussian kernel ``exp(-|x_i - x_j|^2 / (2 sigma^2))``; ``sigma`` defaults to the median distance."""
    X = np.asarray(X, dtype=np.float64)
    sq = np.sum(X * X, axis=1)
    D2 = np.maximum(sq[:, None] + sq[None] - 2 * X @ X.T, 0.0)
    if sigma is None:
        d = np.sqrt(D2[np.triu_indices(len(X), 1)])
        sigma = float(np.median(d)) if d.size and np.median(d) > 0 else 1.0
    return np.exp(-D2 / (2 * sigma ** 2))


def hsic_rbf(X, Y) -> float:
    """Biased HSIC [2]_ with RBF kernels (median-distance bandwidth) between paired rows of ``X`` (n, d_x) and
    ``Y`` (n, d_y), divided by ``sqrt(HSIC(X, X) HSIC(Y, Y))`` (kernel CKA), giving a value in [0, 1].

    Raises
    ------
    ValueError
        If the row counts differ or fewer than 3 rows are given.
    """
    X, Y = np.asarray(X, dtype=np.float64), np.asarray(Y, dtype=np.float64)
    if len(X) != len(Y) or len(X) < 3:
        raise ValueError(f"need the same >= 3 rows, got {len(X)} and {len(Y)}")
    n = len(X)
    H = np.eye(n) - 1.0 / n
    K, L = H @ rbf_kernel(X) @ H, H @ rbf_kernel(Y) @ H
    hxy = float(np.sum(K * L)) / (n - 1) ** 2
    return hxy / np.sqrt(float(np.sum(K * K)) * float(np.sum(L * L)) / (n - 1) ** 4)


def linear_probe(X, y, *, cv: int = 5, seed: int = 0) -> tuple[float, float]:
    """Cross-validated accuracy of a logistic-regression probe (scikit-learn), and the majority baseline.

    Returns
    -------
    (float, float)
        Mean accuracy over ``cv`` stratified folds, and the majority class's frequency.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    y = np.asarray(y)
    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    acc = cross_val_score(clf, np.asarray(X, dtype=np.float64), y,
                          cv=StratifiedKFold(cv, shuffle=True, random_state=seed))
    return float(acc.mean()), float(np.bincount(y).max() / len(y))


def subspace_table(vectors: dict, labels=None, *, n_components: int = 32, n_shared: int = 8, n_private: int = 8,
                   seed: int = 0):
    """Per model, on held-out concepts: HSIC between its shared and private projections and, with ``labels``,
    a linear probe of them on each (classes with at least 5 held-out concepts) beside the majority class.

    ``vectors`` maps model -> (n_concepts, d) concept vectors; returns a DataFrame indexed by ``model``.
    """
    import pandas as pd

    from prh_lib.analysis.displacement import consensus as dc

    cons = dc.consensus_subspaces(list(vectors.values()), n_components=n_components, n_shared=n_shared,
                                  n_private=n_private, seed=seed)
    test, rows = cons.test_idx, []
    for m, Z in zip(vectors, cons.features):
        S, P = dc.project(Z[test], cons.shared_basis), dc.project(Z[test], cons.private_basis)
        row = {"model": m, "HSIC(shared, private)": hsic_rbf(S, P)}
        if labels is not None:
            y = pd.factorize(labels[test])[0]
            keep = np.isin(y, np.flatnonzero(np.bincount(y) >= 5))
            row["probe shared"], row["majority"] = linear_probe(S[keep], pd.factorize(y[keep])[0])
            row["probe private"], _ = linear_probe(P[keep], pd.factorize(y[keep])[0])
        rows.append(row)
    return pd.DataFrame(rows).set_index("model")
