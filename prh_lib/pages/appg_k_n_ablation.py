"""How mutual k-NN alignment depends on the neighbourhood size k and the number of pairs N (Appendix G).

Both knobs move the score even when the models do not change: the chance level of mutual k-NN is
``k / (N - 1)``, so a larger k or a smaller N raises the floor, and the maximum over layer pairs gains a
selection bias that grows as N shrinks. The sweeps here report every score three ways, so the reader can
separate the metric's effects from the models':

- ``raw``: mutual k-NN as computed;
- ``corrected``: chance-corrected, ``(score - c) / (1 - c)`` with ``c = k / (N - 1)`` (0 at chance, 1 for
  identical neighbourhoods; :func:`chance_corrected`);
- ``calibrated`` (optional): the permutation-calibrated score of Gröger et al. (2026) at the fixed layer pair
  (:func:`prh_lib.stats.permutation_test`).

Scores are taken at a *fixed* layer pair (chosen once, on all pairs at the reference k), at the maximum over
all layer pairs (re-selected in every setting), and at the final layers.

The sweeps and the study over datasets x draws live in :mod:`~prh_lib.analysis.ablation.study` (re-exported
here); this module holds the page: summary tables, prose, verdicts and the record."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd

from prh_lib.pages import claims
from prh_lib.formatting import format_mean_std

# the computation (sweeps, the study over draws), re-exported: this module stays the chapter's one namespace
from prh_lib.analysis.ablation.study import (aggregate_sweeps, chance_corrected, k_sweep, run_ablation,  # noqa: F401
    run_study, summarize)
from prh_lib.stats.decision import Test, combine


def summary_table(results: dict) -> pd.DataFrame:
    """Endpoints of every sweep of :func:`run_ablation`: raw and corrected fixed-pair scores at the smallest and
    largest ``k`` or ``n`` (means over seeds), the calibrated score where computed, and the largest mean
    chance-corrected score of the sweep (``corrected best``) with the ``k`` or ``n`` where it occurs (``best at``)."""
    rows = []
    for sweep, frames in results.items():
        x = "k" if sweep == "k" else "n"
        for label, df in frames.items():
            g = df.groupby(x)
            lo, hi = min(g.groups), max(g.groups)
            row = {"pair": label, "sweep": sweep, "layer pair": "{x} × {y}".format(**df.attrs["layer_pair"]),
                   "from": lo, "to": hi}
            for kind in ("raw", "corrected", "calibrated"):
                col = f"{kind} fixed"
                if col in df:
                    m = g[col].mean()
                    row[f"{kind} @ from"], row[f"{kind} @ to"] = float(m[lo]), float(m[hi])
            row["chance @ from"], row["chance @ to"] = float(g["chance"].first()[lo]), float(g["chance"].first()[hi])
            corrected = g["corrected fixed"].mean()
            row["corrected best"], row["best at"] = float(corrected.max()), corrected.idxmax()
            rows.append(row)
    return pd.DataFrame(rows).set_index(["pair", "sweep"])


def study_frames(chapter: str, params: dict) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The study read back: its rows (with the extra columns), :func:`aggregate_sweeps` and :func:`study_table`."""
    from prh_lib import results

    raw = results.load(chapter=chapter, params=params, expand_extra=True)
    agg = aggregate_sweeps(raw)
    return raw, agg, study_table(agg)


def pooled_sweeps(runs: dict, drawn, *, dataset: str) -> dict:
    """Sweep -> pair label -> every draw of ``dataset`` stacked, for the ``drawn`` pairs ([x, y] each)."""
    labels = {f"{x} × {y}" for x, y in drawn}
    first = runs[(dataset, 0)]
    return {sweep: {label: pd.concat([runs[key][sweep][label] for key in runs if key[0] == dataset])
                    for label in first[sweep] if label in labels} for sweep in first}


def headline(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`study_table`'s raw, chance and chance-corrected scores, indexed by dataset, pair and sweep."""
    shown = ["dataset", "pair", "sweep", "k or N", "raw", "chance", "chance-corrected"]
    return table[shown].set_index(["dataset", "pair", "sweep"])


def image_intervals(draw, comparisons, run: dict, *, n_boot: int, **options) -> pd.DataFrame:
    """:func:`prh_lib.analysis.ablation.intervals.draw_intervals` (``options`` passed on); empty when ``n_boot`` is 0."""
    from prh_lib.analysis.ablation.intervals import draw_intervals

    return draw_intervals(draw, comparisons, run, n_boot=n_boot, **options) if n_boot else pd.DataFrame()


def intervals_display(intervals: pd.DataFrame):
    """The page's table: chance-corrected score [95 % CI over images] per pair (rows) and k (columns)."""
    from IPython.display import Markdown

    from prh_lib.formatting import format_interval

    if intervals.empty:
        return Markdown("No intervals (`image_boot` is 0).")
    cell = [format_interval(c, lo, hi) for c, lo, hi in zip(intervals["corrected"], intervals["low"], intervals["high"])]
    out = intervals.assign(cell=cell).pivot_table(index=["regime", "pair"], columns="k", values="cell", aggfunc="first")
    out.columns = [f"k = {k}" for k in out.columns]
    return out


def claim_rows(raw: pd.DataFrame, agg: pd.DataFrame, table: pd.DataFrame, *, dataset: str,
               intervals: pd.DataFrame) -> tuple[list[dict], pd.DataFrame]:
    """:func:`findings` on ``dataset`` with the fixed-ratio sweep's intervals over subsets; both returned."""
    from prh_lib.analysis.ablation.intervals import fixed_ratio_intervals

    ratio = fixed_ratio_intervals(raw, dataset=dataset)
    return findings(agg, table, dataset=dataset, intervals=intervals, ratio_intervals=ratio), ratio


def to_record(results: dict, *, n: int, k: int, params: dict, study: pd.DataFrame, rows: list[dict],
              intervals: pd.DataFrame, ratio_intervals: pd.DataFrame) -> dict:
    """What the Appendix G page records for the book and the tests (:func:`prh_lib.pages.report.record`).

    ``results`` is the headline dataset's first draw, ``study`` the :func:`study_table`, ``rows`` the claim rows."""
    from prh_lib.results import params_hash

    table = summary_table(results)
    full = {label: df[df["n"] == df["n"].max()] for label, df in results["n fixed k"].items()}
    return {
        "n": n, "k": k,
        "summary": [{"pair": p, "sweep": s, **row} for (p, s), row in table.to_dict(orient="index").items()],
        "k_sweep": {label: df[["k", "chance", "raw fixed", "corrected fixed", "raw max"]].to_dict(orient="list")
                    for label, df in results["k"].items()},
        "n_full": {label: {"raw fixed": df["raw fixed"].tolist(), "raw max": df["raw max"].tolist(),
                           "raw final": df["raw final"].tolist()} for label, df in full.items()},
        "n_fixed_k": {label: summarize(df)[("raw fixed", "mean")].to_dict()
                      for label, df in results["n fixed k"].items()},
        "n_fixed_k_corrected": {label: summarize(df)[("corrected fixed", "mean")].to_dict()
                                for label, df in results["n fixed k"].items()},
        "n_fixed_ratio": {label: summarize(df)[("raw fixed", "mean")].to_dict()
                          for label, df in results["n fixed k/N"].items()},
        "params_hash": params_hash(params), "study": study.to_dict(orient="records"), "claims": rows,
        "intervals": intervals.drop(columns="reps", errors="ignore").to_dict(orient="records"),
        "ratio_intervals": ratio_intervals.to_dict(orient="records"),
    }


#: ``"mean ± std"`` over draws (``"mean"`` for one draw), the cells of the page's tables
_ms = partial(format_mean_std, count=False)


def study_table(agg: pd.DataFrame) -> pd.DataFrame:
    """Endpoints of each sweep at the fixed layer pair, mean ± std over draws: one row per (dataset, pair, sweep).

    Columns: ``k or N``, ``raw``, ``chance``, ``chance-corrected`` (each ``"<at smallest> → <at largest>"``), and
    the numeric ``from``, ``to``, ``raw_from``, ``raw_to``, ``spread`` (max - min of
    the mean raw score over the sweep), ``mean`` (of the mean raw score over the sweep), ``n_draws``,
    ``chance_to`` (chance k/(N − 1) at the largest k or N)."""
    rows = []
    fixed = agg[agg["quantity"].str.endswith(":fixed")]
    for (ds, mx, my, q), g in fixed.groupby(["dataset", "model_x", "model_y", "quantity"], sort=False):
        x = "k" if q.startswith("k-sweep") else "n"
        g = g.sort_values(x)
        lo, hi = g.iloc[0], g.iloc[-1]
        rows.append({
            "dataset": ds, "pair": f"{mx} × {my}", "regime": g["regime"].iloc[0],
            "sweep": {"k-sweep:fixed": "k", "n-sweep:fixed-k:fixed": "N at fixed k",
                      "n-sweep:fixed-ratio:fixed": "N at fixed k/N"}[q],
            "from": int(lo[x]), "to": int(hi[x]),
            "k or N": f"{int(lo[x])} → {int(hi[x])}",
            "raw": f"{_ms(lo['score_mean'], lo['score_std'], lo['n_draws'])} → {_ms(hi['score_mean'], hi['score_std'], hi['n_draws'])}",
            "chance": f"{lo['chance']:.3f} → {hi['chance']:.3f}",
            "chance-corrected": (f"{_ms(lo['corrected_mean'], lo['corrected_std'], lo['n_draws'])} → "
                                 f"{_ms(hi['corrected_mean'], hi['corrected_std'], hi['n_draws'])}"),
            "raw_from": float(lo["score_mean"]), "raw_to": float(hi["score_mean"]),
            "spread": float(g["score_mean"].max() - g["score_mean"].min()), "mean": float(g["score_mean"].mean()),
            "n_draws": int(lo["n_draws"]), "chance_to": float(hi["chance"]),
        })
    return pd.DataFrame(rows)


#: The paper's largest k relative to N - 1 (k = 100 at N = 1024, App. G): the order is read up to this share
PAPER_MAX_K_FRACTION = 100 / 1023

#: Each App. G claim's test, in one sentence (shown on the page and the front page)
RULES = {
    "G/k-order": "over the k up to the paper's largest k/(N − 1) = 100/1023, raw scores at the fixed layer pair rise "
                 "from the smallest to the largest of those k for every pair, and at least three pair kinds rank in the "
                 "same order at every such k by their mean chance-corrected score (s − c)/(1 − c), c = k/(N − 1) (raw "
                 "scores rise with chance, so they are not used for the order); each step of that order resolved at "
                 "every k by a paired 95 % interval over images above 0",
    "G/fixed-ratio": "along the N sweep at fixed k/N, every pair's mean raw score varies by at most 25 % of its mean "
                     "(max − min), the conservative simultaneous 95 % bound over the image subsets of that "
                     "relative spread (Bonferroni intervals of the means at every N, not the half-sampling "
                     "interval) below 25 %",
}


def findings(agg: pd.DataFrame, table: pd.DataFrame, *, dataset: str, stable: float = 0.25,
             intervals: pd.DataFrame | None = None, ratio_intervals: pd.DataFrame | None = None) -> list[dict]:
    """Rows of "The paper and this build" for ``G/*``, computed from :func:`aggregate_sweeps` on ``dataset``.

    - ``G/k-order``: at the fixed layer pair, the mean raw score at the largest k exceeds that at the
      smallest k for every pair, and the regimes (cross-modal, vision-vision, language-language; mean
      *chance-corrected* score of their pairs) rank in the same order at every k of the sweep. With fewer than
      three regimes an order is a single comparison: the claim is then inconclusive, with that reason;
    - ``G/fixed-ratio``: along the N sweep at fixed k/N, every pair's mean raw score varies by at most
      ``stable`` of its mean (max - min ≤ ``stable`` × mean).

    Values are means over caption draws (each averaging its random subsets). With ``intervals``
    (:func:`prh_lib.analysis.ablation.intervals.k_sweep_intervals` of one draw of ``dataset``), the order is also
    tested over images: at every k, each regime against the next in the order at the smallest k, by the paired
    interval of their mean chance-corrected scores (:func:`~prh_lib.analysis.ablation.intervals.
    regime_order_tests`); an interval that holds 0 leaves the claim inconclusive. With ``ratio_intervals``
    (:func:`prh_lib.analysis.ablation.intervals.fixed_ratio_intervals`), ``G/fixed-ratio`` is a test per pair of
    the relative spread against ``stable`` (side "<"): an interval reaching ``stable`` leaves it inconclusive."""
    a = agg[(agg["dataset"] == dataset) & (agg["quantity"] == "k-sweep:fixed")]
    t = table[table["dataset"] == dataset]
    rows = []
    ks = t[t["sweep"] == "k"]
    if len(ks):
        # the paper's sweep reaches k = 100 at N = 1024 (k/(N-1) = 0.098); larger k/(N-1) is outside its claim
        n_all = float(a["n"].max()) if "n" in a else float("nan")
        in_range = a[a["k"] <= max(PAPER_MAX_K_FRACTION * (n_all - 1), a["k"].min())] if np.isfinite(n_all) else a
        # the rise is read over the same k range: raw mutual k-NN tends to 1 as k approaches N for any features,
        # so a rise up to k near N could not fail
        ends = {}
        for (mx, my), g in in_range.groupby(["model_x", "model_y"], sort=False):
            g = g.sort_values("k")
            ends[(mx, my)] = (float(g["score_mean"].iloc[0]), float(g["score_mean"].iloc[-1]), int(g["k"].iloc[0]),
                              int(g["k"].iloc[-1]))
        n_rise = sum(hi > lo for lo, hi, k0, k1 in ends.values() if k1 > k0)
        n_swept = sum(k1 > k0 for _, _, k0, k1 in ends.values())
        rises = n_swept > 0 and n_rise == n_swept
        regime_means = in_range.groupby(["k", "regime"])["corrected_mean"].mean().reset_index()
        orders = {kk: tuple(g.sort_values("corrected_mean", ascending=False)["regime"])
                  for kk, g in regime_means.groupby("k")}
        same = len(set(orders.values())) == 1
        n_regimes = int(a["regime"].nunique())
        kinds = ", ".join(sorted(a["regime"].unique()))
        first = next(iter(orders.values())) if orders else ()
        ks_in = sorted(orders)
        span = f"k = {ks_in[0]}-{ks_in[-1]}" if ks_in else "no k"
        if same:
            order_txt = f"the same at all {len(orders)} values of {span}: {' > '.join(first)}"
        else:
            changed = [kk for kk, o in orders.items() if o != first]
            order_txt = (f"changes over {span}: {' > '.join(first)} at k = {ks_in[0]}, "
                         + "; ".join(f"{' > '.join(orders[kk])} at k = {kk}" for kk in changed[:3]))
        few = n_regimes < 3
        tests = []
        if intervals is not None and len(intervals):
            from prh_lib.analysis.ablation.intervals import regime_order_tests

            iv = intervals[intervals["k"] <= max(PAPER_MAX_K_FRACTION * (intervals["n"].max() - 1), intervals["k"].min())]
            tests, _ = regime_order_tests(iv)
        t_holds, t_conclusive, t_why = combine(tests) if tests else (True, True, "")
        holds = rises and same and t_holds
        steps = ""
        if tests:
            steps = "; paired differences [95 % CI over images]: " + "; ".join(
                f"{t.name.split(' (')[0]} {t.estimate:+.3f} [{t.low:+.3f}, {t.high:+.3f}]" for t in tests)
        rows.append(claims.finding(
            "G/k-order", holds=holds, conclusive=(not few and t_conclusive) if holds else True,
            rule=RULES["G/k-order"],
            note="; ".join(t for t in ((f"only {n_regimes} pair kinds: their order is a single comparison" if few else ""),
                                       t_why.replace("cannot decide: ", "over images, cannot decide: ")) if t),
            this_build=(f"raw rises with k over {span} for {n_rise} of {n_swept} pairs; order of the {n_regimes} "
                        f"pair kinds ({kinds}; the paper's same-modality regime split by modality, random-init not "
                        f"swept) by chance-corrected score {order_txt}{steps}")))
    fr = t[t["sweep"] == "N at fixed k/N"]
    if len(fr):
        rel = fr["spread"] / fr["mean"]
        rule = RULES["G/fixed-ratio"].replace("25 %", f"{stable:.0%}")
        if "chance_to" in fr:
            ratio = float(fr["chance_to"].max())
            n_max = int(fr["to"].max())
            k_paper = max(1, round(0.01 * (n_max - 1)))  # the k giving the paper's k/(N - 1) ≈ 0.01 at this N
            kn = (f"k/(N − 1) = {ratio:.3f} at the largest N" + ("; " if abs(ratio - 0.01) <= 0.002 else
                  f" (the paper's ≈ 0.01 needs k ≤ {k_paper} at N = {n_max}); "))
        else:
            kn = ""
        this = (kn + f"spread over N (max − min of the mean) {fr['spread'].min():.3f}-{fr['spread'].max():.3f}, "
                f"{rel.min():.0%}-{rel.max():.0%} of the mean (N {int(fr['from'].min())}-{int(fr['to'].max())})")
        if ratio_intervals is not None and len(ratio_intervals):
            tests = [Test(f"relative spread over N ({r['pair']}), conservative bound over image subsets", r["relative"],
                          r["low"], r["high"], stable, side="<", bounds=(0.0, float("inf")))  # a spread is >= 0
                     for _, r in ratio_intervals.iterrows()]
            this += "; per pair [conservative simultaneous 95 % bound over image subsets]: " + "; ".join(
                f"{r['pair']} {r['relative']:.0%} [{r['low']:.0%}, {r['high']:.0%}]" for _, r in ratio_intervals.iterrows())
            rows.append(claims.finding("G/fixed-ratio", tests=tests, rule=rule, this_build=this))
        else:
            rows.append(claims.finding("G/fixed-ratio", holds=bool((rel <= stable).all()), conclusive=False,
                                       rule=rule, this_build=this,
                                       note="no interval over images (the page computed none), so it cannot decide"))
    return rows


def describe_study(table: pd.DataFrame, rows: list[dict], *, dataset: str) -> str:
    """Markdown generated from :func:`study_table` and the verdicts."""
    t = table[table["dataset"] == dataset]
    lines = [f"On **{dataset}** (means over {int(t['n_draws'].max())} draws, each averaging its random subsets):", ""]
    for _, r in t.iterrows():
        var = "k" if r["sweep"] == "k" else "N"
        lines.append(f"- **{r['pair']}**, {r['sweep']}: {var} = {r['k or N']}: raw {r['raw']} (chance "
                     f"{r['chance']}); chance-corrected {r['chance-corrected']}.")
    lines.append("")
    lines += claims.verdict_lines(rows)
    return "\n".join(lines)
