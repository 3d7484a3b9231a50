"""Language-model capability versus cross-modal alignment (Herbst et al., Section 3.2, Figures 3-4, App. D).

The paper's claim: alignment of a language model with a vision model grows with the language model's capability when
captions are informative. The language models (features and bits per byte) come from :mod:`prh_lib.lm.ladder`, the
benchmark scores from :mod:`prh_lib.data.benchmarks`; :func:`correlate` gives Pearson's r with its p-value and a
bootstrap interval over models.

The computation lives in :mod:`prh_lib.analysis.capability` (re-exported: the chapter's one namespace); this
module holds the page: summaries and correlations over draws, their displays, findings, prose and the record.

References
----------
Herbst, Roschmann, Bouniot, Akata. "Where Does Alignment Emerge and What Does It Mean? A Closer Look at the Platonic
Representation Hypothesis", Section 3.2, Figures 3 and 4, Appendix D. Huh, Cheung, Wang, Isola (2024). "The Platonic
Representation Hypothesis", ICML, Sec. 3 (alignment versus language-model performance measured in bits per byte).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd

from prh_lib.data.benchmarks import BENCHMARKS, missing_counts
from prh_lib.stats.correlation import correlate, exact_p_floor  # noqa: F401 (read as ``capability.correlate``)

# the computation (the study over draws), re-exported: this module stays the chapter's one namespace
from prh_lib.analysis.capability.study import (BENCHMARK_DIRECTION, OFFLINE_CAPABILITY, capability_rows,  # noqa: F401
    heldout_texts, paper_setting, study_alignment, study_sets, vision_features)
from prh_lib.analysis.capability.intervals import image_display, verdict_correlations  # noqa: F401
from prh_lib.pages import claims
from prh_lib.pages.verdicts import fisher_n_for_r
from prh_lib import formatting
from prh_lib.stats.decision import Test, combine


# --------------------------------------------------------------------------------------------------------
# page tables and records


def summary_table(df: pd.DataFrame, capabilities: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per (dataset, vision, language model): alignment mean ± std over draws and capability.

    Parameters
    ----------
    df : DataFrame
        The chapter's rows of the results table (``results.load(chapter=..., params=..., expand_extra=True)``;
        needs the ``family`` and ``fraction`` columns).
    capabilities : DataFrame, optional
        Benchmark scores indexed by model (:func:`prh_lib.data.benchmarks.load_capability_table`), joined as columns
        :data:`BENCHMARKS` (NaN for models without a value).

    Returns
    -------
    DataFrame
        Columns ``dataset``, ``vision``, ``language``, ``family``, ``fraction``, ``n``, ``chance`` (k/(N-1)), for
        ``peak`` and ``final``: ``<q>`` (mean), ``<q> std``, ``calibrated <q>`` (mean), ``p <q> (max)`` (largest p over
        draws), ``n_draws``; then ``bpb``, ``next_token_accuracy`` and the benchmarks.
    """
    from prh_lib import results

    align = df[df["quantity"].isin(["peak", "final"])]
    agg = results.aggregate(align, by=["dataset", "family", "model_x", "model_y", "quantity"],
                            values=["score", "calibrated"])
    pmax = align.groupby(["dataset", "family", "model_x", "model_y", "quantity"], dropna=False)["p"].max()
    meta = align.groupby(["dataset", "family", "model_x", "model_y"], dropna=False).agg(
        n=("n", "first"), k=("k", "first"), fraction=("fraction", "first"))
    out = None
    for q in ("peak", "final"):
        sub = agg[agg["quantity"] == q].set_index(["dataset", "family", "model_x", "model_y"])
        part = pd.DataFrame({q: sub["score_mean"], f"{q} std": sub["score_std"],
                             f"calibrated {q}": sub["calibrated_mean"],
                             f"p {q} (max)": pmax.xs(q, level="quantity").reindex(sub.index),
                             "n_draws": sub["n_draws"]})
        out = part if out is None else out.join(part.drop(columns="n_draws"))
    out = out.join(meta).reset_index().rename(columns={"model_x": "vision", "model_y": "language"})
    n, k = out["n"].astype(float), out["k"].astype(float)
    out["chance"] = k / (n - 1)
    caps = df[df["quantity"].isin(list(OFFLINE_CAPABILITY))]
    for q in OFFLINE_CAPABILITY:
        out[q] = out["language"].map(caps[caps["quantity"] == q].set_index("model_x")["score"]).astype(float)
    if capabilities is not None:
        for bench in BENCHMARKS:
            out[bench] = out["language"].map(capabilities[bench]).astype(np.float64)
    cols = ["dataset", "vision", "language", "family", "fraction", "n", "chance", "n_draws", "peak", "peak std",
            "calibrated peak", "p peak (max)", "final", "final std", "calibrated final", "p final (max)",
            *OFFLINE_CAPABILITY, *([b for b in BENCHMARKS] if capabilities is not None else [])]
    order = {name: i for i, name in enumerate(dict.fromkeys(df["dataset"]))}
    out = out[cols].sort_values(["dataset", "family", "vision", "fraction", "language"],
                                key=lambda c: c.map(order) if c.name == "dataset" else c, kind="stable")
    return out.reset_index(drop=True)


def summary_display(summary: pd.DataFrame, *, n_permutations: int | None = None,
                    family: str = "independent") -> pd.DataFrame:
    """:func:`summary_table` as the page shows it: ``"mean ± std (n draws)"`` cells, p-values written with
    :func:`prh_lib.pages.formatting.format_p` (a bound at the permutation floor), no all-NaN columns, a value missing for
    some models written "not measured", columns named in words (:data:`DISPLAY_NAMES`), indexed by (dataset,
    vision, language)."""
    sub = summary[summary["family"] == family].copy()
    counts = sorted({int(n) for n in sub["n_draws"]})
    same = len(counts) == 1  # one draw count for every row: said once, in the header, not in every cell
    for q in ("peak", "final"):
        sub[q] = [formatting.format_mean_std(m, s, int(n), count=not same)
                  for m, s, n in zip(sub[q], sub[f"{q} std"], sub["n_draws"])]
    if same and counts[0] > 1:
        sub = sub.rename(columns={q: f"{q} (mean ± std, {counts[0]} draws)" for q in ("peak", "final")})
        sub[f"p {q} (max)"] = [formatting.format_p(p, n_permutations) for p in sub[f"p {q} (max)"]]
    sub = sub.drop(columns=["peak std", "final std", "n_draws", "family", "fraction"], errors="ignore")
    sub = sub.dropna(axis=1, how="all")
    # a capability measured for some models only says so in words, never NaN
    for col in sub.columns:
        if col not in ("dataset", "vision", "language") and sub[col].isna().any():
            sub[col] = [("not measured" if pd.isna(v) else f"{v:.3f}" if isinstance(v, float) else v) for v in sub[col]]
    sub = sub.rename(columns={c: DISPLAY_NAMES.get(c, c) for c in sub.columns})
    return sub.set_index(["dataset", "vision", "language"])


def study_correlations(summary: pd.DataFrame, *, capability: Sequence[str], alignment: Sequence[str] = (
        "peak", "final", "calibrated peak"), family: str = "independent", ci: float = 0.95,
        min_models: int = 3) -> pd.DataFrame:
    """Pearson and Spearman correlation of alignment with capability across models, per (dataset, vision).

    For the independently trained models: exact permutation p over all n! orderings when n <=
    :data:`~prh_lib.stats.correlation.EXACT_MAX_N` (else SciPy's) and a Fisher-z interval. For the ladder
    (``family="ladder"``): Spearman only, no p-value or interval (its points lie on one path in weight space, not
    independent).

    Parameters
    ----------
    summary : DataFrame
        :func:`summary_table`.
    capability : sequence of str
        Capability columns (``"bpb"``, ``"next_token_accuracy"``, benchmarks).
    alignment : sequence of str
        Alignment columns (means over draws).
    family : {"independent", "ladder"}
    ci : float
    min_models : int
        Capability columns with fewer non-missing models in a group are left out.

    Returns
    -------
    DataFrame
        Columns ``dataset``, ``vision``, ``alignment``, ``capability``, ``method``, ``r``, ``ci low``, ``ci high``,
        ``p``, ``p method``, ``n``, ``direction`` (+1 when higher capability is a higher value, -1 for bits per byte),
        ``r (capability)`` (``direction * r``: positive when alignment grows with capability).
    """
    direction = {**OFFLINE_CAPABILITY, **BENCHMARK_DIRECTION}
    sub = summary[summary["family"] == family]
    methods = ("pearson", "spearman") if family == "independent" else ("spearman",)
    rows = []
    for (dataset, vision), g in sub.groupby(["dataset", "vision"], sort=False):
        for cap in capability:
            if cap not in g.columns or g[cap].notna().sum() < min_models:
                continue
            for a in alignment:
                for method in methods:
                    if family == "independent":
                        res = correlate(g[a].to_numpy(float), g[cap].to_numpy(float), method=method,
                                        p_value="auto", interval="fisher", ci=ci)
                        r, lo, hi, p, pm = res.r, res.ci_low, res.ci_high, res.p_value, res.p_method
                    else:
                        res = correlate(g[a].to_numpy(float), g[cap].to_numpy(float), method=method,
                                        p_value="scipy", interval="none")
                        r, lo, hi, p, pm = res.r, np.nan, np.nan, np.nan, "none (dependent points)"
                    rows.append({"dataset": dataset, "vision": vision, "alignment": a, "capability": cap,
                                 "method": method, "r": r, "ci low": lo, "ci high": hi, "p": p, "p method": pm,
                                 "n": res.n, "direction": direction.get(cap, 1),
                                 "r (capability)": direction.get(cap, 1) * r})
    return pd.DataFrame(rows, columns=["dataset", "vision", "alignment", "capability", "method", "r", "ci low",
                                       "ci high", "p", "p method", "n", "direction", "r (capability)"])


def correlation_display(corr: pd.DataFrame) -> pd.DataFrame:
    """The correlations as the page shows them: one row per (dataset, vision, alignment, capability), with
    Pearson and Spearman each in one "value [low, high], p" cell."""
    if corr.empty:
        return pd.DataFrame(columns=["dataset", "vision", "alignment", "capability"])
    cell = corr.assign(shown=[format_correlation(r) for _, r in corr.iterrows()])
    wide = cell.pivot_table(index=["dataset", "vision", "alignment", "capability"], columns="method",
                            values="shown", aggfunc="first", sort=False)
    wide.columns = [str(c) for c in wide.columns]
    wide = wide.reset_index()
    wide["capability"] = [DISPLAY_NAMES.get(c, c) for c in wide["capability"]]
    return wide


# --------------------------------------------------------------------------------------------------------
# verdicts and prose


#: Each 3.2 claim's test, in one sentence (shown on the page and the front page)
RULES = {
    "3.2/mmlu-docci": "Pearson r of the peak with MMLU (5-shot) across the generative LMs on DOCCI is positive with "
                      "exact/permutation p < 0.05",
    "3.2/arc-docci": "as for MMLU, with ARC-Challenge (4-shot)",
    "3.2/gsm8k": "the correlation with GSM8K (5-shot) is not significant (p ≥ 0.05)",
    "3.2/datasets": "Pearson r with MMLU falls from DOCCI to its 10 % summaries, WIT and CC3M",
    "3.2/capability-trend": "every vision model's Pearson and Spearman r of the peak with capability has the sign "
                            "of 'alignment grows with capability' (offline: capability = lower bits per byte on "
                            "held-out captions), with exact permutation p < 0.05 over models and, offline, the 95 % "
                            "interval over images of r (held-out peaks) above 0 (else inconclusive); not testable "
                            "when the exact p cannot be below 0.05 (n ≤ 4 models)",
    "3.2/final-less": "the final-layer pair's correlation with capability is below the peak's for every vision "
                      "model, each correlation significant (else inconclusive), and, offline, the paired 95 % "
                      "interval over images of (peak − final) correlation above 0; not testable when the exact p "
                      "cannot be below 0.05 (n ≤ 4 models)",
}


def findings(corr: pd.DataFrame, *, main_dataset: str, comparable: bool = False,
             missing_models: Sequence[str] = (), image_corr: pd.DataFrame | None = None) -> list[dict]:
    """:func:`_findings` with each row's test (:data:`RULES`)."""
    rows = _findings(corr, main_dataset=main_dataset, comparable=comparable, missing_models=missing_models,
                     image_corr=image_corr)
    for r in rows:
        r["rule"] = r.get("rule") or RULES.get(r["id"], "")
    return rows


def _findings(corr: pd.DataFrame, *, main_dataset: str, comparable: bool = False,
              missing_models: Sequence[str] = (), image_corr: pd.DataFrame | None = None) -> list[dict]:
    """Rows of "The paper and this build" for the claims ``3.2/*``, computed from :func:`study_correlations`.

    With benchmark correlations (the paper profile) the paper's claims are tested as stated: MMLU and ARC on DOCCI (r >
    0 and p < 0.05), GSM8K not significant, the order of r over DOCCI, WIT and CC3M, and final-layer alignment
    predicting less than the peak. Offline only ``3.2/capability-trend`` and ``3.2/final-less`` are testable, in kind:
    capability is bits per byte on held-out captions of the independently trained models, on ``main_dataset``; the claim
    holds when every vision model's Pearson and Spearman correlation has the sign of "alignment grows with capability",
    and is "inconclusive" unless every exact p is below 0.05. When no exact p can be below 0.05 (n ≤ 4: the floor is
    1/n! for Pearson, 2/n! for Spearman, :func:`too_few_models`) both claims are "not testable offline" with that reason
    in numbers, the direction kept as a note.

    Parameters
    ----------
    corr : DataFrame
        :func:`study_correlations` of the independent models.
    main_dataset : str
        The dataset whose correlations the offline claims are read on.
    comparable : bool
        Whether the run is in the paper's setting (its 21 models, N = 1024, its datasets).
    missing_models : sequence of str
        Language models that were asked for but are not available (named in the note).
    image_corr : DataFrame, optional
        :func:`prh_lib.analysis.capability.intervals.image_correlations` (bits per byte): each vision model's
        correlation of held-out peaks with capability and its 95 % interval over images. Offline, the capability trend
        then also needs every such interval (signed: > 0 is "alignment grows with capability") above 0; one that holds 0
        makes it inconclusive, one whose estimate has the other sign makes it differ. The caption-draw spread is shown
        beside it, never used as a margin.

    Returns
    -------
    list of dict
        :func:`prh_lib.pages.claims.finding` rows (claims not covered are added by ``claims_table``).
    """
    rows = []
    why_short = (f"fewer than 3 independent language models ran" +
                 (f" (missing: {', '.join(missing_models)})" if missing_models else ""))
    bench = corr[corr["capability"].isin(BENCHMARKS)]
    if not bench.empty:  # the paper profile
        names = list(dict.fromkeys(bench["vision"]))
        vision = next((v for v in names if "dinov3" in v.lower()), names[0] if names else None)
        docci = "docci" if "docci" in set(bench["dataset"]) else main_dataset

        def one(dataset, cap, alignment="peak"):
            sel = _pick(bench, dataset=dataset, vision=vision, capability=cap, alignment=alignment, method="pearson")
            return None if sel.empty else sel.iloc[0]

        for cid, cap in (("3.2/mmlu-docci", "mmlu_5shot"), ("3.2/arc-docci", "arc_challenge")):
            r = one(docci, cap)
            if r is not None:
                rows.append(claims.finding(cid, this_build=f"{vision}, {docci}: {format_correlation(r)}",
                                           holds=bool(r["r"] > 0 and r["p"] < 0.05), value=float(r["r"]),
                                           comparable=comparable))
        r = one(docci, "gsm8k_5shot")
        if r is not None:
            rows.append(claims.finding("3.2/gsm8k", this_build=f"{vision}, {docci}: {format_correlation(r)}",
                                       holds=bool(not r["p"] < 0.05), comparable=comparable))
        order = [d for d in ("docci", "docci-10%", "wit-1024", "cc3m-dreamlip") if d in set(bench["dataset"])]
        got = [(d, one(d, "mmlu_5shot")) for d in order]
        got = [(d, r) for d, r in got if r is not None and np.isfinite(r["r"])]
        if len(got) >= 2:
            rs = [float(r["r"]) for _, r in got]
            rows.append(claims.finding("3.2/datasets", this_build="; ".join(f"{d}: r = {r['r']:.2f}" for d, r in got),
                                       holds=bool(np.all(np.diff(rs) <= 0)), comparable=comparable))
        peak, final = one(docci, "mmlu_5shot"), one(docci, "mmlu_5shot", "final")
        # over images: the held-out peak's correlation with MMLU (and peak − final, paired) on the paper's vision model,
        # when the page computed it (image_corr on "mmlu_5shot")
        pimg = (image_corr[(image_corr["capability"] == "mmlu_5shot") & (image_corr["vision"] == vision)
                           & (image_corr["method"] == "pearson")]
                if image_corr is not None and len(image_corr) else pd.DataFrame())
        if peak is not None:
            t = [Test(f"{vision}: Pearson r (held-out peaks) with MMLU, interval over images",
                      float(r["r (capability)"]), float(r["low (capability)"]), float(r["high (capability)"]),
                      bounds=(-1.0, 1.0))
                 for _, r in pimg.iterrows()]
            i_holds, i_conc, i_why = combine(t) if t else (True, True, "")
            shown = "".join(f"; over images (held-out peak): {r['r']:+.2f} [{r['ci low']:+.2f}, {r['ci high']:+.2f}]"
                            for _, r in pimg.iterrows())
            rows.append(claims.finding("3.2/capability-trend",
                                       this_build=f"MMLU, {docci}: {format_correlation(peak)}{shown}",
                                       holds=bool(peak["r"] > 0 and peak["p"] < 0.05) and i_holds,
                                       conclusive=i_conc, value=float(peak["r"]), comparable=comparable,
                                       note=i_why.replace("cannot decide: ", "over images, cannot decide: ")
                                       or ("" if len(pimg) else "no interval over images was computed")))
        if peak is not None and final is not None:
            t = [Test(f"{vision}: Pearson r with MMLU, held-out peak − final layers, paired interval over "
                      "images", float(r["peak − final (capability)"]), float(r["peak − final low"]),
                      float(r["peak − final high"]), bounds=(-2.0, 2.0))
                 for _, r in pimg.iterrows() if "peak − final (capability)" in r]
            d_holds, d_conc, d_why = combine(t) if t else (True, True, "")
            shown = "".join(f"; over images (held-out peak − final, paired): {r['peak − final (capability)']:+.2f} "
                            f"[{r['peak − final low']:+.2f}, {r['peak − final high']:+.2f}]"
                            for _, r in pimg.iterrows() if "peak − final (capability)" in r)
            rows.append(claims.finding("3.2/final-less", this_build=f"final r = {_fmt(final['r'])} vs peak r = "
                                       f"{_fmt(peak['r'])} (MMLU, {docci}){shown}",
                                       holds=bool(final["r"] < peak["r"]) and d_holds, conclusive=d_conc,
                                       comparable=comparable,
                                       note=d_why.replace("cannot decide: ", "over images, cannot decide: ")
                                       or ("" if len(pimg) else "no interval over images was computed")))
        return rows
    main = _pick(corr, dataset=main_dataset, capability="bpb")
    peak = _pick(main, alignment="peak")
    if peak.empty or int(peak["n"].min()) < 3:
        rows.append(claims.finding("3.2/capability-trend", this_build=None, holds=None, note=why_short))
        rows.append(claims.finding("3.2/final-less", this_build=None, holds=None, note=why_short))
        return rows
    shown = "; ".join(f"{v}: {format_correlation(r)}" for v, g in peak.groupby("vision", sort=False)
                      for _, r in g.iterrows())
    n_models = int(peak["n"].min())
    significant = bool((peak["p"] < 0.05).all())
    untestable = too_few_models(n_models, methods=list(dict.fromkeys(peak["method"])))
    img = (image_corr[(image_corr["dataset"] == main_dataset) & (image_corr["capability"] == "bpb")]
           if image_corr is not None and len(image_corr) else pd.DataFrame())
    tests = [Test(f"{r['vision']}: {r['method']} r (held-out peaks) with capability (= −r with bits per "
                  "byte), interval over images",
                  float(r["r (capability)"]), float(r["low (capability)"]), float(r["high (capability)"]), 0.0,
                  bounds=(-1.0, 1.0))
             for _, r in img.iterrows()]
    img_holds, img_conclusive, img_why = combine(tests) if tests else (True, True, "")
    n_img = (f" (r per draw on the study's draws; the interval over images on all {int(img['images'].iloc[0])} images)"
             if len(img) and "images" in img else "")
    over_images = ("; over images (held-out peaks, r with bits per byte, 95 % CI): " + "; ".join(
        f"{r['vision']} {r['method']} {r['r']:+.2f} [{r['ci low']:+.2f}, {r['ci high']:+.2f}]"
        for _, r in img.iterrows())) if len(img) else ""
    note_models = "" if significant else (
        f"the sign is the paper's, but {n_models} independent models cannot tell it "
        f"from chance (the smallest exact p at n = {n_models} is {exact_p_floor(n_models, 'pearson'):.3g} for "
        f"Pearson's r and {exact_p_floor(n_models, 'spearman'):.3g} for Spearman's ρ); detecting the paper's r = 0.66 at 80 % "
        f"power (two-sided, alpha 0.05) takes {fisher_n_for_r(0.66)} independent "
        "language models")
    grows = bool((peak["r (capability)"] > 0).all())
    img_note = img_why.replace("cannot decide: ", "over images, cannot decide: ")
    if untestable:  # no exact p can reach 0.05: the rule cannot pass, whatever the numbers
        direction = ("direction: " + ("the paper's (alignment grows with capability) for every vision model"
                                      if grows else "not the paper's for " + ", ".join(
                                          dict.fromkeys(peak.loc[peak["r (capability)"] <= 0, "vision"]))))
        # underpowered, not untestable: it ran. An interval over images would treat the three models as fixed, so none
        # is read: the unit of this correlation is the model
        rows.append(claims.finding("3.2/capability-trend", this_build=f"peak vs bits per byte, {main_dataset}{n_img}: "
                                   f"{shown}", holds=True, conclusive=False,
                                   note="; ".join((untestable, direction))))
    else:
        rows.append(claims.finding(
            "3.2/capability-trend", this_build=f"peak vs bits per byte, {main_dataset}{n_img}: {shown}{over_images}",
            holds=grows and img_holds, comparable=False, conclusive=(significant and img_conclusive) or not img_holds,
            note="; ".join(t for t in (note_models, img_note) if t)))
    final = _pick(main, alignment="final", method="pearson").set_index("vision")["r (capability)"]
    pk = _pick(peak, method="pearson").set_index("vision")["r (capability)"]
    both = pd.concat({"final": final, "peak": pk}, axis=1).dropna()
    if both.empty:
        rows.append(claims.finding("3.2/final-less", this_build=None, holds=None, note="no finite correlation"))
    else:
        shown = "; ".join(f"{v}: final {r['final']:+.2f} vs peak {r['peak']:+.2f}" for v, r in both.iterrows())
        pear = img[img["method"] == "pearson"] if len(img) and "peak − final (capability)" in img else pd.DataFrame()
        d_tests = [Test(f"{r['vision']}: Pearson r with capability, held-out peak − final layers, paired "
                        "interval over images", float(r["peak − final (capability)"]),
                        float(r["peak − final low"]), float(r["peak − final high"]), 0.0, bounds=(-2.0, 2.0))
                   for _, r in pear.iterrows()]
        d_holds, d_conclusive, d_why = combine(d_tests) if d_tests else (True, True, "")
        d_shown = ("; over images (held-out peak − final, paired 95 % CI): " + "; ".join(
            f"{r['vision']} {r['peak − final (capability)']:+.2f} [{r['peak − final low']:+.2f}, "
            f"{r['peak − final high']:+.2f}]" for _, r in pear.iterrows())) if len(pear) else ""
        note_final = "" if significant else (f"with {n_models} independent models neither correlation can be told "
                                             "from chance, so neither can their difference (the paper's r = 0.66 "
                                             f"needs {fisher_n_for_r(0.66)} models for 80 % power)")
        less = bool((both["final"] < both["peak"]).all())
        d_note = d_why.replace("cannot decide: ", "over images, cannot decide: ")
        this = f"Pearson r with capability (−bits per byte), {main_dataset}{n_img}: {shown}{d_shown}"
        if untestable:
            direction = "direction: " + ("final below peak for every vision model" if less else
                                         "final not below peak for " + ", ".join(
                                             v for v, r in both.iterrows() if not r["final"] < r["peak"]))
            rows.append(claims.finding("3.2/final-less", this_build=f"Pearson r with capability (−bits per byte), "
                                       f"{main_dataset}{n_img}: {shown}", holds=True, conclusive=False,
                                       note="; ".join((untestable, direction))))
        else:
            rows.append(claims.finding(
                "3.2/final-less", this_build=this, holds=less and d_holds, comparable=False,
                conclusive=(significant and d_conclusive) or not d_holds, note="; ".join(t for t in (note_final, d_note) if t)))
    return rows


def study_record(*, summary: pd.DataFrame, correlations: pd.DataFrame, ladder: pd.DataFrame, claims_rows: list,
                 draws, heldout: Sequence[str], heldout_source: str, missing: dict, k: int,
                 n_permutations: int, capabilities: pd.DataFrame | None = None) -> dict:
    """What the Section 3.2 page records for the book and the tests (:func:`prh_lib.pages.report.record`)."""
    rec = {
        "k": k, "n_permutations": n_permutations, "summary": summary.to_dict(orient="records"),
        "correlations": correlations.to_dict(orient="records"), "ladder": ladder.to_dict(orient="records"),
        "claims": list(claims_rows), "missing": dict(missing), "n_heldout": len(heldout),
        "heldout_source": heldout_source,
        "draws": [{"dataset": d.dataset, "draw": d.draw, "seed": d.seed, "n": len(d.pairs),
                   "repeatable": d.repeatable, "what_varies": d.what_varies} for d in draws],
    }
    if capabilities is not None:
        rec["capability_missing"] = missing_counts(capabilities)
        rec["n_capability_models"] = len(capabilities)
    return rec


# ------------------------------------------------------------------------------------------------- generated prose


#: Column names as the page shows them (capability measures and benchmarks, not their identifiers)
DISPLAY_NAMES = {"bpb": "bits per byte", "next_token_accuracy": "next-token accuracy", "gsm8k_5shot": "GSM8K (5-shot)",
                 "mmlu_5shot": "MMLU (5-shot)", "arc_challenge_25shot": "ARC-Challenge (25-shot)",
                 "arc_challenge": "ARC-Challenge", "arc_challenge_4shot": "ARC-Challenge (4-shot)"}


def _fmt(v, spec=".2f") -> str:
    return "n/a" if v is None or not np.isfinite(v) else format(v, spec)


def format_correlation(row) -> str:
    """``"r = -0.95 [-1.00, 0.10], exact p = 0.083 (n = 4)"`` for a row of :func:`study_correlations`."""
    sym = "ρ" if row["method"] == "spearman" else "r"
    interval = f" [{_fmt(row['ci low'])}, {_fmt(row['ci high'])}]" if np.isfinite(row["ci low"]) else ""
    if not np.isfinite(row["p"]):
        p = "no p-value" if str(row["p method"]).startswith("none") else "p = n/a"
    else:
        p = f"{'exact ' if row['p method'] == 'exact' else ''}p = {row['p']:.3g}"
    return f"{sym} = {_fmt(row['r'])}{interval}, {p} (n = {int(row['n'])})"


def _pick(corr: pd.DataFrame, **eq) -> pd.DataFrame:
    sel = corr
    for col, val in eq.items():
        sel = sel[sel[col] == val]
    return sel


def too_few_models(n: int, *, methods=("pearson", "spearman"), alpha: float = 0.05, r: float = 0.66) -> str:
    """Why a rule "exact permutation p < ``alpha`` over ``n`` models" cannot pass, in numbers ("" when it can).

    The exact two-sided permutation p of ``n`` models is never below :func:`exact_p_floor` (1/n! for Pearson's r, 2/n!
    for Spearman's ρ); when that floor is at least ``alpha`` for one of ``methods``, no data can pass the rule: the
    claim ran but is underpowered ("inconclusive", with this as its note). The reason names ``n``, the floors and the
    number of models that detects the paper's ``r`` at 80 % power (:func:`prh_lib.pages.verdicts.fisher_n_for_r`).

    >>> too_few_models(3)[:33]
    'n = 3 independent language models'
    >>> too_few_models(6)
    ''"""
    floors = {m: exact_p_floor(n, m) for m in methods}
    if not any(np.isfinite(f) and f >= alpha for f in floors.values()):
        return ""
    names = {"pearson": "Pearson's r", "spearman": "Spearman's ρ"}
    shown = " and ".join(f"{f:.3g} for {names.get(m, m)}" for m, f in floors.items())
    return (f"n = {n} independent language models: the smallest exact two-sided p is {shown}, so p < {alpha:g} "
            f"cannot be reached; detecting the paper's r = {r:g} at 80 % power (two-sided, alpha {alpha:g}) takes "
            f"{fisher_n_for_r(r, alpha=alpha)} models")


def describe_study(corr: pd.DataFrame, ladder: pd.DataFrame, summary: pd.DataFrame, *, main_dataset: str,
                   missing: dict | None = None) -> str:
    """Markdown paragraphs, generated from the numbers, on what the correlations show and what they cannot.

    Parameters
    ----------
    corr, ladder : DataFrame
        :func:`study_correlations` of the independent models and of the ladder.
    summary : DataFrame
        :func:`summary_table`.
    main_dataset : str
    missing : dict of str to str, optional
        Models asked for but not available (name -> how to install).
    """
    out = []
    indep = summary[summary["family"] == "independent"]
    n_models = indep["language"].nunique()
    if missing:
        out.append(f"Not available here (see above for how to install them): {', '.join(f'`{m}`' for m in missing)}; "
                   f"the page runs with the {n_models} independent model(s) that are.")
    cap_rows = _pick(corr, capability="bpb") if "bpb" in set(corr.get("capability", [])) else corr
    main = _pick(cap_rows, dataset=main_dataset, alignment="peak")
    if main.empty:
        out.append(f"With {n_models} independently trained language model(s) no correlation across models is "
                   "computed (at least 3 are needed).")
    else:
        n = int(main["n"].max())
        f_pe, f_sp = exact_p_floor(n, "pearson"), exact_p_floor(n, "spearman")
        for vision, g in main.groupby("vision", sort=False):
            pe = g[g["method"] == "pearson"].iloc[0]
            sp = g[g["method"] == "spearman"].iloc[0]
            grows = pe["r (capability)"] > 0 and sp["r (capability)"] > 0
            falls = pe["r (capability)"] < 0 and sp["r (capability)"] < 0
            sig = pe["p"] < 0.05 and sp["p"] < 0.05
            trend = ("is that of alignment growing with capability" if grows else
                     "is that of alignment falling as capability grows" if falls else
                     "is not consistent (Pearson and Spearman disagree in sign)")
            out.append(f"- **{vision}**, {main_dataset}: across the {n} independently trained language models, the "
                       f"direction of peak alignment against {DISPLAY_NAMES.get(pe['capability'], pe['capability'])} "
                       f"{trend}: {format_correlation(pe)}; {format_correlation(sp)}"
                       + ("." if sig or not (grows or falls) else ", a direction that these p-values cannot tell "
                                                                  "from chance."))
        if np.isfinite(f_pe):
            reach = ("so no result here can be significant at 0.05" if f_pe >= 0.05 else
                     "so only a perfectly ordered Pearson r could be significant at 0.05" if f_sp >= 0.05 else
                     "so significance at 0.05 needs a near-perfect ordering")
            out.append(f"With n = {n} models the exact two-sided permutation p-value cannot fall below "
                       f"1/{n}! = {f_pe:.3f} for Pearson's r (the observed ordering is one of the {math.factorial(n)}) "
                       f"and 2/{n}! = {f_sp:.3f} for Spearman's ρ (reversed ranks give −ρ), {reach}"
                       + ("; a Fisher interval needs n > 3" if n <= 3 else "; the Fisher intervals span most of [-1, 1]")
                       + ": the page reports a direction, not evidence of a trend."
                       + (" The rule of 3.2/capability-trend and 3.2/final-less needs both p below 0.05, so with "
                          f"these models they are not testable (detecting the paper's r = 0.66 at 80 % power takes "
                          f"{fisher_n_for_r(0.66)} models)." if too_few_models(n) else ""))
        others = _pick(cap_rows, alignment="peak", method="pearson")
        others = others[others["dataset"] != main_dataset]
        if not others.empty:
            same = int((np.sign(others["r (capability)"]) == np.sign(
                main[main["method"] == "pearson"].set_index("vision")["r (capability)"].reindex(others["vision"]).to_numpy())).sum())
            out.append(f"On the other dataset(s) ({', '.join(dict.fromkeys(others['dataset']))}) the Pearson r has the "
                       f"same sign as on {main_dataset} in {same} of {len(others)} vision models.")
    if not ladder.empty:
        lad = _pick(ladder, dataset=main_dataset, alignment="peak", capability="bpb")
        for _, r in lad.iterrows():
            out.append(f"- Control, the interpolation ladder ({int(r['n'])} points on one path in weight space), "
                       f"**{r['vision']}**: Spearman ρ(peak, bits per byte) = {_fmt(r['r'])}. Any two quantities "
                       "that change monotonically along one path correlate, so no p-value is given.")
    if not indep.empty:
        sub = indep[indep["dataset"] == main_dataset]
        ratio = (sub["peak"] / sub["chance"])
        out.append(f"Peak scores of the independent models on {main_dataset} lie between {sub['peak'].min():.3f} and "
                   f"{sub['peak'].max():.3f}, {ratio.min():.1f} to {ratio.max():.1f} times chance k/(N-1) = "
                   f"{sub['chance'].iloc[0]:.4f}.")
    return "\n".join(out)


def heldout_note(n_texts: int, source: str, text_dataset: dict | None) -> str:
    """Which texts bits per byte and next-token accuracy are measured on (``source`` of :func:`heldout_texts`;
    ``text_dataset`` its text-only dataset spec, or ``None``)."""
    name = (text_dataset or {}).get("name", "")
    return (f"Bits per byte and next-token accuracy are measured on {n_texts} "
            + (f"captions of `{name}` images that no draw aligns (one caption per image, images in the annotation "
               "file's order; held out, disjoint from every aligned image)." if source == "heldout-images"
               else "captions that no draw of any dataset aligns (held out)." if source == "heldout" else
               "of the aligned captions themselves: every caption is used by some draw, so none is held out "
               "(as Huh et al. 2024 measure it)."))


def models_note(independent: Sequence[str], missing: dict) -> str:
    """The independent language models that ran, and those not available here with how to install them."""
    return ("Independent language models: " + ", ".join(f"`{m}`" for m in independent)
            + (". **Not available here**: " + "; ".join(f"`{m}`: {h}" for m, h in missing.items()) + "."
               if missing else "."))
