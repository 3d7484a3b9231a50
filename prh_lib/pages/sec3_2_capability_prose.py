"""Section 3.2's generated prose: what this build's correlations say, and where they agree with the paper.

Split from :mod:`prh_lib.pages.sec3_2_capability` (all re-exported there): the prose, the correlations' display
names and formats, and the count of models below which no exact test can pass.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from prh_lib.stats.correlation import exact_p_floor

__all__ = ["describe_study", "format_correlation", "too_few_models", "DISPLAY_NAMES"]

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

    The exact two-sided permutation p of ``n`` models is never below :func:`exact_p_floor` (1/n! for
    Pearson's r, 2/n! for Spearman's ρ); when that floor is at least ``alpha`` for one of ``methods``, no data
    can pass the rule, so the claim is not testable with these models rather than inconclusive. The reason
    names ``n``, the floors and the number of models that detects the paper's ``r`` at 80 % power
    (:func:`prh_lib.pages.verdicts.fisher_n_for_r`).

    >>> too_few_models(3)[:33]
    'n = 3 independent language models'
    >>> too_few_models(6)
    ''
    """
    from prh_lib.pages.verdicts import fisher_n_for_r

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
    import math

    from prh_lib.pages.verdicts import fisher_n_for_r

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
