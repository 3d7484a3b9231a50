"""Displacement geometry beside mutual k-NN, layer by layer (the displacement chapter's analyses).

Glue between :class:`~prh_lib.extract.LayerFeatures` and :mod:`prh_lib.metrics.displacement`:
layer-pair matrices of the three cosine measures next to mutual k-NN, the measures at the best
layer pair with their controls, a sweep over the whitened dimension, per-model best layers, and
the verdict of the chapter's "The paper and this build" table (:func:`claim_verdict`). The
shared/private decomposition is :mod:`prh_lib.analysis.displacement_consensus`; the public reference code's
procedure is :mod:`prh_lib.analysis.displacement_reference`. The last section draws the chapter's figures from
these results (arrays and tables in, matplotlib figures out; it reuses
:func:`prh_lib.plots.alignment_heatmap` and :func:`prh_lib.plots.line_plot`).

Nothing here loads models; callers clip outliers first (:func:`prh_lib.analysis.clip_features`),
so both views score the same features.

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

from .core import AlignmentMatrix, check_comparisons, layerwise_alignment
from ..features import LayerFeatures, check_aligned
from ..metrics import displacement as D

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

    The best pair is the maximum of the Cross-Model matrix (split seed ``s0`` of the matrices).
    ``shuffled (max)`` is the largest shuffled-pairing Cross-Model value over *all* layer pairs: a
    control that includes the selection of the best pair. With ``n_splits > 0`` the best pair is
    re-scored on ``n_splits`` fresh splits (seeds ``s0 + 1, ...``), whose mean and standard
    deviation show how much the value owes to one split and to the selection.

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

    The layer pair, split and sampled pairs stay those of ``results``; only ``n_components``
    changes (requests above ``min(n_train - 1, d)`` give the same ``r``). With every kept
    component whitened to unit variance, a measure behaves like (shared dimensions) / ``r``
    once ``r`` exceeds the shared dimension, so values compare only at equal ``r``.

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
            res = D.displacement_similarity(x.layer(i), y.layer(j), n_components=q, seed=cm.options["seed"],
                                            test_fraction=cm.options["test_fraction"], n_pairs=cm.options["n_pairs"])
            rows.append({"pair": comp.label, "layers": f"{cm.x_labels[i]} × {cm.y_labels[j]}", "n_components": q,
                         "r": res.n_components, "r / n_train": res.n_components / res.n_train, **res.measures()})
    return pd.DataFrame(rows)


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
        Pair label -> DataFrame indexed by the second model's layer labels, with columns
        ``"mutual k-NN"`` and ``"Cross-Model, r=<r>"`` for each distinct ``r`` used (requests above
        what the training rows support collapse onto one ``r``). The frame's ``attrs["layer x"]``
        names the first model's layer.
    """
    out = {}
    for comp in results:
        ik, _ = _argmax(comp.knn.scores)
        x, y = (features[m] for m in _pair(comp))
        opts = {key: comp.cross_model.options[key] for key in ("test_fraction", "n_pairs", "seed")}
        cols = {"mutual k-NN": comp.knn.scores[ik]}
        for q in n_components:
            with warnings.catch_warnings():  # a constant layer is NaN by design (documented there)
                warnings.filterwarnings("ignore", message=".*degenerate.*", category=RuntimeWarning)
                res = D.displacement_layerwise(x.values[ik:ik + 1], y.values, n_components=q, **opts)
            cols.setdefault(f"Cross-Model, r={int(res['n_components'].max())}", res["cross_model"][0])
        frame = pd.DataFrame(cols, index=pd.Index(comp.knn.y_labels, name=comp.knn.y_name))
        frame.attrs["layer x"] = f"{comp.knn.x_name} {comp.knn.x_labels[ik]}"
        out[comp.label] = frame
    return out


def best_layers(results: list[ViewComparison], models: Sequence[str] | None = None, *,
                measure: str = "cross_model") -> dict[str, str]:
    """One layer per model: where it aligns best, on average, with its partners in ``results``.

    For each comparison involving a model, take for each of its layers the best score over the
    partner's layers; average these profiles over the model's comparisons; return the layer with
    the highest average.

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


# --------------------------------------------------------------------------- figures
def heatmaps_side_by_side(results: list[ViewComparison], *, chance: float | None = None,
                          panel_size: tuple[float, float] = (5.0, 4.2)):
    """One row per pair: mutual k-NN (left, red line at ``chance``) beside Cross-Model (right, line at 0).

    Each panel has its own colour scale (the two measures live on different scales); a white star
    marks the maximum over defined layer pairs, a red square the final-layer pair. NaN cells
    (undefined layers) are blank.
    """
    import matplotlib.pyplot as plt

    from ..plots import alignment_heatmap

    fig, axes = plt.subplots(len(results), 2, figsize=(2 * panel_size[0], panel_size[1] * len(results)),
                             squeeze=False)
    for row, comp in zip(axes, results):
        panels = ((row[0], comp.knn, "mutual k-NN", chance), (row[1], comp.cross_model, "Cross-Model", 0.0))
        for ax, m, title, ch in panels:
            alignment_heatmap(m.scores, m.x_labels, m.y_labels, ax=ax, title=f"{comp.label}: {title}",
                              x_name=m.x_name, y_name=m.y_name, chance=ch)
    fig.tight_layout()
    return fig


def sweep_figure(sweep: pd.DataFrame, *, measure: str = "cross_model"):
    """``measure`` against the whitened dimension ``r`` for each pair of :func:`n_components_sweep`."""
    import matplotlib.pyplot as plt

    from ..plots import line_plot

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    groups = {p: g.drop_duplicates("r").sort_values("r") for p, g in sweep.groupby("pair", sort=False)}
    line_plot({p: g["r"].to_numpy() for p, g in groups.items()}, {p: g[measure].to_numpy() for p, g in groups.items()},
              ax=ax, xlabel="whitened dimension r", ylabel=MEASURE_NAMES.get(measure, measure), logx=True,
              title=f"{MEASURE_NAMES.get(measure, measure)} at the best layer pair")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    fig.tight_layout()
    return fig


def depth_profile_figure(profiles: dict[str, pd.DataFrame], *, panel_size: tuple[float, float] = (4.6, 3.6)):
    """One panel per pair of :func:`depth_profiles`: Cross-Model per ``r`` (left axis), mutual k-NN (dashed, right)."""
    import matplotlib.pyplot as plt

    from ..plots import line_plot

    n = len(profiles)
    fig, axes = plt.subplots(1, n, figsize=(panel_size[0] * n, panel_size[1]), squeeze=False)
    for ax, (label, frame) in zip(axes[0], profiles.items()):
        pos = np.arange(len(frame))
        cm = {c.replace("Cross-Model, ", ""): frame[c].to_numpy() for c in frame.columns if c != "mutual k-NN"}
        line_plot(pos, cm, ax=ax, ylabel="Cross-Model", xlabel=frame.index.name, marker=".",
                  title=f"{label}\nat {frame.attrs.get('layer x', '')}")
        twin = ax.twinx()
        twin.plot(pos, frame["mutual k-NN"].to_numpy(), color="black", linestyle="--", linewidth=1.2)
        twin.set_ylabel("mutual k-NN (dashed)", fontsize=8)
        ticks = pos[:: max(1, len(pos) // 8)]
        ax.set_xticks(ticks, [frame.index[t] for t in ticks], rotation=60, ha="right", fontsize=7)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- prose
def describe(best: pd.DataFrame, views: pd.DataFrame) -> str:
    """Markdown bullets stating the measured figures of :func:`best_pair_table` and :func:`views_table`
    (the consensus bullet is :func:`prh_lib.analysis.displacement_consensus.describe_consensus`)."""
    lines = []
    for pair, b in best.iterrows():
        v = views.loc[pair]
        text = (f"- **{pair}** ({b['kind']}): Cross-Model peaks at {b['layer x']} × {b['layer y']} with "
                f"{b['Cross-Model']:.3f} (shuffled {b['Cross-Model (shuffled)']:+.3f}, at most "
                f"{b['Cross-Model shuffled (max)']:.3f} over all layer pairs); Pointwise {b['Pointwise']:.3f}, "
                f"Cross-Object {b['Cross-Object']:+.3f} (shuffled {b['Cross-Object (shuffled)']:+.3f}); r = {b['r']}")
        split_cols = [c for c in best.columns if c.endswith("re-splits")]
        if split_cols:
            text += f"; over {split_cols[0].split(', ')[1]} {b[split_cols[0]]:.3f} ± {b['re-split sd']:.3f}"
        text += (f". Mutual k-NN peaks at {v['k-NN peak layers']} ({v['k-NN peak']:.3f}), where Cross-Model is "
                 f"{v['Cross-Model at k-NN peak']:.3f}; the two heatmaps have rank correlation "
                 f"{v['rank correlation']:.2f}.")
        lines.append(text)
    return "\n".join(lines)


# --------------------------------------------------------------------------- the paper and this build
#: The companion paper's headline numbers (arXiv:2609.24209, main results table, quoted from the
#: summary in shared/papers): mean Cross-Model and Pointwise cosine per level and kind of pair.
PAPER_CLAIMS = (
    {"level": "concept", "kind": "vision-vision", "cross_model": 0.73, "pointwise": 0.41},
    {"level": "concept", "kind": "language-language", "cross_model": 0.91, "pointwise": 0.36},
    {"level": "concept", "kind": "vision-language", "cross_model": 0.49, "pointwise": 0.25},
    {"level": "sample", "kind": "vision-vision", "cross_model": 0.45, "pointwise": 0.31},
    {"level": "sample", "kind": "language-language", "cross_model": 0.73, "pointwise": 0.36},
    {"level": "sample", "kind": "vision-language", "cross_model": 0.31, "pointwise": 0.19},
)
_CONCEPT_REASON = "needs concept-level features: ImageNet-22k classes matched to CommonWords79k words"
_DATA = {"concept": "ImageNet-22k × CommonWords79k concepts", "sample": "Flickr30k image-caption pairs"}
VERDICTS = ("reproduces", "reproduces in kind", "differs", "not testable offline")


def claim_verdict(paper, draws=None, *, tol: float = 0.05, n_sd: float = 2.0, reason: str | None = None) -> str:
    """Verdict on one claim of a paper from this build's repeated measurements of it.

    A claim is ``k`` values (e.g. Cross-Model and Pointwise); its *kind* is their ordering (each
    non-zero difference ``paper[a] - paper[b]`` with its sign).

    * ``"reproduces"``: every build mean is within ``max(tol, n_sd * sd)`` of the paper's value;
    * ``"reproduces in kind"``: otherwise, if every ordering of the paper holds in the build and is
      resolved (the mean difference exceeds ``max(tol, n_sd * sd of the difference)``; for ``k = 1``
      the sign of the value);
    * ``"differs"``: neither;
    * ``"not testable offline (<reason>)"`` when there are no draws.

    Parameters
    ----------
    paper : sequence of k floats
    draws : array-like of shape (n_draws, k), optional
        This build's values, one row per draw (split, seed); one row: ``sd`` is taken as 0.
    tol : float >= 0, default 0.05
        Agreement tolerance in the measures' units.
    n_sd : float >= 0, default 2.0
    reason : str, optional
        Required when ``draws`` is None or empty.

    Returns
    -------
    str
        One of :data:`VERDICTS` (the last with its reason in parentheses).

    Raises
    ------
    ValueError
        If ``draws`` is not ``(n_draws, k)``, holds NaN, or is missing without a ``reason``.
    """
    p = np.asarray(paper, dtype=float).ravel()
    if draws is None or np.size(draws) == 0:
        if not reason:
            raise ValueError("a claim without draws needs a reason (why it is not testable offline)")
        return f"not testable offline ({reason})"
    d = np.asarray(draws, dtype=float)
    if d.ndim != 2 or d.shape[1] != p.size or not np.isfinite(d).all():
        raise ValueError(f"draws must be a finite (n_draws, {p.size}) array, got shape {d.shape}")
    sd = lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0  # noqa: E731
    if all(abs(d[:, c].mean() - p[c]) <= max(tol, n_sd * sd(d[:, c])) for c in range(p.size)):
        return "reproduces"
    diffs = [(d[:, a] - d[:, b], p[a] - p[b]) for a in range(p.size) for b in range(a + 1, p.size) if p[a] != p[b]]
    if p.size == 1:
        diffs = [(d[:, 0], p[0])]
    if diffs and all(np.sign(x.mean()) == np.sign(q) and abs(x.mean()) > max(tol, n_sd * sd(x)) for x, q in diffs):
        return "reproduces in kind"
    return "differs"


def _mean_sd(x: np.ndarray) -> str:
    return f"{x.mean():.2f} ± {x.std(ddof=1):.2f}" if len(x) > 1 else f"{x.mean():.2f} (one draw, not repeated)"


def paper_table(table: pd.DataFrame, *, steps=("reference code", "our procedure"), claims=PAPER_CLAIMS,
                tol: float = 0.05, n_sd: float = 2.0) -> pd.DataFrame:
    """"The paper and this build": one row per claim, the paper's values, this build's and the verdicts.

    Parameters
    ----------
    table : DataFrame
        :func:`prh_lib.analysis.displacement_reference.compare_procedures` (columns ``kind``, ``step``,
        ``split``, ``cross_model``, ``pointwise``).
    steps : sequence of str
        Procedures reported, each with its own value and verdict columns.
    claims : sequence of dict
        :data:`PAPER_CLAIMS`; sample-level claims are tested on this build's pairs of their kind
        (per split, the mean over those pairs), concept-level ones are not testable offline.
    tol, n_sd
        As in :func:`claim_verdict`.

    Returns
    -------
    DataFrame
        Indexed by claim; columns ``paper``, then ``<step>`` (Cross-Model vs Pointwise, mean ± sd
        over splits), ``<step> verdict`` and ``<step> draws`` (the ``(n_splits, 2)`` values) per step.
    """
    rows = {}
    for c in claims:
        name = f"Cross-Model > Pointwise, {c['kind']}, {c['level']} level ({_DATA.get(c['level'], '?')})"
        row = {"paper": f"{c['cross_model']:.2f} vs {c['pointwise']:.2f}"}
        for step in steps:
            sub = table[(table["kind"] == c["kind"]) & (table["step"] == step)]
            draws = None
            reason = _CONCEPT_REASON if c["level"] != "sample" else f"no {c['kind']} pair in this build"
            if c["level"] == "sample" and len(sub):
                draws = sub.groupby("split")[["cross_model", "pointwise"]].mean().to_numpy()
                row[step] = f"{_mean_sd(draws[:, 0])} vs {_mean_sd(draws[:, 1])}"
            else:
                row[step] = "—"
            row[f"{step} verdict"] = claim_verdict((c["cross_model"], c["pointwise"]), draws, tol=tol, n_sd=n_sd,
                                                   reason=reason)
            row[f"{step} draws"] = None if draws is None else draws.tolist()
        rows[name] = row
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.index.name = "claim"
    return out


_CHECKLIST_IDS = {"vision-vision": "D/vision-vision", "language-language": "D/language-language",
                  "vision-language": "D/cross-modal"}


def checklist_rows(table: pd.DataFrame, *, step: str = "reference code") -> list[dict]:
    """The sample-level rows of :func:`paper_table` in the form of :func:`prh_lib.claims.finding`.

    The front page's checklist (:func:`prh_lib.claims.checklist`) shows them; the verdict is the one
    :func:`paper_table` computed for ``step`` (the reference code's procedure, the one comparable with the
    paper), and the value of our centred procedure is shown beside it.

    Raises
    ------
    KeyError
        If ``table`` lacks the columns of ``step`` or of ``"our procedure"``.
    """
    from .. import claims as _claims

    rows = []
    for name, r in table.iterrows():
        kind = next((k for k in _CHECKLIST_IDS if f", {k}, sample level" in str(name)), None)
        if kind is None:
            continue
        row = _claims.finding(_CHECKLIST_IDS[kind], this_build=None, holds=None)
        row.update({"this build": f"{r[step]} ({step}); our procedure: {r['our procedure']}",
                    "verdict": r[f"{step} verdict"], "note": ""})
        rows.append(row)
    return rows
