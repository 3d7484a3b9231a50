"""The robustness page: the verdicts' findings re-read under each alternative protocol (tables, grid, text).

The findings and their tests are read from :func:`prh_lib.analysis.robustness.robustness_study` rows with the
tests of the claims' pages (:mod:`prh_lib.pages.verdicts`), combined by the symmetric rule
(:func:`prh_lib.stats.decision.combine`): a cell holds when every test's interval is on the finding's side, fails
when one is off it, and is undecided otherwise.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from prh_lib.analysis.robustness import BASELINE
from prh_lib.pages import verdicts as V
from prh_lib.stats.decision import Test, combine

#: Each finding's test, in one sentence (shown on the page).
FINDINGS = {
    "peak above chance and bag of words": "every cross-modal pair's held-out peak is above chance k/(N−1) (mutual "
                                          "k-NN only: the other metrics have no such level) and above its "
                                          "bag-of-words floors (paired 95 % intervals over images above 0)",
    "peak not at the final layers": "every cross-modal pair's held-out peak exceeds the score of its two final "
                                    "layers, the (final, final) pair, on the same halves (paired interval above 0)",
    "peak in the later half": "for every cross-modal pair whose held-out peak beats chance and every floor, the "
                              "peak's mean relative depth is above 0.5 on both sides (interval included)",
    "regime order": "the same-modality pair's held-out peak exceeds the best cross-modal one, and every pair, "
                    "cross-modal and same-modality, exceeds its random-init floors (paired intervals above 0)",
    "PCA: 40 % of the variance keeps 95 %": "for every cross-modal pair at its held-out peak layers, the language "
                                            "side compressed to 40 % of its variance keeps at least 95 % of the "
                                            "score (3.1/pca-40; paired 95 % interval of the ratio included)",
    "PCA: 8 dimensions keep under 80 %": "for every cross-modal pair at its held-out peak layers, 8 principal "
                                         "components of the language side keep less than 80 % of the score "
                                         "(3.1/pca-strong; interval included)",
}
#: Each PCA finding's probe and threshold (:func:`prh_lib.analysis.robustness.pca_study`).
_PCA = {"PCA: 40 % of the variance keeps 95 %": ("40% variance", 0.95, ">"),
        "PCA: 8 dimensions keep under 80 %": ("8 dims", 0.8, "<")}
#: Verdict of a cell -> value drawn in the grid, and its colour (Okabe-Ito, as the front page).
GRID_VALUES = {"holds": 1.0, "undecided": 0.0, "fails": -1.0}
GRID_COLOURS = {"holds": "#009E73", "undecided": "#F0E442", "fails": "#D55E00", "not testable or not run": "#FFFFFF"}
#: The mark of each verdict in a grid cell (the colour says it too; "*": changed from the protocol's verdict).
GRID_MARKS = {"holds": "✓", "undecided": "?", "fails": "✗", "not testable": "n/t", "not run": "–"}
_CHANCE_METRICS = ("mutual_knn", "mutual_knn_dot")
_FIRST = "peak above chance and bag of words"  # tested against the floors only where the metric has no chance


def study_note(draws, verdict: str, comparisons, alternatives, n_splits: int, n_boot: int) -> str:
    """What was scored: the verdicts' dataset and its N, the comparisons, the alternatives and the resampling."""
    n = {d.dataset: len(d.pairs) for d in draws}
    others = "; ".join(f"{ds}: N = {m:,}" for ds, m in n.items() if ds != verdict)
    k = sum(d.dataset == verdict for d in draws)
    return (f"Verdicts' dataset **{verdict}** (N = {n[verdict]:,}, {k} caption draw{'s' * (k > 1)}"
            f"{'; ' + others if others else ''}); "
            f"comparisons {', '.join(' × '.join(c) for c in comparisons)}; {len(alternatives)} alternatives, each "
            f"with {n_splits} halvings and {n_boot} half-samples of the images.")


def finding_tests(summary: pd.DataFrame, pca: pd.DataFrame | None = None) -> dict[str, list]:
    """The tests of every finding (:data:`FINDINGS`) on one alternative's held-out summary and, for the PCA
    findings, its :func:`~prh_lib.analysis.robustness.pca_study` rows (None: those findings are not run)."""
    cross = V.comparisons_of(summary, "cross-modal")
    same = V.comparisons_of(summary)
    same = same[same["regime"].isin(["vision-vision", "language-language"])]
    chance = summary["metric"].iloc[0] in _CHANCE_METRICS if len(summary) else False
    out = {f: [] for f in FINDINGS if f not in _PCA or pca is not None}
    for f, (probe, threshold, side) in _PCA.items() if pca is not None else ():
        out[f] = [Test(f"{r['pair']} relative score at {probe} ({int(r['n_components'])} components)",
                       r["relative"], r["low"], r["high"], threshold, side) for _, r in pca.iterrows()
                  if r["probe"] == probe]
    for _, r in cross.iterrows():
        base = ([V.above_chance(r)] if chance else [])
        out[_FIRST] += base + V.above_floors(summary, r, kinds=["tfidf", "tfidf-svd"])
        out["peak not at the final layers"].append(V.peak_above_final(r))
        if all(t.outcome == "holds" for t in base + V.above_floors(summary, r)):
            out["peak in the later half"] += V.depth_tests(r, 0.5, ">")
        out["regime order"] += V.above_floors(summary, r, kinds=["random-language", "random-vision"])
    if len(cross) and len(same):
        best = cross.loc[cross["score"].idxmax(), "pair"]
        out["regime order"] += [V.above_pair(summary, s, best) for s in same["pair"]]
    for _, s in same.iterrows():
        out["regime order"] += V.above_floors(summary, s, kinds=["random-language", "random-vision"])
    return out


def _weakest(tests):
    """The test closest to (or furthest past) its threshold on the wrong side."""
    def room(t):
        return (t.low - t.threshold) if t.side == ">" else (t.threshold - t.high)
    return min(tests, key=lambda t: room(t) if np.isfinite(room(t)) else -np.inf)


def grid(summary: pd.DataFrame, alternatives, pca: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per finding × alternative: ``finding``, ``alternative``, ``verdict`` (holds / fails / undecided; not
    testable: nothing to test, e.g. no pair beats its floors, so no peak to locate; not run), the weakest test's
    ``test``, ``estimate``, ``low``, ``high``, every test's ``numbers``, ``n_tests``, and
    ``changed`` (the verdict differs from :data:`BASELINE`'s). ``pca``: :func:`~prh_lib.analysis.robustness.pca_study`
    rows (the PCA findings of the alternatives it has; the others' are not run)."""
    rows = []
    for alt in alternatives:
        sub = summary[summary["alternative"] == alt].reset_index(drop=True) if len(summary) else summary
        p = pca[pca["alternative"] == alt] if pca is not None and alt in set(pca["alternative"]) else None
        tested = finding_tests(sub, p) if len(sub) else {}
        no_chance = len(sub) > 0 and sub["metric"].iloc[0] not in _CHANCE_METRICS
        for f in FINDINGS:
            ts = tested.get(f, [])
            row = {"finding": f, "alternative": alt, "verdict": "not testable" if f in tested else "not run",
                   "floors_only": no_chance and f == _FIRST,
                   "test": "", "estimate": np.nan, "low": np.nan, "high": np.nan, "n_tests": len(ts),
                   "weakest": "–", "numbers": "no pair to test" if f in tested else
                   "not run: the PCA findings are read under the protocol and centred only" if f in _PCA else
                   "not run: k too large for the halves of this N"}
            if ts:
                holds, conclusive, _ = combine(ts)
                w = _weakest(ts)
                row |= {"verdict": "fails" if not holds else "holds" if conclusive else "undecided", "test": w.name,
                        "estimate": w.estimate, "low": w.low, "high": w.high, "weakest": w.describe(),
                        "numbers": "; ".join(t.describe() for t in ts)}
            rows.append(row)
    out = pd.DataFrame(rows)
    base = out[out["alternative"] == BASELINE].set_index("finding")["verdict"]
    out["changed"] = [a != BASELINE and v != "not run" and v != base.get(f, v)
                      for f, a, v in zip(out["finding"], out["alternative"], out["verdict"])]
    return out


def finding_table(g: pd.DataFrame, finding: str) -> pd.DataFrame:
    """One finding's rows, one per alternative: verdict, whether it changed, the weakest test [95 % CI], every test."""
    sub = g[g["finding"] == finding]
    verdict = [v + " (floors only)" * bool(f) for v, f in zip(sub["verdict"], sub["floors_only"])]
    return pd.DataFrame({"alternative": sub["alternative"], "verdict": verdict,
                         "changes the verdict": np.where(sub["changed"], "yes", "no"),
                         "weakest test [95 % CI]": sub["weakest"], "every test": sub["numbers"]}
                        ).set_index("alternative")


def grid_figure(g: pd.DataFrame):
    """The findings × alternatives grid, each cell coloured by its verdict and marked with it (:data:`GRID_MARKS`)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    findings, alts = list(dict.fromkeys(g["finding"])), list(dict.fromkeys(g["alternative"]))
    M = np.full((len(findings), len(alts)), np.nan)
    for _, r in g.iterrows():
        M[findings.index(r["finding"]), alts.index(r["alternative"])] = GRID_VALUES.get(r["verdict"], np.nan)
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.5 * len(findings) + 0.08 * max(map(len, alts))), dpi=110)
    cmap = ListedColormap([GRID_COLOURS[v] for v in ("fails", "undecided", "holds")])
    cmap.set_bad(GRID_COLOURS["not testable or not run"])
    ax.imshow(np.ma.masked_invalid(M), cmap=cmap, vmin=-1.5, vmax=1.5, aspect="auto")
    for _, r in g.iterrows():
        ax.text(alts.index(r["alternative"]), findings.index(r["finding"]),
                GRID_MARKS[r["verdict"]] + "*" * bool(r["changed"]), ha="center", va="center", fontsize=10)
    ax.set_xticks(range(len(alts)), alts, rotation=35, ha="right", fontsize=8.5)
    ax.set_yticks(range(len(findings)), findings, fontsize=9)
    ax.set_title("Each finding under each alternative protocol (held-out peaks, 95 % intervals over images;\n"
                 "*: the verdict differs from the protocol's; n/t: not testable, no peak to locate; –: not run)",
                 fontsize=10)
    ax.legend(handles=[Patch(fc=c, ec="#555555", label=f"{v} ({GRID_MARKS.get(v, 'n/t, –')})")
                       for v, c in GRID_COLOURS.items()], ncol=4, fontsize=8.5, loc="lower center",
              bbox_to_anchor=(0.5, 1.12), frameon=False)
    return fig


def headline(g: pd.DataFrame) -> str:
    """How many finding × alternative cells that ran keep the protocol's verdict and how many change it."""
    if (g["verdict"] == "not run").all():
        return "**What changes.** Nothing could be read here: k is too large for the halves of every dataset's N."
    run = g[(g["alternative"] != BASELINE) & (g["verdict"] != "not run")]
    n = int(run["changed"].sum())
    return (f"**What changes.** Of the {len(run)} finding × alternative cells that ran, {len(run) - n} keep the "
            f"verdict the finding has under the book's protocol and {n} change it.")


def changes(g: pd.DataFrame) -> list[dict]:
    """Each finding whose verdict changes under some alternative: ``finding``, ``baseline`` (its verdict under
    the protocol) and ``alternatives`` (``[name, verdict]`` of each that changes it); for the front page. None when
    no cell ran (the front page then says nothing)."""
    if (g["verdict"] == "not run").all():
        return None
    out = []
    for f, sub in g[g["changed"]].groupby("finding", sort=False):
        base = g[(g["finding"] == f) & (g["alternative"] == BASELINE)]["verdict"].iloc[0]
        out.append({"finding": f, "baseline": base,
                    "alternatives": [[a, v] for a, v in zip(sub["alternative"], sub["verdict"])]})
    return out
