"""The computations of the displacement chapter: displacement geometry beside mutual k-NN, layer by layer.

Layer-pair matrices of the three cosine measures (:func:`displacement_matrices`) next to mutual k-NN
(:func:`compare_views`, :class:`ViewComparison`), the measures at the best layer pair with their controls
(:func:`best_pair_table`, :func:`views_table`), a sweep over the whitened dimension
(:func:`n_components_sweep`), depth profiles and per-model best layers. Re-exported by
:mod:`prh_lib.pages.ch_displacement`, which holds the page (figures, prose, verdicts).

References
----------
"Displacement geometry captures platonic shared reality across models and modalities",
arXiv:2609.24209, Sec. "Method". Herbst et al., Section 3.1 (layer-wise mutual k-NN).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from prh_lib.results import score_cache
from prh_lib.analysis.core import AlignmentMatrix, check_comparisons, layerwise_alignment
from prh_lib.extract.features import LayerFeatures, check_aligned
from prh_lib.metrics import displacement as D

#: Display names of the three measures (arXiv:2609.24209).
MEASURE_NAMES = {"pointwise": "Pointwise", "cross_model": "Cross-Model", "cross_object": "Cross-Object"}


def _argmax(scores: np.ndarray) -> tuple[int, int]:
    if np.isnan(scores).all():
        raise ValueError(f"all {scores.shape} scores are NaN; no best layer pair")
    i, j = np.unravel_index(int(np.nanargmax(scores)), scores.shape)
    return int(i), int(j)


def pair_kind(x: LayerFeatures, y: LayerFeatures) -> str:
    """``"vision-language"``, ``"vision-vision"`` or ``"language-language"`` from ``meta["modality"]``."""
    mx, my = x.meta.get("modality", "?"), y.meta.get("modality", "?")
    return "-".join(sorted((mx, my), key=lambda m: (m != "vision", m)))


@score_cache.memoize("displacement_matrices")
def displacement_matrices(x: LayerFeatures, y: LayerFeatures, *, n_components: int = 100, test_fraction: float = 0.5,
                          n_pairs: int = 10_000, seed: int = 0) -> dict[str, AlignmentMatrix]:
    """:func:`~prh_lib.metrics.displacement.displacement_layerwise` of two models, as alignment matrices.

    Parameters
    ----------
    x, y : LayerFeatures
        Same samples in the same row order (zero padding of narrow layers changes nothing).
    n_components, test_fraction, n_pairs, seed
        As in :func:`~prh_lib.metrics.displacement.displacement_similarity`.

    Returns
    -------
    dict of str to AlignmentMatrix
        One ``(n_layers_x, n_layers_y)`` matrix per name in
        :data:`~prh_lib.metrics.displacement.MEASURES`, values in [-1, 1]; NaN rows/columns for
        layers with zero variance (a ViT's constant CLS token at ``embed``). ``options`` records
        the settings and ``r``, the common whitened dimension of each layer pair (int array).

    Raises
    ------
    FeatureMismatchError
        If the rows are not the same samples in the same order.
    """
    check_aligned(x, y)
    out = D.displacement_layerwise(x.values, y.values, n_components=n_components, test_fraction=test_fraction,
                                   n_pairs=n_pairs, seed=seed)
    options = {"n_components": n_components, "test_fraction": test_fraction, "n_pairs": n_pairs, "seed": seed,
               "n": len(x.sample_ids), "r": out["n_components"]}
    return {name: AlignmentMatrix(out[name], tuple(x.layer_labels), tuple(y.layer_labels), x.name, y.name, name,
                                  dict(options)) for name in D.MEASURES}


@dataclass(frozen=True)
class ViewComparison:
    """Mutual k-NN and the displacement measures of one model pair over all layer pairs.

    Attributes
    ----------
    label : str
        ``"x × y"``.
    kind : str
        See :func:`pair_kind`.
    knn : AlignmentMatrix
        Mutual k-NN (Huh et al. 2024), as in Section 3.1.
    displacement : dict of str to AlignmentMatrix
        :func:`displacement_matrices`.
    """

    label: str
    kind: str
    knn: AlignmentMatrix
    displacement: dict

    @property
    def cross_model(self) -> AlignmentMatrix:
        return self.displacement["cross_model"]


def compare_views(features: dict[str, LayerFeatures], comparisons: Sequence, *, k: int = 10, n_components: int = 100,
                  test_fraction: float = 0.5, n_pairs: int = 10_000, seed: int = 0) -> list[ViewComparison]:
    """Both views for each ``(x, y)`` in ``comparisons``: mutual k-NN and the displacement measures.

    Raises
    ------
    KeyError
        If a model of ``comparisons`` has no features (the message lists those available).
    """
    check_comparisons(features, comparisons)
    out = []
    for x_name, y_name in comparisons:
        x, y = features[x_name], features[y_name]
        out.append(ViewComparison(
            f"{x_name} × {y_name}", pair_kind(x, y), layerwise_alignment(x, y, metric="mutual_knn", k=k),
            displacement_matrices(x, y, n_components=n_components, test_fraction=test_fraction, n_pairs=n_pairs,
                                  seed=seed)))
    return out


def _pair(comp: ViewComparison) -> tuple[str, str]:
    return comp.knn.x_name, comp.knn.y_name


def best_pair_table(results: list[ViewComparison], features: dict[str, LayerFeatures], *,
                    n_splits: int = 0) -> pd.DataFrame:
    """The three measures and their shuffled controls at each pair's best Cross-Model layer pair.

    The best pair is the maximum of the Cross-Model matrix (split seed ``s0`` of the matrices). ``shuffled (max)`` is
    the largest shuffled-pairing Cross-Model value over *all* layer pairs: a control that includes the selection of the
    best pair. With ``n_splits > 0`` the best pair is re-scored on ``n_splits`` fresh splits (seeds ``s0 + 1, ...``),
    whose mean and standard deviation show how much the value owes to one split and to the selection.

    Returns
    -------
    DataFrame
        One row per pair; measures in [-1, 1].
    """
    rows = []
    for comp in results:
        cm = comp.cross_model
        i, j = _argmax(cm.scores)
        opts = {key: cm.options[key] for key in ("n_components", "test_fraction", "n_pairs")}
        row = {"pair": comp.label, "kind": comp.kind, "layer x": cm.x_labels[i], "layer y": cm.y_labels[j],
               "r": int(cm.options["r"][i, j])}
        for name in MEASURE_NAMES:
            row[MEASURE_NAMES[name]] = float(comp.displacement[name].scores[i, j])
            row[f"{MEASURE_NAMES[name]} (shuffled)"] = float(comp.displacement[name + "_shuffled"].scores[i, j])
        row["Cross-Model shuffled (max)"] = float(np.nanmax(comp.displacement["cross_model_shuffled"].scores))
        if n_splits:
            x, y = (features[m] for m in _pair(comp))
            vals = [D.displacement_similarity(x.layer(i), y.layer(j), seed=cm.options["seed"] + s, **opts).cross_model
                    for s in range(1, n_splits + 1)]
            row[f"Cross-Model, {n_splits} re-splits"] = float(np.mean(vals))
            row["re-split sd"] = float(np.std(vals, ddof=1)) if n_splits > 1 else np.nan
        rows.append(row)
    return pd.DataFrame(rows).set_index("pair")


def views_table(results: list[ViewComparison]) -> pd.DataFrame:
    """Where each view peaks, what the other view gives there, and how alike the two heatmaps are.

    ``rank correlation`` is Spearman's rho between the two matrices over the layer pairs where both
    are defined; ``depth`` is the peak's relative depth (0 = embedding output, 1 = last layer).
    """
    rows = []
    for comp in results:
        mk, cm = comp.knn, comp.cross_model
        ik, jk = _argmax(mk.scores)
        ic, jc = _argmax(cm.scores)
        ok = np.isfinite(mk.scores) & np.isfinite(cm.scores)
        depth = lambda i, j: f"{i / max(len(mk.x_labels) - 1, 1):.2f} × {j / max(len(mk.y_labels) - 1, 1):.2f}"
        rows.append({
            "pair": comp.label, "kind": comp.kind,
            "k-NN peak": mk.scores[ik, jk], "k-NN peak layers": f"{mk.x_labels[ik]} × {mk.y_labels[jk]}",
            "k-NN peak depth": depth(ik, jk),
            "Cross-Model peak": cm.scores[ic, jc], "Cross-Model peak layers": f"{cm.x_labels[ic]} × {cm.y_labels[jc]}",
            "Cross-Model peak depth": depth(ic, jc),
            "Cross-Model at k-NN peak": cm.scores[ik, jk], "k-NN at Cross-Model peak": mk.scores[ic, jc],
            "k-NN final": mk.final, "Cross-Model final": cm.final,
            "rank correlation": float(spearmanr(mk.scores[ok], cm.scores[ok]).statistic),
        })
    return pd.DataFrame(rows).set_index("pair")


def n_components_sweep(results: list[ViewComparison], features: dict[str, LayerFeatures], *,
                       n_components: Sequence[int] = (8, 16, 32, 50, 100)) -> pd.DataFrame:
    """The measures at each pair's best Cross-Model layer pair for several whitened dimensions.

    The layer pair, split and sampled pairs stay those of ``results``; only ``n_components`` changes (requests above
    ``min(n_train - 1, d)`` give the same ``r``). With every kept component whitened to unit variance, a measure behaves
    like (shared dimensions) / ``r`` once ``r`` exceeds the shared dimension, so values compare only at equal ``r``.

    Returns
    -------
    DataFrame
        Long format: one row per (pair, requested ``n_components``) with the ``r`` used,
        ``r / n_train`` and the six measures.
    """
    rows = []
    for comp in results:
        cm = comp.cross_model
        i, j = _argmax(cm.scores)
        x, y = (features[m] for m in _pair(comp))
        for q in n_components:
            r, n_train, measures = _similarity_at(x.layer(i), y.layer(j), q, cm.options["seed"],
                                                  cm.options["test_fraction"], cm.options["n_pairs"])
            rows.append({"pair": comp.label, "layers": f"{cm.x_labels[i]} × {cm.y_labels[j]}", "n_components": q,
                         "r": r, "r / n_train": r / n_train, **measures})
    return pd.DataFrame(rows)


@score_cache.memoize("displacement_similarity_at")
def _similarity_at(x, y, n_components: int, seed: int, test_fraction: float, n_pairs: int):
    """``(r, n_train, measures)`` of :func:`prh_lib.metrics.displacement.displacement_similarity` (cached)."""
    res = D.displacement_similarity(x, y, n_components=n_components, seed=seed, test_fraction=test_fraction,
                                    n_pairs=n_pairs)
    return res.n_components, res.n_train, res.measures()


@score_cache.memoize("displacement_depth_profile")
def _depth_profile(x_layer, y_stack, n_components: int, test_fraction: float, n_pairs: int, seed: int):
    """``(r used, Cross-Model score of each layer of y_stack)`` against one layer of x (cached)."""
    with warnings.catch_warnings():  # a constant layer is NaN by design (documented there)
        warnings.filterwarnings("ignore", message=".*degenerate.*", category=RuntimeWarning)
        res = D.displacement_layerwise(x_layer, y_stack, n_components=n_components, test_fraction=test_fraction,
                                       n_pairs=n_pairs, seed=seed)
    return int(res["n_components"].max()), np.asarray(res["cross_model"][0])


def depth_profiles(results: list[ViewComparison], features: dict[str, LayerFeatures], *,
                   n_components: Sequence[int] = (4, 8, 16, 32)) -> dict[str, pd.DataFrame]:
    """Both views along the second model's depth, at the first model's mutual k-NN peak layer, for several ``r``.

    Mutual k-NN works on the raw (clipped) features, where a few high-variance directions dominate
    cosine similarities; whitening to ``r`` components weights ``r`` directions equally. Comparing the
    Cross-Model profile at small and large ``r`` with the k-NN profile shows whether a feature of the
    k-NN heatmap lives in a few leading directions. Split and sampled pairs are those of ``results``.

    Returns
    -------
    dict of str to DataFrame
        Pair label -> DataFrame indexed by the second model's layer labels, with columns ``"mutual k-NN"`` and
        ``"Cross-Model, r=<r>"`` for each distinct ``r`` used (requests above what the training rows support collapse
        onto one ``r``). The frame's ``attrs["layer x"]`` names the first model's layer.
    """
    out = {}
    for comp in results:
        ik, _ = _argmax(comp.knn.scores)
        x, y = (features[m] for m in _pair(comp))
        opts = {key: comp.cross_model.options[key] for key in ("test_fraction", "n_pairs", "seed")}
        cols = {"mutual k-NN": comp.knn.scores[ik]}
        for q in n_components:
            r, profile = _depth_profile(x.values[ik:ik + 1], y.values, q, opts["test_fraction"], opts["n_pairs"],
                                        opts["seed"])
            cols.setdefault(f"Cross-Model, r={r}", profile)
        frame = pd.DataFrame(cols, index=pd.Index(comp.knn.y_labels, name=comp.knn.y_name))
        frame.attrs["layer x"] = f"{comp.knn.x_name} {comp.knn.x_labels[ik]}"
        out[comp.label] = frame
    return out


def best_layers(results: list[ViewComparison], models: Sequence[str] | None = None, *,
                measure: str = "cross_model") -> dict[str, str]:
    """One layer per model: where it aligns best, on average, with its partners in ``results``.

    For each comparison involving a model, take for each of its layers the best score over the partner's layers; average
    these profiles over the model's comparisons; return the layer with the highest average.

    Parameters
    ----------
    results : list of ViewComparison
    models : sequence of str, optional
        Default: every model in ``results``.
    measure : str
        ``"mutual_knn"`` or a name in :data:`~prh_lib.metrics.displacement.MEASURES`.

    Returns
    -------
    dict of str to str
        Model name -> layer label.

    Raises
    ------
    KeyError
        If a model appears in no comparison (pass its layer explicitly instead).
    """
    profiles: dict[str, list] = {}
    for comp in results:
        m = comp.knn if measure == "mutual_knn" else comp.displacement[measure]
        for name, labels, prof in ((m.x_name, m.x_labels, m.scores), (m.y_name, m.y_labels, m.scores.T)):
            best = np.full(len(labels), np.nan)
            rows_ok = ~np.isnan(prof).all(1)
            best[rows_ok] = np.nanmax(prof[rows_ok], axis=1)
            profiles.setdefault(name, []).append((labels, best))
    models = list(profiles) if models is None else list(models)
    out = {}
    for name in models:
        if name not in profiles:
            raise KeyError(f"{name!r} is in no comparison; compared models are {sorted(profiles)}")
        labels = profiles[name][0][0]
        with warnings.catch_warnings():  # an all-NaN layer (constant CLS at embed) stays NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            mean = np.nanmean(np.stack([p for _, p in profiles[name]]), axis=0)
        out[name] = labels[int(np.nanargmax(mean))]
    return out
