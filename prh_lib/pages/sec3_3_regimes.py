"""The four regimes of cross-representation alignment (Herbst et al., Section 3.3, Figure 5, Appendix E).

Mutual k-NN alignment of two models is compared across four regimes:

- ``"random-init"``: vision x language pairs with both models re-initialised with seeded random weights (same
  architectures; names ``"<model>@random-init:<seed>"``, see :func:`prh_lib.models.load_model`);
- ``"unimodal"``: trained vision x trained language models, the paper's main subject;
- ``"aligned"``: the two towers of an explicitly aligned image-text model (CLIP, SigLIP) on image-caption pairs (names
  ``"<model>:vision"``, ``"<model>:text"``); their last layer is the joint embedding space (``"projection"``);
- ``"same-modality"``: vision x vision and language x language pairs.

The comparisons and the study loop (:func:`run_study`: every comparison and its control floors on every draw, written to
the results table) live in :mod:`prh_lib.analysis.regimes` (re-exported); this module reads the results table back and
holds the page (aggregates over draws, figure data, tables, prose, verdicts, record). It never loads models or plots.

References
----------
Herbst, Roschmann, Bouniot, Akata. "Where Does Alignment Emerge and What Does It Mean? A Closer Look at the Platonic
Representation Hypothesis", Section 3.3, Figure 5, Appendix E. Huh, Cheung, Wang, Isola (2024). "The Platonic
Representation Hypothesis", ICML (mutual k-NN). Groeger, Wen, Brbic (2026), arXiv:2602.14486, Sec. 5 (calibration).
"""

from __future__ import annotations

import contextlib
import io
from typing import Sequence

import numpy as np
import pandas as pd

from prh_lib.analysis.heldout import floor_margins, margin  # noqa: F401 (the chapter's namespace)
from prh_lib.formatting import format_interval

# the comparisons and the study, re-exported: this module stays the chapter's one namespace
from prh_lib.analysis.regimes import (Comparison, PEAK, REGIMES, REGIME_LABELS, SHUFFLED,  # noqa: F401
    comparison_table, regime_comparisons, run_study)
from prh_lib import formatting, results
from prh_lib.stats.decision import Test


# --------------------------------------------------------------------------------- from the results table


def study_summary(df: pd.DataFrame, *, quantity: str = PEAK) -> pd.DataFrame:
    """Mean ± std over draws of one quantity of every comparison, per dataset (from the results table).

    Parameters
    ----------
    df : DataFrame
        Rows of the results table loaded with ``expand_extra=True`` (columns ``regime``, ``comparison``).
    quantity : str
        ``"peak"`` (maximum over layer pairs), ``"final"``, ``"projection"`` or ``"control:shuffled"``.

    Returns
    -------
    pandas.DataFrame
        One row per dataset and comparison (in the order of :data:`REGIMES`, then as written): ``dataset``, ``n``,
        ``k``, ``regime``, ``comparison``, ``model_x``, ``model_y``, ``score_mean``, ``score_std``, ``calibrated_mean``,
        ``calibrated_std``, ``p_max`` (largest p over draws), ``n_draws``, ``single_draw``, ``chance`` (k/(N-1)).
    """
    part = df[df["quantity"] == quantity]
    out = _over_draws(part, ["dataset", "n", "k", "regime", "comparison", "model_x", "model_y"])
    if out.empty:
        return out
    out["chance"] = out["k"].astype(float) / (out["n"].astype(float) - 1)
    datasets = list(dict.fromkeys(df["dataset"]))
    written = {c: i for i, c in enumerate(dict.fromkeys(df["comparison"]))}
    out["_d"] = out["dataset"].map({d: i for i, d in enumerate(datasets)})
    out["_r"] = out["regime"].map({r: i for i, r in enumerate(REGIMES)})
    out["_c"] = out["comparison"].map(written)
    return out.sort_values(["_d", "_r", "_c"]).drop(columns=["_d", "_r", "_c"]).reset_index(drop=True)


def floor_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Mean ± std over draws of every control floor (rows ``quantity="control:<kind>"`` but the shuffled one).

    Returns
    -------
    pandas.DataFrame
        ``dataset``, ``n``, ``k``, ``quantity``, ``kind``, ``model_x``, ``model_y``, ``score_mean``,
        ``score_std``, ``calibrated_mean``, ``calibrated_std``, ``p_max``, ``n_draws``, ``single_draw``.
    """
    part = df[df["quantity"].str.startswith("control:") & (df["quantity"] != SHUFFLED)]
    return _over_draws(part, ["dataset", "n", "k", "quantity", "kind", "model_x", "model_y"])


def _over_draws(part: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Mean ± std over draws of score and calibrated score per ``by`` group, with ``p_max`` (the largest p)."""
    out = results.aggregate(part, by=by, values=["score", "calibrated", "p"])
    if out.empty:
        return out
    out["p_max"] = part.groupby(by, dropna=False, sort=True)["p"].max().to_numpy()
    return out.drop(columns=["p_mean", "p_std"])


def with_floors(summary: pd.DataFrame, floors: pd.DataFrame, modality: dict, *, control_seed: int = 0,
                svd_components: int | None = 100) -> pd.DataFrame:
    """``summary`` with, for every trained comparison, its highest control floor (mean over draws).

    Adds ``floor`` (the highest mean floor score of the pair's controls,
    :func:`prh_lib.analysis.controls.floors_of_pair`), ``floor kind`` and ``above floors`` (mean score above the highest
    floor by more than the larger of the two standard deviations over draws, or by any margin with one draw).
    Random-init and aligned comparisons get NaN / None."""
    from prh_lib.analysis.controls import floors_of_pair

    out = summary.copy()
    out["floor"], out["floor kind"], out["above floors"] = np.nan, None, None
    for i, r in out.iterrows():
        if r["regime"] not in ("unimodal", "same-modality") or floors.empty:
            continue
        f = floors_of_pair(floors[floors["dataset"] == r["dataset"]], r["model_x"], r["model_y"], modality,
                           seed=control_seed, svd_components=svd_components)
        if f.empty:
            continue
        top = f.loc[f["score_mean"].idxmax()]
        spread = np.nanmax([r["score_std"], top["score_std"], 0.0])
        out.at[i, "floor"], out.at[i, "floor kind"] = float(top["score_mean"]), top["kind"]
        out.at[i, "above floors"] = bool(r["score_mean"] - top["score_mean"] > spread)
    return out


def regime_means(summary: pd.DataFrame) -> pd.DataFrame:
    """Per dataset and regime: comparisons, and the mean (over comparisons) of their draw means.

    Returns
    -------
    pandas.DataFrame
        ``dataset``, ``regime``, ``comparisons``, ``score``, ``score min``, ``score max``, ``calibrated``,
        ``chance``, ``n_draws`` (fewest draws of a comparison).
    """
    rows = []
    for dataset, part in summary.groupby("dataset", sort=False):
        for key in REGIMES:
            g = part[part["regime"] == key]
            rows.append({"dataset": dataset, "regime": key, "comparisons": len(g),
                         "score": g["score_mean"].mean() if len(g) else np.nan,
                         "score min": g["score_mean"].min() if len(g) else np.nan,
                         "score max": g["score_mean"].max() if len(g) else np.nan,
                         "calibrated": g["calibrated_mean"].mean() if len(g) else np.nan,
                         "chance": float(part["chance"].iloc[0]),
                         "n_draws": int(g["n_draws"].min()) if len(g) else 0})
    return pd.DataFrame(rows)


def floor_bands(floors: pd.DataFrame, modality: dict) -> dict:
    """The control floors of vision × language pairs as bands, per dataset and kind (for the figure).

    Returns
    -------
    dict
        ``{dataset: {kind: (mean, low, high)}}`` over the vision × language controls of that kind (``mean`` of their
        draw means; ``low``/``high`` their extremes), for the score and, under ``(dataset, "calibrated")``, the
        calibrated score.
    """
    def base(m):
        return m.split("@random-init:", 1)[0]

    def is_vl(row):
        mods = {modality.get(base(row["model_x"]), "language"), modality.get(base(row["model_y"]), "language")}
        return mods == {"vision", "language"}

    out = {}
    if floors.empty:
        return out
    vl = floors[[is_vl(r) for _, r in floors.iterrows()]]
    for dataset, part in vl.groupby("dataset", sort=False):
        for col, key in (("score_mean", dataset), ("calibrated_mean", (dataset, "calibrated"))):
            out[key] = {kind: (float(g[col].mean()), float(g[col].min()), float(g[col].max()))
                        for kind, g in part.groupby("kind", sort=False)}
    return out


def figure_groups(summary: pd.DataFrame, draws, *, per_figure: int = 2) -> list[dict]:
    """Figure 5's points (:func:`regime_groups_over_draws`) split into figures of at most ``per_figure`` datasets
    (two panels each, raw and calibrated), the dataset the verdicts read first
    (:func:`prh_lib.data.study.headline_dataset`)."""
    from prh_lib.data.study import headline_dataset

    groups = regime_groups_over_draws(summary)
    first = headline_dataset(draws)
    order = sorted(groups, key=lambda d: d != first)
    return [{d: groups[d] for d in order[i:i + per_figure]} for i in range(0, len(order), per_figure)]


def regime_groups_over_draws(summary: pd.DataFrame, *, regimes: Sequence[str] = REGIMES) -> dict:
    """The points of the regime figure per dataset: mean over draws ± std over draws, raw and calibrated.

    Returns
    -------
    dict
        ``{dataset: (raw, calibrated)}``; each maps regime label -> comparison label -> ``(mean, mean - std,
        mean + std)`` (NaN bounds with one draw: no error bar); every regime is a key, empty when unmeasured.
    """
    out = {}
    for dataset, part in summary.groupby("dataset", sort=False):
        raw, cal = {}, {}
        for key in regimes:
            g = part[part["regime"] == key]
            label = REGIME_LABELS.get(key, key)
            raw[label] = {r["comparison"]: (r["score_mean"], r["score_mean"] - r["score_std"],
                                            r["score_mean"] + r["score_std"]) for _, r in g.iterrows()}
            cal[label] = {r["comparison"]: (r["calibrated_mean"], r["calibrated_mean"] - r["calibrated_std"],
                                            r["calibrated_mean"] + r["calibrated_std"]) for _, r in g.iterrows()}
        out[dataset] = (raw, cal)
    return out


def regime_floor_marks(summary: pd.DataFrame, *, regimes: Sequence[str] = REGIMES) -> dict:
    """Each regime's highest own floor, per dataset, for Figure 5 (every regime, same-modality included).

    Returns
    -------
    dict
        ``{dataset: {regime label: (floor, kind)}}``: the highest ``floor`` of :func:`with_floors` over the
        regime's comparisons (the random-init twins of a same-modality pair, the bag of words of a unimodal
        one); regimes without floors (random-init, aligned without controls) are left out.
    """
    out = {}
    if "floor" not in summary:
        return out
    for dataset, part in summary.groupby("dataset", sort=False):
        marks = {}
        for key in regimes:
            g = part[(part["regime"] == key) & np.isfinite(part["floor"].astype(float))]
            if len(g):
                top = g.loc[g["floor"].astype(float).idxmax()]
                marks[REGIME_LABELS.get(key, key)] = (float(top["floor"]), str(top["floor kind"]))
        out[dataset] = marks
    return out


def _ms(mean, std, n_draws, digits=3):
    return formatting.format_mean_std(float(mean), float(std), int(n_draws), digits=digits)


def page_table(summary: pd.DataFrame, *, n_permutations: int) -> pd.DataFrame:
    """The page's table of every comparison: mean ± std over draws beside chance, the highest floor, calibrated, p.

    ``summary`` is :func:`with_floors` of :func:`study_summary`. Columns: ``dataset``, ``regime``, ``comparison``, ``max
    over layer pairs``, ``× chance``, ``highest floor``, ``calibrated``, ``p (largest over draws)``."""
    from prh_lib.formatting import format_p

    rows = []
    for _, r in summary.iterrows():
        floor = (f"{r['floor']:.3f} ({r['floor kind']})" if np.isfinite(r.get("floor", np.nan)) else "–")
        rows.append({"dataset": r["dataset"], "regime": REGIME_LABELS.get(r["regime"], r["regime"]),
                     "comparison": r["comparison"],
                     "max over layer pairs": _ms(r["score_mean"], r["score_std"], r["n_draws"]),
                     "× chance": f"{r['score_mean'] / r['chance']:.1f} (chance {r['chance']:.3f})",
                     "chance-corrected": f"{_cc(r['score_mean'], r['chance']):.3f}",
                     "highest floor": floor,
                     "calibrated": _ms(r["calibrated_mean"], r["calibrated_std"], r["n_draws"]),
                     "p (largest over draws)": format_p(r["p_max"], n_permutations)})
    return pd.DataFrame(rows)


def floor_table(floors: pd.DataFrame, *, chance: dict, n_permutations: int) -> pd.DataFrame:
    """The page's table of control floors: dataset, control, features compared, mean ± std, × chance, calibrated, p."""
    from prh_lib.formatting import format_p
    from prh_lib.analysis.controls import CONTROL_LABELS

    rows = []
    for _, r in floors.iterrows():
        c = chance.get(r["dataset"], np.nan)
        rows.append({"dataset": r["dataset"], "control": CONTROL_LABELS.get(r["kind"], r["kind"]),
                     "features": f"{r['model_x']} × {r['model_y']}",
                     "max over layer pairs": _ms(r["score_mean"], r["score_std"], r["n_draws"]),
                     "× chance": f"{r['score_mean'] / c:.1f}",
                     "chance-corrected": f"{_cc(r['score_mean'], c):.3f}",
                     "calibrated": _ms(r["calibrated_mean"], r["calibrated_std"], r["n_draws"]),
                     "p (largest over draws)": format_p(r["p_max"], n_permutations)})
    return pd.DataFrame(rows)


#: aligned models of the paper's Table 1: claim id -> (name fragment, dataset of the paper's value)
_ALIGNED_CLAIMS = {"3.3/clip": ("clip-vit-large-patch14", "coco"), "3.3/siglip": ("siglip2", "coco"),
                   "3.3/qwen3-vl": ("Qwen3-VL", "docci")}


#: Each 3.3 claim's test, in one sentence (shown on the page and the front page)
RULES = {
    "3.3/unimodal": "the paper's models at N = 1024, k = 10: every unimodal pair's held-out peak above 0.3 (interval "
                    "included); other models: above 2× chance; and in both, above each of its floors "
                    "(paired 95 % intervals over images)",
    "3.3/same-modality": "every same-modality pair's held-out peak beats the best unimodal pair and each of its own "
                         "floors (random-init twins; bag of words for language pairs), paired intervals above 0",
    "3.3/random-init": "every random-init comparison (both models random-init, vision × language) has its held-out "
                       "peak below the near-chance bound (interval included)",
}


def random_vision_pointer(heldout: pd.DataFrame, same: pd.DataFrame, chance: float) -> str:
    """The sentence that bounds ``3.3/random-init``'s scope: vision × language pairs with both models random-init; a
    random-init vision model against a *trained* vision model is a floor that can score high, tested in
    ``3.1/vision-vision`` and ``3.3/same-modality``.

    With the held-out floors of the same-modality comparisons ``same`` (kind ``"random-vision"`` or else any random-init
    twin of a vision-vision pair), the sentence names the highest one and its score."""
    best = None
    for _, r in same.iterrows():
        fm = floor_margins(heldout, r["pair"]) if len(heldout) else pd.DataFrame()
        if fm.empty:
            continue
        fm = fm[fm["kind"].isin(("random-vision", "random-init"))
                & fm["floor"].str.contains("@random-init", regex=False)]
        vis = fm[fm["kind"] == "random-vision"]
        fm = vis if len(vis) else fm
        if len(fm) and (best is None or fm.iloc[0]["floor_score"] > best["floor_score"]):
            best = fm.iloc[0]
    shown = (f" (highest here: {best['floor']} {best['floor_score']:.3f}, {best['floor_score'] / chance:.1f}× chance)"
             if best is not None else "")
    return ("this claim covers vision × language pairs with both models random-init only; a random-init vision "
            f"model compared with a trained vision model can score far above chance{shown}: those pairs are "
            "floors, tested in 3.1/vision-vision and 3.3/same-modality")


def regime_claims(summary: pd.DataFrame, projection: pd.DataFrame | None = None, *, heldout: pd.DataFrame | None = None,
                  headline: str | None = None, near_chance: float = 2.0, flagged=None) -> list[dict]:
    """Rows of "The paper and this build" for the claims ``3.3/*``, computed from the aggregated numbers.

    Parameters
    ----------
    summary : DataFrame
        :func:`with_floors` of :func:`study_summary` (``"peak"`` rows; in-sample, shown beside the held-out).
    projection : DataFrame, optional
        :func:`study_summary` of the ``"projection"`` rows (aligned models), for Table 1 and App. E.
    heldout : DataFrame, optional
        :func:`prh_lib.analysis.heldout.heldout_summary` of the headline dataset: the verdicts' estimates (held-out
        peaks with intervals over images and paired floor margins, :data:`RULES`); without it the claims of Figure 5 are
        not tested.
    headline : str, optional
        Dataset the claims of Figure 5 are read on (default: ``"coco"`` when present, as in the paper's Table 1, else
        the first dataset of ``summary``).
    near_chance : float
        "Near chance" is read as a held-out peak below ``near_chance`` × k/(N-1).
    flagged : mapping of str to str, optional
        As in :func:`prh_lib.pages.sec3_1_layerwise.findings`.

    Returns
    -------
    list of dict
        :func:`prh_lib.pages.claims.finding` rows; a claim without numbers here is left out (the claims table adds it as
        not testable offline).
    """
    from prh_lib.pages import claims
    from prh_lib.pages import verdicts as V

    rows = []
    if summary.empty:
        return rows
    names = list(dict.fromkeys(summary["dataset"]))
    headline = headline or ("coco" if "coco" in names else names[0])
    s = summary[summary["dataset"] == headline]
    chance = float(s["chance"].iloc[0])
    n, k = int(s["n"].iloc[0]), int(s["k"].iloc[0])
    paper_n = n == 1024 and k == 10  # the paper's setting: values compare (offline models never do)
    where = f"{headline}, N = {n}, k = {k}"
    h = heldout if heldout is not None else pd.DataFrame()
    comps = V.without_flagged(V.comparisons_of(h), flagged or {})
    regime_of = {r["comparison"]: r["regime"] for _, r in s.iterrows()}
    if len(comps):
        comps = comps.assign(regime3=[regime_of.get(p, regime_of.get(f"{p} (seed 0)", "")) for p in comps["pair"]])
        comps.loc[comps["pair"].str.contains("@random-init:"), "regime3"] = "random-init"
    uni, uni_beside, only_note = V.unimodal_first(comps[comps["regime3"] == "unimodal"] if len(comps) else comps)
    same = comps[comps["regime3"] == "same-modality"] if len(comps) else comps
    rnd = comps[comps["regime3"] == "random-init"] if len(comps) else comps

    def row(cid, tests, this_build, **kw):
        power = V.power_note(tests)
        note = "; ".join(t for t in (kw.pop("note", ""), power, V.model_caveats(this_build, flagged)) if t)
        rows.append(claims.finding(cid, this_build=this_build, tests=tests, rule=RULES[cid], note=note, **kw))

    if comps.empty:
        why = "no held-out estimates in this run (heldout_boot = 0)"
        rows += [claims.finding(cid, this_build=None, holds=None, note=why) for cid in RULES]
    if len(uni):
        best = uni.loc[uni["score"].idxmax()]
        tests = []
        for _, r in uni.iterrows():
            if paper_n:  # the paper's absolute 0.3 only for its own models at its N
                tests.append(Test(f"{r['pair']} held-out peak", r["score"], r["ci_low"], r["ci_high"], 0.3))
            else:
                tests.append(Test(f"{r['pair']} held-out peak − 2× chance", r["score"] - 2 * chance,
                                  r["ci_low"] - 2 * chance, r["ci_high"] - 2 * chance, 0.0))
            tests += V.above_floors(h, r)
        note = ("" if paper_n else
                f"the paper's absolute 0.3 is for its models (up to 8B parameters) at N = 1024 and is not applied to "
                f"these small models at N = {n}, k = {k} (chance {chance:.4f}); read here, relatively, as: every "
                "unimodal pair above 2× chance, and above its floors")
        fm = floor_margins(h, best["pair"])
        row("3.3/unimodal", tests,
            f"best {best['pair']}: {V.held_text(best)}, {best['score'] / chance:.1f}× chance"
            + (f"; highest floor {fm.iloc[0]['floor_score']:.3f} ({fm.iloc[0]['kind']}), margin "
               f"{format_interval(fm.iloc[0]['margin'], fm.iloc[0]['low'], fm.iloc[0]['high'])}" if len(fm) else "")
            + f" ({where})" + ("; beside, with a text encoder trained on caption pairs (not a unimodal control): "
                                + "; ".join(f"{r['pair']} {format_interval(r['score'], r['ci_low'], r['ci_high'])}"
                                            for _, r in uni_beside.iterrows()) if len(uni_beside) else ""),
            value=float(best["score"]), interval=(float(best["ci_low"]), float(best["ci_high"])),
            comparable=paper_n and headline in ("coco", "docci"), note="; ".join(t for t in (only_note, note) if t),
            headline={"estimate": best["score"], "low": best["ci_low"], "high": best["ci_high"],
                      "label": f"{best['pair']}, {best['score'] / chance:.1f}× chance"
                               + ("" if paper_n else "; read in kind as above 2× chance")})
    if len(same) and len(uni):
        best_uni = uni.loc[uni["score"].idxmax()]
        tests = []
        for _, r in same.iterrows():
            tests.append(V.above_pair(h, r["pair"], best_uni["pair"]))
            tests += V.above_floors(h, r)
        m = float(same["score"].mean())
        row("3.3/same-modality", tests,
            "; ".join(f"{r['pair']} {format_interval(r['score'], r['ci_low'], r['ci_high'])}"
                      + (f" (highest floor {fm.iloc[0]['floor_score']:.3f}, {fm.iloc[0]['kind']})"
                         if len(fm := floor_margins(h, r["pair"])) else "") for _, r in same.iterrows())
            + f"; best unimodal {best_uni['score']:.3f} ({where})",
            value=m, comparable=paper_n,
            note="" if paper_n else "read here as: every same-modality pair above every unimodal pair and its floors",
            headline={"estimate": float(same["score"].min()), "label": f"lowest same-modality pair; best unimodal "
                                                                        f"{best_uni['score']:.3f}"})
    if len(rnd):
        bound = near_chance * chance
        tests = [Test(f"{r['pair']} held-out peak", r["score"], r["ci_low"], r["ci_high"], bound, "<")
                 for _, r in rnd.iterrows()]
        m = float(rnd["score"].mean())
        row("3.3/random-init", tests,
            f"mean held-out {m:.3f} = {m / chance:.1f}× chance over {len(rnd)} comparisons, highest "
            f"{rnd['score'].max() / chance:.1f}× ({where})", comparable=paper_n,
            headline={"estimate": m, "label": f"mean, {m / chance:.1f}× chance {chance:.3f}"},
            note=f"near chance read as below {near_chance:g}× chance; " + random_vision_pointer(h, same, chance))
    if projection is not None and len(projection):
        for cid, (fragment, dataset) in _ALIGNED_CLAIMS.items():
            part = projection[projection["model_x"].str.contains(fragment, regex=False)
                              & (projection["dataset"] == dataset)]
            u = summary[(summary["dataset"] == dataset) & (summary["regime"] == "unimodal")]
            if part.empty or u.empty:
                continue
            p = part.iloc[0]
            above = bool(u["score_mean"].max() > p["score_mean"])
            holds = (not above) if cid == "3.3/qwen3-vl" else above
            rows.append(claims.finding(cid, holds=holds, value=float(p["score_mean"]),
                                       comparable=int(p["n"]) == 1024 and int(p["k"]) == 10,
                                       this_build=(f"projection {_ms(p['score_mean'], p['score_std'], p['n_draws'])}; "
                                                   f"best unimodal {u['score_mean'].max():.3f} ({dataset})")))
        both = projection.merge(summary[["dataset", "comparison", "score_mean"]], on=["dataset", "comparison"],
                                suffixes=("", "_max"))
        if len(both):
            gap = float((both["score_mean_max"] - both["score_mean"]).max())
            rows.append(claims.finding("3.3/projection", holds=gap <= 0.016, value=gap,
                                       comparable=bool((both["n"] == 1024).all()),
                                       this_build=f"largest gap best layer pair - projection {gap:.3f}"))
    return rows


def study_record(summary: pd.DataFrame, floors: pd.DataFrame, means: pd.DataFrame, claim_rows: list[dict], *,
                 draws, comparisons: Sequence[Comparison], aligned_models: Sequence[str], params: dict) -> dict:
    """What the Section 3.3 page records for the book and the tests (:func:`prh_lib.pages.report.record`).

    Holds the draws, the comparisons, the aggregated tables, the claims rows and ``params_hash`` (to read the same rows
    back from the results table)."""
    from prh_lib.results import params_hash as _hash

    params_hash = _hash(params)
    return {"draws": [{"dataset": d.dataset, "draw": d.draw, "seed": d.seed, "n": len(d.pairs),
                       "repeatable": d.repeatable, "what_varies": d.what_varies} for d in draws],
            "comparisons": [c._asdict() for c in comparisons], "aligned_models": list(aligned_models),
            "summary": summary.to_dict(orient="records"), "floors": floors.to_dict(orient="records"),
            "means": means.to_dict(orient="records"), "claims": claim_rows, "params_hash": params_hash}


# ------------------------------------------------------------------------------------------------- generated prose


def _cc(score: float, chance: float) -> float:
    """Chance-corrected score (s − c)/(1 − c): 0 at chance, 1 for identical neighbourhoods."""
    return (score - chance) / (1 - chance)


def describe_study(summary: pd.DataFrame, bands: dict, *, missing_note: "str | dict" = "not run with these parameters",
                   word_floor: float = 1.5, heldout: pd.DataFrame | None = None) -> str:
    """Markdown reading each dataset's regimes against chance and the control floors, in figures.

    Parameters
    ----------
    summary : DataFrame
        :func:`with_floors` of :func:`study_summary`.
    bands : dict
        :func:`floor_bands`.
    missing_note : str or dict of str to str
        Said of a regime without comparisons; a dict gives it per dataset ("not run with these parameters" for others).
    word_floor : float
        A floor is said to come partly from the words when trained vision × random-init language reaches this multiple
        of chance.
    heldout : DataFrame, optional
        :func:`prh_lib.analysis.heldout.heldout_summary` (one dataset). For its dataset, the comparisons beating their
        floors are counted from the held-out paired margins the verdicts use (:func:`held_out_floor_count`); for others,
        from in-sample means, labelled so.

    Returns
    -------
    str
        Per dataset: one list item per regime (mean of the comparisons' means over draws, × chance, range), the floors
        (× chance), how many trained comparisons clear every floor, and the order.
    """
    from prh_lib.analysis.controls import CONTROL_LABELS

    out = []
    for dataset, part in summary.groupby("dataset", sort=False):
        chance = float(part["chance"].iloc[0])
        nd = int(part["n_draws"].min())
        draws = f"{nd} draws" if nd > 1 else "one draw, which cannot be repeated"
        out.append(f"**{dataset}** (N = {int(part['n'].iloc[0])}, chance {chance:.3f}, {draws}):\n")
        means = {}
        for key in REGIMES:
            g = part[part["regime"] == key]
            if not len(g):
                note = (missing_note.get(dataset, "not run with these parameters") if isinstance(missing_note, dict)
                        else missing_note)
                out.append(f"- {REGIME_LABELS[key]}: {note}.")
                continue
            m = float(g["score_mean"].mean())
            means[key] = m
            rng = (f", range {g['score_mean'].min():.3f}-{g['score_mean'].max():.3f} over {len(g)} comparisons"
                   if len(g) > 1 else "")
            out.append(f"- {REGIME_LABELS[key]}: {m:.3f} ({m / chance:.1f}× chance, chance-corrected "
                       f"{_cc(m, chance):.3f}{rng}); calibrated "
                       f"{g['calibrated_mean'].mean():.3f}.")
        band = bands.get(dataset, {})
        if band:
            parts = [f"{CONTROL_LABELS.get(kind, kind)} {mean:.3f} ({mean / chance:.1f}× chance, chance-corrected "
                     f"{_cc(mean, chance):.3f})"
                     for kind, (mean, _, _) in band.items()]
            out.append("- control floors of the vision × language pairs (mean over pairs): " + "; ".join(parts) + ".")
            rl = band.get("random-language")
            rl_cal = bands.get((dataset, "calibrated"), {}).get("random-language")
            if rl and rl[0] >= word_floor * chance and rl_cal and rl_cal[0] > 0.01:
                out.append(f"- The trained-vision × random-LM floor is {rl[0] / chance:.1f}× chance (calibrated "
                           f"{rl_cal[0]:.3f}): part of any cross-modal score comes from the words (a random-init "
                           "language model keeps token identity), not from learned alignment.")
            elif rl and rl[0] >= word_floor * chance:
                out.append(f"- The trained-vision × random-LM floor is {rl[0] / chance:.1f}× chance, but its "
                           f"calibrated score is {rl_cal[0] if rl_cal else float('nan'):.3f}: the excess over chance "
                           "is what choosing the best of many layer pairs gives, not evidence of shared structure.")
            elif rl:
                out.append(f"- The trained-vision × random-LM floor is {rl[0] / chance:.1f}× chance, close to chance.")
        held_line = held_out_floor_count(heldout, dataset) if heldout is not None else ""
        trained = part[part["above floors"].notna()] if "above floors" in part else part.iloc[:0]
        if held_line:
            out.append(held_line)
        elif len(trained):
            clear = trained[trained["above floors"].astype(bool)]
            missing = ", ".join(f"{r['comparison']} ({r['score_mean']:.3f} against {r['floor']:.3f}, {r['floor kind']})"
                                for _, r in trained[~trained["above floors"].astype(bool)].iterrows())
            out.append(f"- In-sample, {len(clear)} of {len(trained)} trained comparisons lie above their highest "
                       "control floor by more than the spread over draws" + (f" (not: {missing})" if missing else "")
                       + ". This describes the means; it is not the test: the verdicts below read held-out peaks "
                       "against each floor with paired intervals over images.")
        if len(means) > 1:
            order = " < ".join(f"{REGIME_LABELS[k]} ({v:.3f})" for k, v in sorted(means.items(), key=lambda kv: kv[1]))
            out.append(f"- Order of the regime means: {order}.")
        out.append("")
    return "\n".join(out)


def held_out_floor_count(heldout: pd.DataFrame, dataset: str) -> str:
    """One Markdown item: how many trained comparisons beat *every* floor by a paired interval above 0.

    Counted from :func:`prh_lib.analysis.heldout.floor_margins` of each trained comparison with floors (the test
    :func:`prh_lib.pages.verdicts.above_floors` gives the verdicts): it clears its floors when every paired 95 %
    interval of ``pair − floor`` over images lies above 0. Returns ``""`` when ``heldout`` has no rows of ``dataset`` or
    no comparison has floors."""
    from prh_lib.pages import verdicts as V

    if heldout is None or heldout.empty or "dataset" not in heldout or dataset not in set(heldout["dataset"]):
        return ""
    h = heldout[heldout["dataset"] == dataset]
    clear, not_clear, random_vision = [], [], []
    for _, r in V.comparisons_of(h).iterrows():
        fm = floor_margins(h, r["pair"])
        if fm.empty:
            continue
        worst = fm.loc[fm["low"].idxmin()] if fm["low"].notna().any() else fm.iloc[0]
        (clear if bool((fm["low"] > 0).all()) else not_clear).append(
            f"{r['pair']} − {worst['floor']} ({worst['kind']}): {format_interval(worst['margin'], worst['low'], worst['high'])}")
        rv = fm[(fm["kind"] == "random-vision") & ~(fm["low"] > 0)]
        if len(rv):
            lowest = rv.loc[rv["margin"].idxmin()]
            random_vision.append((r["pair"], float(lowest["margin"]), bool(lowest["high"] < 0)))
    if not clear and not not_clear:
        return ""
    n = len(clear) + len(not_clear)
    why = ""
    if random_vision:
        below = [(p, m, excl) for p, m, excl in random_vision if m < 0]
        why = (f" A randomly initialised vision model is not beaten by its trained twin in {len(random_vision)} "
               f"vision-vision comparison(s) ({', '.join(p for p, _, _ in random_vision)}"
               + (f"; the random-init pair's held-out estimate is the higher one in {len(below)} of them, by "
                  + " and ".join(f"{-m:.3f}" + (" (its paired interval excludes 0: significantly higher)" if excl
                                                else " (within the interval)") for _, m, excl in below)
                  if below else "")
               + "). A likely reason, not tested here: a network with random weights is a random feature map of the "
               "pixels and keeps much of the images' pixel-space neighbourhoods (colour, layout, texture), which a "
               "trained vision model also ranks images by. Whatever the cause, a vision-vision score says little "
               "about learned semantics unless it beats this floor; the verdicts that need it (3.1/vision-vision, "
               "3.3/same-modality) require the margin's interval above 0.")
    return (f"- Held out (the verdicts' numbers): {len(clear)} of {n} trained comparisons beat every one of their "
            "floors, each paired 95 % interval over images above 0"
            + (f"; not: {'; '.join(not_clear)}" if not_clear else "")
            + ". Margins are held-out peak minus the floor's held-out peak, on the same image half-samples." + why)


def offline_scope(summary: pd.DataFrame, bands: dict, *, aligned_measured: bool, dataset: str | None = None) -> str:
    """Markdown: what this run's models can and cannot tell about the paper's Section 3.3 claims, from the numbers
    of ``dataset`` (the verdicts' headline dataset; default: the first in ``summary``)."""
    if summary.empty:
        return "*No scores in this run.*"
    first = dataset if dataset is not None else summary["dataset"].iloc[0]
    s = summary[summary["dataset"] == first]
    chance, n = float(s["chance"].iloc[0]), int(s["n"].iloc[0])
    uni = s[s["regime"] == "unimodal"]
    same = s[s["regime"] == "same-modality"]
    rl = bands.get(first, {}).get("random-language")
    lex = bands.get(first, {}).get("tfidf")
    can = []
    if len(uni) and len(same):
        can.append(f"whether the *order* of the regimes holds for small models (here same-modality "
                   f"{same['score_mean'].mean():.3f} against unimodal {uni['score_mean'].mean():.3f}, in-sample means; "
                   "whether each same-modality pair also beats its random-init floors is the held-out test of "
                   "3.3/same-modality in the table above)")
    if rl or lex:
        floors = [f"a random-init language model {rl[0]:.3f}" if rl else "", f"a bag of words {lex[0]:.3f}" if lex else ""]
        can.append("how much of a cross-modal score needs no learned language model at all ("
                   + " and ".join(f for f in floors if f) + f", against unimodal {uni['score_mean'].mean():.3f})")
    trained = s[s["regime"].isin(["unimodal", "same-modality"])]
    names = ", ".join(dict.fromkeys(list(trained["model_x"]) + list(trained["model_y"])))
    cannot = [f"the paper's absolute values: N = {n} rather than 1024 puts chance at {chance:.3f} rather than "
              f"0.0098, and the models ({names}) are not the paper's"] if n != 1024 else []
    if not aligned_measured:
        cannot.append("where explicitly aligned models (CLIP, SigLIP 2, Qwen3-VL-Embedding) sit: no such weights "
                      "install offline, so the unimodal-versus-aligned comparison of Table 1 and the projection "
                      "gap of Appendix E need the paper profile")
    names_ds = list(dict.fromkeys(summary["dataset"]))
    quoted = ", ".join(f"`{d}`" for d in names_ds)  # "coco-mini, 5 captions" is one dataset's name
    cannot.append("whether the pattern holds across the paper's datasets (WIT, COCO at N = 1024, DOCCI, CC3M with "
                  f"DreamLIP captions): offline there are {quoted}, with short human captions only")
    return ("**What the offline models can tell:** " + "; ".join(can) + ".\n\n"
            "**What they cannot tell:** " + "; ".join(cannot) + ".")


# ------------------------------------------------------------------------------------------- the page's steps


def missing_notes(draws, note: str) -> dict[str, str]:
    """What a regime's empty slot says per dataset: ``note``, or that a text-only dataset has no images."""
    from prh_lib.data.text_only import is_text_only

    return {d.dataset: ("text only: no images" if is_text_only(d.pairs) else note) for d in draws}


def score_study(draws, comparisons, *, chapter: str, params: dict, control_seed: int, svd_components: int | None,
                **kw) -> tuple[dict, pd.DataFrame, tuple]:
    """:func:`run_study` (``kw`` passed on) with the Hub and the zoo's conversion messages silenced; returns its
    modalities, the loaded results table and (:func:`with_floors` of :func:`study_summary`, :func:`floor_summary`,
    :func:`regime_means`, :func:`floor_bands`, chance per dataset)."""
    from prh_lib.lm.quiet import quiet_hub_for_session

    quiet_hub_for_session()  # models load only when their features are not cached yet
    with contextlib.redirect_stdout(io.StringIO()):  # the zoo reports conversions of models not yet cached
        modality = run_study(draws, comparisons, chapter=chapter, params=params, control_seed=control_seed,
                             svd_components=svd_components, **kw)
    table = results.load(chapter=chapter, params=params, expand_extra=True)
    floors = floor_summary(table)
    summary = with_floors(study_summary(table), floors, modality, control_seed=control_seed,
                          svd_components=svd_components)
    chance = dict(zip(summary["dataset"], summary["chance"]))
    return modality, table, (summary, floors, regime_means(summary), floor_bands(floors, modality), chance)


def heldout_estimates(draws, comparisons, *, chapter: str, params: dict, n_boot: int, **kw) -> tuple[str, pd.DataFrame]:
    """The verdicts' held-out peaks on the headline dataset (:func:`prh_lib.analysis.heldout.heldout_study`, ``kw``
    passed on; none when ``n_boot`` is 0) and their :func:`~prh_lib.analysis.heldout.heldout_summary`."""
    from prh_lib.analysis import heldout
    from prh_lib.data.study import headline_dataset

    headline = headline_dataset(draws)  # the paper's COCO, else the largest N (offline: flickr8k-1k)
    if n_boot:
        with contextlib.redirect_stdout(io.StringIO()):
            heldout.heldout_study([d for d in draws if d.dataset == headline],
                                  [(c.x, c.y) for c in comparisons if c.regime != "aligned"], chapter=chapter,
                                  params=params, n_boot=n_boot, **kw)
    return headline, heldout.heldout_summary(results.load(chapter=chapter, params=params), dataset=headline)
