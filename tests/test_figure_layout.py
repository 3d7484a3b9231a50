"""Figures as a reader sees them on the page: no text runs into other text.

Each figure is put through what :func:`prh_lib.pages.report.show_figure` does before saving it (provenance footer,
:func:`prh_lib.pages.plots.readable`), drawn, and the boxes of its texts are compared: tick labels, axis labels,
titles, figure legends and the texts under the figure (keys, provenance) must not overlap one another. The
inputs are synthetic but shaped like the chapters' (names as long, as many model pairs), so that a layout
that fails on the built book fails here.
"""

from __future__ import annotations

import io
import types

import matplotlib
import numpy as np
import pandas as pd

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from prh_lib.pages import plots, report  # noqa: E402

PAIRS = ["dinov2-small × efficientnet-lite0", "dinov2-small × smollm2-135m", "dinov2-small × minilm-l6",
         "efficientnet-lite0 × smollm2-135m", "efficientnet-lite0 × minilm-l6", "smollm2-135m × minilm-l6"]


def _as_on_the_page(fig):
    """``fig`` as :func:`report.show_figure` saves it (without showing or closing it): the texts' places are
    measured while the PNG is drawn, since ``bbox_inches="tight"`` moves what is anchored to the figure's edges
    (a figure legend at "lower center") after the layout."""
    report.caption(fig, "demo", {"k": 10})
    plots.readable(fig)
    seen = []
    cid = fig.canvas.mpl_connect("draw_event", lambda event: seen.append(_text_boxes(fig, event.renderer)))
    fig.savefig(io.BytesIO(), format="png", dpi=fig.dpi, bbox_inches="tight", pad_inches=plots._TIGHT_PAD_IN)
    fig.canvas.mpl_disconnect(cid)
    return seen[-1]


def _corners(box, angle=0.0, size=None):
    """The four corners (display pixels) of a text's rectangle: ``box`` (its axis-aligned extent) when upright,
    else the ``size`` (width, height) upright rectangle turned by ``angle`` degrees about ``box``'s centre."""
    if size is None or angle % 180 == 0:
        return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])
    w, h = size
    a = np.deg2rad(angle)
    turn = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    half = np.array([[-w, -h], [w, -h], [w, h], [-w, h]]) / 2
    return np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2]) + half @ turn.T


def _disjoint(p, q):
    """Whether two convex polygons (corners in order) are apart, by the separating axis test (1 px slack)."""
    for poly in (p, q):
        for i in range(len(poly)):
            edge = poly[(i + 1) % len(poly)] - poly[i]
            normal = np.array([-edge[1], edge[0]]) / (np.hypot(*edge) or 1.0)
            a, b = p @ normal, q @ normal
            if a.max() <= b.min() + 1 or b.max() <= a.min() + 1:
                return True
    return False


def _text_boxes(fig, renderer):
    """(name, corners) of every visible text outside the plotting areas, in display pixels (a turned text's own
    rectangle, not the upright box around it, so that slanted tick labels side by side are not counted)."""
    boxes = []

    def text(t, name):
        if not (t.get_visible() and t.get_text().strip()):
            return
        box, angle, size = Text.get_window_extent(t, renderer), t.get_rotation(), None
        if angle % 180:
            t.set_rotation(0)
            upright = Text.get_window_extent(t, renderer)
            t.set_rotation(angle)
            size = (upright.width, upright.height)
        boxes.append((f"{name} {t.get_text()[:30]!r}", _corners(box, angle, size)))

    for i, ax in enumerate(fig.axes):
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                if lo - 1e-9 <= tick.get_loc() <= hi + 1e-9:  # drawn (ticks outside the view are not)
                    text(tick.label1, f"axes {i} tick")
        text(ax.xaxis.label, f"axes {i} x label")
        text(ax.yaxis.label, f"axes {i} y label")
        for t in (ax.title, ax._left_title, ax._right_title):
            text(t, f"axes {i} title")
        for t in ax.texts:  # notes and point labels drawn in the panel
            text(t, f"axes {i} text")
    legends = fig.legends + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    for j, legend in enumerate(legends):
        boxes.append((f"legend {j}", _corners(legend.get_window_extent(renderer))))
    for t in fig.texts:
        text(t, "figure text")
    return boxes


def _overlaps(boxes):
    return [(a, b) for i, (a, pa) in enumerate(boxes) for b, pb in boxes[i + 1:] if not _disjoint(pa, pb)]


def test_consensus_bars_name_the_model_pairs_without_overlapping_tick_labels():
    from prh_lib.analysis.displacement import consensus as dc

    rng = np.random.default_rng(0)
    cols = pd.MultiIndex.from_product([["mutual k-NN", "Cross-Model"], dc.SUBSPACES])
    table = pd.DataFrame(rng.uniform(0, 0.8, (len(PAIRS), len(cols))), index=PAIRS, columns=cols)
    ev = np.sort(rng.uniform(0.1, 0.9, 32))[::-1]
    result = types.SimpleNamespace(eigenvalues=ev, shared_basis=np.zeros((4, 8)), private_basis=np.zeros((4, 8)))
    summary = dc.ConsensusSummary(layers={}, result=result, table=table, chance=0.084, held_out_eigenvalues=ev / 2)
    from prh_lib.pages import ch_displacement as da

    fig = da.consensus_figure(summary)
    assert not _overlaps(_as_on_the_page(fig))
    footer = " ".join(t.get_text() for t in fig.texts)
    assert all(p in footer.replace("\n", " ") for p in PAIRS)  # every pair named under the figure
    plt.close(fig)


def test_displacement_heatmaps_key_stays_clear_of_the_axis_labels():
    from prh_lib.pages import ch_displacement as da

    rng = np.random.default_rng(1)

    def view(ny, nx, x_name, y_name):
        return types.SimpleNamespace(scores=rng.uniform(0, 0.5, (nx, ny)), x_labels=[f"layer.{i}" for i in range(nx)],
                                     y_labels=[f"layer.{i}" for i in range(ny)], x_name=x_name, y_name=y_name)

    results = [types.SimpleNamespace(label=p, knn=view(13, 9, p.split(" × ")[1], p.split(" × ")[0]),
                                     cross_model=view(13, 9, p.split(" × ")[1], p.split(" × ")[0]))
               for p in PAIRS[:4]]
    fig = da.heatmaps_side_by_side(results, chance=0.042)
    assert not _overlaps(_as_on_the_page(fig))
    plt.close(fig)


def test_hierarchy_legend_stays_clear_of_the_tick_labels_and_the_footer():
    from prh_lib.pages import ch_concepts as cp

    rows = []
    for model in ("efficientnet-lite0", "efficientnet-lite2", "minilm-l6", "smollm2-135m"):
        for tree in ("WordNet", "shuffled"):
            row = {"model": model, "tree": tree, "centroid_artefact": -0.74, "n_families": 5,
                   "own_parents": 0 if model.startswith("efficientnet") else 5}
            for k, v in (("child_parent", 0.7), ("variation_parent", -0.03), ("sibling", -0.7)):
                row.update({k: v, f"{k}_low": v - 0.05, f"{k}_high": v + 0.05})
            rows.append(row)
    fig = cp.hierarchy_figure(pd.DataFrame(rows))
    assert not _overlaps(_as_on_the_page(fig))
    # the vision models' centroid parents are not tested: their bars (2 trees x 3 panels each) are hatched
    hatched = [b for ax in fig.axes for b in ax.patches if b.get_hatch()]
    assert len(hatched) == 2 * 2 * 3 and "centroid parents (not tested)" in [t.get_text() for t in fig.legends[0].texts]
    plt.close(fig)


def test_figure_5_texts_stay_apart_with_the_chapters_regimes_and_floors():
    """Figure 5 shaped like the chapter's: four points at nearly one height (random init), a regime without
    comparisons, floors of every kind and the regimes' own floors. No text overlaps another (point numbers,
    the missing regime's note, ticks, legend, keys under the figure), and each point's number is at most a few
    lines from its point's height."""
    from prh_lib.pages import figures

    seeds = {f"{p} (seed 0)": (0.05 + 0.002 * i, 0.04, 0.07) for i, p in enumerate(PAIRS[1:5])}
    unimodal = {p: (v, v - 0.01, v + 0.01) for p, v in zip(PAIRS[1:5], (0.163, 0.20, 0.235, 0.34))}
    same = {p: (v, v - 0.01, v + 0.01) for p, v in zip(PAIRS[:1] + PAIRS[5:] + ["a × b", "c × d", "e × f"],
                                                         (0.423, 0.426, 0.53, 0.567, 0.70))}
    g = {"random init": seeds, "unimodal (vision × language)": unimodal, "aligned vision-language": {},
         "same modality": same}
    kinds = {"random-language": 0.1, "random-vision": 0.065, "tfidf": 0.16, "tfidf-svd": 0.162}
    datasets = ("coco-mini", "coco-mini, 5 captions")
    floors = {d: {k: (v, v - 0.02, v + 0.03) for k, v in kinds.items()} for d in datasets}
    floors.update({(d, "calibrated"): {k: (v / 2, v / 3, v) for k, v in kinds.items()} for d in datasets})
    own = {d: {"unimodal (vision × language)": (0.205, "tfidf-svd"), "same modality": (0.51, "random-vision")}
           for d in datasets}
    fig = figures.regime_figure({d: (g, g) for d in datasets}, chance={d: 0.042 for d in datasets}, floors=floors,
                                regime_floors=own, missing_note="needs the paper profile")
    assert not _overlaps(_as_on_the_page(fig))
    for ax in fig.axes:
        per_line = np.diff(ax.get_ylim())[0] / (ax.get_window_extent().height / fig.dpi * 72) * 9 * 1.3
        numbers = [t for t in ax.texts if t.get_text().isdigit()]
        assert len(numbers) == 13
        for t in numbers:  # placed near the point it names (xy: the point, xyann: the label)
            assert abs(t.xyann[1] - t.xy[1]) <= 2.5 * per_line, (ax.get_title(), t.get_text())
            assert t.xyann[0] > t.xy[0]  # right of its point
    plt.close(fig)


def test_labels_spread_apart_stay_near_their_values():
    """plots._spread: a lone value keeps its height; a cluster is centred on its values, one gap apart; the
    limits hold."""
    from prh_lib.pages.plots import _spread

    assert _spread([0.5], 0.1, 0.0, 1.0) == [0.5]
    ys = _spread([0.40, 0.41, 0.42, 0.90], 0.1, 0.0, 1.0)
    assert np.allclose(ys[:3], [0.31, 0.41, 0.51]) and ys[3] == 0.90
    assert np.all(np.diff(ys) >= 0.1 - 1e-9)
    ys = _spread([0.0, 0.0, 0.0], 0.1, 0.05, 1.0)  # at the bottom: pushed up from the lower limit
    assert np.allclose(ys, [0.05, 0.15, 0.25])
    ys = _spread([0.95, 0.97], 0.1, 0.0, 0.98)  # at the top: held under the upper limit
    assert np.allclose(ys, [0.88, 0.98])
