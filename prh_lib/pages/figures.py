"""Chapter figures: drawn from result objects and tables with the primitives of :mod:`prh_lib.pages.plots`.

One function per figure of the book: :func:`heatmap_grid` (Section 3.1, Fig. 1), :func:`plot_sweep_bands`
(Section 3.1, Fig. 2), :func:`capability_panels` (Section 3.2, Figs. 3-4), :func:`plot_detail` (App. F),
:func:`regime_figure` (Section 3.3, Fig. 5) and :func:`plot_sweep` (App. G). They read result objects and
tables by their fields; none computes a score. The sweep figures live in :mod:`prh_lib.pages.figures_sweeps`
and are re-exported here.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from prh_lib.pages import plots
from prh_lib.validation import check_columns

# the sweep figures (Section 3.1 Fig. 2, App. G), re-exported: notebooks read every figure from this module
from prh_lib.pages.figures_sweeps import plot_sweep, plot_sweep_bands  # noqa: F401


#: Most panels a figure draws before :func:`figure_pairs_of` leaves comparisons to the tables: 12 panels
#: in two columns are six rows, about 22 inches of figure, still read at page width one screen at a time.
MAX_PANELS = 12


def figure_pairs_of(comparisons: Sequence[Sequence[str]], figure_pairs: Sequence[Sequence[str]] | None = None, *,
                    panels_per_pair: int = 1, limit: int = MAX_PANELS) -> tuple[list[tuple[str, str]], str]:
    """The model pairs a chapter's figures draw, and a sentence saying which are left to the tables.

    Every comparison is scored, written to the results table and listed in the chapter's tables; the
    figures draw one panel (or row) per pair and dataset, so the paper's 63 vision × language pairs on four
    datasets would be a figure some 70,000 pixels tall. The figures draw ``figure_pairs`` when given (the
    paper profile names the pairs of the paper's own figures), else the first comparisons that fit in
    ``limit`` panels.

    Parameters
    ----------
    comparisons : sequence of [x, y]
        Every scored pair, in the chapter's order.
    figure_pairs : sequence of [x, y], optional
        The pairs to draw; each must be one of ``comparisons``. None: the first ``limit // panels_per_pair``.
    panels_per_pair : int, >= 1
        Panels one pair takes (its datasets, for example).
    limit : int, >= 1
        Most panels drawn when ``figure_pairs`` is None.

    Returns
    -------
    (list of (str, str), str)
        The pairs to draw, in ``comparisons`` order, and a Markdown sentence for the page ("" when every
        pair is drawn).

    Raises
    ------
    ValueError
        If a pair of ``figure_pairs`` is not among ``comparisons`` (the message names it and lists them),
        or ``figure_pairs`` is empty.
    """
    every = [tuple(map(str, c)) for c in comparisons]
    if figure_pairs is None:
        chosen = every[:max(1, limit // max(1, panels_per_pair))]
        how = f"the first {len(chosen)}; set `figure_pairs` to choose"
    else:
        wanted = [tuple(map(str, c)) for c in figure_pairs]
        if not wanted:
            raise ValueError("figure_pairs is empty; None draws the first comparisons")
        unknown = [w for w in wanted if w not in every]
        if unknown:
            raise ValueError(f"figure_pairs {[list(u) for u in unknown]} are not among the comparisons "
                             f"{[list(c) for c in every]}")
        chosen = [c for c in every if c in set(wanted)]
        how = "`figure_pairs`"
    if len(chosen) == len(every):
        return chosen, ""
    return chosen, (f"The figures draw {len(chosen)} of the {len(every)} model pairs ({how}): "
                    f"{', '.join(f'{x} × {y}' for x, y in chosen)}. Every pair is scored, in the tables "
                    "below and in the results table.")


def heatmap_grid(matrices: dict, *, chance: float | None = None, ncols: int = 2, scale: str = "shared",
                 other_peaks: dict | None = None,
                 panel_size: tuple[float, float] = (3.55, 3.3), dpi: int = 150):
    """One :func:`prh_lib.pages.plots.alignment_heatmap` per entry of ``matrices`` (label -> AlignmentMatrix-like).

    Parameters
    ----------
    matrices : dict of str to object
        Each value needs ``scores``, ``x_labels``, ``y_labels``, ``x_name`` and ``y_name`` (and optionally
        ``peak``).
    chance : float, optional
        Chance level k/(N-1), marked on every colour bar.
    ncols : int
    scale : {"shared", "chance-corrected", "panel"}, default "shared"
        ``"shared"``: one colour range for all panels, from min(0, chance) to the largest score of any
        panel, so colours compare across pairs (a 0.16 cross-modal peak is not as hot as a 0.57
        same-modality one). ``"chance-corrected"``: the same shared range, drawn on
        (score - chance) / (1 - chance), 0 at chance. ``"panel"``: each panel its own range (the layer
        structure of weak pairs; never for comparing panels).
    other_peaks : dict of str to list of (int, int), optional
        Label -> peaks of other draws, drawn as small circles.
    panel_size : (float, float)
        Inches per panel (with its colour bar); two columns make a figure of about 7.1 inches, the page's
        width (:data:`prh_lib.pages.plots.PAGE_WIDTH_PX`), so the 9-pt ticks are drawn at 9 pt.
    dpi : int

    Returns
    -------
    matplotlib.figure.Figure
        The marker legend is one figure legend below the panels (never over cells); each panel's title
        carries its max and final scores.
    """
    if scale not in ("shared", "chance-corrected", "panel"):
        raise ValueError(f"scale must be 'shared', 'chance-corrected' or 'panel'; got {scale!r}")
    if scale == "chance-corrected" and chance is None:
        raise ValueError("scale='chance-corrected' needs the chance level")
    n = len(matrices)
    ncols = min(ncols, n)
    nrows = int(np.ceil(n / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size[0] * ncols, panel_size[1] * nrows + 0.6),
                             squeeze=False, dpi=dpi, layout="constrained")

    def values(m):
        s = np.asarray(m.scores, dtype=float)
        return (s - chance) / (1 - chance) if scale == "chance-corrected" else s

    vmin = vmax = None
    if scale != "panel":
        vmax = max(float(np.nanmax(values(m))) for m in matrices.values())
        vmin = min(0.0, chance if chance is not None and scale == "shared" else 0.0,
                   min(float(np.nanmin(values(m))) for m in matrices.values()))
    for ax, (label, m) in zip(axes.flat, matrices.items()):
        s = values(m)
        peak = m.peak[:2] if hasattr(m, "peak") and not np.isnan(m.scores).all() else None
        i, j = peak if peak is not None else np.unravel_index(int(np.nanargmax(s)), s.shape)
        raw = np.asarray(m.scores, dtype=float)
        title = f"{label}\nmax {raw[i, j]:.3f} (★) · final {raw[-1, -1]:.3f} (□)"
        plots.alignment_heatmap(s, m.x_labels, m.y_labels, ax=ax, title=title, x_name=m.x_name, y_name=m.y_name,
                                chance=chance if scale != "chance-corrected" else 0.0, vmin=vmin, vmax=vmax,
                                peak=peak, other_peaks=(other_peaks or {}).get(label, ()), legend=False)
        if scale == "chance-corrected":
            ax.images[0].colorbar.set_label("(score − chance) / (1 − chance)", fontsize=plots.HEATMAP_FONTS["labels"])
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="*", color="white", markeredgecolor="black", markersize=13, linestyle="none",
                      label="maximum over layer pairs"),
               Line2D([], [], marker="s", markerfacecolor="none", markeredgecolor="red", markeredgewidth=2,
                      markersize=9, linestyle="none", label="final-layer pair"),
               Line2D([], [], color="red", linestyle="--", linewidth=2, label="chance k/(N-1) (colour bar)")]
    if other_peaks:
        handles.insert(1, Line2D([], [], marker="o", color="white", markeredgecolor="black", markersize=5,
                                 linestyle="none", label="peak of another draw"))
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=plots.HEATMAP_FONTS["legend"],
               frameon=False)
    return fig


def capability_panels(summary: pd.DataFrame, *, x: str = "bpb", y: str = "peak", family: str = "independent",
                      correlations: pd.DataFrame | None = None, label: str = "language",
                      panel_size: tuple[float, float] = (3.5, 3.2), dpi: int = 160):
    """Alignment against capability, one panel per dataset, one series per vision model (Figures 3-4 layout).

    Each point is one language model: its alignment (mean over draws, error bar = std over draws; none for
    a single draw) against its capability, numbered in order of capability, with the key under the panels
    (names placed beside clustered points overlap). All panels share the y range, chance k/(N-1) is a dashed grey
    line, and with ``x="bpb"`` the x axis is reversed so capability grows to the right in every panel. The
    legend sits above the panels; the key of the numbered points and Pearson r per vision model (from
    ``correlations``) are written under the panels.

    Parameters
    ----------
    summary : DataFrame
        :func:`prh_lib.pages.sec3_2_capability.summary_table` (columns ``dataset``, ``vision``, ``family``,
        ``label``, ``x``, ``y``, ``y + " std"`` when present, ``chance``).
    x, y : str
        Capability and alignment columns.
    family : {"independent", "ladder"}
    correlations : DataFrame, optional
        :func:`prh_lib.pages.sec3_2_capability.study_correlations`, for the r written under each panel.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        If a named column is missing or no row has ``family``.
    """
    check_columns(summary, ("dataset", "vision", "family", label, x, y, "chance"))
    sub = summary[summary["family"] == family]
    if sub.empty:
        raise ValueError(f"no rows of family {family!r}")
    datasets = list(dict.fromkeys(sub["dataset"]))
    visions = list(dict.fromkeys(sub["vision"]))
    colors = {v: plt.cm.tab10(i % 10) for i, v in enumerate(visions)}
    fig, axes = plt.subplots(1, len(datasets), figsize=(panel_size[0] * len(datasets), panel_size[1]),
                             squeeze=False, sharey=True, dpi=dpi, layout="constrained")
    std = f"{y} std"
    number = {name: i + 1 for i, name in enumerate(dict.fromkeys(sub.sort_values(x)[label].astype(str)))}
    panel_notes = []
    for ax, ds in zip(axes[0], datasets):
        part = sub[sub["dataset"] == ds]
        notes = []
        for v in visions:
            pts = part[part["vision"] == v]
            if pts.empty:
                continue
            err = pts[std].to_numpy(float) if std in pts.columns else None
            ax.errorbar(pts[x].to_numpy(float), pts[y].to_numpy(float), yerr=err, fmt="o", color=colors[v],
                        capsize=3, markersize=5, label=v)
            if v == visions[0]:  # one number per language model (the series share their x positions), keyed below
                for i, (_, r) in enumerate(pts.sort_values(x).iterrows()):
                    ax.annotate(str(number[str(r[label])]), (r[x], r[y]), textcoords="offset points", fontsize=9,
                                xytext=(5, 5 if i % 2 == 0 else -12), fontweight="bold")
            if correlations is not None and not correlations.empty:
                hit = correlations[(correlations["dataset"] == ds) & (correlations["vision"] == v)
                                   & (correlations["alignment"] == y) & (correlations["capability"] == x)]
                for _, c in hit.iterrows():
                    sym = "ρ" if c["method"] == "spearman" else "r"
                    notes.append(f"{v}: {sym} = {c['r']:.2f}" + (f", p = {c['p']:.2g}" if np.isfinite(c["p"]) else ""))
        chance = float(part["chance"].iloc[0])
        ax.axhline(chance, color="0.4", linestyle="--", linewidth=1.2)
        ax.set_title(f"{ds} (N = {int(part['n'].iloc[0])})", fontsize=10)
        ax.set_xlabel({"bpb": "bits per byte (held-out captions)\n← less capable · more capable →",
                       "next_token_accuracy": "next-token accuracy"}.get(x, x), fontsize=9)
        if x == "bpb":
            ax.invert_xaxis() if not ax.xaxis_inverted() else None
        ax.tick_params(labelsize=9)
        if notes:
            panel_notes.append(f"{ds}: " + "; ".join(notes))
    axes[0, 0].set_ylabel(f"mutual k-NN, {y} (mean ± std)", fontsize=9)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    handles.append(plt.Line2D([], [], color="0.4", linestyle="--"))
    labels.append("chance k/(N-1)")
    fig.legend(handles, labels, loc="outside upper center", ncol=min(len(labels), 2), fontsize=9, frameon=False)
    plots.add_footer(fig, "points: " + "   ".join(f"{i} {name}" for name, i in number.items()))
    for note in panel_notes:
        plots.add_footer(fig, note)
    return fig


def plot_detail(table: pd.DataFrame, *, score: str = "peak", panel_size: tuple[float, float] = (3.5, 3.2),
                dpi: int = 160):
    """Alignment against mean caption length in tokens, one line per control, one panel per (dataset, model pair).

    Parameters
    ----------
    table : DataFrame
        :func:`prh_lib.pages.appf_caption_detail.study_summary` (or :func:`~prh_lib.pages.appf_caption_detail.detail_alignment`):
        columns ``vision model``, ``language model``, ``control``, ``tokens``, ``chance``, ``score`` and,
        when present, ``dataset`` (one panel each) and ``<score> std`` (error bars: std over draws).
    score : str
        Column to plot (``"peak"``, ``"corrected peak"``, ...). For raw scores each control's chance level
        ``k/(n-1)`` is drawn as a dotted line in its colour (controls on fewer pairs have a higher one); all
        panels share one y range.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if score not in table.columns:
        raise ValueError(f"no column {score!r}; have {list(table.columns)}")
    table = table if "dataset" in table.columns else table.assign(dataset="")
    panels = list(dict.fromkeys(zip(table["dataset"], table["vision model"], table["language model"])))
    ncols = min(len(panels), 2)
    nrows = int(np.ceil(len(panels) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size[0] * ncols, panel_size[1] * nrows), squeeze=False,
                             sharey=True, dpi=dpi, layout="constrained")
    raw = not score.startswith("corrected")
    order = list(dict.fromkeys(table["control"]))  # the same colour for a control in every panel
    colors = {c: plt.cm.tab10(i % 10) for i, c in enumerate(order)}
    std = f"{score} std"
    for ax, (ds, vm, lm) in zip(axes.flat, panels):
        sub = table[(table["dataset"] == ds) & (table["vision model"] == vm)
                    & (table["language model"] == lm)].sort_values("tokens")
        for c in [c for c in order if c in set(sub["control"])]:
            part = sub[sub["control"] == c]
            err = part[std].to_numpy(float) if std in part.columns else None
            ax.errorbar(part["tokens"].to_numpy(float), part[score].to_numpy(float), yerr=err, color=colors[c],
                        marker="o", markersize=4, capsize=2, label=c)
            if raw:
                ax.axhline(float(part["chance"].iloc[0]), color=colors[c], linestyle=":", linewidth=1.2)
        if not raw:
            ax.axhline(0.0, color="0.4", linestyle="--", linewidth=1.2)
        ax.set_xlabel(f"mean caption length (tokens, {lm})", fontsize=9)
        ax.set_title(f"{ds + ': ' if ds else ''}{vm} × {lm}", fontsize=10)
        ax.tick_params(labelsize=9)
    for ax in axes[:, 0]:
        ax.set_ylabel(f"mutual k-NN ({score})", fontsize=9)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colors[c], marker="o", label=c) for c in order]
    handles.append(plt.Line2D([], [], color="0.4", linestyle=":" if raw else "--",
                              label="chance k/(N-1) (in each control's colour)" if raw else "chance (0)"))
    fig.legend(handles=handles, loc="outside upper center", ncol=2, fontsize=9, frameon=False)
    return fig


_FLOOR_STYLE = {"random-language": ("tab:purple", "a language model → its random-init twin"),
                "random-vision": ("tab:brown", "a vision model → its random-init twin"),
                "tfidf": ("tab:olive", "a language model → the caption's bag of words (TF-IDF)"),
                "tfidf-svd": ("tab:cyan", "a language model → TF-IDF, truncated SVD")}
# one dash pattern per floor kind, so floors at nearly the same height stay apart (TF-IDF and its SVD)
_FLOOR_DASH = {"random-language": (0, (1, 1.5)), "random-vision": (0, (4, 2)), "tfidf": (0, (6, 2, 1, 2)),
               "tfidf-svd": (0, (2, 3))}


def regime_figure(groups: dict, *, chance: dict | None = None, floors: dict | None = None,
                  regime_floors: dict | None = None, missing_note: "str | dict" = "not run", metric: str = "mutual k-NN",
                  panel_size=(3.45, 3.0)):
    """Figure 5 layout: one row of panels per dataset, raw maxima (left) and calibrated maxima (right).

    Parameters
    ----------
    groups : dict
        ``{dataset: (raw, calibrated)}``, each a :func:`prh_lib.pages.plots.regime_bars` group (regime label ->
        comparison label -> ``(value, low, high)``; see :func:`prh_lib.pages.sec3_3_regimes.regime_groups_over_draws`).
    chance : dict of str to float, optional
        Chance level k/(N-1) per dataset, drawn as a dashed red line on the raw panel (calibrated scores are
        0 for every score up to the null's (1 - alpha) quantile tau, chance included).
    floors : dict, optional
        Control floors as bands (:func:`prh_lib.pages.sec3_3_regimes.floor_bands`): ``{dataset: {kind: (mean,
        low, high)}}`` and ``{(dataset, "calibrated"): {...}}``; each kind is a coloured line at its mean (one
        dash pattern per kind, named in the legend) over a band from its lowest to its highest control.
    regime_floors : dict, optional
        Each regime's own highest floor (:func:`prh_lib.pages.sec3_3_regimes.regime_floor_marks`):
        ``{dataset: {regime label: (value, kind)}}``, drawn on the raw panel as a black dashed segment across
        that regime's slot; its kind (the same-modality pairs' random-init twins, for example) is named in a
        line under the figure, not over the points.
    missing_note : str or dict of str to str
        Said in the slot of a regime without comparisons; a dict gives it per dataset (e.g. a text-only
        dataset's "text only: no images"), "not run" for a dataset it does not name.
    panel_size : (float, float)
        Inches per panel; the default keeps the figure about 7.5 inches wide, the page's width, so 9-pt text
        is drawn at 9 pt.

    Returns
    -------
    matplotlib.figure.Figure
        Each dataset's row has its own y scale (raw and calibrated apart), so small scores at large N stay
        readable beside a dataset with higher ones; the legend sits below the axes.
    """
    import textwrap

    chance, floors = chance or {}, floors or {}
    datasets = list(groups)
    fig, axes = plt.subplots(len(datasets), 2, figsize=(2 * panel_size[0], panel_size[1] * len(datasets) + 0.9),
                             squeeze=False, dpi=150, layout="constrained")

    def top_of(col, extra, dataset):
        vals = [v for pts in groups[dataset][col].values() for p in pts.values() for v in (p[0], p[2]) if np.isfinite(v)]
        return max(vals + [v for v in extra if np.isfinite(v)] + [0.05]) * 1.12

    # every comparison gets a number beside its point, and the key under the figure names it
    names = list(dict.fromkeys(n for raw_cal in groups.values() for pts in raw_cal[0].values() for n in pts))
    number = {n: str(i + 1) for i, n in enumerate(names)}

    handles, own_floors = {}, {}
    for row, dataset in enumerate(datasets):
        raw, cal = groups[dataset]
        # each dataset's row on its own scale: at N = 1,000 cross-modal scores sit near 0.05, at N = 239 near 0.2
        raw_top = top_of(0, [chance.get(dataset, np.nan)] + [b[2] for b in floors.get(dataset, {}).values()]
                         + [v for v, _ in (regime_floors or {}).get(dataset, {}).values()], dataset)
        cal_top = top_of(1, [b[2] for b in floors.get((dataset, "calibrated"), {}).values()], dataset)
        for col, (pts, key, top, ylabel, what) in enumerate((
                (raw, dataset, raw_top, f"{metric}, max over layers", "raw"),
                (cal, (dataset, "calibrated"), cal_top, "calibrated score", "calibrated"))):
            ax = axes[row, col]
            labels = {textwrap.fill(r, 9): {number.get(n, n): v for n, v in p.items()} for r, p in pts.items()}
            plots.regime_bars(labels, ax=ax, ylabel=ylabel, title=f"{dataset}: {what}",
                              missing_note=(missing_note.get(dataset, "not run") if isinstance(missing_note, dict)
                                            else missing_note),
                              ylim=(-0.02 * top, top), point_label=str, label_size=9,
                              defer_labels=True)
            for kind, (mean, low, high) in floors.get(key, {}).items():
                color, label = _FLOOR_STYLE.get(kind, ("grey", kind))
                ax.axhspan(low, high, color=color, alpha=0.12, linewidth=0)
                handles[label] = ax.axhline(mean, color=color, linestyle=_FLOOR_DASH.get(kind, ":"), linewidth=1.6)
            if col == 0:
                slots = list(pts)
                for label, (value, kind) in (regime_floors or {}).get(dataset, {}).items():
                    if label not in slots or not np.isfinite(value):
                        continue
                    x = slots.index(label)
                    handles["highest floor of the regime's own pairs"] = ax.hlines(
                        value, x - 0.42, x + 0.42, colors="black", linestyles="--", linewidth=1.3)
                    own_floors.setdefault(dataset, {})[label.replace("\n", " ")] = kind
            if col == 0 and dataset in chance:
                handles["chance k/(N-1)"] = ax.axhline(chance[dataset], color="red", linestyle="--", linewidth=1.2)
            ax.tick_params(labelsize=9)
            ax.yaxis.label.set_fontsize(9)
            ax.title.set_fontsize(10)
    # under the axes: the legend (constrained layout keeps room for it), then the key of the numbered points
    if handles:
        fig.legend(list(handles.values()), [textwrap.fill(h, 44) for h in handles], loc="outside lower center",
                   ncol=2, fontsize=9, frameon=False,
                   title="floors (line: mean over vision × language pairs;\nband: lowest to highest pair)",
                   title_fontsize=9)
    footer = []
    if names:
        footer.append("Points: " + "; ".join(f"{number[n]} {n}" for n in names))
    if own_floors:  # which floor each black segment is (named here, not over the points)
        footer.append("Highest floor of a regime's own pairs: " + "; ".join(
            f"{d}, {r}: {k}" for d, kinds in own_floors.items() for r, k in kinds.items()))
    for text in footer:
        plots.add_footer(fig, text)
    plots.place_point_labels(fig)
    return fig
