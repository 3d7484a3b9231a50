"""Plot primitives: they take arrays and labels (never models or result objects) and return matplotlib objects.

Chapter figures, drawn from result tables with these primitives, are in :mod:`prh_lib.pages.figures`.
"""

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


#: Width, in CSS pixels, of the column a figure is shown in on a book page (sphinx-book-theme in a 1,280 px
#: window, as tests/test_browser.py opens it): a PNG wider than this is shrunk to it. The browser test
#: measures the column and fails if the built book's is narrower.
PAGE_WIDTH_PX = 680
#: Smallest text size, in points as rendered on the page (1 pt = 96/72 CSS px), that :func:`readable` allows.
MIN_RENDERED_PT = 9.0
#: Padding, in inches, that ``savefig(bbox_inches="tight")`` (IPython's inline backend) adds around the figure.
_TIGHT_PAD_IN = 0.1


def rendered_scale(width_in: float, dpi: float, *, page_width_px: float = PAGE_WIDTH_PX) -> float:
    """How much a figure ``width_in`` inches wide, saved at ``dpi``, is magnified on the page (1 = true size).

    The PNG is ``width_in * dpi`` pixels wide; the browser shows it at that many CSS pixels, or at the column
    width ``page_width_px`` when wider. A CSS inch is 96 px, so the magnification is
    ``min(width_in * dpi, page_width_px) / (96 * width_in)``: text of ``s`` points is seen at ``s * scale``.
    """
    if width_in <= 0 or dpi <= 0:
        raise ValueError(f"width_in and dpi must be positive; got {width_in}, {dpi}")
    return min(width_in * dpi, page_width_px) / (96.0 * width_in)


def _saved_width_in(fig) -> float:
    fig.canvas.draw()
    bbox = fig.get_tightbbox(fig.canvas.get_renderer())
    return float(bbox.width) + 2 * _TIGHT_PAD_IN


def _texts(fig):
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def add_footer(fig, text: str) -> None:
    """Set ``text`` under everything else in ``fig`` (a key, a provenance line), as :func:`place_footers` lays out.

    The footers stack in the order added, each wrapped to the figure's width, under the figure's tight bounding
    box (axes, their labels and figure legends), so they never overlap a legend a layout engine placed.
    """
    fig._prh_footers = [*getattr(fig, "_prh_footers", []), str(text)]
    place_footers(fig)


def _axes(fig) -> list:
    from matplotlib.axes import Axes

    return list({id(a): a for a in fig.findobj(Axes)}.values())


def _unfreeze(fig) -> None:
    """Give a figure frozen by :func:`place_footers` its layout engine back (its axes back into the layout)."""
    engine = getattr(fig, "_prh_engine", None)
    if engine is None:
        return
    for ax in _axes(fig):
        ax.set_in_layout(True)
    for legend, loc in getattr(fig, "_prh_legend_locs", []):
        legend.set_bbox_to_anchor(None)
        legend.set_loc(loc)
    fig._prh_legend_locs = []
    fig.set_layout_engine(engine)
    fig._prh_engine = None


def place_footers(fig, *, fontsize: float | None = None) -> None:
    """Lay out :func:`add_footer`'s texts anew under the figure's current tight bounding box.

    Called by :func:`add_footer` and again by :func:`prh_lib.pages.report.show_figure` after :func:`readable` has
    resized the text (``fontsize``: their size in points; default 9).
    """
    import textwrap

    for artist in getattr(fig, "_prh_footer_artists", []):
        artist.remove()
    fig._prh_footer_artists = []
    texts = getattr(fig, "_prh_footers", [])
    if not texts:
        return
    size = float(fontsize or 9.0)
    _unfreeze(fig)  # laid out again (fonts may have changed), then frozen again
    for _ in range(2):  # constrained layout settles legends "outside" the axes in a second pass
        fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
    width_chars = max(40, int(box.width * 72 / (0.55 * size)))
    y = box.y0 - 0.06
    for text in texts:
        wrapped = "\n".join(textwrap.fill(line, width_chars) for line in text.splitlines())
        w, h = fig.get_size_inches()
        artist = fig.text(box.x0 / w, y / h, wrapped, fontsize=size, ha="left", va="top",
                          color="0.35" if text.startswith("notebook ") else "black")
        fig._prh_footer_artists.append(artist)
        y -= (wrapped.count("\n") + 1) * size * 1.3 / 72 + 0.06
    # freeze the layout: a layout engine run again when the figure is saved with bbox_inches="tight" would
    # measure the footers as part of the figure and move "outside" legends under them
    engine = fig.get_layout_engine()
    if engine is not None and engine.__class__.__name__ != "PlaceHolderLayoutEngine":
        fig._prh_engine = engine
        renderer = fig.canvas.get_renderer()
        for ax in _axes(fig):  # kept where the engine put them (set_position takes them out of the layout)
            ax.set_position(ax.get_position(original=False), which="both")
        for legend in fig.findobj(lambda a: a.__class__.__name__ == "Legend"):
            if legend.axes is not None:
                continue
            # figure legends pinned where the engine put them, in figure fractions
            from matplotlib.legend import Legend

            loc = {code: name for name, code in Legend.codes.items()}[legend._loc]
            loc = f"outside {loc}" if getattr(legend, "_outside_loc", None) else loc  # set_loc("center") clears it
            fig._prh_legend_locs = [*getattr(fig, "_prh_legend_locs", []), (legend, loc)]
            where = legend.get_window_extent(renderer).transformed(fig.transFigure.inverted())
            legend.set_bbox_to_anchor(where, transform=fig.transFigure)
            legend.set_loc("center")
        fig.set_layout_engine("none")


def readable(fig, *, min_pt: float = MIN_RENDERED_PT, page_width_px: float = PAGE_WIDTH_PX,
             max_rounds: int = 4) -> dict:
    """Enlarge every text of ``fig`` that would be rendered below ``min_pt`` points on a book page.

    The figure is saved with ``bbox_inches="tight"`` at ``fig.dpi`` and shown at most ``page_width_px`` CSS
    pixels wide (:func:`rendered_scale`), so a 9-pt tick label on a 14-inch figure ends up near 5 pt.
    Each text below ``min_pt / scale`` points is set to that size (tick labels through ``tick_params``, so
    ticks drawn later keep it), the layout engine (if any) runs again, and the check repeats, since larger
    text widens the saved figure. A figure without a layout engine and without figure legends is laid out
    again with ``tight_layout`` (one with figure legends keeps its layout: its function sizes it for the page).
    The figure functions lay out their panels at page width so that this changes little.

    Returns
    -------
    dict
        ``width_in`` (saved width, inches), ``dpi``, ``scale`` (:func:`rendered_scale`), ``min_pt`` (the
        smallest text size in the figure, points) and ``min_rendered_pt`` (= ``min_pt * scale``), the numbers
        :func:`prh_lib.pages.report.show_figure` writes into the PNG for the browser test.

    Raises
    ------
    ValueError
        If ``min_pt`` or ``page_width_px`` is not positive.
    """
    if min_pt <= 0 or page_width_px <= 0:
        raise ValueError(f"min_pt and page_width_px must be positive; got {min_pt}, {page_width_px}")
    for _ in range(max_rounds):
        width = _saved_width_in(fig)
        scale = rendered_scale(width, fig.dpi, page_width_px=page_width_px)
        need = min_pt / scale * 1.001
        small = [t for t in _texts(fig) if t.get_fontsize() < need]
        if not small:
            break
        _unfreeze(fig)  # frozen by place_footers: lay out again
        for ax in _axes(fig):
            for axis, which in ((ax.xaxis, "x"), (ax.yaxis, "y")):
                labels = [t for t in axis.get_ticklabels(which="both") if t.get_text().strip()]
                if labels and min(t.get_fontsize() for t in labels) < need:
                    ax.tick_params(axis=which, which="both", labelsize=need)
        for t in small:
            if t.get_fontsize() < need:
                t.set_fontsize(need)
        if fig.get_layout_engine() is None and not fig.legends:  # laid out once by tight_layout(): again
            fig.set_layout_engine("tight")
        if getattr(fig, "_prh_footers", None):
            place_footers(fig, fontsize=need)
    texts = _texts(fig)
    width = _saved_width_in(fig)
    scale = rendered_scale(width, fig.dpi, page_width_px=page_width_px)
    smallest = min((t.get_fontsize() for t in texts), default=float("nan"))
    return {"width_in": round(width, 3), "dpi": float(fig.dpi), "scale": round(scale, 4),
            "min_pt": round(float(smallest), 2), "min_rendered_pt": round(float(smallest) * scale, 2)}


#: font sizes of the heatmaps, in points, for a figure at most 10 inches wide shown at page width
HEATMAP_FONTS = {"ticks": 9, "labels": 10, "title": 10, "legend": 9}


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
    peak: tuple[int, int] | None = None,
    other_peaks: Sequence[tuple[int, int]] = (),
    cmap: str = "viridis",
    legend: str | bool = "outside",
    colorbar: bool = True,
    max_ticks: int = 12,
    value_label: str = "mutual k-NN",
    chance_label: str = "chance",
):
    """Heatmap of a ``(n_layers_x, n_layers_y)`` score matrix: rows are x's layers, columns y's.

    The maximum is marked with a white star, the final-layer pair with a red square, and ``other_peaks``
    (e.g. the peaks of other draws) with small white circles. The chance level is drawn on the colour bar
    as a thick red dashed notch across the bar (the bar's label gives its value). NaN entries (undefined scores, e.g. a ViT's
    constant embedding-output CLS token) are left blank (grey) and ignored by the markers.

    Parameters
    ----------
    scores : array_like of shape (n_layers_x, n_layers_y)
    x_labels, y_labels : sequence of str
    ax : matplotlib Axes, optional
    title, x_name, y_name : str
    chance : float, optional
        Marked on the colour bar and kept inside the colour range.
    vmin, vmax : float, optional
        Colour range; pass the same values to panels that are compared (a shared scale). Default: this
        panel's NaN-aware range, with ``chance`` inside it.
    mark_peak, mark_final : bool
    peak : (int, int), optional
        The (row, column) to star, e.g. :attr:`prh_lib.analysis.AlignmentMatrix.peak`; default the NaN-aware
        maximum.
    other_peaks : sequence of (int, int)
    cmap : str
    legend : {"outside", False}
        ``"outside"``: the markers' legend below the axes (never over cells); False: none (a figure legend
        or the title carries the values).
    colorbar : bool
    max_ticks : int
    value_label, chance_label : str
        The colour bar reads ``"<value_label> (<chance_label> <chance>)"`` (e.g. ``"Cross-Model (0 = no shared
        displacement)"`` for a measure whose reference is 0, not a chance level).

    Returns
    -------
    matplotlib.image.AxesImage

    Raises
    ------
    ValueError
        If the labels do not match the shape or every score is NaN.
    """
    scores = np.asarray(scores, dtype=float)
    if scores.shape != (len(x_labels), len(y_labels)):
        raise ValueError(f"scores of shape {scores.shape} do not match {len(x_labels)} x {len(y_labels)} labels")
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 4.6), dpi=150)
    if np.isnan(scores).all():
        raise ValueError("every score is NaN: nothing to draw")
    if vmin is None:  # NaN-aware autoscale, with the chance level inside the range
        vmin = float(np.nanmin(scores)) if chance is None else min(float(np.nanmin(scores)), chance)
    if vmax is None:
        vmax = float(np.nanmax(scores))
    cm = plt.get_cmap(cmap).with_extremes(bad="0.85")
    im = ax.imshow(scores, origin="lower", aspect="auto", cmap=cm, vmin=vmin, vmax=vmax, interpolation="nearest")
    f = HEATMAP_FONTS
    xt, yt = _tick_positions(len(y_labels), max_ticks), _tick_positions(len(x_labels), max_ticks)
    ax.set_xticks(xt, [y_labels[t] for t in xt], rotation=60, ha="right", rotation_mode="anchor",
                  fontsize=f["ticks"])
    ax.set_yticks(yt, [x_labels[t] for t in yt], fontsize=f["ticks"])
    ax.set_xlabel(y_name, fontsize=f["labels"])
    ax.set_ylabel(x_name, fontsize=f["labels"])
    for i, j in other_peaks:
        ax.plot(j, i, marker="o", color="white", markersize=5, markeredgecolor="black", linestyle="none",
                label="peak of another draw")
    if mark_peak:
        i, j = peak if peak is not None else np.unravel_index(int(np.nanargmax(scores)), scores.shape)
        ax.plot(j, i, marker="*", color="white", markersize=14, markeredgecolor="black", linestyle="none",
                label=f"max {scores[i, j]:.3f}")
    if mark_final:
        ax.plot(len(y_labels) - 1, len(x_labels) - 1, marker="s", markersize=10, markerfacecolor="none",
                markeredgecolor="red", markeredgewidth=2.2, linestyle="none", label=f"final {scores[-1, -1]:.3f}")
    if legend == "outside" and (mark_peak or mark_final or len(other_peaks)):
        handles, labels = ax.get_legend_handles_labels()
        keep = dict(zip(labels, handles))
        ax.legend(keep.values(), keep.keys(), loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3,
                  fontsize=f["legend"], frameon=False)
    if colorbar:
        cbar = ax.figure.colorbar(im, ax=ax, fraction=0.05, pad=0.03)
        cbar.ax.tick_params(labelsize=f["ticks"])
        if chance is not None:
            lo, hi = im.get_clim()
            if lo <= chance <= hi:
                tr = cbar.ax.get_yaxis_transform()  # a notch that sticks out on both sides of the bar
                cbar.ax.plot([-0.35, 1.35], [chance, chance], color="white", linewidth=4.5, transform=tr,
                             clip_on=False, solid_capstyle="butt")
                cbar.ax.plot([-0.35, 1.35], [chance, chance], color="red", linewidth=2.2, linestyle="--",
                             transform=tr, clip_on=False)
            cbar.set_label(f"{value_label} ({chance_label} {chance:.3f})" if chance_label else value_label,
                           fontsize=f["labels"])
    if title:
        ax.set_title(title, fontsize=f["title"])
    return im


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
    ax.legend(fontsize=9)
    ax.grid(alpha=0.3)
    return ax


def _short_pair(name: str) -> str:
    """``"dinov2-small × smollm2-135m (seed 0)"`` -> ``"dinov2-small×smollm2-135m"``: a point's label."""
    return name.split(" (")[0].replace(" × ", "×")


def regime_bars(groups: dict, *, ax=None, chance: float | None = None, ylabel: str = "", title: str | None = None,
                missing_note: str = "not run", ylim: tuple[float, float] | None = None, label_points: bool = True,
                point_label=_short_pair, label_size: float = 7, defer_labels: bool = False):
    """Regimes side by side: a bar at each regime's mean and every comparison as a point with its interval.

    Parameters
    ----------
    groups : dict of str to dict of str to (float, float, float)
        Regime label -> comparison label -> ``(value, low, high)``, in display order. A regime with no
        comparisons is drawn as a hatched band over the full height, labelled ``missing_note``.
    ax : matplotlib Axes, optional
    chance : float, optional
        Drawn as a dashed horizontal line.
    ylabel, title : str
    missing_note : str
        Text in empty slots (e.g. ``"needs the paper profile"``).
    ylim : (float, float), optional
        Default: from just below 0 to just above the highest value, interval end or chance level.
    label_points : bool, default True
        Write each comparison's label beside its point (``point_label(name)``, ``label_size`` pt): per slot, a
        column right of the points in the order of their values, one line apart, with a thin line to a point
        whose label had to move.
    defer_labels : bool, default False
        Leave the labels for :func:`place_point_labels` (for figures whose layout changes after this call).

    Returns
    -------
    matplotlib.axes.Axes
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    top = max([hi for pts in groups.values() for _, _, hi in pts.values() if np.isfinite(hi)] +
              [v for pts in groups.values() for v, _, _ in pts.values() if np.isfinite(v)] + [chance or 0, 0.05])
    labelled = []
    for slot, (label, points) in enumerate(groups.items()):
        color = colors[slot % len(colors)]
        if not points:  # a hatched band over the whole height: no value, not a bar
            ax.axvspan(slot - 0.35, slot + 0.35, facecolor="none", edgecolor="lightgrey", hatch="//", linewidth=0)
            ax.text(slot, top * 0.5, missing_note, ha="center", va="center", rotation=90, fontsize=9, color="dimgrey",
                    bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.9})
            continue
        values = np.array([v for v, _, _ in points.values()], dtype=float)
        ax.bar(slot, np.nanmean(values), width=0.7, color=color, alpha=0.3, edgecolor=color)
        offsets = np.linspace(-0.25, 0.25, len(points)) if len(points) > 1 else np.zeros(1)
        for dx, (name, (v, lo, hi)) in zip(offsets, points.items()):
            err = [[max(v - lo, 0.0)], [max(hi - v, 0.0)]] if np.isfinite(lo) and np.isfinite(hi) else None
            ax.errorbar(slot + dx, v, yerr=err, fmt="o", color=color, markersize=4, capsize=2, linewidth=1)
            if label_points and np.isfinite(v):  # each point names its comparison (placed below, once y is fixed)
                labelled.append((slot, slot + dx, v, point_label(name)))
    if chance is not None:
        ax.axhline(chance, color="red", linestyle="--", linewidth=1, label=f"chance {chance:.3f}")
        ax.legend(fontsize=9, loc="upper left")
    ax.set_xticks(range(len(groups)), [label.replace(" (", "\n(") for label in groups], fontsize=9)
    ax.set_ylabel(ylabel)
    ax.set_ylim(*(ylim if ylim is not None else (-0.02 * top, top * 1.1)))  # points at 0 stay visible
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if defer_labels:  # the caller lays the figure out first (:func:`place_point_labels`)
        ax._prh_point_labels = (labelled, label_size)
    else:
        _label_column(ax, labelled, label_size)
    return ax


def place_point_labels(fig) -> None:
    """Place the point labels that :func:`regime_bars` deferred (``defer_labels=True``) on every axes of ``fig``,
    after laying the figure out, so that "one line apart" is measured on the axes' final height."""
    fig.draw_without_rendering()
    for ax in _axes(fig):
        deferred = getattr(ax, "_prh_point_labels", None)
        if deferred:
            _label_column(ax, *deferred)
            ax._prh_point_labels = None


def _spread(values, gap: float, low: float, high: float) -> list[float]:
    """Heights for labels of ``values`` (ascending), at least ``gap`` apart, each as near its value as that allows:
    labels that would collide form a group centred on the mean of its values (kept within ``low``..``high``), and
    groups that then collide merge, until none do."""
    groups = []  # [values of the group, height of its lowest label]
    for v in values:
        groups.append([[v], min(max(v, low), high)])
        while len(groups) > 1 and groups[-1][1] - (groups[-2][1] + (len(groups[-2][0]) - 1) * gap) < gap - 1e-12:
            merged = groups[-2][0] + groups[-1][0]
            start = float(np.mean(merged)) - (len(merged) - 1) * gap / 2
            groups[-2:] = [[merged, max(min(start, high - (len(merged) - 1) * gap), low)]]
    return [start + i * gap for members, start in groups for i in range(len(members))]


def _label_column(ax, labelled, size: float) -> None:
    """Each slot's point labels in a column just right of its points, in the order of their values, at least one
    line apart (so no two labels overlap however close the points are) and each as near its point's height as
    that allows, joined to their points by thin lines where a label had to move. Each label has a white backing
    so that lines drawn across the slot (floors, chance) do not run through it."""
    if not labelled:
        return
    fig = ax.figure
    y0, y1 = ax.get_ylim()
    # data units per point along y, from the axes' height as laid out now
    height_pt = (ax.get_window_extent().height / fig.dpi) * 72
    per_pt = (y1 - y0) / max(height_pt, 1.0)
    gap = size * 1.3 * per_pt
    for slot in dict.fromkeys(s for s, *_ in labelled):
        items = sorted((t for t in labelled if t[0] == slot), key=lambda t: t[2])
        ys = _spread([t[2] for t in items], gap, y0 + gap / 2, y1 - gap / 2)
        # clear of the rightmost point (points sit at most 0.25 right of the slot's centre), so that a label
        # beside a point that is not its own is not read as that point's
        x_text = slot + 0.36
        for (_, x, v, text), y in zip(items, ys):
            moved = abs(y - v) > gap / 4 or x_text - x > 0.14
            ax.annotate(text, (x, v), xytext=(x_text, y), textcoords="data", fontsize=size, va="center",
                        ha="left", color="0.2",
                        bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none", "alpha": 0.8},
                        arrowprops={"arrowstyle": "-", "color": "0.6", "linewidth": 0.5,
                                    "shrinkA": 0, "shrinkB": 2} if moved else None)


#: Columns of :func:`figure_data`: where (``panel``), what (``kind``, ``series``) and the values drawn.
DATA_COLUMNS = ["panel", "kind", "series", "x", "y", "low", "high", "row", "column", "value"]


def _series(artist) -> str:
    label = str(artist.get_label() or "")
    return "" if label.startswith("_") else label  # matplotlib's own "_child0", "_nolegend_": no name


def _index_names(axis, n: int) -> list:
    """Each of ``n`` cells along ``axis``: its tick label where one is set at its index, else the index."""
    from matplotlib.ticker import FixedLocator

    if not isinstance(axis.get_major_locator(), FixedLocator):  # ticks the caller placed (set_ticks), else indices
        return list(range(n))
    named = {int(round(p)): t.get_text() for p, t in zip(axis.get_ticklocs(), axis.get_ticklabels()) if t.get_text()}
    return [named.get(i, i) for i in range(n)]


def figure_data(fig) -> "pd.DataFrame":
    """The numbers ``fig`` draws, read back from its visible artists: a tidy table, one row per value drawn.

    Columns :data:`DATA_COLUMNS`: ``panel`` (the axes' title on one line, else ``"panel <i>"``), ``kind`` and ``series``
    (the artist's label; ``""`` when it has none), then by kind: ``line`` / ``marker`` (``plt.plot``),
    ``scatter``, ``segments`` (``hlines``, line collections): ``x``, ``y``; ``hline`` / ``vline``: ``y`` / ``x``;
    ``bar`` (``x`` at its centre, ``y`` its height), ``barh`` (``x`` its width); ``errorbar``: ``x``, ``y``,
    ``low``, ``high`` (the ends of the bar); ``band`` (``fill_between``): ``x``, ``low``, ``high``;
    ``hspan`` / ``vspan``: ``low``, ``high``; ``heatmap`` (images, meshes): ``row``, ``column`` (tick label
    where one is set, else the index) and ``value``. A colour bar's gradient and all texts are not data.
    """
    import pandas as pd
    from matplotlib.collections import LineCollection, PathCollection, PolyCollection, QuadMesh
    from matplotlib.container import BarContainer, ErrorbarContainer
    from matplotlib.patches import Rectangle

    frames = []

    def add(panel, kind, artist, **cols):
        cols = {k: np.asarray(v, dtype=object if k in ("row", "column") else float).ravel() for k, v in cols.items()}
        frames.append(pd.DataFrame({"panel": panel, "kind": kind, "series": _series(artist), **cols}))

    for i, ax in enumerate(_axes(fig), 1):
        if not ax.get_visible():
            continue
        panel, colorbar = " ".join(ax.get_title().split()) or f"panel {i}", hasattr(ax, "_colorbar")
        hspan, vspan = ax.get_yaxis_transform(), ax.get_xaxis_transform()
        done = {id(a) for c in ax.containers for a in c.get_children()}  # drawn as their containers, below
        for c in ax.containers:
            if isinstance(c, BarContainer):
                geo = np.array([[p.get_x(), p.get_y(), p.get_width(), p.get_height()]
                                for p in c.patches if p.get_visible()], dtype=float).reshape(-1, 4)
                if c.orientation == "horizontal":
                    add(panel, "barh", c, x=geo[:, 2], y=geo[:, 1] + geo[:, 3] / 2)
                else:
                    add(panel, "bar", c, x=geo[:, 0] + geo[:, 2] / 2, y=geo[:, 3])
            elif isinstance(c, ErrorbarContainer) and c.lines[0] is not None and c.lines[0].get_visible():
                xy = np.asarray(c.lines[0].get_xydata(), dtype=float)
                low = high = np.full(len(xy), np.nan)
                segs = [np.asarray(s, dtype=float).reshape(-1, 2)[:, int(c.has_yerr)]  # a NaN error: no segment
                        for s in (c.lines[2][-1].get_segments() if c.lines[2] else [])]
                if len(segs) == len(xy):  # the ends of each point's bar, along y (along x with only xerr)
                    low, high = ([f(s) if s.size else np.nan for s in segs] for f in (np.min, np.max))
                add(panel, "errorbar", c, x=xy[:, 0], y=xy[:, 1], low=low, high=high)
        for line in ax.lines:
            if id(line) in done or not line.get_visible():
                continue
            xy, tr = np.array(line.get_xydata(), dtype=float), line.get_transform()
            if tr == hspan or tr == vspan:  # axhline / axvline: one value
                kind, xy = ("hline", xy[:1] * [np.nan, 1]) if tr == hspan else ("vline", xy[:1] * [1, np.nan])
            else:
                kind = "marker" if line.get_linestyle() in ("None", "", " ") else "line"
            add(panel, kind, line, x=xy[:, 0], y=xy[:, 1])
        for coll in ax.collections:
            if id(coll) in done or not coll.get_visible() or colorbar or isinstance(coll, QuadMesh):
                continue
            if isinstance(coll, PathCollection):
                xy = np.ma.filled(np.ma.asarray(coll.get_offsets(), dtype=float), np.nan).reshape(-1, 2)
                add(panel, "scatter", coll, x=xy[:, 0], y=xy[:, 1])
            elif isinstance(coll, LineCollection):
                xy = np.concatenate([np.asarray(s, dtype=float) for s in coll.get_segments()] or [np.empty((0, 2))])
                add(panel, "segments", coll, x=xy[:, 0], y=xy[:, 1])
            elif isinstance(coll, PolyCollection):  # fill_between: the envelope at each x
                xy = np.concatenate([p.vertices for p in coll.get_paths()] or [np.empty((0, 2))])
                env = pd.DataFrame(xy, columns=["x", "y"]).groupby("x")["y"].agg(["min", "max"])
                add(panel, "band", coll, x=env.index, low=env["min"], high=env["max"])
        for p in ax.patches:
            if id(p) not in done and p.get_visible() and isinstance(p, Rectangle):
                if p.get_data_transform() == hspan:
                    add(panel, "hspan", p, low=[p.get_y()], high=[p.get_y() + p.get_height()])
                elif p.get_data_transform() == vspan:
                    add(panel, "vspan", p, low=[p.get_x()], high=[p.get_x() + p.get_width()])
        for im in [] if colorbar else ax.images + [c for c in ax.collections if isinstance(c, QuadMesh)]:
            a = np.ma.filled(np.ma.asarray(im.get_array(), dtype=float), np.nan)
            if im.get_visible() and a.ndim == 2:  # scalar values (an RGB picture is not data)
                r, c = np.indices(a.shape)
                add(panel, "heatmap", im, row=np.array(_index_names(ax.yaxis, a.shape[0]), dtype=object)[r],
                    column=np.array(_index_names(ax.xaxis, a.shape[1]), dtype=object)[c], value=a)
    return pd.concat(frames, ignore_index=True).reindex(columns=DATA_COLUMNS) if frames else \
        pd.DataFrame(columns=DATA_COLUMNS)
