"""The tests behind the verdicts, built from held-out estimates and their image-level intervals.

Every test here reads :func:`prh_lib.analysis.heldout.heldout_summary` (held-out peaks, selected on one
half of the images and scored on the other; 95 % intervals from half-samples of the images that re-select
the peak in each replicate) and returns :class:`prh_lib.pages.claims.Test` objects, which
:func:`prh_lib.pages.claims.combine` turns into a verdict. A comparison is read against its floors with *paired*
intervals (the same image half-samples), so a floor whose paired interval overlaps the comparison's never lets a
claim pass. The caption-draw spread is shown on the pages, but it is not a margin anywhere.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from prh_lib.analysis.heldout import QUANTITY, floor_margins, margin
from prh_lib.formatting import format_interval, format_number
from prh_lib.stats.decision import Test
from prh_lib.stats.intervals import paired_interval

__all__ = ["caption_trained", "model_caveats", "without_flagged", "sanity_table", "unimodal_first", "comparisons_of", "above_chance", "above_floors", "above_pair", "ratio_above", "depth_tests",
           "peak_above_final", "power_note", "held_text", "fisher_n_for_r"]


def caption_trained(pair: str) -> str:
    """The zoo's ``caption_trained`` of a pair's language model (MiniLM-L6: COCO and Flickr30k caption pairs), or
    "" for a unimodal one: such a model is shown beside the unimodal language models, never read as one."""
    from prh_lib.models.zoo.registry import ZOO

    return next((e.caption_trained for m in str(pair).split(" × ") if "@random-init" not in m
                 and (e := ZOO.get(m.split(" (")[0])) is not None and e.caption_trained), "")


def model_caveats(text: str, flagged=None) -> str:
    """The zoo's ``caveat`` (and ``caption_trained``) of every zoo model ``text`` names, and the note of every
    ``flagged`` model it names (model -> note: failed sanity checks), as one note ("" if none)."""
    import re

    from prh_lib.models.zoo.registry import ZOO

    names = lambda n: re.search(rf"\b{re.escape(n)}\b(?!@)", text)  # noqa: E731
    return "; ".join([f"{e.name} is {e.caveat or e.caption_trained}" for n, e in ZOO.items()
                      if (e.caveat or e.caption_trained) and names(n)] + [v for m, v in (flagged or {}).items() if names(m)])


def without_flagged(rows: pd.DataFrame, flagged) -> pd.DataFrame:
    """The comparisons of ``rows`` with no ``flagged`` model (a model that fails its sanity check carries no
    verdict), or all of them when every one has one."""
    if rows.empty or not flagged:
        return rows
    keep = ~rows["pair"].map(lambda p: any(m.split(" (")[0] in flagged for m in str(p).split(" × "))).astype(bool)
    return rows[keep] if keep.any() else rows


def sanity_table(draws, models, *, chapter: str, params: dict, k: int = 10, seed: int = 0,
                 **options) -> tuple[pd.DataFrame, dict, str]:
    """The semantic sanity check of every model (:func:`prh_lib.analysis.sanity.sanity_check`) on each dataset of
    caption draws: draw 0's features, relevance from the other draws' captions. Rows go to the results table
    (``quantity="sanity"``, ``score`` the held-out margin over the random-init twin). Returns the page's table, the
    models whose margin does not exclude 0 on some dataset (model -> note) and a paragraph on both. ``options``: as
    :func:`~prh_lib.analysis.core.prepare_features`."""
    from prh_lib import results
    from prh_lib.analysis import sanity
    from prh_lib.analysis.core import prepare_features
    from prh_lib.analysis.controls import random_init_name

    models = [m for m in models if "@random-init:" not in m]
    frames, flagged = [], {}
    twins = {m: random_init_name(m, seed) for m in models}
    for name in sorted({d.dataset for d in draws}):
        ds = [d for d in draws if d.dataset == name]
        if len(ds) < 2 or any(d.pairs.images != ds[0].pairs.images for d in ds):
            continue  # needs caption draws: the same images, another caption besides draw 0's
        f = prepare_features([], ds[0].pairs, models=[*twins, *twins.values()], **options)
        rel = sanity.relevance(sanity.salient_words(list(zip(*(d.pairs.texts for d in ds[1:]))),
                                                    min_captions=min(2, len(ds) - 1)))
        df = sanity.sanity_check({m: f[m].values.numpy() for m in f}, twins, rel, k=k, seed=seed,
                                 layers={m: f[m].layer_labels for m in twins})
        results.write(df.rename(columns={"model": "model_x", "twin": "model_y", "layer": "layer_x",
                                         "margin": "score"}), chapter=chapter, params=params, dataset=name, draw=0,
                      metric=f"precision@{k}", quantity="sanity", k=k, n=len(rel), seed=seed)
        frames.append(df.assign(dataset=name))
        for _, r in df[~df["passes"]].iterrows():
            flagged[r["model"]] = (f"{r['model']} fails the sanity check on {name} (precision@{k} margin over its "
                                   f"random-init twin {format_interval(r['margin'], r['low'], r['high'])})")
    if not frames:
        return pd.DataFrame(), flagged, "No dataset here has caption draws, so the sanity check did not run."
    t = pd.concat(frames, ignore_index=True)
    return pd.DataFrame({
        "dataset": t["dataset"], "model": t["model"], "chance": t["chance"].map(format_number),
        f"P@{k} (held-out layer)": [f"{format_number(p)} at {layer}" for p, layer in zip(t["P@k"], t["layer"])],
        "twin": t["twin P@k"].map(format_number),
        "margin over twin": [format_interval(*v) for v in zip(t["margin"], t["low"], t["high"])],
        f"final layer: P@{k}, margin": [f"{format_number(p)}, {format_interval(*v)}" for p, *v in
                                        zip(t["final P@k"], t["final margin"], t["final low"], t["final high"])],
        "passes": t["passes"].map({True: "yes", False: "**no**"})}).set_index(["dataset", "model"]), flagged, \
        sanity_text(t, flagged)


def sanity_text(t: pd.DataFrame, flagged) -> str:
    """The paragraph under the sanity table: the models that fail (``flagged``) or the smallest margin, and each
    model whose final layer keeps less than half of its held-out margin (``t``: the checks of every dataset)."""
    weak = t[t["final margin"] < t["margin"] / 2]
    low = t.loc[t["margin"].idxmin()]
    return ((f"**Models that fail it**: {'; '.join(flagged.values())}. " if flagged else
             f"Every model beats its random-init twin on every dataset (smallest margin "
             f"{format_number(low['margin'])}, {low['model']} on {low['dataset']}). ")
            + "".join(f"At its final layer {m} keeps less than half of its held-out margin: " + "; ".join(
                f"{format_interval(r['final margin'], r['final low'], r['final high'])} on {r['dataset']}"
                for _, r in g.iterrows()) + ". " for m, g in weak.groupby("model")))


def unimodal_first(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """``(read, beside, note)``: the comparisons a claim about unimodal models reads (no caption-trained member,
    :func:`caption_trained`) and those shown beside it. When only caption-trained ones ran, they are read, and
    the note says so."""
    mask = np.array([bool(caption_trained(p)) for p in rows["pair"]], dtype=bool) if len(rows) else np.zeros(0, bool)
    read, beside = rows[~mask], rows[mask]
    if len(beside) and not len(read):
        return beside, beside.iloc[:0], ("only pairs with a caption-trained text encoder ran, so this reads them: "
                                         + caption_trained(beside["pair"].iloc[0]))
    return read, beside, ""


def comparisons_of(summary: pd.DataFrame, regime: str | None = None) -> pd.DataFrame:
    """The trained comparisons (not floors) of a held-out summary, optionally of one regime."""
    if summary.empty:
        return summary
    c = summary[summary["quantity"] == QUANTITY]
    return c if regime is None else c[c["regime"] == regime]


def above_chance(r: pd.Series) -> Test:
    """Held-out peak above chance k/(N-1) (its interval's lower bound above it)."""
    ch = float(r["chance"])
    return Test(f"{r['pair']} held-out peak − chance", float(r["score"]) - ch, float(r["ci_low"]) - ch,
                float(r["ci_high"]) - ch, 0.0)


def above_floors(summary: pd.DataFrame, r: pd.Series, kinds=None) -> list[Test]:
    """One test per floor of the comparison ``r`` (optionally of some kinds): paired margin above 0, marked as
    this book's control (:func:`prh_lib.stats.decision.readings`)."""
    fm = floor_margins(summary, r["pair"])
    if kinds is not None:
        fm = fm[fm["kind"].isin(kinds)]
    return [Test(f"{r['pair']} − {f['floor']} ({f['kind']} floor)", f["margin"], f["low"], f["high"], 0.0,
                 control=True) for _, f in fm.iterrows()]


def above_pair(summary: pd.DataFrame, a: str, b: str) -> Test:
    """Paired difference ``a − b`` of two comparisons on the same images, above 0."""
    m = margin(summary, a, b)
    return Test(f"{a} − {b}", m["estimate"], m["low"], m["high"], 0.0)


def ratio_above(summary: pd.DataFrame, a: str, b: str, threshold: float) -> Test:
    """Paired ratio ``a / b`` of two held-out peaks above ``threshold``."""
    m = margin(summary, a, b, ratio=True)
    return Test(f"{a} / {b}", m["estimate"], m["low"], m["high"], threshold)


def depth_tests(r: pd.Series, threshold: float, side: str) -> list[Test]:
    """The held-out peak's mean relative depth on each side against ``threshold`` (with intervals)."""
    return [Test(f"{r['pair']} depth of {r[f'model_{s}']}", float(r[f"depth_{s}"]),
                 float(r[f"depth_{s}_low"]), float(r[f"depth_{s}_high"]), threshold, side)
            for s in ("x", "y")]


def late_over_early(r: pd.Series) -> Test:
    """Share of the held-out selections in the late third of both models minus the share in the early third of
    both (relative depth > 2/3, resp. < 1/3), with its interval over images, above 0: a mean depth above 0.5 can
    average a late and an early choice, this cannot."""
    return Test(f"{r['pair']} late-third minus early-third share of selections", float(r["late_minus_early"]),
                float(r["lme_low"]), float(r["lme_high"]), 0.0)


def peak_above_final(r: pd.Series) -> Test:
    """Held-out peak minus the final-layer pair's score on the same halves (paired), above 0."""
    lo, hi = paired_interval(r["reps"], r["final_reps"], estimates=(r["score"], r["final_half"]))
    return Test(f"{r['pair']} held-out peak − final layers", float(r["score"]) - float(r["final_half"]),
                lo, hi, 0.0)


def power_note(tests) -> str:
    """The note on what ``tests`` could detect, the figure attached to the test it belongs to.

    ``"smallest difference from 0 this build detects at 80 % power, on its widest interval (<test name>):
    0.070"``, for the difference tests against 0 (:meth:`prh_lib.stats.decision.Test.detectable`); "" when none
    has a finite interval or when every such test is undecided (each undecided test already names its own figure
    in :func:`prh_lib.pages.claims.combine`'s note, so a second, unattached figure would only compete with it).
    """
    cand = [(t.detectable(), t) for t in tests if t.threshold == 0 and t.side == ">"]
    cand = [(d, t) for d, t in cand if np.isfinite(d)]
    if not cand:
        return ""
    d, t = max(cand, key=lambda c: c[0])
    if t.outcome == "inconclusive":  # combine's note already gives this test's figure, next to its name
        return ""
    return f"smallest difference from 0 this build detects at 80 % power, on its widest interval ({t.name}): {d:.3f}"


def held_text(r: pd.Series) -> str:
    """``"held-out 0.151 [0.120, 0.180] (in-sample on the halves 0.170)"`` for a summary row."""
    return (f"held-out {format_interval(r['score'], r['ci_low'], r['ci_high'])} (in-sample on the same halves "
            f"{r['insample_half']:.3f})")


def fisher_n_for_r(r: float, *, alpha: float = 0.05, power: float = 0.8) -> int:
    """Independent models needed to detect a Pearson correlation ``r`` (two-sided, Fisher z approximation).

    ``n = ((z_{1-alpha/2} + z_power) / atanh(r))^2 + 3``, rounded up: 16 for the paper's r = 0.66 at 80 % power.

    References
    ----------
    Cohen (1988), "Statistical Power Analysis for the Behavioral Sciences", Ch. 3.
    """
    from scipy.stats import norm

    if not -1 < r < 1 or r == 0:
        raise ValueError(f"r must be in (-1, 1) and not 0; got {r}")
    z = norm.ppf(1 - alpha / 2) + norm.ppf(power)
    return int(np.ceil((z / np.arctanh(abs(r))) ** 2 + 3))
