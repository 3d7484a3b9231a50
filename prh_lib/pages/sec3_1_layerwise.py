"""Section 3.1: where does alignment emerge? Every layer pair of each model pair, against chance and controls.

The scoring and the study over datasets and draws (:func:`run_study`, :func:`pair_rows`, :func:`clip_variants`,
:func:`aggregate_peaks`: mean ± std over draws) live in :mod:`~prh_lib.analysis.layerwise` and are re-exported
here. This module holds the page: from the results table, :func:`headline_table`, :func:`peak_locations` and
:func:`clip_effect_table` give its tables, :func:`findings` the rows of "The paper and this build" and
:func:`describe_findings` the prose, generated from the numbers; :func:`pooling_tables` the causal LMs under other
token poolings.

References
----------
Herbst et al., Section 3.1 and Figure 1; Huh et al. (2024), App. A (mutual k-NN); Groeger et al. (2026),
Sec. 5 (calibration).
"""

from __future__ import annotations

from functools import partial
from typing import Sequence

import numpy as np
import pandas as pd

from prh_lib.results import expand_extra_columns
from prh_lib.formatting import format_interval, format_mean_std, format_number
from prh_lib.analysis.core import PairResult
from prh_lib.analysis.heldout import QUANTITY, floor_margins, floors_table, pooling_variants  # noqa: F401 (the tables)

# the computation (scoring, the study over draws), re-exported: this module stays the chapter's one namespace
from prh_lib.analysis.layerwise import aggregate_peaks, clip_variants, pair_rows, run_study  # noqa: F401
from prh_lib.stats.decision import Test

#: ``"mean ± std"`` over draws (``"mean"`` for one draw), the cells of the page's tables
_ms = partial(format_mean_std, count=False)


def _modal_text(r: pd.Series, col: str, sep: str = " of ") -> str:
    """``"layer.1 (3/5)"``, or for a tie ``"layer.10 × layer.2 and layer.9 × layer.1 (2/5 each)"``: the modal
    value(s) of an :func:`aggregate_peaks` column and in how many draws (``sep`` "/" or " of ")."""
    each = " each" if r.get(f"{col}_ties", 1) > 1 else ""
    draws = "" if sep == "/" else " draws"
    return f"{r[col]} ({r[f'{col}_draws']}{sep}{r['n_draws']}{draws}{each})"


def headline_table(agg: pd.DataFrame, *, n_permutations: int | None = None) -> pd.DataFrame:
    """The page's summary table: one row per (dataset, pair), values as mean ± std over draws.

    Columns: draws, peak, peak layers (most frequent, in how many draws; every pair that ties for most
    frequent, "2/5 each"), final layers, chance
    k/(N-1), shuffled-pairs control (max over layer pairs), calibrated (max), p (the largest over draws,
    :func:`prh_lib.pages.formatting.format_p`).
    """
    from prh_lib.formatting import format_p

    rows = []
    for _, r in agg.iterrows():
        rows.append({
            "dataset": r["dataset"], "pair": r["pair"],
            "draws": f"{r['n_draws']}" + (" (not repeatable)" if r["single_draw"] else ""),
            "peak": _ms(r["peak_mean"], r["peak_std"], r["n_draws"]),
            "peak layers": _modal_text(r, "peak_layers", "/"),
            "final": _ms(r["final_mean"], r["final_std"], r["n_draws"]),
            "chance": f"{r['chance']:.3f}",
            "shuffled (max)": f"{r['shuffled_max_mean']:.3f}",
            "calibrated": _ms(r["calibrated_mean"], r["calibrated_std"], r["n_draws"]),
            "p (largest)": format_p(r["p_largest"], n_permutations).replace("p ", "", 1).replace("= ", ""),
        })
    return pd.DataFrame(rows).set_index(["dataset", "pair"])


def peak_locations(df: pd.DataFrame, *, dataset: str, preprocessing: str | None = None) -> pd.DataFrame:
    """Peak layer pair and score of every draw of ``dataset``: rows model pairs, columns draws."""
    df = expand_extra_columns(df)
    if preprocessing is None:
        preprocessing = df.loc[df["quantity"] == "layer_pair", "preprocessing"].iloc[0]
    p = df[(df["quantity"] == "peak") & (df["dataset"] == dataset) & (df["preprocessing"] == preprocessing)]
    cells = {}
    for _, r in p.iterrows():
        cells.setdefault(f"{r['model_x']} × {r['model_y']}", {})[f"draw {int(r['draw'])}"] = (
            f"{r['layer_x']} × {r['layer_y']}: {r['score']:.3f}")
    return pd.DataFrame.from_dict(cells, orient="index").rename_axis("pair")


def _clip_name(label: str) -> str:
    return label.split("(")[1].split(",")[0] if label.startswith("clip(") else label


def clip_effect_table(df: pd.DataFrame, *, dataset: str) -> pd.DataFrame:
    """Peak scores (mean ± std over draws) and peak layers of ``dataset`` under each clipping choice.

    Returns
    -------
    DataFrame
        Rows model pairs; a column per clipping choice (``"stack"``, ``"layer"``, ``"none"``: the peak as
        mean ± std), ``"<choice> − <main>"`` (difference of the means to the main run's) and ``"peak layers"``
        (the most frequent peak layer pair under each choice, in the same order, joined by ``" | "``).
    """
    df = expand_extra_columns(df)
    df = df[df["dataset"] == dataset]
    main = df.loc[df["quantity"] == "layer_pair", "preprocessing"].iloc[0]
    labels = [main] + [p for p in dict.fromkeys(df.loc[df["quantity"] == "peak", "preprocessing"]) if p != main]
    aggs = {lab: aggregate_peaks(df, preprocessing=lab).set_index("pair") for lab in labels}
    pairs = [p for p in aggs[main].index if all(p in a.index for a in aggs.values())]
    table = pd.DataFrame(index=pd.Index(pairs, name="pair"))
    for lab, a in aggs.items():
        a = a.loc[pairs]
        table[_clip_name(lab) + (" (reference)" if lab == main else "")] = [
            _ms(m, s, n) for m, s, n in zip(a["peak_mean"], a["peak_std"], a["n_draws"])]
    for lab, a in list(aggs.items())[1:]:
        table[f"{_clip_name(lab)} − {_clip_name(main)}"] = [
            format_number(v, 3, sign=True) for v in (a.loc[pairs, "peak_mean"] - aggs[main].loc[pairs, "peak_mean"])]
    table[" | ".join(_clip_name(lab) for lab in labels) + ": peak layers"] = [
        " | ".join(aggs[lab].loc[p, "peak_layers"] for lab in labels) for p in pairs]
    return table


#: "far more": a vision-vision held-out peak at least this many times the best cross-modal one
FAR_MORE = 2.0

#: Each 3.1 claim's test, in one sentence (shown on the page and the front page)
RULES = {
    "3.1/cross-modal-peak": "every cross-modal pair's held-out peak is above chance and above its bag-of-words "
                            "floors (paired 95 % interval over images above 0), every selection-aware p ≤ alpha, "
                            "and the best held-out peak is below 0.5 (its interval too)",
    "3.1/later-layers": "for every cross-modal pair whose held-out peak beats chance and every floor (the others have no "
                        "peak to locate) the held-out peak's mean relative depth is above 0.5 on both "
                        "sides, interval included, and the share of selections in the late third of both models "
                        "exceeds the share in the early third of both (interval above 0)",
    "3.1/final-not-max": "for every cross-modal pair the held-out peak exceeds the final-layer pair on the same "
                         "halves (paired interval above 0)",
    "3.1/vision-vision": f"the best vision-vision held-out peak is at least {FAR_MORE:g}× the best cross-modal one "
                         "(paired ratio's interval above it), beats each random-init floor (paired interval above "
                         "0), and its held-out peak's relative depth is above 0.5 on both sides (the depth "
                         "interval's lower end above 0.5)",
    "3.1/language-language": "the best language-language held-out peak beats the best cross-modal one and each "
                             "of its floors (random-init twins, bag of words; paired intervals above 0), and its "
                             "held-out peak's relative depth is below 0.6 on both sides (the depth interval's upper "
                             "end below 0.6: early-middle layers)",
}


def findings(agg: pd.DataFrame, heldout: pd.DataFrame, *, dataset: str, alpha: float = 0.05,
             paper_setting: bool = False, flagged=None) -> list[dict]:
    """The rows of "The paper and this build" for the claims ``3.1/*``, from held-out estimates.

    Parameters
    ----------
    agg : DataFrame
        :func:`aggregate_peaks` (in-sample peaks, mean ± std over caption draws; shown, never a margin).
    heldout : DataFrame
        :func:`prh_lib.analysis.heldout.heldout_summary` of ``dataset``: held-out peaks of the comparisons
        and their floors with 95 % intervals over images (:mod:`prh_lib.pages.verdicts`).
    dataset : str
    alpha : float
        Level of the selection-aware permutation p-values.
    paper_setting : bool
        Whether the run is in the paper's setting (its models, N = 1024), so values compare.
    flagged : mapping of str to str, optional
        Models that fail their sanity check (:func:`~prh_lib.pages.verdicts.sanity_table`) -> note: their comparisons are left out of the
        tests (:func:`~prh_lib.pages.verdicts.without_flagged`) and the notes name them.

    Returns
    -------
    list of dict
        :func:`prh_lib.pages.claims.finding` rows; the tests of each claim are :data:`RULES`. Without held-out
        estimates every claim is "not testable" with that reason: no verdict rests on in-sample peaks alone.
    """
    from prh_lib.pages import claims
    from prh_lib.pages import verdicts as V

    a = agg[agg["dataset"] == dataset]
    comps = V.without_flagged(V.comparisons_of(heldout), flagged or {})
    if comps.empty:
        why = "no held-out estimates in this run (heldout_boot = 0)"
        return [claims.finding(cid, this_build=None, holds=None, note=why) for cid in RULES]
    # claims about unimodal language models rest on them; pairs with a caption-trained encoder are shown beside
    cross, beside, only_note = V.unimodal_first(comps[comps["regime"] == "cross-modal"])
    beside_text = ("; beside, with a text encoder trained on caption pairs (not a unimodal control): " + "; ".join(
        f"{r['pair']} {format_interval(r['score'], r['ci_low'], r['ci_high'])}" for _, r in beside.iterrows())
                   if len(beside) else "")
    ins = a.set_index("pair")
    rows = []

    def row(cid, tests, this_build, **kw):
        power = V.power_note(tests)
        note = "; ".join(t for t in (kw.pop("note", ""), power, V.model_caveats(this_build, flagged)) if t)
        rows.append(claims.finding(cid, this_build=this_build, tests=tests, rule=RULES[cid], note=note, **kw))

    if len(cross):
        best = cross.loc[cross["score"].idxmax()]
        tests = []
        for _, r in cross.iterrows():
            tests.append(V.above_chance(r))
            tests += V.above_floors(heldout, r)
            p = float(ins.loc[r["pair"], "p_largest"]) if r["pair"] in ins.index else float("nan")
            if np.isfinite(p):
                tests.append(Test(f"{r['pair']} alpha − p (largest over draws)", alpha - p + 1e-12,
                                  alpha - p + 1e-12, alpha - p + 1e-12, 0.0))
        tests.append(Test(f"best held-out peak ({best['pair']})", float(best["score"]), float(best["ci_low"]),
                          float(best["ci_high"]), 0.5, "<"))
        fl = []
        for _, r in cross.iterrows():
            fm = floor_margins(heldout, r["pair"])
            fl.append(f"{r['pair']} {r['score']:.3f} vs highest floor "
                      + (f"{fm.iloc[0]['floor_score']:.3f} ({fm.iloc[0]['kind']})" if len(fm) else "–"))
        insample = ins.loc[best["pair"]] if best["pair"] in ins.index else None
        row("3.1/cross-modal-peak", tests,
            f"best {best['pair']}: {V.held_text(best)}, chance {best['chance']:.3f}"
            + (f"; in-sample peak on all N {_ms(insample['peak_mean'], insample['peak_std'], insample['n_draws'])} "
               f"(± over caption draws)" if insample is not None else "") + "; " + "; ".join(fl) + beside_text,
            note=only_note,
            value=float(best["score"]), interval=(float(best["ci_low"]), float(best["ci_high"])),
            comparable=paper_setting, headline={"estimate": best["score"], "low": best["ci_low"],
                                                "high": best["ci_high"], "label": f"{best['pair']}, "
                                                f"{best['score'] / best['chance']:.1f}× chance {best['chance']:.3f}"})
        # a peak is located only where there is one: the pair's held-out peak beats chance and every floor
        real = [r for _, r in cross.iterrows()
                if all(t.outcome == "holds" for t in (V.above_chance(r), *V.above_floors(heldout, r)))]
        tests = [t for r in real for t in (*V.depth_tests(r, 0.5, ">"), V.late_over_early(r))]
        located = "; ".join(
            f"{r['pair']}: modal held-out pair {r['modal']} ({r['modal_share']:.0%} of selections), mean depth "
            f"{_depths(r, 3)}, late-third minus early-third share "
            f"{format_interval(r['late_minus_early'], r['lme_low'], r['lme_high'], 2)}" for r in real)
        skipped = [r["pair"] for _, r in cross.iterrows() if r["pair"] not in {q["pair"] for q in real}]
        skip_note = (f"not located, since their held-out peaks do not beat every floor: {', '.join(skipped)}"
                     if skipped else "")
        if not real:
            rows.append(claims.finding("3.1/later-layers", this_build="no cross-modal pair beats its floors",
                                       holds=True, conclusive=False, rule=RULES["3.1/later-layers"],
                                       note=skip_note + " (locating their peaks would locate noise)"))
        else:
            row("3.1/later-layers", tests, located, note=skip_note)
        tests = [V.peak_above_final(r) for _, r in cross.iterrows()]
        n_final = int(a.loc[a["regime"] == "cross-modal", "final_is_peak"].sum()) if len(a) else 0
        n_pd = int(a.loc[a["regime"] == "cross-modal", "n_draws"].sum()) if len(a) else 0
        row("3.1/final-not-max", tests,
            f"in-sample, the final pair is the maximum in {n_final} of {n_pd} pair-draws; held-out peak − final: "
            + "; ".join(f"{r['pair']} {format_interval(t.estimate, t.low, t.high, 3, sign=True)}"
                        for (_, r), t in zip(cross.iterrows(), tests)))
    best_cross = cross.loc[cross["score"].idxmax()] if len(cross) else None
    for cid, regime in (("3.1/vision-vision", "vision-vision"), ("3.1/language-language", "language-language")):
        part = comps[comps["regime"] == regime]
        if part.empty:
            continue
        r = part.loc[part["score"].idxmax()]
        tests = V.above_floors(heldout, r)
        if regime == "vision-vision":
            if best_cross is not None:
                tests.insert(0, V.ratio_above(heldout, r["pair"], best_cross["pair"], FAR_MORE))
            tests += V.depth_tests(r, 0.5, ">")
        else:
            if best_cross is not None:
                tests.insert(0, V.above_pair(heldout, r["pair"], best_cross["pair"]))
            tests += V.depth_tests(r, 0.6, "<")
        ratio = (f"; {r['score'] / best_cross['score']:.2f}× the best cross-modal held-out peak"
                 if best_cross is not None and best_cross["score"] > 0 else "")
        fm = floor_margins(heldout, r["pair"])
        floor_txt = (f"; highest floor {fm.iloc[0]['floor']} {fm.iloc[0]['floor_score']:.3f}, margin "
                     f"{format_interval(fm.iloc[0]['margin'], fm.iloc[0]['low'], fm.iloc[0]['high'])}"
                     if len(fm) else "")
        row(cid, tests,
            f"{r['pair']}: {V.held_text(r)}{ratio}; depth {_depths(r)}{floor_txt}",
            value=float(r["score"]), interval=(float(r["ci_low"]), float(r["ci_high"])), comparable=paper_setting,
            headline={"estimate": r["score"], "low": r["ci_low"], "high": r["ci_high"], "label": r["pair"]})
    return rows


def _depths(r: pd.Series, digits: int = 2) -> str:
    """``"0.32 [0.20, 0.45] × 0.22 [0.10, 0.40]"``: a held-out peak's mean relative depth on each side with its
    95 % interval over images (the intervals the depth tests read, :func:`prh_lib.pages.verdicts.depth_tests`;
    centred half-sampling intervals, clipped to [0, 1])."""
    return " × ".join(format_interval(r[f"depth_{s}"], r[f"depth_{s}_low"], r[f"depth_{s}_high"], digits)
                      for s in "xy")


def _layer_phrase(label: str, depth: float) -> str:
    if depth == 1.0:
        return f"its last layer ({label})"
    if depth == 0.0:
        return f"its input embedding ({label})"
    return f"{label} (depth {depth:.2f})"


def describe_findings(agg: pd.DataFrame, rows: list[dict], *, dataset: str, n_permutations: int | None = None) -> str:
    """Markdown generated from the numbers: where each pair peaks, and where this build agrees with the paper.

    Nothing here restates the paper: each sentence is computed from ``agg`` (:func:`aggregate_peaks`) and the
    verdicts of ``rows`` (:func:`findings`).
    """
    from prh_lib.formatting import format_p
    from prh_lib.pages import claims

    a = agg[agg["dataset"] == dataset]
    lines = [f"On **{dataset}** (N = {int(a['n'].iloc[0])}, k = {int(a['k'].iloc[0])}, chance "
             f"{a['chance'].iloc[0]:.3f}; in-sample means ± std over {int(a['n_draws'].max())} caption draws, the spread of "
             "caption choice only; the verdicts use the held-out estimates and their intervals over images):", ""]
    for _, r in a.iterrows():
        dxm, dym = r["depth_x_mean"], r["depth_y_mean"]

        def where(s, depth):  # a model's modal peak layer (every one that ties), never one side of a tie
            if r[f"peak_layer_{s}_draws"] == r["n_draws"]:
                return _layer_phrase(r[f"peak_layer_{s}"], depth)
            return f"{_modal_text(r, f'peak_layer_{s}')[:-1]}; mean depth {depth:.2f})"

        pairs = ("" if r["peak_layers_draws"] == r["n_draws"] else
                 f" (modal layer pair{'s' if r['peak_layers_ties'] > 1 else ''} "
                 f"{_modal_text(r, 'peak_layers', '/')[:-1].replace(' (', ', ', 1)})")
        lines.append(
            f"- **{r['pair']}** ({r['regime']}): peak {_ms(r['peak_mean'], r['peak_std'], r['n_draws'])}, "
            f"{r['peak_mean'] / r['chance']:.1f}× chance (chance-corrected (s − c)/(1 − c) "
            f"{(r['peak_mean'] - r['chance']) / (1 - r['chance']):.3f}), calibrated {r['calibrated_mean']:.3f}, "
            f"{format_p(r['p_largest'], n_permutations)} (largest over draws). {r['model_y']} peaks at "
            f"{where('y', dym)} with {r['model_x']} at {where('x', dxm)}{pairs}; "
            f"the final-layer pair scores {r['final_mean']:.3f}."
            + (" Its score is identical in every draw: what varies between the draws (here the captions) does not "
               "enter a pair without a language model." if r["n_draws"] > 1 and r["peak_std"] == 0
               and r["regime"] == "vision-vision" else ""))
    lines.append("")
    by = {}
    for r in rows:  # the verdicts, grouped by label (defined on the front page)
        by.setdefault(claims.label_of(r["verdict"]), []).append(r["id"])
    lines.append("Verdicts here: " + "; ".join(f"{v}: {', '.join(ids)}" for v, ids in by.items()) + " (the rows above "
                 "give the numbers and why; no value is compared with the paper's unless this build runs its models, "
                 "data and N).")
    return "\n".join(lines)


def study_draws(datasets, *, n_draws=None, dataset: str | None = None):
    """The study's draws, its headline dataset (``dataset``, else the paper's COCO, else the largest N) and that
    dataset's first draw (None when it has no draw 0)."""
    from prh_lib.data.study import headline_dataset, study_draws as draws_of

    draws = draws_of(datasets, n_draws=n_draws)
    main = dataset or headline_dataset(draws)
    return draws, main, next((d for d in draws if d.dataset == main and d.draw == 0), None)


def dtype_note(comparisons, dtype: str, device: str) -> str:
    """Markdown: the precision each model of ``comparisons`` runs in."""
    from prh_lib.analysis.core import model_names
    from prh_lib.models.precision import dtype_statement

    return dtype_statement(model_names(comparisons), dtype, device)


def draws_of(draws, dataset: str) -> list:
    """The draws of one dataset."""
    return [d for d in draws if d.dataset == dataset]


def heatmaps(scored: dict, agg: pd.DataFrame, drawn, *, dataset: str, draw: int) -> tuple[dict, dict, float]:
    """The heatmaps' matrices (pair label -> matrix) of the ``drawn`` pairs in one draw, their peaks in every
    other draw (:func:`other_peaks`) and ``dataset``'s chance level."""
    labels = {f"{x} × {y}" for x, y in drawn}
    shown = {r.label: r.matrix for r in scored[(dataset, draw)] if r.label in labels}
    others = {label: p for label, p in other_peaks(scored, dataset=dataset, draw=draw).items() if label in shown}
    return shown, others, float(agg.loc[agg["dataset"] == dataset, "chance"].iloc[0])


def cross_modal(matrices: dict, agg: pd.DataFrame) -> dict:
    """The cross-modal pairs of ``matrices`` (pair label -> matrix), by :func:`aggregate_peaks`' regime."""
    regime = dict(zip(agg["pair"], agg["regime"]))
    return {label: m for label, m in matrices.items() if regime[label] == "cross-modal"}


def heldout_tables(draws, comparisons, agg: pd.DataFrame, *, chapter: str, params: dict, dataset: str, n_boot: int,
                   **options) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held-out peaks on ``dataset`` (:func:`prh_lib.analysis.heldout.heldout_study`, run when ``n_boot``;
    ``options`` passed on), read back: their summary and the page's table against the in-sample peaks."""
    from prh_lib import results
    from prh_lib.analysis import heldout

    if n_boot:
        heldout.heldout_study(draws_of(draws, dataset), comparisons, chapter=chapter, params=params, n_boot=n_boot,
                              **options)
    held = heldout.heldout_summary(results.load(chapter=chapter, params=params), dataset=dataset)
    return held, heldout.heldout_table(held, agg[agg["dataset"] == dataset])


def pooling_pairs(comparisons) -> list:
    """The vision × causal-LM pairs of ``comparisons``: those :func:`pooling_tables` pools otherwise."""
    from prh_lib.models.spec import is_causal_lm, parse_model_name

    return [(x, y) for x, y in comparisons if is_causal_lm(y) and parse_model_name(x).identity().modality == "vision"]


def pooling_tables(draws, comparisons, *, variants, n_boot: int, **options) -> tuple[pd.DataFrame, str]:
    """Each vision × causal-LM pair of ``comparisons`` under each token pooling (:func:`pooling_variants`), and whether
    the held-out peaks that mean pooling puts at the LM's ``embed`` or ``layer.1`` survive the other poolings.

    Returns
    -------
    (DataFrame, str)
        One row per (dataset, pair, pooling): held-out peak [95 % CI over images], location (modal layer pair, share
        of selections), chance, paired margins over the random-init twin pooled alike and the higher bag of words;
        and Markdown. Empty, with the reason, without such pairs, variants or ``n_boot``.
    """
    pairs = pooling_pairs(comparisons)
    if not (pairs and variants and n_boot):
        return pd.DataFrame(), "Not run: no vision × causal-LM pair, other pooling or held-out resample asked for."
    held, rows = pooling_variants(draws, pairs, variants=variants, n_boot=n_boot, **options), []
    for _, r in held[held["quantity"] == QUANTITY].iterrows():
        fm = floor_margins(held[held["dataset"] == r["dataset"]], r["pair"])  # highest floor first
        margin = {kind: next((format_interval(f["margin"], f["low"], f["high"]) for _, f in fm.iterrows()
                              if f["kind"].startswith(kind)), "–") for kind in ("random", "tfidf")}
        rows.append({"dataset": r["dataset"], "pair": f"{r['model_x']} × {r['model_y'].split('@')[0]}",
                     "pooling": r["pooling"], "held-out peak [95 % CI]": format_interval(r["score"], r["ci_low"],
                                                                                         r["ci_high"]),
                     "location (share)": f"{r['modal']} ({r['modal_share']:.0%})", "chance": f"{r['chance']:.3f}",
                     "margin over random-init twin [paired CI]": margin["random"],
                     "margin over bag of words [paired CI]": margin["tfidf"],
                     "early": r["layer_y"] in ("embed", "layer.1"), "beats": bool((fm["low"] > 0).all())})
    table = pd.DataFrame(rows).sort_values(["dataset", "pair"], kind="stable")  # mean pooling first in each pair
    lines = [f"- {ds}, {pair}: " + "; ".join(
        f"{o['pooling']} {o['location (share)']}, {o['held-out peak [95 % CI]']}, "
        f"{'beats' if o['beats'] else 'does not beat'} every floor" for _, o in g.iterrows())
             + f". The early peak survives {', '.join(g.loc[g['early'], 'pooling'].iloc[1:]) or 'no other pooling'}, "
               f"moves under {', '.join(g.loc[~g['early'], 'pooling']) or 'none'}" + ("." if g["beats"].iloc[0] else
               "; but the mean-pooled peak does not beat every floor, so where it sits is noise by this book's rule.")
             for (ds, pair), g in table.groupby(["dataset", "pair"], sort=False) if g["early"].iloc[0]]
    text = ("Held-out peaks that mean pooling puts at the language model's `embed` or `layer.1`, under each pooling:"
            "\n\n" + "\n".join(lines) if lines else "No mean-pooled held-out peak is at an LM's `embed` or `layer.1`.")
    return table.drop(columns=["early", "beats"]).set_index(["dataset", "pair", "pooling"]), text


def claim_rows(agg: pd.DataFrame, held: pd.DataFrame, *, dataset: str, alpha: float, flagged=None) -> list[dict]:
    """:func:`findings` on ``dataset``, knowing whether this build runs the paper's models."""
    from prh_lib.data import paper

    return findings(agg, held, dataset=dataset, alpha=alpha, paper_setting=in_paper_setting(agg, paper.models()),
                    flagged=flagged)


def other_peaks(scored: dict, *, dataset: str, draw: int) -> dict:
    """Pair label -> (row, column) of the peak in every other draw of ``dataset`` (:func:`run_study` output)."""
    out = {}
    for (ds, dr), res in scored.items():
        if ds != dataset or dr == draw:
            continue
        for r in res:
            out.setdefault(r.label, []).append(r.matrix.peak[:2])
    return out


def in_paper_setting(agg: pd.DataFrame, paper_models: Sequence[str]) -> bool:
    """True when every score is on N = 1024 pairs between the paper's models (values then compare)."""
    models = set(agg["model_x"]) | set(agg["model_y"])
    return bool((agg["n"] == 1024).all() and models <= set(paper_models))


def describe_clip_effect(df: pd.DataFrame, *, dataset: str) -> str:
    """Markdown: how much the clipping choice moves each pair's peak (means over draws) and its location."""
    df = expand_extra_columns(df)
    df = df[df["dataset"] == dataset]
    main = df.loc[df["quantity"] == "layer_pair", "preprocessing"].iloc[0]
    labels = [p for p in dict.fromkeys(df.loc[df["quantity"] == "peak", "preprocessing"]) if p != main]
    base = aggregate_peaks(df, preprocessing=main).set_index("pair")
    lines = []
    for lab in labels:
        other = aggregate_peaks(df, preprocessing=lab).set_index("pair").reindex(base.index)
        diff = other["peak_mean"] - base["peak_mean"]
        moved = [p for p in base.index if other.loc[p, "peak_layers"] != base.loc[p, "peak_layers"]]
        worst = diff.abs().idxmax()
        lines.append(
            f"- `{lab}` instead of `{main}`: peaks change by {format_number(diff.min(), 3, sign=True)} to "
            f"{format_number(diff.max(), 3, sign=True)} "
            f"(largest for {worst}: {base.loc[worst, 'peak_mean']:.3f} → {other.loc[worst, 'peak_mean']:.3f}); "
            + (f"the most frequent peak layer pair moves for {', '.join(moved)}." if moved else
               "no pair's most frequent peak layer pair moves."))
    return "\n".join(lines)


def _records(obj):
    return obj.to_dict(orient="records") if isinstance(obj, pd.DataFrame) and isinstance(obj.index, pd.RangeIndex) else obj


def to_record(results: list[PairResult], table: pd.DataFrame, *, heatmap_dataset: str, k: int, chance: float,
              clip_q: float | None, **more) -> dict:
    """What the Section 3.1 page records for the book and the tests (:func:`prh_lib.pages.report.record`).

    ``results`` are the heatmap's draw; ``table`` the aggregated numbers (:func:`aggregate_peaks`); ``more``
    further JSON-ready entries (claims rows, the clipping comparison, ...).
    """
    n_pairs = int(table.loc[table["dataset"] == heatmap_dataset, "n"].iloc[0])
    return {
        "n_pairs": n_pairs, "k": k, "chance": chance, "clip_q": clip_q, "summary": _records(table),
        "heatmap_dataset": heatmap_dataset, **{key: _records(v) for key, v in more.items()},
        "matrices": {r.label: {"scores": r.matrix.scores, "x_labels": r.matrix.x_labels,
                               "y_labels": r.matrix.y_labels} for r in results},
    }
