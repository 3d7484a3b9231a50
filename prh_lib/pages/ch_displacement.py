"""Displacement geometry beside mutual k-NN, layer by layer (the displacement chapter's analyses).

The displacement chapter's page (``notebooks/ch_displacement.py``): figures, prose, verdicts (:func:`claim_verdict`),
checklist rows and the notebook's steps. The computations live in :mod:`~prh_lib.analysis.displacement.study`
(re-exported), the consensus decomposition in :mod:`~prh_lib.analysis.displacement.consensus`, the reference code's
procedure in :mod:`~prh_lib.analysis.displacement.procedures`. Nothing here loads models.

References
----------
"Displacement geometry captures platonic shared reality across models and modalities",
arXiv:2609.24209, Sec. "Method". Herbst et al., Section 3.1 (layer-wise mutual k-NN).
"""

from __future__ import annotations

from prh_lib.analysis.displacement.consensus import _VIEWS, ConsensusSummary

import numpy as np
import pandas as pd

from prh_lib.pages import claims as _claims

# the layer-pair computations, re-exported: this module stays the chapter's one namespace
from prh_lib.analysis.displacement.study import (MEASURE_NAMES, ViewComparison, best_layers,  # noqa: F401
    best_pair_table, depth_profiles, n_components_sweep, views_table)
from prh_lib.stats.decision import Test, combine


# --------------------------------------------------------------------------- figures
def heatmaps_side_by_side(results: list[ViewComparison], *, chance: float | None = None,
                          panel_size: tuple[float, float] = (3.75, 3.3)):
    """One row per pair: mutual k-NN (left, red line at ``chance``) beside Cross-Model (right, line at 0).

    Each panel has its own colour scale (the two measures live on different scales); a white star marks the maximum over
    defined layer pairs, a red square the final-layer pair. NaN cells (undefined layers) are blank."""
    import matplotlib.pyplot as plt

    from prh_lib.pages.plots import alignment_heatmap

    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(len(results), 2, figsize=(2 * panel_size[0], panel_size[1] * len(results) + 0.4),
                             squeeze=False, layout="constrained")
    for row, comp in zip(axes, results):
        panels = ((row[0], comp.knn, "mutual k-NN", chance, "chance"),
                  (row[1], comp.cross_model, "Cross-Model", 0.0, "reference line at"))
        for ax, m, title, ch, ch_label in panels:
            s = np.asarray(m.scores, dtype=float)
            i, j = np.unravel_index(int(np.nanargmax(s)), s.shape)
            # the markers' values go in the title (a legend under each panel ran into its axis label), on three lines
            # (one line ran past a right-hand panel's edge)
            alignment_heatmap(s, m.x_labels, m.y_labels, ax=ax, legend=False,
                              title=f"{comp.label}\n{title}\nmax {s[i, j]:.3f} (★) · final {s[-1, -1]:.3f} (□)",
                              x_name=m.x_name, y_name=m.y_name, chance=ch, value_label=title, chance_label=ch_label)
    handles = [Line2D([], [], marker="*", color="white", markeredgecolor="black", markersize=13, linestyle="none",
                      label="maximum over layer pairs (★)"),
               Line2D([], [], marker="s", markerfacecolor="none", markeredgecolor="red", markeredgewidth=2,
                      markersize=9, linestyle="none", label="final-layer pair (□)")]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=9, frameon=False)
    return fig


def sweep_figure(sweep: pd.DataFrame, *, measure: str = "cross_model"):
    """``measure`` against the whitened dimension ``r`` for each pair of :func:`n_components_sweep`."""
    import matplotlib.pyplot as plt

    from prh_lib.pages.plots import line_plot

    fig, ax = plt.subplots(figsize=(5.5, 3.8), layout="constrained")
    groups = {p: g.drop_duplicates("r").sort_values("r") for p, g in sweep.groupby("pair", sort=False)}
    line_plot({p: g["r"].to_numpy() for p, g in groups.items()}, {p: g[measure].to_numpy() for p, g in groups.items()},
              ax=ax, xlabel="whitened dimension r", ylabel=MEASURE_NAMES.get(measure, measure), logx=True,
              title=f"{MEASURE_NAMES.get(measure, measure)} at the best layer pair")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    return fig


def depth_profile_figure(profiles: dict[str, pd.DataFrame], *, panel_size: tuple[float, float] = (3.4, 3.2)):
    """One panel per pair of :func:`depth_profiles`: Cross-Model per ``r`` (left axis), mutual k-NN (dashed, right)."""
    import matplotlib.pyplot as plt

    from prh_lib.pages.plots import line_plot

    n = len(profiles)
    ncols = min(n, 2)  # two columns: the figure stays near 7.5 inches wide, the page's width
    nrows = int(np.ceil(n / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size[0] * ncols * 1.1, panel_size[1] * nrows),
                             squeeze=False, layout="constrained")
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    for ax, (label, frame) in zip(axes.flat, profiles.items()):
        pos = np.arange(len(frame))
        cm = {c.replace("Cross-Model, ", ""): frame[c].to_numpy() for c in frame.columns if c != "mutual k-NN"}
        line_plot(pos, cm, ax=ax, ylabel="Cross-Model", xlabel=frame.index.name, marker=".",
                  title=f"{label}\nat {frame.attrs.get('layer x', '')}")
        twin = ax.twinx()
        twin.plot(pos, frame["mutual k-NN"].to_numpy(), color="black", linestyle="--", linewidth=1.2)
        twin.set_ylabel("mutual k-NN (dashed)", fontsize=9)
        twin.tick_params(labelsize=9)
        ticks = pos[:: max(1, len(pos) // 6)]
        ax.set_xticks(ticks, [frame.index[t] for t in ticks], rotation=60, ha="right", fontsize=9)
        if ax.get_legend() is not None:  # one key for every panel, below them: a panel's own sat on its curves
            ax.get_legend().remove()
    if n:
        from matplotlib.lines import Line2D

        handles, labels = axes.flat[0].get_legend_handles_labels()
        handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1.2))
        labels.append("mutual k-NN (right axis)")
        fig.legend(handles, labels, loc="outside lower center", ncol=min(4, len(labels)), fontsize=9, frameon=False)
    return fig


# --------------------------------------------------------------------------- prose
def describe(best: pd.DataFrame, views: pd.DataFrame) -> str:
    """Markdown bullets stating the measured figures of :func:`best_pair_table` and :func:`views_table` (consensus:
    :func:`describe_consensus`)."""
    lines = []
    for pair, b in best.iterrows():
        v = views.loc[pair]
        text = (f"- **{pair}** ({b['kind']}): Cross-Model peaks at {b['layer x']} × {b['layer y']} with "
                f"{b['Cross-Model']:.3f} (shuffled {b['Cross-Model (shuffled)']:+.3f}, at most "
                f"{b['Cross-Model shuffled (max)']:.3f} over all layer pairs); Pointwise {b['Pointwise']:.3f}, "
                f"Cross-Object {b['Cross-Object']:+.3f} (shuffled {b['Cross-Object (shuffled)']:+.3f}); r = {b['r']}")
        split_cols = [c for c in best.columns if c.endswith("re-splits")]
        if split_cols:
            text += f"; over {split_cols[0].split(', ')[1]} {b[split_cols[0]]:.3f} ± {b['re-split sd']:.3f}"
        text += (f". Mutual k-NN peaks at {v['k-NN peak layers']} ({v['k-NN peak']:.3f}), where Cross-Model is "
                 f"{v['Cross-Model at k-NN peak']:.3f}; the two heatmaps have rank correlation "
                 f"{v['rank correlation']:.2f}.")
        lines.append(text)
    return "\n".join(lines)


# --------------------------------------------------------------------------- the paper and this build
#: The companion paper's headline numbers (arXiv:2609.24209, main results table, quoted from the
#: summary in shared/papers): mean Cross-Model and Pointwise cosine per level and kind of pair.
PAPER_CLAIMS = (
    {"level": "concept", "kind": "vision-vision", "cross_model": 0.73, "pointwise": 0.41},
    {"level": "concept", "kind": "language-language", "cross_model": 0.91, "pointwise": 0.36},
    {"level": "concept", "kind": "vision-language", "cross_model": 0.49, "pointwise": 0.25},
    {"level": "sample", "kind": "vision-vision", "cross_model": 0.45, "pointwise": 0.31},
    {"level": "sample", "kind": "language-language", "cross_model": 0.73, "pointwise": 0.36},
    {"level": "sample", "kind": "vision-language", "cross_model": 0.31, "pointwise": 0.19},
)
_CONCEPT_REASON = "needs concept-level features: ImageNet-22k classes matched to CommonWords79k words"
_DATA = {"concept": "ImageNet-22k × CommonWords79k concepts", "sample": "Flickr30k image-caption pairs"}
VERDICTS = _claims.VERDICTS  # the one vocabulary of verdicts (prh_lib.pages.claims)


def claim_verdict(paper, draws=None, *, tol: float = 0.05, n_sd: float = 2.0, reason: str | None = None) -> str:
    """Verdict on one claim of a paper from this build's repeated measurements of it.

    A claim is ``k`` values (e.g. Cross-Model and Pointwise); its *kind* is their ordering (each non-zero difference
    ``paper[a] - paper[b]`` with its sign).

    * ``"reproduces"``: every build mean is within ``max(tol, n_sd * sd)`` of the paper's value;
    * ``"reproduces in kind"``: otherwise, if every ordering of the paper holds in the build and is resolved (the mean
      difference exceeds ``max(tol, n_sd * sd of the difference)``; for ``k = 1`` the sign of the value);
    * ``"differs"``: neither;
    * ``"not testable offline (<reason>)"`` when there are no draws.

    Parameters
    ----------
    paper : sequence of k floats
    draws : array-like of shape (n_draws, k), optional
        This build's values, one row per draw (split, seed); one row: ``sd`` is taken as 0.
    tol : float >= 0, default 0.05
        Agreement tolerance in the measures' units.
    n_sd : float >= 0, default 2.0
    reason : str, optional
        Required when ``draws`` is None or empty.

    Returns
    -------
    str
        One of :data:`VERDICTS` (the last with its reason in parentheses).

    Raises
    ------
    ValueError
        If ``draws`` is not ``(n_draws, k)``, holds NaN, or is missing without a ``reason``.
    """
    p = np.asarray(paper, dtype=float).ravel()
    if draws is None or np.size(draws) == 0:
        if not reason:
            raise ValueError("a claim without draws needs a reason (why it is not testable offline)")
        return f"not testable offline ({reason})"
    d = np.asarray(draws, dtype=float)
    if d.ndim != 2 or d.shape[1] != p.size or not np.isfinite(d).all():
        raise ValueError(f"draws must be a finite (n_draws, {p.size}) array, got shape {d.shape}")
    sd = lambda x: float(np.std(x, ddof=1)) if len(x) > 1 else 0.0  # noqa: E731
    if all(abs(d[:, c].mean() - p[c]) <= max(tol, n_sd * sd(d[:, c])) for c in range(p.size)):
        return "reproduces"
    diffs = [(d[:, a] - d[:, b], p[a] - p[b]) for a in range(p.size) for b in range(a + 1, p.size) if p[a] != p[b]]
    if p.size == 1:
        diffs = [(d[:, 0], p[0])]
    if diffs and all(np.sign(x.mean()) == np.sign(q) and abs(x.mean()) > max(tol, n_sd * sd(x)) for x, q in diffs):
        return "reproduces in kind"
    return "differs"


def _mean_sd(x: np.ndarray) -> str:
    return f"{x.mean():.2f} ± {x.std(ddof=1):.2f}" if len(x) > 1 else f"{x.mean():.2f} (one draw, not repeated)"


#: The sample-level claims, the ones this chapter tests (the concept-level ones: the concept chapter, ``C/*``).
SAMPLE_CLAIMS = tuple(c for c in PAPER_CLAIMS if c["level"] == "sample")


def paper_table(table: pd.DataFrame, *, steps=("reference code", "our procedure"), claims=SAMPLE_CLAIMS,
                tol: float = 0.05, n_sd: float = 2.0) -> pd.DataFrame:
    """"The paper and this build": one row per claim, the paper's values, this build's and the verdicts.

    Parameters
    ----------
    table : DataFrame
        :func:`prh_lib.analysis.displacement.procedures.compare_procedures` (columns ``kind``, ``step``,
        ``split``, ``cross_model``, ``pointwise``).
    steps : sequence of str
        Procedures reported, each with its own value and verdict columns.
    claims : sequence of dict
        Default :data:`SAMPLE_CLAIMS` (concept-level claims are tested by :mod:`prh_lib.pages.ch_concepts`; passed here
        they are not testable); sample-level claims are tested on this build's pairs of their kind (per split, the mean
        over those pairs).
    tol, n_sd
        As in :func:`claim_verdict`.

    Returns
    -------
    DataFrame
        Indexed by claim; columns ``paper``, then per step ``<step>`` (Cross-Model vs Pointwise, mean ± sd over splits),
        ``<step> verdict`` and ``<step> draws`` (the ``(n_splits, 2)`` values).
    """
    rows = {}
    for c in claims:
        name = f"Cross-Model > Pointwise, {c['kind']}, {c['level']} level ({_DATA.get(c['level'], '?')})"
        row = {"paper": f"{c['cross_model']:.2f} vs {c['pointwise']:.2f}"}
        for step in steps:
            sub = table[(table["kind"] == c["kind"]) & (table["step"] == step)]
            draws = None
            reason = _CONCEPT_REASON if c["level"] != "sample" else f"no {c['kind']} pair in this build"
            if c["level"] == "sample" and len(sub):
                draws = sub.groupby("split")[["cross_model", "pointwise"]].mean().to_numpy()
                row[step] = f"{_mean_sd(draws[:, 0])} vs {_mean_sd(draws[:, 1])}"
            else:
                row[step] = "—"
            row[f"{step} verdict"] = claim_verdict((c["cross_model"], c["pointwise"]), draws, tol=tol, n_sd=n_sd,
                                                   reason=reason)
            row[f"{step} draws"] = None if draws is None else draws.tolist()
        rows[name] = row
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.index.name = "claim"
    return out


_CHECKLIST_IDS = {"vision-vision": "D/vision-vision", "language-language": "D/language-language",
                  "vision-language": "D/cross-modal"}


def checklist_rows(table: pd.DataFrame, *, step: str = "our procedure", other: str = "reference code",
                   heldout: dict | None = None, kinds: dict | None = None) -> list[dict]:
    """The sample-level rows of :func:`paper_table` in the form of :func:`prh_lib.pages.claims.finding`.

    The front page's checklist (:func:`prh_lib.pages.claims.checklist`) shows them. The verdict is that of ``step``,
    *our* procedure (centred, whitened and aligned features), which this chapter shows measures what the paper's
    measures are defined to measure; the reference code's reading (``other``), whose Cross-Model > Pointwise gap comes,
    on this build's features, from adding each model's mean back after whitening, stays beside it as a note (for the
    paper's own table, a hypothesis).

    With ``heldout`` the verdict is a test on selection-free estimates over images (issue 24): for every pair of the
    claim's kind, the held-out Cross-Model − Pointwise at the best layer pair chosen on the other half of the images,
    with its paired 95 % subsampling interval (:func:`prh_lib.analysis.displacement.heldout.heldout_best_pair`), must
    exceed 0 (:class:`prh_lib.pages.claims.Test`; "inconclusive" when an interval reaches 0, "differs" when an estimate
    is not above it). A kind without a held-out estimate (a draw below
    :data:`~prh_lib.analysis.displacement.heldout.MIN_SAMPLES` images) keeps :func:`claim_verdict`'s reading of
    ``table`` (spread over splits), its note saying so.

    Parameters
    ----------
    table : DataFrame
        :func:`paper_table`.
    step, other : str
        The procedure whose verdict the row carries, and the one shown as a note.
    heldout : dict, optional
        :func:`prh_lib.analysis.displacement.heldout.heldout_best_pairs` (``"x × y"`` -> result, or an ``int``
        sample count where none was estimated).
    kinds : dict, optional
        ``"x × y"`` -> ``"vision-vision"``, ``"language-language"`` or ``"vision-language"`` (the ``kind`` column of
        :func:`best_pair_table`); required with ``heldout``.

    Raises
    ------
    KeyError
        If ``table`` lacks the columns of ``step`` or of ``other``.
    ValueError
        If ``heldout`` is given without ``kinds``.
    """
    from prh_lib.pages import claims as _claims
    from prh_lib.analysis.displacement.heldout import HeldoutBestPair

    if heldout is not None and kinds is None:
        raise ValueError("checklist_rows: heldout needs kinds (the 'kind' column of best_pair_table)")
    rows = []
    for name, r in table.iterrows():
        kind = next((k for k in _CHECKLIST_IDS if f", {k}, sample level" in str(name)), None)
        if kind is None:
            continue
        ref_note = (f"read with the {other}'s procedure: {r[f'{other} verdict']}; on this build's features its gap "
                    "comes from adding each model's mean back after whitening (see the chapter); that the same "
                    "explains the paper's table is a hypothesis the paper profile would test")
        held = {label: h for label, h in (heldout or {}).items()
                if kinds.get(label) == kind and isinstance(h, HeldoutBestPair)}
        if held:
            tests = [Test(f"{label}: held-out Cross-Model − Pointwise",
                          h.heldout["cross_model"] - h.heldout["pointwise"], *h.gap_interval())
                     for label, h in held.items()]
            shown = "; ".join(
                f"{label}: {h.heldout['cross_model']:.3f} [{'%.3f' % h.interval('cross_model')[0]}, "
                f"{'%.3f' % h.interval('cross_model')[1]}] vs {h.heldout['pointwise']:.3f} "
                f"[{'%.3f' % h.interval('pointwise')[0]}, {'%.3f' % h.interval('pointwise')[1]}]"
                for label, h in held.items())
            paper = next((p for p in PAPER_CLAIMS if p["level"] == "sample" and p["kind"] == kind), None)
            gap_note = ""
            if paper is not None:
                pg = paper["cross_model"] - paper["pointwise"]
                above = sum(t.high < pg for t in tests)
                gap_note = (f"the paper's gap (+{pg:.2f}) lies above the upper end of {above} of {len(tests)} "
                            "pairs' intervals")
            ours_fail = not combine(tests)[0]
            explained = (f"the {other}'s procedure reproduces the paper's gap ({r[f'{other} verdict']}), and the chapter "
                         "traces it to each model's mean added back after whitening: centred, Cross-Model equals "
                         "Pointwise" if ours_fail and str(r[f"{other} verdict"]).startswith("reproduces") else "")
            row = _claims.finding(
                _CHECKLIST_IDS[kind], this_build=f"held out ({step}): {shown}; in-sample over splits: {r[step]}; "
                                                 f"{other}: {r[other]}", explained=explained,
                headline={"estimate": tests[0].estimate, "low": tests[0].low, "high": tests[0].high,
                          "label": f"Cross-Model − Pointwise, {next(iter(held))}"},
                tests=tests, note="; ".join(x for x in (gap_note, ref_note) if x),
                rule="for every pair of this kind, Cross-Model − Pointwise of our procedure at the best layer pair "
                     "chosen on the other half of the images, with its paired 95 % interval over images, above 0")
        else:
            row = _claims.finding(_CHECKLIST_IDS[kind], this_build=None, holds=None)
            row.update({"this build": f"{r[step]} ({step}); {other}: {r[other]}",
                        "verdict": r[f"{step} verdict"],
                        "note": ref_note + ("; no held-out estimate of this kind (too few images), so the verdict "
                                            "reads the spread over splits" if heldout is not None else ""),
                        "rule": "Cross-Model and Pointwise of our procedure, ordered as the paper orders them and "
                                "resolved beyond the spread over draws"})
        rows.append(row)
    return rows


def consensus_figure(summary: ConsensusSummary):
    """Eigenvalues of ``S_cross`` (shared and private ranges shaded) and grouped bars of both views per subspace."""
    import matplotlib.pyplot as plt

    from prh_lib.pages.plots import line_plot

    res = summary.result
    ev = res.eigenvalues
    n_sh, n_pr = res.shared_basis.shape[1], res.private_basis.shape[1]
    # the spectrum over the full width, the two views' bars under it: 7 inches wide, the page's width
    fig = plt.figure(figsize=(7.0, 8), layout="constrained")
    grid = fig.add_gridspec(2, 2)
    axes = [fig.add_subplot(grid[0, :]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])]
    line_plot(np.arange(1, len(ev) + 1), {"training rows (fitted)": ev, "held-out rows": summary.held_out_eigenvalues},
              ax=axes[0], xlabel="eigenvector (descending)", ylabel="v' S_cross v",
              title="Cross-model covariance spectrum", marker=".")
    axes[0].axhline(0.0, color="black", linewidth=0.6)
    axes[0].axvspan(0.5, n_sh + 0.5, color="tab:green", alpha=0.15, label="shared")
    axes[0].axvspan(len(ev) - n_pr + 0.5, len(ev) + 0.5, color="tab:red", alpha=0.15, label="private")
    axes[0].legend(fontsize=9)
    table = summary.table
    pairs = list(table.index)
    for ax, (col, _) in zip(axes[1:], _VIEWS):
        subs = list(table[col].columns)
        width = 0.8 / len(subs)
        for s, sub in enumerate(subs):
            ax.bar(np.arange(len(pairs)) + (s - (len(subs) - 1) / 2) * width, table[(col, sub)], width, label=sub)
        if col == "mutual k-NN":
            ax.axhline(summary.chance, color="grey", linestyle="--", linewidth=1, label="chance")
        ax.axhline(0.0, color="black", linewidth=0.6)
        # one tick per model pair, numbered; the key under the figure names them (full names overlapped)
        ax.set_xticks(np.arange(len(pairs)), [str(k + 1) for k in range(len(pairs))], fontsize=9)
        ax.set_xlabel("model pair (key below)", fontsize=9)
        ax.set_ylabel(col)
        ax.set_title(f"{col} by subspace (held-out rows)", fontsize=10)
        ax.legend(fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    from prh_lib.pages.plots import add_footer

    add_footer(fig, "Model pairs: " + "; ".join(f"{k + 1} {p}" for k, p in enumerate(pairs)))
    return fig


def describe_consensus(summary: ConsensusSummary) -> str:
    """One Markdown bullet stating the measured figures of :func:`consensus_summary`."""
    mean = summary.table.mean()
    parts = ", ".join(f"{s} {mean[('Cross-Model', s)]:.3f} / {mean[('mutual k-NN', s)]:.3f}"
                      for s in summary.table["Cross-Model"].columns)
    ev = summary.result.eigenvalues
    n_sh = summary.result.shared_basis.shape[1]
    return (f"- **Consensus** of {', '.join(f'{m} ({l})' for m, l in summary.layers.items())}: "
            f"top {n_sh} eigenvalues of S_cross {ev[0]:.2f} to {ev[n_sh - 1]:.2f} on the training rows "
            f"({summary.held_out_eigenvalues[:n_sh].mean():.2f} on average held out), bottom {ev[-1]:.2f}; "
            f"mean over model pairs, Cross-Model / mutual k-NN: {parts} (k-NN chance {summary.chance:.3f}).")


# --------------------------------------------------------------------------- the notebook's steps
def shown_draw(datasets: list, *, n_draws=None, dataset: str | None = None, draw: int = 0, k: int = 10) -> tuple:
    """The study's draws (:func:`prh_lib.data.study.study_draws`), the heatmaps' dataset (None: the paper's COCO, else
    the largest N), that draw's pairs and their mutual k-NN chance.

    Raises
    ------
    ValueError
        If the draws hold no draw ``draw`` of ``dataset``.
    """
    from prh_lib.data.study import headline_dataset, study_draws
    from prh_lib.metrics.knn import mutual_knn_chance

    draws = study_draws(datasets, n_draws=n_draws)
    dataset = dataset or headline_dataset(draws)
    shown = next((d for d in draws if (d.dataset, d.draw) == (dataset, draw)), None)
    if shown is None:
        raise ValueError(f"no draw {draw} of dataset {dataset!r}; draws: {[(d.dataset, d.draw) for d in draws]}")
    return draws, dataset, shown.pairs, mutual_knn_chance(len(shown.pairs), k)


def study_summary(draws: list, *, chapter: str, params: dict) -> pd.DataFrame:
    """:func:`~prh_lib.analysis.displacement.draws.aggregate_best` of this run's rows in the results table."""
    from prh_lib import results
    from prh_lib.analysis.displacement import draws as ds

    table = ds.load_rows(chapter=chapter, params=params, run_id=results.current_run_id())
    return ds.aggregate_best(table, datasets=list(dict.fromkeys(d.dataset for d in draws)))


def sweep_table(sweep: pd.DataFrame) -> pd.DataFrame:
    """:func:`n_components_sweep` as the page shows it: Cross-Model per pair (rows) and ``r`` (columns)."""
    out = sweep.pivot(index="pair", columns="n_components", values="cross_model")
    out.columns = [f"Cross-Model, r = {c}" for c in out.columns]
    return out


def page_record(ns: dict) -> dict:
    """The page's record (:func:`prh_lib.pages.report.record`) from the notebook's namespace ``ns``."""
    from prh_lib import results
    from prh_lib.analysis.displacement import heldout as dh, procedures as dr

    consensus, params, tol = ns["consensus"], ns["params"], ns["claim_tol"]
    return {
        **{key: ns[key] for key in ("k", "chance", "clip_q", "n_components", "test_fraction", "n_displacement_pairs",
                                    "heatmap_dataset", "heatmap_draw", "split_seed", "best", "views")},
        "n_pairs": len(ns["pairs"]), "claim_tol": tol,
        "heldout_best": {label: {"heldout": r.heldout, "insample_half": r.insample_half,
                                 "reps": {m: v.tolist() for m, v in r.reps.items()}, "selected": r.selected.tolist(),
                                 "n_splits": r.n_splits, "n_boot": r.n_boot, "interval": list(r.interval()),
                                 "gap_interval": list(r.gap_interval())} for label, r in ns["held_best"].items()
                         if isinstance(r, dh.HeldoutBestPair)},
        "study": {"params_hash": results.params_hash(params), "run_id": results.current_run_id(),
                  "draws": [{"dataset": d.dataset, "draw": d.draw, "seed": d.seed, "n": len(d.pairs),
                             "repeatable": d.repeatable} for d in ns["draws"]],
                  "summary": ns["study_summary"].to_dict(orient="records")},
        "sweep": ns["sweep"].to_dict(orient="records"),
        "depth_profiles": {label: {"layer x": f.attrs["layer x"], **f.to_dict(orient="list")}
                           for label, f in ns["profiles"].items()},
        "consensus": {
            "layers": list(consensus.layers.items()), "n_shared": ns["n_shared"], "n_private": ns["n_private"],
            "chance": consensus.chance,
            "eigenvalues": consensus.result.eigenvalues, "held_out_eigenvalues": consensus.held_out_eigenvalues,
            "table": {f"{view} | {sub}": col for (view, sub), col in consensus.table.to_dict().items()},
        },
        "procedures": ns["procedures"].to_dict(orient="records"),
        "synthetic": ns["synthetic"].to_dict(orient="records"),
        "procedure_verdict": dr.procedure_verdict(ns["procedures"], ns["synthetic"], tol=tol),
        "claims": ns["claims"].reset_index().to_dict(orient="records"),
        "matrices": {r.label: {"mutual_knn": r.knn.scores, "cross_model": r.cross_model.scores,
                               "pointwise": r.displacement["pointwise"].scores,
                               "cross_model_shuffled": r.displacement["cross_model_shuffled"].scores,
                               "x_labels": r.knn.x_labels, "y_labels": r.knn.y_labels} for r in ns["shown"]},
    }
