"""Orchestration of the concept-level study: measures under both procedures, hierarchy, ablation.

Functions take concept vectors as arrays (rows = the same concepts in the same order) and return
tidy tables; extraction (classifier rows, language-model embeddings of the lemmas) is the caller's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from prh_lib.metrics import displacement as D
from prh_lib.analysis.concepts import controllability as C
from prh_lib.analysis.displacement.procedures import OURS, REFERENCE
from prh_lib.analysis.displacement.reference import reference_procedure

#: The paper's concept-level numbers (Cross-Model, Pointwise), ``../shared/papers/003_*``.
PAPER = {"V-V": (0.73, 0.41), "L-L": (0.91, 0.36), "V-L": (0.49, 0.25)}

_MEASURES = ("pointwise", "cross_model", "cross_object")


def _both(A, B, *, n_components: int, seed: int) -> list[dict]:
    ours = D.displacement_similarity(A, B, n_components=n_components, seed=seed)
    ref = reference_procedure(A, B, n_components=n_components, train_size=len(A) // 2, seed=seed)
    return [{"procedure": OURS, **{k: getattr(ours, k) for k in _MEASURES},
             **{k + "_shuffled": getattr(ours, k + "_shuffled", np.nan) for k in _MEASURES}},
            {"procedure": REFERENCE, **ref.measures()}]


def concept_measures(pairs: dict, *, n_components: int = 32, seeds=(0, 1, 2)) -> pd.DataFrame:
    """Pointwise / Cross-Model / Cross-Object for each pair of concept-vector sets, both procedures.

    Parameters
    ----------
    pairs : dict
        label (e.g. ``"V-V: Lite0 x Lite2"``) -> ``(A, B)``, arrays (n_concepts, d_a), (n_concepts, d_b).
    n_components : int, default 32
        Whitened dimension for both procedures (the reference needs it below each ``d``).
    seeds : iterable of int
        Splits; the table has one row per (pair, seed, procedure).

    Returns
    -------
    DataFrame
        ``pair``, ``seed``, ``procedure``, the three measures (and our shuffled controls).
    """
    rows = []
    for label, (A, B) in pairs.items():
        for s in seeds:
            rows += [{"pair": label, "seed": s, **r} for r in _both(A, B, n_components=n_components, seed=s)]
    return pd.DataFrame(rows)


def category_labels(synsets, hypernyms: dict, *, depth: int = 6, min_count: int = 10) -> np.ndarray:
    """WordNet category of each concept: its first-hypernym ancestor ``depth`` steps below the root.

    Categories with fewer than ``min_count`` concepts are merged into one "other" label.

    Returns
    -------
    int ndarray of shape (n_concepts,)
    """
    cats = []
    for s in synsets:
        chain = [s]
        while hypernyms.get(chain[-1]):
            chain.append(hypernyms[chain[-1]][0])
        chain = chain[::-1]  # root first
        cats.append(chain[min(depth, len(chain) - 1)])
    ser = pd.Series(cats)
    counts = ser.value_counts()
    ser = ser.where(ser.map(counts) >= min_count, "other")
    return pd.factorize(ser)[0]


def _pca(M: np.ndarray, train: np.ndarray, k: int) -> np.ndarray:
    mu = M[train].mean(0)
    _, _, Vt = np.linalg.svd(M[train] - mu, full_matrices=False)
    return (M - mu) @ Vt[:k].T


def ablation(X, teacher, labels, *, methods=C.METHODS, seeds=(0, 1, 2), n_components: int = 32,
             test_fraction: float = 0.5, steps: int = 300, hidden: int = 256, lr: float = 1e-3,
             n_pca: int | None = 64) -> pd.DataFrame:
    """The controllability ablation: measures of (student, teacher) before and after training.

    "Before" is the student's input model ``X`` itself; "after" is the trained student's output. The
    student trains on the training rows only; both procedures are measured on the held-out rows.

    Parameters
    ----------
    X : array (n, d_x)
        The student model's features (concept vectors or cached sample features).
    teacher : array (n, d_t)
    labels : int array (n,)
        The fine-tuning task.
    methods, seeds, n_components, test_fraction, steps, hidden, lr
        ``seeds`` fix the split and the training.
    n_pca : int or None, default 64
        Reduce both models to this many principal components (fitted on the training rows) before
        anything else, so relation distillation's in-batch whitening stays cheap (seconds).

    Returns
    -------
    DataFrame
        ``method``, ``seed``, ``stage`` in {"before", "after"}, ``procedure``, the three measures.
    """
    X, teacher, labels = np.asarray(X, dtype=np.float64), np.asarray(teacher, dtype=np.float64), np.asarray(labels)
    n = len(X)
    rows = []
    for s in seeds:
        perm = np.random.default_rng([s, 7]).permutation(n)
        test, train = np.sort(perm[: int(n * test_fraction)]), np.sort(perm[int(n * test_fraction):])
        Xs, Ts = (_pca(M, train, n_pca) for M in (X, teacher)) if n_pca else (X, teacher)
        before = _both(Xs[test], Ts[test], n_components=n_components, seed=s)
        rows += [{"method": m, "seed": s, "stage": "before", **r} for m in methods for r in before]
        for m in methods:
            model, _ = C.train_student(Xs[train], method=m, teacher=Ts[train], labels=labels[train],
                                       d_out=Ts.shape[1], hidden=hidden, steps=steps, lr=lr, seed=s)
            mu, sd = Xs[train].mean(0), Xs[train].std(0).clip(1e-8)
            with torch.no_grad():
                Z = model(torch.as_tensor((Xs[test] - mu) / sd, dtype=torch.float32)).double().numpy()
            rows += [{"method": m, "seed": s, "stage": "after", **r}
                     for r in _both(Z, Ts[test], n_components=n_components, seed=s)]
    return pd.DataFrame(rows)


def ablation_labels(synsets, hypernyms: dict | None, teacher, *, depth: int = 6) -> np.ndarray:
    """The fine-tuning task's labels: :func:`category_labels` at ``depth``, or without WordNet (``hypernyms``
    None) 10 k-means clusters of the ``teacher``'s concept vectors."""
    if hypernyms is not None:
        return category_labels(list(synsets), hypernyms, depth=depth)
    from sklearn.cluster import KMeans

    return KMeans(10, n_init=4, random_state=0).fit_predict(teacher)
