"""The PCA-compression page (Section 3.1, Figure 2, App. C): summary tables, prose, verdicts and the record.

The sweeps, the projection ``space`` and the study over datasets x draws are
:mod:`prh_lib.analysis.compression.study`'s (re-exported here); figures:
:func:`prh_lib.pages.figures.plot_sweep_bands`."""

from __future__ import annotations

from functools import partial
from typing import Sequence

import numpy as np
import pandas as pd

from prh_lib.pages import claims
from prh_lib.formatting import format_mean_std

# the computation (sweeps, the study over draws), re-exported: this module stays the chapter's one namespace
from prh_lib.analysis.compression.study import (PAPER_RANK_SHARE, PROBES, CompressionSweep,  # noqa: F401
    aggregate_sweeps, interval_table, run_study)


def summary_table(sweeps: Sequence[CompressionSweep], *, fraction: float = 0.95,
                  at_variance: Sequence[float] = (0.5, 0.9)) -> pd.DataFrame:
    """One row per (model pair, layer pair, side compressed): reference, smallest sufficient dimension, ...

    Columns: ``layer x``, ``layer y``, ``uncompressed`` (reference score), ``chance``, ``max dims``
    (components of a full PCA of the compressed side), ``min dims (95%)`` (smallest swept dimension keeping
    ``fraction`` of the reference, from the dimension sweep; NaN if none), ``variance at min dims``, and
    ``relative @ v var`` (score / reference when keeping a fraction ``v`` of the variance, from the variance
    sweep, for each ``v`` in ``at_variance`` that was swept)."""
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


def study_frames(chapter: str, params: dict, *, fraction: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The study read back: :func:`aggregate_sweeps` and :func:`study_table` with its intervals."""
    from prh_lib import results

    loaded = results.load(chapter=chapter, params=params, expand_extra=True)
    agg = aggregate_sweeps(loaded)
    return agg, study_table(agg, fraction=fraction, intervals=interval_table(loaded))


def headline(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`study_table` without its claim columns, indexed by dataset, pair, layers and compressed side."""
    shown = [c for c in table.columns if not c.startswith(("rel_", "dims_", "max_dims", "n_draws", "reference", "ci_"))]
    return table[shown].set_index(["dataset", "pair", "layers", "compressed"])


def sweep_bands(agg: pd.DataFrame, drawn, *, sweep: str, dataset: str) -> dict:
    """Arguments of :func:`prh_lib.pages.figures.plot_sweep_bands`: the ``drawn`` pairs' peak layer pairs
    against ``sweep``, with :func:`claim_marks` at ``dataset``'s N."""
    n = int(agg.loc[agg["dataset"] == dataset, "n"].iloc[0])
    return {"agg": agg[[(x, y) in set(drawn) for x, y in zip(agg["model_x"], agg["model_y"])]], "sweep": sweep,
            "role": "peak", "thresholds": claim_marks(sweep, n=n)}


def claim_rows(table: pd.DataFrame, agg: pd.DataFrame, *, dataset: str) -> list[dict]:
    """:func:`findings` at the peak layer pair of ``dataset``, knowing whether this build runs the paper's models."""
    from prh_lib.data import paper
    from prh_lib.pages.sec3_1_layerwise import in_paper_setting

    return findings(table, dataset=dataset, role="peak",
                    paper_setting=in_paper_setting(agg.assign(n=agg["n"].astype(int)), paper.models()))


def to_record(sweeps: Sequence[CompressionSweep], table: pd.DataFrame, *, n: int, k: int, space: str,
              keep_fraction: float, params: dict, study: pd.DataFrame, rows: list[dict]) -> dict:
    """What the Section 3.1 PCA page records for the book and the tests (:func:`prh_lib.pages.report.record`).

    ``sweeps`` are the headline dataset's first draw, ``table`` their :func:`summary_table`, ``study`` the
    :func:`study_table` and ``rows`` the claim rows."""
    from prh_lib.results import params_hash

    min_col = f"min dims ({keep_fraction:.0%})"
    return {
        "n": n, "k": k, "chance": sweeps[0].chance, "space": space, "keep_fraction": keep_fraction,
        "rows": [
            {"pair": pair, "layers": role, "compress": side, "layer_x": row["layer x"], "layer_y": row["layer y"],
             "uncompressed": row["uncompressed"], "max_dims": row["max dims"], "min_dims": row[min_col],
             "variance_at_min_dims": row["variance at min dims"],
             **{c: row[c] for c in table.columns if c.startswith("relative @")}}
            for (pair, role, side), row in table.iterrows()
        ],
        "full_rank_scores": [float(s.scores[-1]) for s in sweeps if s.labels["sweep"] == "dims"],
        "references": [float(s.reference) for s in sweeps if s.labels["sweep"] == "dims"],
        "params_hash": params_hash(params), "study": study.to_dict(orient="records"), "claims": rows,
    }


def _at(agg_group: pd.DataFrame, x: float, *, below: bool = True):
    g = agg_group[agg_group["x"] <= x + 1e-9] if below else agg_group[np.isclose(agg_group["x"], x)]
    return None if g.empty else g.loc[g["x"].idxmax()]


#: ``"mean ± std"`` over draws (``"mean"`` for one draw), the cells of the page's tables
_ms = partial(format_mean_std, count=False)


def study_table(agg: pd.DataFrame, *, dims_probe: int = 100, low_dims: int = 8, variance_probe: float = 0.4,
                fraction: float = 0.95, rank_share: float = PAPER_RANK_SHARE,
                intervals: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (dataset, pair, layer pair, side compressed): the page's summary, mean ± std over draws.

    Columns: ``uncompressed``; ``@ 40% var`` (relative score keeping ``variance_probe`` of the variance);
    ``@ 100 dims`` (relative score at the largest swept dimension ≤ ``dims_probe``, with that dimension when
    smaller); ``@ 8 dims``; ``min dims (95%)`` (smallest swept dimension whose mean relative score reaches
    ``fraction``); ``min dims (90%)``; ``@ share of rank`` (relative score at the swept dimension nearest, on a
    log scale, to ``rank_share`` × the largest swept dimension, the rank here: the paper's 100 of 1,023 is 9.8 %);
    and the numeric ``rel_var``, ``rel_dims``, ``rel_low``, ``rel_share``, ``dims_share``, ``dims_at``,
    ``max_dims``, ``n_draws``. With ``intervals`` (:func:`interval_table`): for each of :data:`PROBES` the
    relative score on the first draw with its paired 95 % interval over images, as ``ci_var``, ``ci_share``,
    ``ci_low`` (``(relative, low, high, n_components)``) and the page column ``over images (first draw)``."""
    rows = []
    for key, g in agg.groupby(["dataset", "model_x", "model_y", "role", "compress"], sort=False):
        ref = g[g["quantity"] == "pca:reference"].iloc[0]
        gd, gv = g[g["quantity"] == "pca:dims"], g[g["quantity"] == "pca:variance"]
        var = _at(gv, variance_probe, below=False)
        at = _at(gd, dims_probe)
        low = _at(gd, low_dims)
        ok = gd[gd["relative_mean"] >= fraction - 1e-12]
        ok90 = gd[gd["relative_mean"] >= 0.9 - 1e-12]
        target = share_dims(gd["x"].max(), rank_share) if len(gd) else 0
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
            "@ share of rank": (f"{_ms(share['relative_mean'], share['relative_std'], share['n_draws'])} (at "
                                f"{target} of {int(gd['x'].max())}" + (f"; swept {int(share['x'])}, the nearest"
                                if int(share["x"]) != target else "") + ")") if share is not None else "–",
            "rel_share": float(share["relative_mean"]) if share is not None else np.nan,
            "dims_share": target,
            "rel_var": float(var["relative_mean"]) if var is not None else np.nan,
            "rel_dims": float(at["relative_mean"]) if at is not None else np.nan,
            "rel_low": float(low["relative_mean"]) if low is not None else np.nan,
            "dims_at": int(at["x"]) if at is not None else 0, "max_dims": int(gd["x"].max()),
            "n_draws": int(ref["n_draws"]), "reference": float(ref["score_mean"]),
            **_probe_intervals(intervals, key),
        })
    return pd.DataFrame(rows)


_PROBE_COLUMNS = {"40% variance": "ci_var", "share of rank": "ci_share", "8 dims": "ci_low"}


def _probe_intervals(intervals: pd.DataFrame | None, key: tuple) -> dict:
    """The ``ci_*`` columns of one study-table row (NaN tuples when no interval ran)."""
    nan = (np.nan, np.nan, np.nan, 0)
    out = {c: nan for c in _PROBE_COLUMNS.values()}
    if intervals is None or intervals.empty:
        return out
    ds, x, y, role, side = key
    sel = intervals[(intervals["dataset"] == ds) & (intervals["model_x"] == x) & (intervals["model_y"] == y)
                    & (intervals["role"] == role) & (intervals["compress"] == side)]
    parts = []
    for _, r in sel.iterrows():
        if r["probe"] in _PROBE_COLUMNS:
            out[_PROBE_COLUMNS[r["probe"]]] = (float(r["relative"]), float(r["low"]), float(r["high"]),
                                               int(r["n_components"]))
            parts.append(f"{r['probe']} ({int(r['n_components'])}): {r['relative']:.2f} [{r['low']:.2f}, "
                         f"{r['high']:.2f}]")
    out["over images (first draw)"] = "; ".join(parts) if parts else "–"
    return out


#: Where each PCA claim is read and what it needs there: (probe, relative score, side). The one source the rules,
#: the figure's marks (:func:`claim_marks`) and the verdicts (:func:`findings`) read.
THRESHOLDS = {"3.1/pca-40": (0.4, 0.95, ">"), "3.1/pca-100": (PAPER_RANK_SHARE, 0.9, ">"),
              "3.1/pca-strong": (8, 0.8, "<")}
_T40, _T100, _TLOW = (THRESHOLDS[c][1] for c in ("3.1/pca-40", "3.1/pca-100", "3.1/pca-strong"))

#: Each PCA claim's test, in one sentence (shown on the page and the front page)
RULES = {
    "3.1/pca-40": f"in more than half of the rows that compress a language side, keeping 40 % of the variance keeps "
                  f"at least {_T40 * 100:g} % of the uncompressed score, its paired 95 % interval over images included; "
                  "vision-side rows are shown, not counted",
    "3.1/pca-100": f"in more than half of the rows that compress a language side, the paper's share of rank (100 "
                   f"of 1,023 = 9.8 %) keeps at least {_T100 * 100:g} % of the score, interval included; the dimensions "
                   f"needed for {_T100 * 100:g} % and {_T40 * 100:g} % are reported beside it",
    "3.1/pca-strong": f"in more than half of the rows that compress a language side, 8 components keep less than "
                      f"{_TLOW * 100:g} %, interval included",
}

def share_dims(rank: int, rank_share: float = PAPER_RANK_SHARE) -> int:
    """Components kept at the paper's share of rank (100 of 1,023 = 9.8 %) for a side of rank ``rank`` (its largest
    swept dimension, min(N, d)): ``max(1, round(rank_share × rank))``; the one source of the 3.1/pca-100 dimension for
    figure, table, verdict, prose and the verdict's intervals (:func:`prh_lib.analysis.compression.study.probe_dims`,
    checked by a test)."""
    return max(1, int(round(rank_share * int(rank))))


def claim_marks(sweep: str, *, n: int, rank_share: float = PAPER_RANK_SHARE) -> list[tuple[float, float, str]]:
    """Where the PCA verdicts read the sweep figures (:data:`RULES`), as ``(x, relative score, label)``.

    ``sweep="variance"``: 95 % of the score at 40 % of the variance (3.1/pca-40). ``sweep="dims"``: 90 % at
    the paper's share of rank (3.1/pca-100; ``x`` is then :func:`share_dims` itself, read per panel on the rank
    of its compressed language side) and 80 % at 8 components (3.1/pca-strong). For
    :func:`prh_lib.pages.figures.plot_sweep_bands`.

    Raises
    ------
    ValueError
        If ``sweep`` is not ``"variance"`` or ``"dims"``.
    """
    if sweep == "variance":
        return [(0.4, _T40, f"3.1/pca-40: needs ≥ {_T40 * 100:g} % at 40 % variance")]
    if sweep == "dims":
        return [(share_dims, _T100, f"3.1/pca-100: needs ≥ {_T100 * 100:g} % at {rank_share:.1%} of the language side's rank"),
                (8, _TLOW, f"3.1/pca-strong: needs < {_TLOW * 100:g} % at 8 dims")]
    raise ValueError(f"sweep must be 'variance' or 'dims'; got {sweep!r}")


_LANGUAGE = "smollm|minilm|gemma|qwen|llama|mistral|bloom|deepseek|embed|tfidf"


def _majority(values, threshold: float, side: str) -> tuple[bool, bool, int, int]:
    """``(holds, conclusive, n_estimate, n_clear)`` of "more than half of the rows are on ``side`` of ``threshold``",
    read symmetrically: ``n_clear`` rows have their whole interval on ``side``, ``n_off`` rows have it wholly off (rows
    without an interval count by their estimate). Holds when the ``n_clear`` rows are a majority; differs when the rows
    not wholly off cannot be one; inconclusive otherwise. ``n_estimate`` counts the rows by their estimate (shown)."""
    def on(v):
        return v > threshold if side == ">" else v < threshold

    n = len(values)
    n_est = sum(on(e) for e, _, _ in values)
    has = [np.isfinite(lo) and np.isfinite(hi) for _, lo, hi in values]
    n_clear = sum(on(lo if side == ">" else hi) if h else on(e) for (e, lo, hi), h in zip(values, has))
    n_off = sum(((hi < threshold) if side == ">" else (lo > threshold)) if h else not on(e)
                for (e, lo, hi), h in zip(values, has))
    if n_clear > n / 2:
        return True, True, n_est, n_clear
    if n - n_off <= n / 2:
        return False, True, n_est, n_clear
    return True, False, n_est, n_clear


def findings(table: pd.DataFrame, *, dataset: str, role: str = "peak", dims_probe: int = 100,
             paper_setting: bool = False) -> list[dict]:
    """Rows of "The paper and this build" for ``3.1/pca-*`` from :func:`study_table` (one dataset, one role).

    The paper's PCA claims are about compressing the *language* side (Sec. 3.1, Fig. 2), so only rows that compress a
    language model count (:data:`RULES`); the 100-dimension probe is at the paper's share of rank (100 of 1,023), not
    100 components of a rank of 238. Each row's relative score is read with its paired 95 % interval over images when
    :func:`study_table` has them (``ci_*``; first draw), by the symmetric majority rule of :func:`_majority`; without
    intervals the means over draws decide, and the note says so."""
    t = table[(table["dataset"] == dataset) & (table["layers"] == role)]
    lang = t[t["compressed"].str.contains(_LANGUAGE, case=False, regex=True)]
    n = len(lang)
    if not n:
        why = "no row compresses a language side"
        return [claims.finding(cid, this_build=None, holds=None, note=why) for cid in RULES]

    def read(col_ci, col_mean):
        out = []
        for _, r in lang.iterrows():
            ci = r.get(col_ci, (np.nan, np.nan, np.nan, 0))
            ok = isinstance(ci, (tuple, list)) and np.isfinite(ci[0])
            out.append((float(ci[0]), float(ci[1]), float(ci[2])) if ok else (float(r[col_mean]), np.nan, np.nan))
        return out

    has_ci = any(isinstance(v, (tuple, list)) and np.isfinite(v[1]) for v in lang.get("ci_var", []))
    note = ("relative scores on the first draw with paired 95 % intervals over images (the compressed and the "
            "uncompressed score on the same half-samples of the images)" if has_ci else
            "means over caption draws; no interval over images in this run")

    def with_power(vals, threshold):
        """The note plus the smallest difference from ``threshold`` the widest interval detects at 80 % power."""
        from prh_lib.stats.intervals import detectable_difference

        d = [detectable_difference(lo, hi) for _, lo, hi in vals if np.isfinite(lo)]
        return note + (f"; smallest difference from {threshold * 100:.0f} % this build detects at 80 % power, on its widest "
                       f"interval: {100 * max(d):.0f} percentage points of the uncompressed score" if d else "")

    def text(vals):
        return "; ".join(f"{r['pair']} ({r['compressed']}) {e:.2f}" + (f" [{lo:.2f}, {hi:.2f}]" if np.isfinite(lo) else "")
                         for (_, r), (e, lo, hi) in zip(lang.iterrows(), vals))

    rows = []
    v40 = read("ci_var", "rel_var")
    holds, conclusive, n_est, n_clear = _majority(v40, _T40, ">")
    rows.append(claims.finding("3.1/pca-40", holds=holds, conclusive=conclusive, rule=RULES["3.1/pca-40"],
                               note=with_power(v40, _T40),
                               this_build=f"{n_est} of {n} language sides keep ≥ {_T40 * 100:g} % at 40 % variance ({n_clear} "
                                          f"with the interval); {text(v40)}"))
    vshare = read("ci_share", "rel_share")
    holds, conclusive, n_est, n_clear = _majority(vshare, _T100, ">")
    dims = "/".join(sorted({f"{int(r['ci_share'][3]) if has_ci else int(r['dims_share'])} of {int(r['max_dims'])}"
                            for _, r in lang.iterrows()}))
    top = next((c for c in lang.columns if c.startswith("min dims (") and c != "min dims (90%)"), None)
    need = "; ".join(f"{r['pair']} ({r['compressed']}): {r['min dims (90%)']} / {r[top] if top else '–'}"
                     for _, r in lang.iterrows())
    rows.append(claims.finding("3.1/pca-100", holds=holds, conclusive=conclusive, rule=RULES["3.1/pca-100"],
                               note=with_power(vshare, _T100),
                               this_build=f"{n_est} of {n} language sides keep ≥ {_T100 * 100:g} % at the paper's share of rank "
                                          f"({dims} dims; {n_clear} with the interval): {text(vshare)}; dims for "
                                          f"90 % / {top[10:-1] if top else '95%'} on the mean sweep over caption draws "
                                          f"(the relative scores above are the first draw's, whose curve can reach "
                                          f"them sooner): {need}"))
    vlow = read("ci_low", "rel_low")
    holds, conclusive, n_est, n_clear = _majority(vlow, _TLOW, "<")
    rows.append(claims.finding("3.1/pca-strong", holds=holds, conclusive=conclusive, rule=RULES["3.1/pca-strong"],
                               note=with_power(vlow, _TLOW), this_build=f"{n_est} of {n} language sides fall below {_TLOW * 100:g} % at 8 dims "
                                                     f"({n_clear} with the interval); {text(vlow)}"))
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
