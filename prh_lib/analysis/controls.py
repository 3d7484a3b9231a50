"""Control floors: what a cross-modal score reaches without learned vision-language alignment.

A mutual k-NN score is read against chance k/(N-1), but chance is not the only floor. Three controls bound every score
of a model pair from below, each keeping one side's structure and removing what the other side learned:

``"random-language"`` / ``"random-vision"``
    One model of the pair replaced by the same architecture with seeded random weights
    (``"<model>@random-init:<seed>"``, :func:`prh_lib.models.random_init`); its features are cached like
    any other. A random-init language model still carries token identity through its embedding layer, so
    trained vision × random-init language measures how much of a cross-modal score the words alone give.
``"tfidf"`` / ``"tfidf-svd"``
    The language model replaced by a bag of words: TF-IDF of the caption (scikit-learn's
    :class:`~sklearn.feature_extraction.text.TfidfVectorizer`, fitted on the pairs' own captions), as a
    one-layer :class:`~prh_lib.extract.features.LayerFeatures`, and optionally its truncated SVD. It is the lexical
    baseline of vision-language pairs (vision × TF-IDF) and of language-language pairs (each language
    model × TF-IDF: how much two language models share beyond which words a caption uses).

Each control is scored as the pair itself is (maximum of mutual k-NN over all layer pairs, the
selection-aware calibrated maximum and its p-value), so a floor and a score carry the same selection
over layers. :func:`control_floors` scores them for one draw and writes rows with
``quantity="control:<kind>"`` to the results table; :func:`floors_of_pair` reads them back per pair.

References
----------
Herbst et al., Section 3.3 (random initialisation regime); Huh et al. (2024), App. A (mutual k-NN);
Groeger et al. (2026), Sec. 5 (calibration); Salton & Buckley (1988), "Term-weighting approaches in
automatic text retrieval" (TF-IDF).
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

import numpy as np
import pandas as pd
import torch

from prh_lib.results import score_cache
from prh_lib.extract.features import LayerFeatures
from prh_lib.validation import check_model_pairs
from prh_lib.analysis.core import prepare_features, score_pair

#: Control kinds, in display order; a row's quantity is ``"control:<kind>"``.
CONTROL_KINDS = ("random-language", "random-vision", "tfidf", "tfidf-svd")

#: How the kinds are named on pages (for any pair: a same-modality pair has these floors too).
CONTROL_LABELS = {
    "random-language": "a language model replaced by its random-init twin",
    "random-vision": "a vision model replaced by its random-init twin",
    "tfidf": "bag of words (TF-IDF of the caption)",
    "tfidf-svd": "bag of words, truncated SVD",
}

#: Feature name of the TF-IDF representation.
TFIDF = "tfidf"


def tfidf_name(svd_components: int | None = None) -> str:
    """Feature name of the bag-of-words control: ``"tfidf"`` or ``"tfidf-svd<d>"``."""
    return TFIDF if not svd_components else f"{TFIDF}-svd{int(svd_components)}"


class Control(NamedTuple):
    """One control comparison.

    Attributes
    ----------
    x, y : str
        Feature names compared (model names, ``"<model>@random-init:<seed>"`` or :func:`tfidf_name`).
    kind : str
        One of :data:`CONTROL_KINDS`.
    pair : (str, str)
        The trained pair whose score it bounds (the first pair that asked for it; controls are shared).
    """

    x: str
    y: str
    kind: str
    pair: tuple

    @property
    def quantity(self) -> str:
        """The results-table quantity, ``"control:<kind>"``."""
        return f"control:{self.kind}"


def tfidf_features(pairs, *, svd_components: int | None = None, seed: int = 0, min_df: int = 1) -> LayerFeatures:
    """The captions of ``pairs`` as TF-IDF vectors: a one-layer bag-of-words representation.

    Parameters
    ----------
    pairs : prh_lib.data.Pairs
        Its ``texts`` (after the caption policy) are vectorised; rows follow ``pairs.sample_ids``.
    svd_components : int, optional
        Reduce the TF-IDF matrix to this many dimensions with truncated SVD (LSA); capped at
        ``min(n_samples, vocabulary) - 1``. None: the sparse TF-IDF vectors, densified.
    seed : int
        Seeds the randomised SVD solver.
    min_df : int
        Words in fewer captions are dropped (default 1: every word).

    Returns
    -------
    LayerFeatures
        ``values`` of shape (1, n_samples, d), float32, one layer labelled ``"tfidf"`` or ``"tfidf-svd<d>"``;
        ``meta["modality"] = "language"``. Rows are L2-normalised (TF-IDF's default norm), so cosine and
        Euclidean neighbours agree. Not meant for outlier clipping: most entries are 0, so a per-sample
        quantile threshold would zero the vectors.

    Raises
    ------
    ValueError
        If ``pairs`` has fewer than 2 captions, no caption has a word, or ``svd_components < 1``.
    """
    import sklearn

    texts = list(pairs.texts)
    if len(texts) < 2:
        raise ValueError(f"TF-IDF needs at least 2 captions, got {len(texts)}")
    if svd_components is not None and int(svd_components) < 1:
        raise ValueError(f"svd_components must be >= 1 or None, got {svd_components}")
    dense, name, vocabulary = _tfidf_values(texts, svd_components=None if svd_components is None else int(svd_components),
                                            seed=seed, min_df=min_df, sklearn_version=sklearn.__version__)
    values = torch.as_tensor(dense)[None]
    meta = {"model": name, "modality": "language", "pooling": "bag of words", "revision": f"sklearn-tfidf:min_df={min_df}",
            "vocabulary": str(vocabulary), "dataset": pairs.dataset, "dtype": "float32"}
    return LayerFeatures(values, (name,), tuple(pairs.sample_ids), meta)


@score_cache.memoize("tfidf_features")  # vectoriser and randomised SVD: 0.2 s a draw, on every run otherwise
def _tfidf_values(texts: list[str], *, svd_components: int | None, seed, min_df,
                  sklearn_version: str) -> tuple[np.ndarray, str, int]:
    """:func:`tfidf_features`' values ``(n_samples, d)`` float32, layer name and vocabulary size, keyed by the
    texts in row order, the options and scikit-learn's version (its solvers' numbers may change with it)."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    try:
        matrix = TfidfVectorizer(lowercase=True, min_df=min_df).fit_transform(texts)
    except ValueError as err:  # empty vocabulary
        raise ValueError(f"TF-IDF of {len(texts)} captions: {err}") from err
    name = tfidf_name(svd_components)
    if svd_components:
        d = max(1, min(svd_components, min(matrix.shape) - 1))
        dense = TruncatedSVD(n_components=d, random_state=seed).fit_transform(matrix)
        name = tfidf_name(d)
    else:
        dense = matrix.toarray()
    return np.ascontiguousarray(dense, dtype=np.float32), name, int(matrix.shape[1])


def random_init_name(name: str, seed: int) -> str:
    """The name of ``name`` with seeded random weights, ``"<name>@random-init:<seed>"``
    (as :func:`prh_lib.models.load_model` reads it)."""
    return f"{name}@random-init:{int(seed)}"


def control_comparisons(pairs: Sequence[Sequence[str]], modality: Mapping[str, str], *, seed: int = 0,
                        svd_components: int | None = 100, lexical: bool = True) -> list[Control]:
    """The controls that bound each pair, each listed once (pairs share them).

    Parameters
    ----------
    pairs : sequence of (str, str)
        Trained model pairs (vision × language, vision × vision or language × language).
    modality : mapping of str to {"vision", "language"}
        Modality of every model named in ``pairs`` (e.g. ``features[m].meta["modality"]``).
    seed : int
        Initialisation seed of the random-init controls.
    svd_components : int, optional
        Dimensions of the truncated-SVD bag of words; None: no SVD control.
    lexical : bool
        Add the bag-of-words controls (on every language side of a pair).

    Returns
    -------
    list of Control
        Per pair ``(x, y)``: each side in turn replaced by its random-init model (kind ``"random-vision"``
        or ``"random-language"`` by that side's modality); for each language side, the other model against
        TF-IDF (and its SVD). Duplicates (the same features compared twice) are dropped.

    Raises
    ------
    ValueError
        If a pair is not two distinct names, a model has no modality or an unknown one, or a pair member is
        itself a random-init model.
    """
    pairs = check_model_pairs(pairs, "pairs", distinct=True)
    out, seen = [], set()

    def add(x, y, kind, pair):
        if (x, y) not in seen:
            seen.add((x, y))
            out.append(Control(x, y, kind, tuple(pair)))

    for x, y in pairs:
        for m in (x, y):
            if "@random-init:" in m:
                raise ValueError(f"controls bound trained pairs; {m!r} is already randomly initialised")
            if modality.get(m) not in ("vision", "language"):
                raise ValueError(f"no modality for {m!r} (got {modality.get(m)!r}); give 'vision' or 'language'")
        add(random_init_name(x, seed), y, f"random-{modality[x]}", (x, y))
        add(x, random_init_name(y, seed), f"random-{modality[y]}", (x, y))
        if lexical:
            for lang, other in ((y, x), (x, y)):
                if modality[lang] != "language":
                    continue
                add(other, TFIDF, "tfidf", (x, y))
                if svd_components:
                    add(other, tfidf_name(svd_components), "tfidf-svd", (x, y))
    return out


def control_features(pairs, controls: Sequence[Control], *, features: Mapping[str, LayerFeatures] | None = None,
                     clip_q: float | None = 0.95, svd_components: int | None = 100, seed: int = 0,
                     device: str = "cpu", dtype: str = "float32", batch_size: int = 32) -> dict[str, LayerFeatures]:
    """The features of every control on ``pairs``: random-init models (cached, clipped) and the bag of words.

    Parameters
    ----------
    pairs : prh_lib.data.Pairs
    controls : sequence of Control
        From :func:`control_comparisons`.
    features : mapping, optional
        Features already prepared (trained models); they are reused, not extracted again.
    clip_q : float or None
        Outlier clipping of model features (:func:`prh_lib.analysis.clip_features`), as for the scores.
        The bag of words is never clipped (see :func:`tfidf_features`).
    svd_components, seed
        As in :func:`tfidf_features`.
    device, dtype, batch_size
        As in :func:`prh_lib.analysis.prepare_features`.

    Returns
    -------
    dict of str to LayerFeatures
        ``features`` plus every feature name the controls use.
    """
    have = dict(features or {})
    bow = {TFIDF} | ({tfidf_name(svd_components)} if svd_components else set())
    needed = sorted({m for c in controls for m in (c.x, c.y)} - set(have) - bow)
    if needed:
        have.update(prepare_features([], pairs, clip_q=clip_q, device=device, dtype=dtype, batch_size=batch_size,
                                     models=needed))
    names = {m for c in controls for m in (c.x, c.y)}
    if TFIDF in names:
        have[TFIDF] = tfidf_features(pairs)
    if svd_components and tfidf_name(svd_components) in names:
        svd = tfidf_features(pairs, svd_components=svd_components, seed=seed)
        have[tfidf_name(svd_components)] = svd.replace(svd.values, model=tfidf_name(svd_components))
    return have


def score_controls(features: Mapping[str, LayerFeatures], controls: Sequence[Control], *, k: int = 10,
                   n_permutations: int = 200, alpha: float = 0.05, seed: int = 0, device=None) -> pd.DataFrame:
    """Each control scored as a pair is: maximum over layer pairs, calibrated maximum, p.

    Parameters
    ----------
    features : mapping of str to LayerFeatures
        From :func:`control_features`, on one set of pairs.
    controls : sequence of Control
    k, n_permutations, alpha, seed, device
        As in :func:`prh_lib.analysis.score_pair` (no bootstrap, no shuffled control).

    Returns
    -------
    pandas.DataFrame
        One row per control in the results-table schema: ``model_x``, ``model_y``, ``layer_x``, ``layer_y``,
        ``depth_x``, ``depth_y`` (the peak layer pair and its relative depth in [0, 1]), ``metric`` (``"mutual_knn"``),
        ``k``, ``n``, ``score`` (maximum over layer pairs, in [0, 1]), ``calibrated`` (in [0, 1]), ``tau``, ``p``,
        ``quantity`` (``"control:<kind>"``), ``preprocessing``, and the extra columns ``kind``, ``pair_x``, ``pair_y``.

    Raises
    ------
    KeyError
        If a control's features are missing.
    """
    missing = sorted({m for c in controls for m in (c.x, c.y)} - set(features))
    if missing:
        raise KeyError(f"no features for controls {missing}; have {sorted(features)}")
    rows = []
    for c in controls:
        fx, fy = features[c.x], features[c.y]
        r = score_pair(fx, fy, k=k, n_permutations=n_permutations, alpha=alpha, n_boot=0, seed=seed,
                       control=False, device=device)
        i, j, best = r.matrix.peak
        dx, dy = r.matrix.relative_depth()
        cal = r.calibration
        rows.append({
            "model_x": c.x, "model_y": c.y, "layer_x": r.matrix.x_labels[i], "layer_y": r.matrix.y_labels[j],
            "depth_x": dx, "depth_y": dy, "metric": "mutual_knn", "k": k, "n": len(fx.sample_ids), "score": best,
            "calibrated": cal.calibrated_max if cal is not None else np.nan,
            "tau": cal.threshold_max if cal is not None else np.nan, "p": cal.p_max if cal is not None else np.nan,
            "quantity": c.quantity, "preprocessing": " + ".join(_preprocessing(f) for f in (fx, fy)),
            "kind": c.kind, "pair_x": c.pair[0], "pair_y": c.pair[1],
        })
    return pd.DataFrame(rows)


def _preprocessing(f: LayerFeatures) -> str:
    q = f.meta.get("clip_q")
    return f"clip_outliers(q={q})" if q else ("none (bag of words)" if f.meta.get("pooling") == "bag of words" else "none")


def control_floors(features: Mapping[str, LayerFeatures], pairs_of_models: Sequence[Sequence[str]], pairs, *,
                   chapter: str, params: Mapping, dataset: str, draw: int, draw_seed: int | None = None,
                   k: int = 10, n_permutations: int = 200, alpha: float = 0.05, seed: int = 0,
                   svd_components: int | None = 100, clip_q: float | None = 0.95, lexical: bool = True,
                   device: str = "cpu", dtype: str = "float32", batch_size: int = 32, root=None) -> pd.DataFrame:
    """The control floors of ``pairs_of_models`` on one draw, written to the results table.

    Parameters
    ----------
    features : mapping of str to LayerFeatures
        Features of the trained models of ``pairs_of_models`` on ``pairs`` (their ``meta["modality"]``
        decides the controls); controls' features are added (:func:`control_features`).
    pairs_of_models : sequence of (str, str)
        The trained pairs to bound.
    pairs : prh_lib.data.Pairs
        The draw's image-caption pairs.
    chapter, params, dataset, draw, draw_seed
        Where the rows go (:func:`prh_lib.results.write`); ``draw_seed`` fills the ``seed`` column.
    k, n_permutations, alpha, seed
        Scoring (:func:`score_controls`); ``seed`` also seeds the random-init models and the SVD.
    svd_components, clip_q, lexical, device, dtype, batch_size
        As in :func:`control_comparisons` and :func:`control_features`.
    root : path, optional
        Results-table folder (tests).

    Returns
    -------
    pandas.DataFrame
        The rows written (:func:`score_controls`, with ``dataset``, ``draw`` and ``seed``).
    """
    from prh_lib import results

    modality = {m: features[m].meta.get("modality") for pair in pairs_of_models for m in pair if m in features}
    controls = control_comparisons(pairs_of_models, modality, seed=seed, svd_components=svd_components,
                                   lexical=lexical)
    feats = control_features(pairs, controls, features=features, clip_q=clip_q, svd_components=svd_components,
                             seed=seed, device=device, dtype=dtype, batch_size=batch_size)
    rows = score_controls(feats, controls, k=k, n_permutations=n_permutations, alpha=alpha, seed=seed)
    results.write(rows, chapter=chapter, params=params, dataset=dataset, draw=draw, seed=draw_seed, root=root)
    return rows.assign(dataset=dataset, draw=draw, seed=draw_seed)


def floors_of_pair(floors: pd.DataFrame, x: str, y: str, modality: Mapping[str, str], *, seed: int = 0,
                   svd_components: int | None = 100) -> pd.DataFrame:
    """The rows of a control table (raw or aggregated over draws) that bound the pair ``(x, y)``.

    Parameters
    ----------
    floors : DataFrame
        Control rows with ``model_x``, ``model_y`` and ``quantity`` (e.g. from :func:`score_controls`, or
        :func:`prh_lib.results.aggregate` of them).
    x, y : str
        The trained pair.
    modality : mapping of str to {"vision", "language"}
        Modality of ``x`` and ``y``.
    seed, svd_components
        As used to make the controls (:func:`control_comparisons`).

    Returns
    -------
    pandas.DataFrame
        The rows whose compared features are one of the pair's controls (in the order of
        :func:`control_comparisons`), with a column ``replaced``: the model of the pair the control stands in for.
    """
    wanted = {}
    for c in control_comparisons([(x, y)], modality, seed=seed, svd_components=svd_components):
        wanted[(c.x, c.y)] = x if c.x != x else y
    keys = list(zip(floors["model_x"], floors["model_y"]))
    mask = np.array([key in wanted for key in keys], dtype=bool)
    out = floors[mask].copy()
    out["replaced"] = [wanted[key] for key, m in zip(keys, mask) if m]
    return out
