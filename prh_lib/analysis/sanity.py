"""Does a model's representation carry what its images or captions show? A label-free sanity check (issue 44).

For each image, precision@k of retrieving the images whose captions share one of its salient content words, by
cosine similarity of one layer's features: a vision model embeds the images, a language model one caption per
image, and relevance comes from the image's other captions (so a caption's own words cannot make it relevant).
Each model is read against its random-init twin (its floor): the layer is selected on one half of the images and
scored on the other (both ways, over random splits), and the margin over the twin carries a 95 % half-sampling
interval over images. Retrieval judged by caption content follows Hodosh et al. (2013), who built Flickr8k for
ranking-based evaluation of image-text embeddings.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from prh_lib.results import score_cache
from prh_lib.stats.intervals import bootstrap_interval
from prh_lib.stats.selection import split_halves


def salient_words(captions: Sequence[Sequence[str]], *, min_captions: int = 2, max_share: float = 0.1) -> list[set]:
    """Per image, the content words at least ``min_captions`` of its captions use.

    Words are lower-cased letters; scikit-learn's English stop words and words of fewer than 3 letters are left out,
    and a plural is folded onto its singular when the singular occurs. Words salient for more than ``max_share`` of
    the images ("man", "water") are dropped: too common to tell images apart.

    Parameters
    ----------
    captions : sequence of N sequences of str
        Each image's captions.

    Returns
    -------
    list of N sets of str
    """
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    words = [[set(re.findall(r"[a-z]{3,}", c.lower())) - ENGLISH_STOP_WORDS for c in caps] for caps in captions]
    vocab = set().union(*(w for caps in words for w in caps))
    fold = {w: w[:-1] if w.endswith("s") and not w.endswith("ss") and w[:-1] in vocab else w for w in vocab}
    salient = [{w for w, n in Counter(fold[w] for c in caps for w in {fold[x] for x in c}).items()
                if n >= min_captions} for caps in words]
    share = Counter(w for s in salient for w in s)
    return [{w for w in s if share[w] <= max_share * len(salient)} for s in salient]


def relevance(salient: Sequence[set]) -> np.ndarray:
    """``(N, N)`` bool: images ``i != j`` share a salient word (:func:`salient_words`)."""
    vocab = {w: i for i, w in enumerate(sorted(set().union(*salient)))}
    M = np.zeros((len(salient), len(vocab)), dtype=np.float32)
    for i, s in enumerate(salient):
        M[i, [vocab[w] for w in s]] = 1
    rel = (M @ M.T) > 0
    np.fill_diagonal(rel, False)
    return rel


def _similarity(X) -> np.ndarray | None:
    """Cosine similarities ``(N, N)`` with ``-inf`` on the diagonal; None for features the same for every row."""
    X = np.asarray(X, dtype=np.float64)
    if np.ptp(X, axis=0).max() < 1e-12:
        return None
    X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12)
    S = X @ X.T
    np.fill_diagonal(S, -np.inf)
    return S


def _precision(S: np.ndarray | None, relevant: np.ndarray, k: int) -> np.ndarray:
    if S is None:
        return np.full(len(relevant), np.nan)
    return relevant[np.arange(len(S))[:, None], np.argpartition(-S, k, axis=1)[:, :k]].mean(axis=1)


def precision_at_k(values: np.ndarray, relevant: np.ndarray, *, k: int = 10) -> np.ndarray:
    """Per layer and image, the share of its ``k`` nearest images by cosine similarity that are relevant.

    Parameters
    ----------
    values : array of shape (L, N, D)
        Features of L layers (zero-padded columns change nothing).
    relevant : bool array of shape (N, N)
        From :func:`relevance`.

    Returns
    -------
    float array of shape (L, N), in [0, 1]; NaN for a layer whose features are the same for every image (a ViT's
    CLS token at ``embed``), where nearest neighbours are undefined.

    Raises
    ------
    ValueError
        If the shapes disagree or ``k`` is not in [1, N - 1].
    """
    L, N, _ = np.shape(values)
    if relevant.shape != (N, N) or not 1 <= k < N:
        raise ValueError(f"need relevance of shape ({N}, {N}) and 1 <= k < {N}; got {relevant.shape}, k = {k}")
    return np.stack([_precision(_similarity(X), relevant, k) for X in values])


def heldout_precision(P: np.ndarray, *, n_splits: int = 10, seed: int = 0) -> tuple[np.ndarray, int]:
    """Per image, precision@k at the layer selected on the other half of the images, averaged over ``n_splits``
    random splits (both halves scored each time); ``P`` of shape (L, N) from :func:`precision_at_k`. Returns the
    (N,) scores and the layer selected most often."""
    score, picks = np.zeros(P.shape[1]), Counter()
    for a, b in split_halves(P.shape[1], n_splits=n_splits, seed=seed):
        for sel, out in ((a, b), (b, a)):
            layer = int(np.nanargmax(P[:, sel].mean(axis=1)))
            score[out] += P[layer, out] / n_splits
            picks[layer] += 1
    return score, picks.most_common(1)[0][0]


def _margin(est: float, Sa, Sb, relevant, k: int, n_boot: int, seed: int) -> tuple[float, float, float]:
    """``est`` and its centred 95 % half-sampling interval: each replicate scores both similarity matrices on half
    of the images (queries and gallery), as the book's other intervals over images (:mod:`prh_lib.stats`)."""
    rng, n = np.random.default_rng([seed, 1]), len(relevant)
    reps = np.empty(n_boot)
    for i in range(n_boot):
        idx = np.ix_(*[np.sort(rng.choice(n, n // 2, replace=False))] * 2)
        reps[i] = np.nanmean(_precision(Sa[idx], relevant[idx], k) - _precision(Sb[idx], relevant[idx], k))
    return (float(est), *bootstrap_interval(est, reps, method="centred"))


def sanity_check(features: Mapping[str, np.ndarray], twins: Mapping[str, str], relevant: np.ndarray, *,
                 layers: Mapping[str, Sequence[str]] | None = None, k: int = 10, n_splits: int = 10,
                 n_boot: int = 200, seed: int = 0) -> pd.DataFrame:
    """Each model's precision@k against its random-init twin's, at held-out layers and at the final layer.

    Parameters
    ----------
    features : mapping of str to array of shape (L, N, D)
        Every model and twin, rows aligned with ``relevant``.
    twins : mapping of str to str
        Model -> its random-init twin (a key of ``features``).
    relevant : bool array of shape (N, N)
    layers : mapping of str to sequence of str, optional
        Layer labels per model (for the ``layer`` column).
    k, n_splits, seed
        As in :func:`precision_at_k` and :func:`heldout_precision`.
    n_boot : int
        Half-samples of the images for the 95 % intervals of the margins (at the layers selected most often).

    Returns
    -------
    pandas.DataFrame
        One row per model: ``chance`` (precision@k of a random ranking), ``P@k``, ``twin P@k`` and ``margin`` with
        ``low``/``high`` (held-out layers), ``layer`` (the one selected most often), the same at the final layer
        (``final P@k``, ``final margin``, ``final low``, ``final high``), and ``passes``: the held-out margin's
        interval lies above 0.
    """
    chance = float(relevant.sum(axis=1).mean() / (relevant.shape[0] - 1))
    rows = []
    for model, twin in twins.items():
        r = _model_row(np.asarray(features[model]), np.asarray(features[twin]), np.asarray(relevant, dtype=bool), k=k,
                       n_splits=n_splits, n_boot=n_boot, seed=seed)
        label = (layers or {}).get(model, range(len(features[model])))[r["layer"]]
        rows.append({"model": model, "twin": twin, "chance": chance, **r, "layer": label, "passes": r["low"] > 0})
    return pd.DataFrame(rows)


@score_cache.memoize("sanity_check")  # one model against its twin: the same in every chapter that checks it
def _model_row(X: np.ndarray, T: np.ndarray, relevant: np.ndarray, *, k: int, n_splits: int, n_boot: int,
               seed: int) -> dict:
    P, Q = (precision_at_k(V, relevant, k=k) for V in (X, T))
    (p, layer), (t, twin_layer) = (heldout_precision(V, n_splits=n_splits, seed=seed) for V in (P, Q))
    sim = [_similarity(V[i]) for V, i in ((X, layer), (T, twin_layer), (X, -1), (T, -1))]
    m, lo, hi = _margin(p.mean() - t.mean(), *sim[:2], relevant, k, n_boot, seed)
    fm, flo, fhi = _margin(np.mean(P[-1] - Q[-1]), *sim[2:], relevant, k, n_boot, seed)
    return {"P@k": p.mean(), "twin P@k": t.mean(), "margin": m, "low": lo, "high": hi, "layer": layer,
            "final P@k": P[-1].mean(), "final margin": fm, "final low": flo, "final high": fhi}
