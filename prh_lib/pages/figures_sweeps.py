"""The sweep figures of the book, drawn from result objects and tables with :mod:`prh_lib.pages.plots`.

:func:`plot_sweep_bands` (Section 3.1, Fig. 2: alignment under PCA compression over draws) and
:func:`plot_sweep` (App. G: k and N sweeps). Re-exported by :mod:`prh_lib.pages.figures`,
the module notebooks read figures from; none computes a score.
"""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from prh_lib.pages import plots


def plot_sweep(frames: dict[str, pd.DataFrame], *, x: str, scores: Sequence[str] = ("fixed", "max"),
               chance: bool = True, panel_size: tuple[float, float] = (2.5, 2.2), dpi: int = 150):
    """Raw, chance-corrected (and calibrated) scores against ``k`` or ``n``: one row of panels per entry of ``frames``.

    Each row is titled by its entry (a model pair); the columns are the kinds of score, named once at the
    top; one legend for the whole figure below the panels (the same line styles in every panel).

    Parameters
    ----------
    frames : dict of str to DataFrame
        Title -> a :func:`prh_lib.pages.appg_k_n_ablation.k_sweep` or :func:`~prh_lib.pages.appg_k_n_ablation.n_sweep` table (several seeds per ``x`` value are averaged, with a
        band of ± one standard deviation).
    x : {"k", "n"}
        The swept column.
    scores : sequence of {"fixed", "max", "final"}
        Which scores to draw as lines in the raw and corrected panels.
    chance : bool
        Draw the chance level ``k/(N-1)`` in the raw panel (a curve when it varies with ``x``).
    panel_size : (float, float)
        Inches per panel: three columns stay under 8 inches, so the figure is not shrunk on the page.

    Returns
    -------
    matplotlib.figure.Figure
        Columns: raw scores; chance-corrected scores (s - c)/(1 - c), 0 = chance; the calibrated score at the
        fixed layer pair when the tables hold one.

    Raises
    ------
    ValueError
        If ``x`` is not ``"k"`` or ``"n"``, or ``frames`` is empty.
    """
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, NullFormatter

    if x not in ("k", "n"):
        raise ValueError(f"x must be 'k' or 'n'; got {x!r}")
    if not frames:
        raise ValueError("no sweeps to plot")
    kinds = ["raw", "corrected"] + (["calibrated"] if all("calibrated fixed" in df for df in frames.values()) else [])
    columns = {"raw": "mutual k-NN", "corrected": "(s − c) / (1 − c)", "calibrated": "calibrated"}
    fig = plt.figure(figsize=(panel_size[0] * len(kinds), (panel_size[1] + 0.35) * len(frames) + 0.9), dpi=dpi,
                     layout="constrained")
    rows = np.atleast_1d(fig.subfigures(len(frames), 1))
    styles = {s: f"C{i}" for i, s in enumerate(scores)}
    for sf, (title, df) in zip(rows, frames.items()):
        sf.suptitle(title, fontsize=10)
        axes = np.atleast_1d(sf.subplots(1, len(kinds)))
        g = df.groupby(x)
        xs = np.asarray(list(g.groups), dtype=float)
        for ax, kind in zip(axes, kinds):
            names = [f"{kind} {s}" for s in (scores if kind != "calibrated" else ("fixed",))]
            for c in names:
                y = g[c].mean().to_numpy()
                color = styles[c.split(" ", 1)[1]]
                ax.plot(xs, y, marker="o", markersize=3, color=color)
                if g.size().max() > 1:
                    sd = g[c].std().fillna(0).to_numpy()
                    ax.fill_between(xs, y - sd, y + sd, color=color, alpha=0.2, linewidth=0)
            if kind == "raw" and chance:
                ax.plot(xs, g["chance"].first().to_numpy(), color="grey", linestyle="--", linewidth=1)
            if kind == "corrected":
                ax.axhline(0.0, color="grey", linestyle="--", linewidth=1)
            if x == "k":
                ax.set_xscale("log")
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
                ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel(x, fontsize=9)
            ax.set_title(columns[kind], fontsize=9)
            ax.tick_params(labelsize=9)
            ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=styles[s], marker="o", markersize=3,
                      label={"fixed": "fixed layer pair", "max": "max over layer pairs",
                             "final": "final layers"}.get(s, s)) for s in scores]
    handles.append(Line2D([], [], color="grey", linestyle="--",
                          label="chance k/(N−1) (raw); 0 = chance (corrected)"))
    fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=9, frameon=False)
    return fig


def plot_sweep_bands(agg: pd.DataFrame, *, sweep: str = "variance", role: str = "peak", ncols: int = 2,
                     thresholds: Sequence[tuple[float, float, str]] = (),
                     panel_size: tuple[float, float] = (3.6, 3.0), dpi: int = 150):
    """Figure 2 over draws: relative score (score / uncompressed) against variance retained or components kept.

    One panel per (model pair, dataset), one line per side compressed, with a band of ± one standard
    deviation over draws; dashed grey: 1 (the uncompressed score); dash-dotted black: chance on the same
    scale, k/(N-1) divided by the uncompressed score (a compressed space that kept no neighbour structure);
    dotted: the thresholds the verdicts read (a horizontal line at the relative score a claim needs and a
    vertical one where it is read).

    Parameters
    ----------
    agg : DataFrame
        From :func:`prh_lib.pages.sec3_1b_pca.aggregate_sweeps` (its ``pca:reference`` rows give the
        uncompressed score of each panel; ``n`` and ``k`` give chance).
    sweep : {"variance", "dims"}
    role : {"peak", "final"}
    thresholds : sequence of (x, relative score, label)
        The verdicts' reading points, e.g. ``(0.4, 0.95, "3.1/pca-40: ≥ 95 % at 40 % variance")``
        (:func:`prh_lib.pages.sec3_1b_pca.claim_marks`). ``x`` is a fraction of variance or a number of
        components as ``sweep`` says, or a function of the rank of the panel's language side (the ``y`` side
        where both are compressed).

    Returns
    -------
    matplotlib.figure.Figure
    """
    if sweep not in ("variance", "dims"):
        raise ValueError(f"sweep must be 'variance' or 'dims'; got {sweep!r}")
    sub = agg[(agg["quantity"] == f"pca:{sweep}") & (agg["role"] == role)]
    if sub.empty:
        raise ValueError(f"no {sweep} sweeps at the {role} layers to plot")
    panels = list(dict.fromkeys(zip(sub["model_x"], sub["model_y"], sub["dataset"])))
    ncols = min(ncols, len(panels))
    nrows = int(np.ceil(len(panels) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size[0] * ncols, panel_size[1] * nrows), squeeze=False,
                             dpi=dpi, layout="constrained")
    ref = agg[(agg["quantity"] == "pca:reference") & (agg["role"] == role)]
    colors = ["tab:red", "tab:purple", "tab:brown"]
    for ax, (mx, my, ds) in zip(axes.flat, panels):
        g = sub[(sub["model_x"] == mx) & (sub["model_y"] == my) & (sub["dataset"] == ds)]
        r = ref[(ref["model_x"] == mx) & (ref["model_y"] == my) & (ref["dataset"] == ds)]
        if not r.empty and {"n", "k"} <= set(g.columns) and float(r["score_mean"].iloc[0]) > 0:
            n, k = int(g["n"].iloc[0]), int(g["k"].iloc[0])
            ax.axhline(k / (n - 1) / float(r["score_mean"].iloc[0]), color="black", linestyle="-.", linewidth=1)
        lang = g[g["compress"] == "y"] if (g["compress"] == "y").any() else g
        for (x_at, y_at, _), color in zip(thresholds, colors):
            ax.axhline(y_at, color=color, linestyle=":", linewidth=1.2)
            # a callable mark is read on this panel's compressed language side's rank (its largest swept dimension)
            ax.axvline(x_at(lang["x"].max()) if callable(x_at) else x_at, color=color, linestyle=":", linewidth=1.2)
        xs, ys, bands = {}, {}, {}
        for side, gs in g.groupby("compress", sort=False):
            gs = gs.sort_values("x")
            label = f"compress {mx if side == 'x' else my if side == 'y' else 'both'}"
            xs[label], ys[label] = gs["x"].to_numpy(), gs["relative_mean"].to_numpy()
            sd = gs["relative_std"].fillna(0).to_numpy()
            bands[label] = (ys[label] - sd, ys[label] + sd)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        plots.line_plot(xs, ys, ax=ax, bands=bands, logx=sweep == "dims", title=f"{mx} × {my}\n{ds}, {role} layers",
                        xlabel="variance retained" if sweep == "variance" else "components kept",
                        ylabel="score / uncompressed", marker="o" if sweep == "variance" else "")
        ax.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=1, frameon=False)
        ax.tick_params(labelsize=9)
        ax.xaxis.label.set_fontsize(9)
        ax.yaxis.label.set_fontsize(9)
        ax.title.set_fontsize(9)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    from matplotlib.lines import Line2D

    keys = [Line2D([], [], color="grey", linestyle="--", label="uncompressed score (= 1)"),
            Line2D([], [], color="black", linestyle="-.", label="chance k/(N−1) ÷ uncompressed")]
    keys += [Line2D([], [], color=c, linestyle=":", linewidth=1.2, label=label)
             for (_, _, label), c in zip(thresholds, colors)]
    fig.legend(handles=keys, loc="outside lower center", ncol=1, fontsize=9, frameon=False)
    return fig
