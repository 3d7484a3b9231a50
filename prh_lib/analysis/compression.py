"""How many dimensions does cross-modal alignment need? PCA compression sweeps (Section 3.1, Figure 2, App. C).

One side (or both) of a vision-language layer pair is replaced by its projection onto its own top principal
components, and mutual k-NN against the other modality is recomputed. Two sweeps: by the number of
components kept and by the fraction of variance retained.

PCA is scikit-learn's, exact and fitted on each layer alone (:mod:`prh_lib.analysis.pca`, whose helpers are
re-exported here).

Where the projection lives (``space``):

- ``"original"`` (default): the rank-``m`` reconstruction ``mean + Z[:, :m] V[:m]`` in the layer's own
  coordinates (``PCA.inverse_transform``). It removes the variance outside the top ``m`` directions and
  changes nothing else, so at full rank it *is* the uncompressed layer and the score equals the uncompressed
  score exactly (tested). Mutual k-NN uses cosine similarity, which is not invariant to centring, so this
  matters.
- ``"pca"``: the PCA coordinates ``Z[:, :m]`` (``PCA.transform``), centred. At full rank this equals the
  *centred* layer up to a rotation; the reference score is then that of the centred layer.

Functions take arrays (one layer per side) or :class:`~prh_lib.features.LayerFeatures` and never plot
(figures: :func:`prh_lib.figures.plot_sweeps`). The sweeps and the study over datasets x draws live in
:mod:`~prh_lib.analysis.compression_study` (re-exported here); this module holds the page: summary tables,
prose, verdicts and the record.
"""

from __future__ import annotations

from functools import partial
from typing import Sequence

import numpy as np
import pandas as pd

from .. import claims
from ..results import format_mean_std
from .pca import DENSE_DIMS, components_for_variance, default_dims, fit_pca, max_components  # noqa: F401

# the computation (sweeps, the study over draws), re-exported: this module stays the chapter's one namespace
from .compression_study import (  # noqa: F401
    COMPRESS, DEFAULT_VARIANCE, LAYER_ROLES, SPACES, CompressionSweep, aggregate_sweeps, compress_comparisons,
    compress_layer_pairs, pca_sweep, run_study, select_layer_pairs, sweep_rows)

__all__ = ["COMPRESS", "SPACES", "DEFAULT_VARIANCE", "DENSE_DIMS", "max_components", "fit_pca", "default_dims",
           "components_for_variance", "CompressionSweep", "pca_sweep", "LAYER_ROLES", "select_layer_pairs",
           "compress_layer_pairs", "compress_comparisons", "describe", "summary_table", "to_record", "run_study",
           "sweep_rows", "aggregate_sweeps", "study_table", "findings", "describe_study"]


def describe(table: pd.DataFrame, *, fraction: float = 0.95) -> str:
    """A Markdown line per row of :func:`summary_table` stating, in figures, how few dimensions suffice."""
    col = f"min dims ({fraction:.0%})"
    lines = []
    for (pair, role, side), row in table.iterrows():
        who = {"x": pair.split(" × ")[0], "y": pair.split(" × ")[-1], "both": "both models"}[side]
        m = row.get(col)
        if m is None or not np.isfinite(m):
            kept = f"no swept dimension keeps {fraction:.0%} of it"
        else:
            kept = (f"{int(m)} of {int(row['max dims'])} principal components of {who} "
                    f"({row['variance at min dims']:.0%} of its variance) keep {fraction:.0%} of it")
        lines.append(f"- **{pair}**, {role} layers ({row['layer x']} × {row['layer y']}): uncompressed "
                     f"{row['uncompressed']:.3f} (chance {row['chance']:.3f}); {kept}.")
    return "\n".join(lines)


def summary_table(sweeps: Sequence[CompressionSweep], *, fraction: float = 0.95,
                  at_variance: Sequence[float] = (0.5, 0.9)) -> pd.DataFrame:
    """One row per (model pair, layer pair, side compressed): reference, smallest sufficient dimension, ...

    Columns: ``layer x``, ``layer y``, ``uncompressed`` (reference score), ``chance``, ``max dims``
    (components of a full PCA of the compressed side), ``min dims (95%)`` (smallest swept dimension keeping
    ``fraction`` of the reference, from the dimension sweep; NaN if none), ``variance at min dims``, and
    ``relative @ v var`` (score / reference when keeping a fraction ``v`` of the variance, from the variance
    sweep, for each ``v`` in ``at_variance`` that was swept).
    """
    rows: dict[tuple, dict] = {}
    pct = f"{fraction:.0%}"
    for s in sweeps:
        key = (s.labels.get("pair", "?"), s.labels.get("layers", "?"), s.compress)
        row = rows.setdefault(key, {"layer x": s.labels.get("layer x"), "layer y": s.labels.get("layer y"),
                                    "uncompressed": s.reference, "chance": s.chance})
        if s.labels.get("sweep", "dims" if s.target_variance is None else "variance") == "dims":
            m = s.min_dims(fraction)
            row["max dims"] = int(s.dims[-1]) if s.dims.size else np.nan
            row[f"min dims ({pct})"] = m if m is not None else np.nan
            row["variance at min dims"] = float(s.variance[s.dims == m][0]) if m is not None else np.nan
        elif s.target_variance is not None:
            for v in at_variance:
                hit = np.isclose(s.target_variance, v)
                if hit.any():
                    row[f"relative @ {v:.0%} var"] = float(s.relative[hit][0])
    index = pd.MultiIndex.from_tuples(list(rows), names=["pair", "layers", "compress"])
    return pd.DataFrame(list(rows.values()), index=index)


def to_record(sweeps: Sequence[CompressionSweep], table: pd.DataFrame, *, n: int, k: int, chance: float,
              space: str, keep_fraction: float) -> dict:
    """What the Section 3.1 PCA page records for the book and the tests (:func:`prh_lib.report.record`)."""
    min_col = f"min dims ({keep_fraction:.0%})"
    return {
        "n": n, "k": k, "chance": chance, "space": space, "keep_fraction": keep_fraction,
        "rows": [
            {"pair": pair, "layers": role, "compress": side, "layer_x": row["layer x"], "layer_y": row["layer y"],
             "uncompressed": row["uncompressed"], "max_dims": row["max dims"], "min_dims": row[min_col],
             "variance_at_min_dims": row["variance at min dims"],
             **{c: row[c] for c in table.columns if c.startswith("relative @")}}
            for (pair, role, side), row in table.iterrows()
        ],
        "full_rank_scores": [float(s.scores[-1]) for s in sweeps if s.labels["sweep"] == "dims"],
        "references": [float(s.reference) for s in sweeps if s.labels["sweep"] == "dims"],
    }


def _at(agg_group: pd.DataFrame, x: float, *, below: bool = True):
    g = agg_group[agg_group["x"] <= x + 1e-9] if below else agg_group[np.isclose(agg_group["x"], x)]
    return None if g.empty else g.loc[g["x"].idxmax()]


#: ``"mean ± std"`` over draws (``"mean"`` for one draw), the cells of the page's tables
_ms = partial(format_mean_std, count=False)


#: The paper's language-side probe as a share of rank: 100 components of a rank of at most N - 1 = 1023
PAPER_RANK_SHARE = 100 / 1023


def study_table(agg: pd.DataFrame, *, dims_probe: int = 100, low_dims: int = 8, variance_probe: float = 0.4,
                fraction: float = 0.95, rank_share: float = PAPER_RANK_SHARE) -> pd.DataFrame:
    """One row per (dataset, pair, layer pair, side compressed): the page's summary, mean ± std over draws.

    Columns: ``uncompressed``; ``@ 40% var`` (relative score keeping ``variance_probe`` of the variance);
    ``@ 100 dims`` (relative score at the largest swept dimension ≤ ``dims_probe``, with that dimension when
    smaller); ``@ 8 dims``; ``min dims (95%)`` (smallest swept dimension whose mean relative score reaches
    ``fraction``); ``min dims (90%)``; ``@ share of rank`` (relative score at the swept dimension nearest, on a
    log scale, to ``rank_share`` × the largest swept dimension, the rank here: the paper's 100 of 1,023 is 9.8 %);
    and the numeric ``rel_var``, ``rel_dims``, ``rel_low``, ``rel_share``, ``dims_share``, ``dims_at``,
    ``max_dims``, ``n_draws``.
    """
    rows = []
    for key, g in agg.groupby(["dataset", "model_x", "model_y", "role", "compress"], sort=False):
        ref = g[g["quantity"] == "pca:reference"].iloc[0]
        gd, gv = g[g["quantity"] == "pca:dims"], g[g["quantity"] == "pca:variance"]
        var = _at(gv, variance_probe, below=False)
        at = _at(gd, dims_probe)
        low = _at(gd, low_dims)
        ok = gd[gd["relative_mean"] >= fraction - 1e-12]
        ok90 = gd[gd["relative_mean"] >= 0.9 - 1e-12]
        target = rank_share * float(gd["x"].max())
        share = gd.loc[(np.log(gd["x"].clip(lower=1)) - np.log(max(target, 1.0))).abs().idxmin()] if len(gd) else None
        side = key[1] if key[4] == "x" else key[2] if key[4] == "y" else "both"
        rows.append({
            "dataset": key[0], "pair": f"{key[1]} × {key[2]}", "layers": key[3], "compressed": side,
            "uncompressed": _ms(ref["score_mean"], ref["score_std"], ref["n_draws"]),
            f"@ {variance_probe:.0%} var": _ms(var["relative_mean"], var["relative_std"], var["n_draws"]) if var is not None else "–",
            f"@ {dims_probe} dims": (_ms(at["relative_mean"], at["relative_std"], at["n_draws"])
                                     + (f" (at {int(at['x'])})" if at["x"] < dims_probe else "")) if at is not None else "–",
            f"@ {low_dims} dims": _ms(low["relative_mean"], low["relative_std"], low["n_draws"]) if low is not None else "–",
            f"min dims ({fraction:.0%})": int(ok["x"].min()) if len(ok) else "not reached",
            "min dims (90%)": int(ok90["x"].min()) if len(ok90) else "not reached",
            "@ share of rank": (f"{_ms(share['relative_mean'], share['relative_std'], share['n_draws'])} "
                                f"(at {int(share['x'])} of {int(gd['x'].max())})") if share is not None else "–",
            "rel_share": float(share["relative_mean"]) if share is not None else np.nan,
            "dims_share": int(share["x"]) if share is not None else 0,
            "rel_var": float(var["relative_mean"]) if var is not None else np.nan,
            "rel_dims": float(at["relative_mean"]) if at is not None else np.nan,
            "rel_low": float(low["relative_mean"]) if low is not None else np.nan,
            "dims_at": int(at["x"]) if at is not None else 0, "max_dims": int(gd["x"].max()),
            "n_draws": int(ref["n_draws"]), "reference": float(ref["score_mean"]),
        })
    return pd.DataFrame(rows)


#: Each PCA claim's test, in one sentence (shown on the page and the front page)
RULES = {
    "3.1/pca-40": "in more than half of the rows that compress a language side, keeping 40 % of the variance keeps "
                  "at least 95 % of the uncompressed score (mean over draws); vision-side rows are shown, not counted",
    "3.1/pca-100": "in more than half of the rows that compress a language side, the paper's share of rank (100 "
                   "of 1,023 = 9.8 %; the nearest swept dimension) keeps at least 90 % of the score; the "
                   "dimensions needed for 90 % and 95 % are reported beside it",
    "3.1/pca-strong": "in more than half of the rows that compress a language side, 8 components keep less than 80 %",
}

_LANGUAGE = "smollm|minilm|gemma|qwen|llama|mistral|bloom|deepseek|embed|tfidf"


def findings(table: pd.DataFrame, *, dataset: str, role: str = "peak", dims_probe: int = 100,
             paper_setting: bool = False) -> list[dict]:
    """Rows of "The paper and this build" for ``3.1/pca-*`` from :func:`study_table` (one dataset, one role).

    The paper's PCA claims are about compressing the *language* side (Sec. 3.1, Fig. 2), so only rows that
    compress a language model count (:data:`RULES`); the 100-dimension probe is taken at the paper's share of
    rank (100 of 1,023), not at 100 components of a rank of 238. Values are means over caption draws of the
    same images (no interval over images yet: stated in each row's note).
    """
    t = table[(table["dataset"] == dataset) & (table["layers"] == role)]
    lang = t[t["compressed"].str.contains(_LANGUAGE, case=False, regex=True)]
    n = len(lang)
    caveat = "means over caption draws; no interval over images for the PCA ratios in this build"
    if not n:
        why = "no row compresses a language side"
        return [claims.finding(cid, this_build=None, holds=None, note=why) for cid in RULES]
    keep40 = int((lang["rel_var"] >= 0.95).sum())
    rows = [claims.finding("3.1/pca-40", holds=keep40 > n / 2, rule=RULES["3.1/pca-40"], note=caveat,
                           this_build=f"{keep40} of {n} language sides keep ≥ 95 % at 40 % variance; relative "
                                      f"{lang['rel_var'].min():.2f}-{lang['rel_var'].max():.2f}")]
    ok = int((lang["rel_share"] >= 0.9).sum())
    dims = "/".join(f"{int(d)} of {int(m)}" for d, m in sorted(set(zip(lang["dims_share"], lang["max_dims"]))))
    top = next((c for c in lang.columns if c.startswith("min dims (") and c != "min dims (90%)"), None)
    need = "; ".join(f"{r['pair']} ({r['compressed']}): {r['min dims (90%)']} / {r[top] if top else '–'}"
                     for _, r in lang.iterrows())
    rows.append(claims.finding("3.1/pca-100", holds=ok > n / 2, rule=RULES["3.1/pca-100"], note=caveat,
                               this_build=f"{ok} of {n} language sides keep ≥ 90 % at the paper's share of rank "
                                          f"({dims} dims); relative {lang['rel_share'].min():.2f}-"
                                          f"{lang['rel_share'].max():.2f}; dims for 90 % / {top[10:-1] if top else '95%'}: {need}"))
    strong = int((lang["rel_low"] < 0.8).sum())
    rows.append(claims.finding("3.1/pca-strong", holds=strong > n / 2, rule=RULES["3.1/pca-strong"], note=caveat,
                               this_build=f"{strong} of {n} language sides fall below 80 % at 8 dims; relative "
                                          f"{lang['rel_low'].min():.2f}-{lang['rel_low'].max():.2f}"))
    return rows


def describe_study(table: pd.DataFrame, rows: list[dict], *, dataset: str) -> str:
    """Markdown generated from :func:`study_table` and the verdicts: what compression does on this build."""
    t = table[table["dataset"] == dataset]
    lines = [f"On **{dataset}** ({int(t['n_draws'].max())} draws):", ""]
    for _, r in t.iterrows():
        lines.append(f"- {r['pair']}, {r['layers']} layers, {r['compressed']} compressed: uncompressed "
                     f"{r['uncompressed']}; 40 % of the variance keeps {r['rel_var']:.0%} of it, "
                     f"{r['dims_at']} dims {r['rel_dims']:.0%}, 8 dims {r['rel_low']:.0%}.")
    lines.append("")
    lines += claims.verdict_lines(rows)
    return "\n".join(lines)
