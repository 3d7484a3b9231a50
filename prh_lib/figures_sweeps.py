"""The sweep figures of the book, drawn from result objects and tables with :mod:`prh_lib.plots`.

:func:`plot_sweeps` and :func:`plot_sweep_bands` (Section 3.1, Fig. 2: alignment under PCA compression, one
draw and over draws) and :func:`plot_sweep` (App. G: k and N sweeps). Re-exported by :mod:`prh_lib.figures`,
the module notebooks read figures from; none computes a score.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from . import plots

if TYPE_CHECKING:  # pragma: no cover
    from .analysis.compression import CompressionSweep


def plot_sweeps(sweeps: Sequence[CompressionSweep], *, sweep: str = "variance", ncols: int = 2,
                relative: bool = False, panel_size: tuple[float, float] = (5.0, 3.6)):
    """Figure 2-style panels: alignment against variance retained or against dimensions kept.

    One panel per (model pair, layer pair), one line per side compressed; the dashed black line is the
    uncompressed score (the reference) and the grey line the chance level ``k/(N-1)``.

    Parameters
    ----------
    sweeps : sequence of CompressionSweep
        From :func:`prh_lib.analysis.compression.compress_layer_pairs`; only those whose ``labels["sweep"] == sweep`` are drawn.
    sweep : {"variance", "dims"}
        x axis: fraction of variance retained, or number of components (log scale).
    relative : bool
        Plot ``score / reference`` instead of the score.

    Returns
    -------
    matplotlib.figure.Figure
    """
    if sweep not in ("variance", "dims"):
        raise ValueError(f"sweep must be 'variance' or 'dims'; got {sweep!r}")
    panels: dict[str, list[CompressionSweep]] = {}
    for s in sweeps:
        if s.labels.get("sweep") == sweep:
            lab = s.labels
            title = f"{lab.get('pair')}\n{lab.get('layers')}: {lab.get('layer x')} × {lab.get('layer y')}"
            panels.setdefault(title, []).append(s)
    if not panels:
        raise ValueError(f"no sweeps of kind {sweep!r} to plot")
    nrows = int(np.ceil(len(panels) / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size[0] * ncols, panel_size[1] * nrows), squeeze=False)
    names = {"x": "compress {x}", "y": "compress {y}", "both": "compress both"}
    for ax, (title, group) in zip(axes.flat, panels.items()):
        xs = {names[s.compress].format(**s.labels): (s.variance if sweep == "variance" else s.dims) for s in group}
        ys = {names[s.compress].format(**s.labels): (s.relative if relative else s.scores) for s in group}
        ref = 1.0 if relative else group[0].reference
        chance = group[0].chance / (group[0].reference if relative else 1.0)
        ax.axhline(ref, color="black", linestyle=":", linewidth=1.2, label=f"uncompressed {group[0].reference:.3f}")
        plots.line_plot(xs, ys, ax=ax, chance=chance, logx=sweep == "dims", title=title,
                        xlabel="fraction of variance retained" if sweep == "variance" else "principal components kept",
                        ylabel="score / uncompressed" if relative else f"mutual k-NN (k={group[0].k})",
                        marker="o" if sweep == "variance" else "")
        ax.title.set_fontsize(9)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def plot_sweep(frames: dict[str, pd.DataFrame], *, x: str, scores: Sequence[str] = ("fixed", "max"),
               chance: bool = True, panel_size: tuple[float, float] = (4.6, 3.5)):
    """Raw, chance-corrected (and calibrated) scores against ``k`` or ``n``: one row of panels per entry of ``frames``.

    Parameters
    ----------
    frames : dict of str to DataFrame
        Title -> a :func:`prh_lib.analysis.ablation.k_sweep` or :func:`~prh_lib.analysis.ablation.n_sweep` table (several seeds per ``x`` value are averaged, with a
        band of ± one standard deviation).
    x : {"k", "n"}
        The swept column.
    scores : sequence of {"fixed", "max", "final"}
        Which scores to draw as lines in the raw and corrected panels.
    chance : bool
        Draw the chance level ``k/(N-1)`` in the raw panel (a curve when it varies with ``x``).

    Returns
    -------
    matplotlib.figure.Figure
        Columns: raw scores; chance-corrected scores (0 = chance); the calibrated score at the fixed layer pair
        when the tables hold one.
    """
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    if x not in ("k", "n"):
        raise ValueError(f"x must be 'k' or 'n'; got {x!r}")
    kinds = ["raw", "corrected"] + (["calibrated"] if all("calibrated fixed" in df for df in frames.values()) else [])
    fig, axes = plt.subplots(len(frames), len(kinds), figsize=(panel_size[0] * len(kinds), panel_size[1] * len(frames)),
                             squeeze=False)
    ylabels = {"raw": "mutual k-NN", "corrected": "(score - chance) / (1 - chance)", "calibrated": "calibrated score"}
    for row, (title, df) in enumerate(frames.items()):
        g = df.groupby(x)
        xs = np.asarray(list(g.groups), dtype=float)
        for col, kind in enumerate(kinds):
            names = [f"{kind} {s}" for s in (scores if kind != "calibrated" else ("fixed",))]
            ys = {c: g[c].mean().to_numpy() for c in names}
            bands = None
            if g.size().max() > 1:
                sd = {c: g[c].std().fillna(0).to_numpy() for c in names}
                bands = {c: (ys[c] - sd[c], ys[c] + sd[c]) for c in names}
            if kind == "raw" and chance:
                ys["chance k/(N-1)"] = g["chance"].first().to_numpy()
            ax = axes[row, col]
            plots.line_plot(xs, ys, ax=ax, bands=bands, logx=x == "k", xlabel=x, title=f"{title}: {kind}",
                            ylabel=ylabels[kind], chance=0.0 if kind == "corrected" else None)
            if x == "k":
                ax.xaxis.set_major_formatter(ScalarFormatter())
                ax.xaxis.set_minor_formatter(NullFormatter())
            ax.title.set_fontsize(9)
    fig.tight_layout()
    return fig


def plot_sweep_bands(agg: pd.DataFrame, *, sweep: str = "variance", role: str = "peak", ncols: int = 2,
                     panel_size: tuple[float, float] = (4.8, 3.6), dpi: int = 150):
    """Figure 2 over draws: relative score (score / uncompressed) against variance retained or components kept.

    One panel per (model pair, dataset), one line per side compressed, with a band of ± one standard
    deviation over draws; dashed grey: 1 (the uncompressed score).

    Parameters
    ----------
    agg : DataFrame
        From :func:`prh_lib.analysis.compression.aggregate_sweeps`.
    sweep : {"variance", "dims"}
    role : {"peak", "final"}

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
                             dpi=dpi)
    for ax, (mx, my, ds) in zip(axes.flat, panels):
        g = sub[(sub["model_x"] == mx) & (sub["model_y"] == my) & (sub["dataset"] == ds)]
        xs, ys, bands = {}, {}, {}
        for side, gs in g.groupby("compress", sort=False):
            gs = gs.sort_values("x")
            label = f"compress {mx if side == 'x' else my if side == 'y' else 'both'}"
            xs[label], ys[label] = gs["x"].to_numpy(), gs["relative_mean"].to_numpy()
            sd = gs["relative_std"].fillna(0).to_numpy()
            bands[label] = (ys[label] - sd, ys[label] + sd)
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        plots.line_plot(xs, ys, ax=ax, bands=bands, logx=sweep == "dims", title=f"{mx} × {my}\n{ds}, {role} layers",
                        xlabel="fraction of variance retained" if sweep == "variance" else "principal components kept",
                        ylabel="score / uncompressed", marker="o" if sweep == "variance" else "")
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=2, frameon=False)
        ax.tick_params(labelsize=9)
        ax.title.set_fontsize(9)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig
