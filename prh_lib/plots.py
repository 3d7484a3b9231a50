"""Figures. Plots take arrays and labels (never models) and return matplotlib objects."""

from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np


def _tick_positions(n: int, max_ticks: int = 12) -> np.ndarray:
    step = max(1, int(np.ceil(n / max_ticks)))
    ticks = list(range(0, n, step))
    if ticks[-1] != n - 1:
        ticks.append(n - 1)
    return np.array(ticks)


def alignment_heatmap(
    scores: np.ndarray,
    x_labels: Sequence[str],
    y_labels: Sequence[str],
    *,
    ax=None,
    title: str | None = None,
    x_name: str = "",
    y_name: str = "",
    chance: float | None = None,
    vmin: float | None = None,
    vmax: float | None = None,
    mark_peak: bool = True,
    mark_final: bool = True,
    cmap: str = "viridis",
):
    """Heatmap of a ``(n_layers_x, n_layers_y)`` score matrix: rows are x's layers, columns y's.

    The maximum is marked with a white star and the final-layer pair with a red square; the colour bar
    shows the chance level as a line when ``chance`` is given. NaN entries (undefined scores, e.g. a ViT's
    constant embedding-output CLS token) are left blank and ignored by the markers.

    Returns
    -------
    matplotlib.image.AxesImage
    """
    scores = np.asarray(scores, dtype=float)
    if scores.shape != (len(x_labels), len(y_labels)):
        raise ValueError(f"scores of shape {scores.shape} do not match {len(x_labels)} x {len(y_labels)} labels")
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 4))
    if np.isnan(scores).all():
        raise ValueError("every score is NaN: nothing to draw")
    if vmin is None:  # NaN-aware autoscale, with the chance level inside the range
        vmin = float(np.nanmin(scores)) if chance is None else min(float(np.nanmin(scores)), chance)
    if vmax is None:
        vmax = float(np.nanmax(scores))
    im = ax.imshow(scores, origin="lower", aspect="auto", cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")
    xt, yt = _tick_positions(len(y_labels)), _tick_positions(len(x_labels))
    ax.set_xticks(xt, [y_labels[t] for t in xt], rotation=60, ha="right", fontsize=7)
    ax.set_yticks(yt, [x_labels[t] for t in yt], fontsize=7)
    ax.set_xlabel(y_name)
    ax.set_ylabel(x_name)
    if mark_peak:
        i, j = np.unravel_index(int(np.nanargmax(scores)), scores.shape)
        ax.plot(j, i, marker="*", color="white", markersize=13, markeredgecolor="black", linestyle="none",
                label=f"max {scores[i, j]:.3f}")
    if mark_final:
        ax.plot(len(y_labels) - 1, len(x_labels) - 1, marker="s", markersize=9, markerfacecolor="none",
                markeredgecolor="red", markeredgewidth=2, linestyle="none", label=f"final {scores[-1, -1]:.3f}")
    if mark_peak or mark_final:
        ax.legend(loc="upper left", fontsize=7, framealpha=0.8)
    cbar = ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if chance is not None:
        lo, hi = im.get_clim()
        if lo <= chance <= hi:
            cbar.ax.axhline(chance, color="red", linewidth=1.5)
        cbar.set_label(f"score (chance {chance:.3f})", fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return im


def heatmap_grid(matrices: dict, *, chance: float | None = None, ncols: int = 2, shared_scale: bool = False,
                 panel_size: tuple[float, float] = (5.0, 4.2)):
    """One :func:`alignment_heatmap` per entry of ``matrices`` (label -> AlignmentMatrix-like object).

    Each value needs ``scores``, ``x_labels``, ``y_labels``, ``x_name`` and ``y_name`` attributes.
    With ``shared_scale`` all panels use the same colour range, so colours compare across pairs; by default
    each panel has its own range, so the layer structure of weakly aligned pairs stays visible.
    """
    n = len(matrices)
    nrows = int(np.ceil(n / ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_size[0] * ncols, panel_size[1] * nrows), squeeze=False)
    vmin = vmax = None
    if shared_scale:
        vmin = min(float(np.nanmin(m.scores)) for m in matrices.values())
        vmax = max(float(np.nanmax(m.scores)) for m in matrices.values())
    for ax, (label, m) in zip(axes.flat, matrices.items()):
        alignment_heatmap(m.scores, m.x_labels, m.y_labels, ax=ax, title=label, x_name=m.x_name,
                          y_name=m.y_name, chance=chance, vmin=vmin, vmax=vmax)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    fig.tight_layout()
    return fig


def line_plot(x, ys: dict, *, ax=None, xlabel: str = "", ylabel: str = "", title: str | None = None,
              chance: float | None = None, bands: dict | None = None, logx: bool = False, marker: str = "o"):
    """Lines ``label -> y`` over a shared ``x``, with optional ``label -> (low, high)`` bands and chance line."""
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.8))
    for label, y in ys.items():
        xs = x[label] if isinstance(x, dict) else x
        (line,) = ax.plot(xs, y, marker=marker, markersize=3.5, label=label)
        if bands and label in bands:
            lo, hi = bands[label]
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
    if chance is not None:
        ax.axhline(chance, color="grey", linestyle="--", linewidth=1, label="chance")
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return ax
