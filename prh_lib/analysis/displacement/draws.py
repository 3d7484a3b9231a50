"""The displacement chapter over the study's datasets and draws, with every score a row of the results table.

The study's shape (:mod:`prh_lib.data.study`, the loop :func:`prh_lib.analysis.study.run_draws`), on top of
:mod:`prh_lib.pages.ch_displacement` (the two views of one draw):

- :func:`run_study` scores both views (mutual k-NN and the three displacement measures) over all layer pairs
  on every draw and writes the rows (:func:`view_rows`, quantities in :data:`QUANTITIES`);
- :func:`aggregate_best` reads them back: per (dataset, model pair), the measures at each draw's best Cross-Model layer
  pair, as mean ± std over the draws; :func:`headline_table` and :func:`describe_study` put them on the page.

The split of one draw into training and held-out rows, and the sampled ``(i, j)`` pairs, are seeded by
``split_seed``, the same in every draw: what varies between draws is what the dataset's draws vary (caption
choice, or the sample), while the chapter's re-splits of one draw measure the split-to-split noise.

References
----------
"Displacement geometry captures platonic shared reality across models and modalities", arXiv:2609.24209;
Herbst et al., Section 2 (mean ± std over draws).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Sequence

import numpy as np
import pandas as pd

from prh_lib.formatting import format_mean_std
from prh_lib.analysis.core import find_peak, layer_depths, preprocessing_label
from prh_lib.analysis.study import run_draws
from prh_lib.analysis.displacement.study import MEASURE_NAMES, ViewComparison, compare_views

#: Results-table metric name of each displacement measure (and of mutual k-NN, scored at the same layers).
METRICS = {"pointwise": "displacement_pointwise", "cross_model": "displacement_cross_model",
           "cross_object": "displacement_cross_object", "mutual_knn": "mutual_knn"}
#: The quantity of the rows at a draw's best Cross-Model layer pair (every metric of :data:`METRICS`).
BEST = "at_cross_model_peak"
#: The ``quantity`` values this chapter writes, and what each row is.
QUANTITIES = {
    "layer_pair": "one layer pair of the heatmaps (every metric of METRICS, every layer pair)",
    BEST: "at the draw's best Cross-Model layer pair (the maximum of its Cross-Model heatmap), every metric",
    "control:shuffled": "a displacement measure with the second model's rows paired to the wrong samples, at "
                        "that best layer pair",
    "control:shuffled-max": "the largest shuffled-pairing Cross-Model over all layer pairs (includes the selection)",
}
_DISPLAY = {**MEASURE_NAMES, "mutual_knn": "mutual k-NN"}


def view_rows(comp: ViewComparison, *, k: int) -> list[dict]:
    """The results-table rows of one model pair on one draw (:data:`QUANTITIES`).

    Parameters
    ----------
    comp : ViewComparison
        From :func:`prh_lib.pages.ch_displacement.compare_views`.
    k : int
        Neighbours of the mutual k-NN matrix (the ``k`` column of its rows; NA for the displacement measures).

    Returns
    -------
    list of dict
        ``4 * n_x * n_y`` rows ``"layer_pair"``, then four :data:`BEST` rows, three ``"control:shuffled"`` rows and one
        ``"control:shuffled-max"`` row. Columns: model_x/y, layer_x/y, depth_x/y, metric, k, score, quantity; extra
        columns ``kind`` (the pair's modalities), ``r`` (the whitened dimension of that layer pair; NA for mutual k-NN)
        and the displacement options ``n_components``, ``test_fraction``, ``n_sampled_pairs`` and ``split_seed``.

    Raises
    ------
    ValueError
        If the Cross-Model matrix is NaN everywhere (no best layer pair).
    """
    cm = comp.cross_model
    xl, yl = cm.x_labels, cm.y_labels
    dx, dy = layer_depths(len(xl)), layer_depths(len(yl))
    r = np.asarray(cm.options["r"])
    base = {"model_x": cm.x_name, "model_y": cm.y_name, "kind": comp.kind,
            "n_components": int(cm.options["n_components"]), "test_fraction": float(cm.options["test_fraction"]),
            "n_sampled_pairs": int(cm.options["n_pairs"]), "split_seed": int(cm.options["seed"])}
    mats = {name: comp.displacement[name].scores for name in MEASURE_NAMES} | {"mutual_knn": comp.knn.scores}

    def cell(i, j, name, score, quantity):
        return base | {"layer_x": xl[i], "layer_y": yl[j], "depth_x": float(dx[i]), "depth_y": float(dy[j]),
                       "metric": METRICS[name], "k": k if name == "mutual_knn" else None,
                       "r": None if name == "mutual_knn" else int(r[i, j]), "score": float(score),
                       "quantity": quantity}

    rows = [cell(i, j, name, m[i, j], "layer_pair") for name, m in mats.items()
            for i in range(len(xl)) for j in range(len(yl))]
    i, j, _ = find_peak(cm.scores)
    rows += [cell(i, j, name, m[i, j], BEST) for name, m in mats.items()]
    rows += [cell(i, j, name, comp.displacement[f"{name}_shuffled"].scores[i, j], "control:shuffled")
             for name in MEASURE_NAMES]
    rows.append(base | {"metric": METRICS["cross_model"], "score": float(np.nanmax(
        comp.displacement["cross_model_shuffled"].scores)), "quantity": "control:shuffled-max"})
    return rows


@dataclass(frozen=True)
class StudyDraw:
    """Both views of every comparison on one draw (:func:`run_study`).

    Attributes
    ----------
    draw : prh_lib.data.study.Draw
    views : list of ViewComparison
        One per comparison, in order.
    features : dict of str to LayerFeatures, optional
        The clipped features of the draw, kept only for the draws :func:`run_study` was asked to keep.
    """

    draw: object
    views: list
    features: dict | None = field(default=None, repr=False)


def run_study(draws, comparisons: Sequence, *, chapter: str, params: dict, k: int = 10, n_components: int = 100,
              test_fraction: float = 0.5, n_pairs: int = 10_000, split_seed: int = 0,
              clip_q: float | None = 0.95, clip: str | None = "stack", device: str = "cpu", dtype: str = "float32",
              batch_size: int = 32, keep=(), models: Sequence[str] = (), write: bool = True,
              root=None) -> dict[tuple[str, int], StudyDraw]:
    """Both views (:func:`~prh_lib.pages.ch_displacement.compare_views`) on every draw, written as rows.

    Parameters
    ----------
    draws, comparisons, chapter, params, device, dtype, batch_size, write, root
        As in :func:`prh_lib.analysis.study.run_draws`.
    k, n_components, test_fraction, n_pairs
        As in :func:`~prh_lib.pages.ch_displacement.compare_views` (``n_pairs``: sampled ``(i, j)`` pairs).
    split_seed : int
        Seed of the train/test split and the sampled pairs, the same in every draw.
    clip_q, clip
        Outlier clipping before both views (:func:`prh_lib.analysis.clip_features`); the rows' ``preprocessing``.
    keep : sequence of (str, int)
        ``(dataset, draw)`` whose features are returned (for the analyses of one draw); only they also
        extract ``models``.
    models : sequence of str
        Further models extracted on the kept draws (e.g. the consensus models).

    Returns
    -------
    dict
        ``(dataset, draw) -> StudyDraw``, in draw order.

    Raises
    ------
    KeyError
        If a model of ``comparisons`` has no features.
    ValueError
        If a Cross-Model matrix is NaN everywhere.
    """
    keep = {tuple(x) for x in keep}

    def score(d, feats):
        views = compare_views(feats, comparisons, k=k, n_components=n_components, test_fraction=test_fraction,
                              n_pairs=n_pairs, seed=split_seed)
        rows = [row for comp in views for row in view_rows(comp, k=k)] if write else []
        return StudyDraw(d, views, feats if (d.dataset, d.draw) in keep else None), rows

    return run_draws(draws, comparisons, score, chapter=chapter, params=params, clip_q=clip_q, clip=clip,
                     device=device, dtype=dtype, batch_size=batch_size,
                     models=lambda d: models if (d.dataset, d.draw) in keep else (), write=write, root=root,
                     preprocessing=preprocessing_label(clip_q, clip))


def load_rows(*, chapter: str, params: dict, run_id: str | None = None, root=None) -> pd.DataFrame:
    """This chapter's rows of one parameter set (and run, when ``run_id`` is given), extra columns expanded."""
    from prh_lib import results as results_table

    filters = {"chapter": chapter, "params": params}
    if run_id is not None:
        filters["run_id"] = run_id
    return results_table.load(root=root, expand_extra=True, **filters)


_KEYS = ["dataset", "model_x", "model_y"]


def aggregate_best(df: pd.DataFrame, *, datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """The measures at each draw's best Cross-Model layer pair, as mean ± std over draws.

    Parameters
    ----------
    df : DataFrame
        Rows of one run of the chapter (:func:`load_rows`), with the extra columns expanded.
    datasets : sequence of str, optional
        Dataset names in the order the rows should follow (the study's order; :func:`prh_lib.results.load`
        sorts by name). Default: the order of ``df``.

    Returns
    -------
    DataFrame
        One row per (dataset, model_x, model_y), in order of first appearance (or of ``datasets``): ``pair``, ``kind``, ``n``,
        ``k``, ``chance`` (k/(n-1) of mutual k-NN), ``n_draws``, ``single_draw``; ``<metric>_mean`` and
        ``<metric>_std`` (ddof = 1; NaN for one draw) for ``pointwise``, ``cross_model``, ``cross_object``
        and ``mutual_knn`` at the best layer pair, and ``shuffled_<measure>_mean`` for the three shuffled
        controls there and ``shuffled_max_mean`` (the control over all layer pairs); ``best_layers`` (the
        most frequent best layer pair), ``best_layers_draws`` (in how many draws), ``depth_x_mean``,
        ``depth_y_mean`` and ``r`` (the whitened dimension, its most frequent value).

    Raises
    ------
    ValueError
        If ``df`` holds no rows of quantity :data:`BEST`.
    """
    from prh_lib import results as results_table

    best = df[df["quantity"] == BEST]
    if best.empty:
        raise ValueError(f"no rows of quantity {BEST!r}; quantities present: {sorted(df['quantity'].unique())}")
    order = list(dict.fromkeys(map(tuple, best[_KEYS].to_numpy())))
    if datasets is not None:
        rank = {name: i for i, name in enumerate(datasets)}
        order.sort(key=lambda key: rank.get(key[0], len(rank)))  # stable: pairs keep their order
    by = _KEYS + ["metric"]
    agg = results_table.aggregate(best, by=by, values=["score", "depth_x", "depth_y"]).set_index(by)
    ctrl = df[df["quantity"] == "control:shuffled"]
    a_ctrl = results_table.aggregate(ctrl, by=by).set_index(by) if len(ctrl) else None
    cmax = df[df["quantity"] == "control:shuffled-max"]
    a_max = results_table.aggregate(cmax, by=_KEYS).set_index(_KEYS) if len(cmax) else None
    rows = []
    for key in order:
        g = best.set_index(_KEYS).loc[[key]]
        cm = g[g["metric"] == METRICS["cross_model"]]
        knn = g[g["metric"] == METRICS["mutual_knn"]]
        n, kk = int(g["n"].iloc[0]), int(knn["k"].iloc[0]) if len(knn) else None
        loc = Counter(f"{a} × {b}" for a, b in zip(cm["layer_x"], cm["layer_y"])).most_common(1)[0]
        first = agg.loc[key + (METRICS["cross_model"],)]
        row = {"dataset": key[0], "model_x": key[1], "model_y": key[2], "pair": f"{key[1]} × {key[2]}",
               "kind": cm["kind"].iloc[0], "n": n, "k": kk, "chance": kk / (n - 1) if kk else np.nan,
               "n_draws": int(first["n_draws"]), "single_draw": bool(first["single_draw"])}
        for name, metric in METRICS.items():
            a = agg.loc[key + (metric,)] if key + (metric,) in agg.index else None
            row[f"{name}_mean"] = float(a["score_mean"]) if a is not None else np.nan
            row[f"{name}_std"] = float(a["score_std"]) if a is not None else np.nan
        for name in MEASURE_NAMES:
            idx = key + (METRICS[name],)
            row[f"shuffled_{name}_mean"] = (float(a_ctrl.loc[idx, "score_mean"])
                                            if a_ctrl is not None and idx in a_ctrl.index else np.nan)
        row["shuffled_max_mean"] = float(a_max.loc[key, "score_mean"]) if a_max is not None else np.nan
        row |= {"best_layers": loc[0], "best_layers_draws": int(loc[1]),
                "depth_x_mean": float(first["depth_x_mean"]), "depth_y_mean": float(first["depth_y_mean"]),
                "r": int(Counter(int(v) for v in cm["r"]).most_common(1)[0][0])}
        rows.append(row)
    return pd.DataFrame(rows)


_ms = partial(format_mean_std, count=False)


def headline_table(agg: pd.DataFrame) -> pd.DataFrame:
    """The page's summary: one row per (dataset, pair), each measure as mean ± std over draws.

    Columns: draws (``"(not repeatable)"`` when a dataset has one draw that cannot be repeated), best layers (most
    frequent, in how many draws), r, Pointwise, Cross-Model, Cross-Object, Cross-Model shuffled (at the best pair, mean
    over draws), shuffled (max) (over all layer pairs), mutual k-NN (at the same layers) and its chance k/(N-1).
    """
    rows = []
    for _, r in agg.iterrows():
        rows.append({
            "dataset": r["dataset"], "pair": r["pair"], "kind": r["kind"],
            "draws": f"{r['n_draws']}" + (" (not repeatable)" if r["single_draw"] else ""),
            "best layers": f"{r['best_layers']} ({r['best_layers_draws']}/{r['n_draws']})", "r": r["r"],
            **{_DISPLAY[m]: _ms(r[f"{m}_mean"], r[f"{m}_std"], r["n_draws"]) for m in MEASURE_NAMES},
            "Cross-Model shuffled": f"{r['shuffled_cross_model_mean']:+.3f}",
            "shuffled (max)": f"{r['shuffled_max_mean']:.3f}",
            "mutual k-NN (same layers)": _ms(r["mutual_knn_mean"], r["mutual_knn_std"], r["n_draws"]),
            "k-NN chance": f"{r['chance']:.3f}",
        })
    return pd.DataFrame(rows).set_index(["dataset", "pair"])


def describe_study(agg: pd.DataFrame, draws=()) -> str:
    """Markdown bullets: per dataset, its draws and what varies between them, then each pair's measures as
    mean ± std over the draws (a pair whose measures are identical in every draw is said to be so)."""
    varies = {d.dataset: (d.what_varies, d.repeatable) for d in draws}
    lines = []
    for ds, g in agg.groupby("dataset", sort=False):
        what, repeatable = varies.get(ds, ("", True))
        n_draws = int(g["n_draws"].iloc[0])
        head = f"- **{ds}** (N = {int(g['n'].iloc[0])}, {n_draws} draw{'s' if n_draws != 1 else ''}"
        single = n_draws < 2 or not repeatable
        head += "; one draw that cannot be repeated, so no spread)" if single else (
            f"; what varies: {what})" if what else ")")
        lines.append(head + ":")
        for _, r in g.iterrows():
            parts = [f"{_DISPLAY[m]} {_ms(r[f'{m}_mean'], r[f'{m}_std'], r['n_draws'])}" for m in MEASURE_NAMES]
            text = f"  - {r['pair']}: " + "; ".join(parts)
            if not single:
                text += f", at {r['best_layers']} in {r['best_layers_draws']} of {r['n_draws']} draws"
                if all(abs(r[f"{m}_std"]) < 1e-12 for m in MEASURE_NAMES):
                    text += " (identical in every draw: what varies between the draws does not reach this pair)"
            else:
                text += f", at {r['best_layers']}"
            lines.append(text + ".")
    return "\n".join(lines)

