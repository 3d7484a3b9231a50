"""Caption detail as a control (Section 3.2's caption argument; Appendices F and H).

If cross-modal alignment reflects shared *content*, it should grow when a caption says more about its image
and shrink when it says less, with the images unchanged. Two controls over the same images:

- **more detail**: concatenate the first 1 to 5 COCO captions of each image
  (:func:`prh_lib.data.sample_pairs` with ``caption_policy="concat"``);
- **less detail**: shorten a detailed text (the 5 captions concatenated) to a fraction of its words, by a causal
  language model (:func:`prh_lib.lm.summarize_texts`) or by keeping the first words
  (:func:`prh_lib.lm.truncate_texts`, the deterministic baseline).

:func:`detail_variants` builds the caption variants, :func:`detail_alignment` scores them (figures:
:func:`prh_lib.pages.figures.plot_detail`); they and the study over draws (:func:`study_variants`,
:func:`study_alignment`) live in :mod:`~prh_lib.analysis.captions.study` (re-exported); this module holds the page:
summary reports, tables, findings, prose and records."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from prh_lib.lm.summaries import target_words, word_count

# the variants and their scores, re-exported: this module stays the chapter's one namespace
from prh_lib.analysis.captions.study import (detail_alignment, detail_variants, study_alignment,  # noqa: F401
    study_variants)
from prh_lib.analysis.captions.intervals import order_display, order_intervals  # noqa: F401
from prh_lib import formatting
from prh_lib.stats.decision import Test, combine


def summary_report(summaries: dict, sources: Sequence[str]) -> pd.DataFrame:
    """How the summaries came out, per fraction: lengths reached, and fallbacks to truncation with reasons.

    Parameters
    ----------
    summaries : dict of float to Summaries
        From :func:`detail_variants`.
    sources : sequence of str
        The source texts (same rows as the summaries).

    Returns
    -------
    DataFrame
        Indexed by ``fraction``: ``rows``, ``source words``, ``target words``, ``summary words`` (means),
        ``achieved fraction`` (mean of summary words / source words), ``fallbacks`` (count) and ``reasons``,
        ``model``, ``cached file``.
    """
    src_words = np.array([word_count(t) for t in sources], dtype=float)
    rows = []
    for f, s in sorted(summaries.items()):
        if len(s.texts) != len(sources):
            raise ValueError(f"summaries at fraction {f} have {len(s.texts)} rows, sources {len(sources)}")
        words = np.array([word_count(t) for t in s.texts], dtype=float)
        rows.append({"fraction": f, "rows": len(s.texts), "source words": src_words.mean(),
                     "target words": float(np.mean([target_words(t, f) for t in sources])),
                     "summary words": words.mean(), "achieved fraction": float(np.mean(words / src_words)),
                     "fallbacks": s.n_fallback, "reasons": ", ".join(f"{k}: {v}" for k, v in s.fallback_counts.items()),
                     "model": s.model, "cached file": s.path.name if s.path else ""})
    return pd.DataFrame(rows).set_index("fraction")


def study_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std over draws of every (dataset, vision, language, control, level) from the results table.

    Parameters
    ----------
    df : DataFrame
        The chapter's rows (``results.load(..., expand_extra=True)``; columns ``control``, ``level``,
        ``tokens``, ``chance``, ``corrected peak``, ``final``).

    Returns
    -------
    DataFrame
        Columns ``dataset``, ``vision model``, ``language model``, ``control``, ``level``, ``variant``, ``n``,
        ``n_draws``, ``tokens``, ``chance``, ``peak``, ``peak std``, ``corrected peak``, ``corrected peak std``.
    """
    from prh_lib import results

    by = ["dataset", "model_x", "model_y", "control", "level", "quantity"]
    agg = results.aggregate(df, by=by, values=["score", "corrected peak", "tokens", "chance", "n"])
    out = pd.DataFrame({
        "dataset": agg["dataset"], "vision model": agg["model_x"], "language model": agg["model_y"],
        "control": agg["control"], "level": agg["level"].astype(float), "variant": agg["quantity"],
        "n": agg["n_mean"].round().astype(int), "n_draws": agg["n_draws"], "tokens": agg["tokens_mean"],
        "chance": agg["chance_mean"], "peak": agg["score_mean"], "peak std": agg["score_std"],
        "corrected peak": agg["corrected peak_mean"], "corrected peak std": agg["corrected peak_std"]})
    order = {d: i for i, d in enumerate(dict.fromkeys(df["dataset"]))}
    return out.sort_values(["dataset", "vision model", "language model", "control", "level"],
                           key=lambda c: c.map(order) if c.name == "dataset" else c, kind="stable").reset_index(drop=True)


#: F/detail's test, in one sentence (shown on the page and the front page)
RULE = ("every (vision, language) pair's mean peak is lower at the shortest text than at the full text, and the "
        "language models' order is kept. Three or more language models: Kendall τ between their peaks at the full "
        "text and at each shorter level is positive at every level, and where computed its 95 % interval over images "
        "(held-out peaks, one draw) lies above 0. Two: the order exists at the full text (the 95 % interval over "
        "images of the difference of their held-out peaks, paired on the same image half-samples, excludes 0; else "
        "inconclusive) and the full-text leader's margin at each shorter level has its 95 % interval above 0 (a "
        "margin estimated at or below 0 differs); without an interval over images two models give a single comparison")


def control_of(summary: pd.DataFrame) -> str:
    """The shortening the verdict reads: ``"summary"`` when it ran on at least two draws, else ``"truncation"``."""
    sel = summary[summary["control"] == "summary"] if len(summary) else summary
    n = int(sel["n_draws"].min()) if len(sel) and "n_draws" in sel else 0
    return "summary" if n >= 2 else "truncation"


def findings(summary: pd.DataFrame, *, paper_setting: bool = False,
             order_intervals: pd.DataFrame | None = None) -> list[dict]:
    """The row of "The paper and this build" for ``F/detail``, computed from :func:`study_summary`.

    The claim (App. F): shorter captions lower alignment but keep the order of the models. Tested on the ``summary``
    control when it ran on at least two draws, else on ``truncation`` (every draw) (:data:`RULE`). *Lower*: for every
    (dataset, vision, language), the mean peak at the shortest level is below the full text's. *Keeps the order*:
    Kendall τ (:func:`scipy.stats.kendalltau`, τ-b) between the language models' peaks at the full text and at each
    shorter level, per (dataset, vision model), is positive at every level. The caption-draw std is shown, never used as
    a margin. With ``order_intervals`` (:func:`prh_lib.analysis.captions.intervals.order_intervals` of the same control;
    held-out peaks, one draw) each row is a :class:`prh_lib.pages.claims.Test` against 0 read by
    :func:`prh_lib.pages.claims.combine` (holds when its 95 % interval is above 0, differs when its estimate is at or
    below 0, else inconclusive, with the difference it could detect):

    - three or more language models: every Kendall τ over images;
    - two: the order of the means is one comparison and is not read; per vision model, the difference of the
      two models' held-out peaks at the full text must have its interval exclude 0 (else the order to keep does
      not exist on these images and the claim is inconclusive, the note giving that difference), and then the
      full-text leader's margin at every shorter level is the test (in units of the score).

    With fewer than three language models and no interval over images the order is one comparison: at best inconclusive
    (the note says when no interval over images was computed). Comparable only in the paper's setting (DOCCI,
    Qwen3-8B)."""
    from scipy.stats import kendalltau

    from prh_lib.pages import claims
    from prh_lib.analysis.captions.intervals import COLUMNS
    from prh_lib.formatting import format_interval

    control = control_of(summary)
    sub = summary[summary["control"] == control]
    if sub.empty:
        return [claims.finding("F/detail", this_build=None, holds=None, note="no shortening control ran", rule=RULE)]
    lower, taus, parts = [], [], []
    for (ds, vm), g in sub.groupby(["dataset", "vision model"], sort=False):
        for lm_name, h in g.groupby("language model", sort=False):
            h = h.sort_values("level")
            lo, hi = h.iloc[0], h.iloc[-1]
            lower.append(bool(hi["peak"] > lo["peak"]))
            parts.append(f"{ds}, {vm} × {lm_name}: {hi['peak']:.3f} → {lo['peak']:.3f} at {lo['level']:g}")
        full = g[g["level"] == g["level"].max()].set_index("language model")["peak"]
        for level, lv in g.groupby("level"):
            if level == g["level"].max():
                continue
            lv = lv.set_index("language model")["peak"]
            common = [m for m in full.index if m in lv.index]
            if len(common) >= 2:
                tau = kendalltau(full[common].to_numpy(), lv[common].to_numpy()).statistic
                taus.append((ds, vm, float(level), float(tau), len(common)))
    n_lms = int(sub["language model"].nunique())
    order_ok = bool(taus) and all(np.isfinite(t) and t > 0 for *_, t, _ in taus)
    few = n_lms < 3
    # a drop that fails decides the claim; two models are read by the paired margin, since their τ is ±1 in every
    # resample
    iv = (order_intervals[order_intervals["control"] == control].reindex(columns=COLUMNS) if order_intervals is not
          None and len(order_intervals) else pd.DataFrame(columns=COLUMNS))
    taus_iv, pairs_iv = iv[iv["n_lms"] >= 3], iv[iv["n_lms"] == 2]
    tests = [Test(f"{r['vision model']}: Kendall τ full vs {r['level']:g} (held-out peaks, interval over "
                  f"images)", float(r["tau"]), float(r["low"]), float(r["high"]), 0.0)
             for _, r in taus_iv.iterrows()]
    unresolved, over_pairs = [], []
    for (ds_iv, vm), g in pairs_iv.groupby(["dataset", "vision model"], sort=False):
        r0 = g.iloc[0]
        vm = f"{ds_iv}, {vm}"  # the dataset read over images, named (the means above list every dataset)
        d = (f"{r0['lm_a']} − {r0['lm_b']} = "
             f"{format_interval(r0['full_margin'], r0['full_low'], r0['full_high'], 3, sign=True)}")
        lead, trail = (r0["lm_a"], r0["lm_b"]) if r0["full_margin"] > 0 else (r0["lm_b"], r0["lm_a"])
        if not (r0["full_low"] > 0 or r0["full_high"] < 0):  # interval holds 0 (or there is none)
            unresolved.append(f"{vm}: the two language models' order at the full text is not resolved over images: "
                              f"d = {d}")
            over_pairs.append(f"{vm}: d = {d} at the full text")
            continue
        tests += [Test(f"{vm}: margin of {lead} over {trail} at {r['level']:g} (held-out peaks, interval over "
                       f"images)", float(r["margin"]), float(r["margin_low"]), float(r["margin_high"]), 0.0,
                       bounds=(-1.0, 1.0)) for _, r in g.iterrows()]
        over_pairs.append(f"{vm}: d = {d} at the full text, margin of {lead} " + ", ".join(
            f"{format_interval(r['margin'], r['margin_low'], r['margin_high'], 3, sign=True)} at {r['level']:g}"
            for _, r in g.iterrows()))
    t_holds, t_conclusive, t_why = combine(tests) if tests else (True, True, "")
    t_conclusive = t_conclusive and not unresolved
    margins = bool(len(pairs_iv))  # two models, read over images: the order of the means is not needed
    holds = all(lower) and (order_ok or few) and t_holds
    why = "" if control == "summary" else "summaries exist for one draw only, so the verdict reads truncation"
    notes = [why, ("no interval over images for these means (mean over draws only)" if iv.empty else
                   t_why.replace("cannot decide: ", "over images, cannot decide: ")), "; ".join(unresolved),
             (f"{n_lms} language model(s): the order is a single comparison, so it cannot be decided"
              if few and not margins else "")]
    over = ("; over images (the held-out peaks of draw " + f"{int(iv['draw'].iloc[0])} alone, so it can differ "
            "from the means above): " + "; ".join(
                ([", ".join(f"τ {r['tau']:+.2f} [{r['low']:+.2f}, {r['high']:+.2f}] at {r['level']:g}"
                            for _, r in taus_iv.iterrows())] if len(taus_iv) else []) + over_pairs) if len(iv) else "")
    if taus and n_lms == 2:  # τ of two values is ±1: say what it means rather than print it as a statistic
        groups = dict.fromkeys((ds, vm) for ds, vm, *_ in taus)
        order = "; order of the two language models' in-sample mean peaks over draws, full vs shorter: " + "; ".join(
            f"{ds}, {vm}: " + ", ".join(f"{'kept' if t > 0 else 'swapped' if t < 0 else 'tied'} at {lv:g}"
                                        for d2, v2, lv, t, _ in taus if (d2, v2) == (ds, vm))
            for ds, vm in groups)
    elif taus:
        order = ("; Kendall τ (full vs shorter) of the in-sample peaks' means over draws " + ", ".join(
            f"{t:+.2f} at {lv:g}" for _, _, lv, t, _ in taus) + f" over {n_lms} language models")
    else:
        order = "; one language model: no order to compare"
    return [claims.finding("F/detail", this_build=f"{control}: " + "; ".join(parts) + order + over, holds=holds,
                           conclusive=not all(lower) or (not (few and holds and not margins) and t_conclusive),
                           comparable=paper_setting, rule=RULE, note="; ".join(x for x in notes if x))]


def describe_study(summary: pd.DataFrame) -> str:
    """Markdown lines, generated from :func:`study_summary`: per (dataset, model pair, control) the score at
    the shortest and the longest texts (mean ± std over draws) and the Spearman ρ of score with length."""
    from scipy.stats import spearmanr

    def fmt(mean, std, n):
        # a control run on fewer draws (the summaries: generation is costly) is one draw by choice, not a set
        # that cannot be repeated
        return formatting.format_mean_std(mean, std, n) if n > 1 else f"{mean:.3f} (one draw)"

    lines = []
    for (ds, vm, lm_name, control), g in summary.groupby(["dataset", "vision model", "language model", "control"],
                                                      sort=False):
        g = g.sort_values("tokens")
        lo, hi = g.iloc[0], g.iloc[-1]
        varies = len(g) > 2 and g["tokens"].nunique() > 1 and g["peak"].nunique() > 1
        rho = float(spearmanr(g["tokens"], g["peak"]).statistic) if varies else float("nan")  # else undefined
        lines.append(f"- **{ds}, {vm} × {lm_name}**, {control} (N = {int(lo['n'])}): {lo['tokens']:.0f} → "
                     f"{hi['tokens']:.0f} tokens, peak {fmt(lo['peak'], lo['peak std'], int(lo['n_draws']))}"
                     f" → {fmt(hi['peak'], hi['peak std'], int(hi['n_draws']))}; "
                     f"chance-corrected {lo['corrected peak']:.3f} → {hi['corrected peak']:.3f}; Spearman ρ with "
                     f"length = {rho:.2f}.")
    return "\n".join(lines)


def summary_tables(summaries: dict, variants: dict) -> dict:
    """(dataset, draw) -> :func:`summary_report` of its summaries against the captions they summarise."""
    return {key: summary_report(s, variants[f"{key[0]}/{key[1]}/summary-1"]["pairs"].texts)
            for key, s in summaries.items()}


def summaries_display(tables: dict):
    """The page's table of every draw's summaries (or a note when none were made)."""
    from IPython.display import Markdown

    if not tables:
        return Markdown("No summaries were made (`summary_model = None`).")
    return pd.concat({f"{ds}, draw {dr}": t.drop(columns=["cached file"]) for (ds, dr), t in tables.items()},
                     names=["draw"])


def example_texts(variants: dict, summaries: dict, draws) -> pd.DataFrame:
    """Every scored text variant of one image (the first summarised draw's, else the first draw's first image)."""
    first = next(iter(summaries), (draws[0].dataset, draws[0].draw))
    one = {name: v for name, v in variants.items() if v["score"] and (v["dataset"], v["draw"]) == first}
    sid = (one.get(f"{first[0]}/{first[1]}/summary-1") or next(iter(one.values())))["pairs"].sample_ids[0]
    return pd.DataFrame({"text": {v["variant"]: v["pairs"].texts[v["pairs"].sample_ids.index(sid)]
                                  for v in one.values() if sid in v["pairs"].sample_ids}}).rename_axis(f"image {sid}")


def dtype_note(vision_models, language_models, dtype: str, device: str) -> str:
    """Markdown: the precision each model runs in."""
    from prh_lib.models.precision import dtype_statement

    return dtype_statement(list(vision_models) + list(language_models), dtype, device)


def study_frames(chapter: str, params: dict, parts) -> tuple[pd.DataFrame, str]:
    """The study read back (:func:`study_summary`) and the note on the degenerate layers of ``parts``
    (:func:`prh_lib.analysis.captions.study.score_study`)."""
    from prh_lib import results

    summary = study_summary(results.load(chapter=chapter, params=params, expand_extra=True))
    return summary, " ".join(dict.fromkeys(p.attrs["degenerate"] for p in parts if p.attrs.get("degenerate")))


def drawn_rows(summary: pd.DataFrame, drawn) -> pd.DataFrame:
    """The rows of ``summary`` whose (vision, language) pair is among ``drawn``."""
    return summary[[(v, m) in set(drawn) for v, m in zip(summary["vision model"], summary["language model"])]]


def order_study(draws, summaries: dict, vision: dict, variants: dict, language_models, summary: pd.DataFrame, *,
                n_boot: int, **options) -> pd.DataFrame:
    """:func:`order_intervals` on the first draw of each dataset that has the shortening the verdict reads
    (``options`` passed on); empty when ``n_boot`` is 0 or no draw qualifies."""
    control = control_of(summary)
    firsts = list({d.dataset: d for d in reversed(draws) if control != "summary" or (d.dataset, d.draw) in summaries}
                  .values())[::-1]
    if not (n_boot and firsts):
        return pd.DataFrame()
    return pd.concat([order_intervals(vision[fd.dataset], {n: v for n, v in variants.items() if v["dataset"] == fd.dataset},
                                      language_models, control=control, dataset=fd.dataset, draw=fd.draw, n_boot=n_boot,
                                      progress=False, **options) for fd in firsts], ignore_index=True)


def claim_rows(summary: pd.DataFrame, draws, *, summary_model, order_intervals: pd.DataFrame) -> list[dict]:
    """:func:`findings`, in the paper's setting when its summariser (Qwen3-8B) ran on DOCCI."""
    paper = summary_model == "Qwen/Qwen3-8B" and any(str(d.dataset).startswith("docci") for d in draws)
    return findings(summary, paper_setting=paper, order_intervals=order_intervals)


def study_record(summary: pd.DataFrame, summary_tables: dict, claims_rows: list, draws, *, k: int,
                 summary_model: str | None, prompt: str) -> dict:
    """What the Appendix F page records for the book and the tests (:func:`prh_lib.pages.report.record`)."""
    return {
        "k": k, "summary_model": summary_model, "prompt": prompt, "summary": summary.to_dict(orient="records"),
        "summaries": {f"{ds}/{dr}": t.reset_index().to_dict(orient="records") for (ds, dr), t in summary_tables.items()},
        "fallbacks": int(sum(t["fallbacks"].sum() for t in summary_tables.values())) if summary_tables else 0,
        "claims": list(claims_rows),
        "draws": [{"dataset": d.dataset, "draw": d.draw, "seed": d.seed, "n": len(d.pairs),
                   "what_varies": d.what_varies} for d in draws],
    }
