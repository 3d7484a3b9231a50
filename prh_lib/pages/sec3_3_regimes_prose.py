"""Section 3.3's generated prose: each dataset's regimes against chance and the control floors, the held-out
count of comparisons above their floors, and what the offline build can and cannot say (re-exported by
:mod:`prh_lib.pages.sec3_3_regimes`, the chapter's one namespace)."""

from __future__ import annotations

import pandas as pd

from prh_lib.analysis.heldout import floor_margins
from prh_lib.formatting import format_interval
from prh_lib.analysis.regimes import REGIME_LABELS, REGIMES


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
        Said of a regime without comparisons; a dict gives it per dataset ("not run with these parameters" for
        a dataset it does not name).
    word_floor : float
        A floor is said to come partly from the words when trained vision × random-init language reaches
        this multiple of chance.
    heldout : DataFrame, optional
        :func:`prh_lib.analysis.heldout.heldout_summary` (one dataset). For its dataset, the comparisons that
        beat their floors are counted from the held-out paired margins, the numbers the verdicts use
        (:func:`held_out_floor_count`); for any other dataset the count is of in-sample means, labelled so.

    Returns
    -------
    str
        Per dataset: one list item per regime (mean of the comparisons' means over draws, × chance, range),
        the floors (× chance), how many trained comparisons clear every floor, and the order.
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

    Counted from :func:`prh_lib.analysis.heldout.floor_margins` of each trained comparison with floors (the
    tests :func:`prh_lib.pages.verdicts.above_floors` gives the verdicts): a comparison clears its floors
    when every paired 95 % interval of ``pair − floor`` over images lies above 0. Returns ``""`` when
    ``heldout`` has no rows of ``dataset`` or no comparison has floors.
    """
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
