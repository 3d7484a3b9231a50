"""Figures: shapes checked, NaN-aware markers and colour range."""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from prh_lib import figures, plots


def test_heatmap_marks_the_nan_aware_maximum_and_final_pair():
    scores = np.array([[np.nan, np.nan, np.nan], [0.1, 0.5, 0.2], [0.3, 0.2, 0.4]])
    im = plots.alignment_heatmap(scores, ["embed", "layer.1", "layer.2"], ["a", "b", "c"], chance=0.05,
                                 other_peaks=[(2, 0)])
    ax = im.axes
    other, star, square = ax.lines[0], ax.lines[1], ax.lines[2]
    assert (other.get_xdata()[0], other.get_ydata()[0]) == (0, 2)
    assert (star.get_xdata()[0], star.get_ydata()[0]) == (1, 1)
    assert (square.get_xdata()[0], square.get_ydata()[0]) == (2, 2)
    assert im.get_clim() == pytest.approx((0.05, 0.5))
    legend = ax.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == ["peak of another draw", "max 0.500", "final 0.400"]
    # the legend sits outside the axes (below them), never over cells
    assert legend.get_bbox_to_anchor().transformed(ax.transAxes.inverted()).y1 < 0
    assert min(t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()) >= 8
    # the chance notch on the colour bar
    cbar_ax = im.colorbar.ax
    assert any(np.allclose(line.get_ydata(), 0.05) and line.get_color() == "red" for line in cbar_ax.lines)


def test_heatmap_rejects_mismatched_labels_and_all_nan():
    with pytest.raises(ValueError, match="do not match"):
        plots.alignment_heatmap(np.zeros((2, 3)), ["a", "b"], ["x", "y"])
    with pytest.raises(ValueError, match="NaN"):
        plots.alignment_heatmap(np.full((1, 1), np.nan), ["a"], ["x"])


def test_grid_has_one_visible_panel_per_matrix():
    class M:
        def __init__(self, s):
            self.scores, self.x_labels, self.y_labels, self.x_name, self.y_name = s, ["a", "b"], ["x", "y"], "X", "Y"

    fig = figures.heatmap_grid({"p": M(np.eye(2)), "q": M(np.ones((2, 2)) * 0.3), "r": M(np.eye(2) * 0.5)}, ncols=2)
    heat_axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert [ax.get_title().split("\n")[0] for ax in heat_axes] == ["p", "q", "r"]


class _M:
    def __init__(self, s):
        self.scores, self.x_labels, self.y_labels, self.x_name, self.y_name = s, ["a", "b"], ["x", "y"], "X", "Y"


def test_grid_shares_one_colour_scale_by_default_and_has_a_legend_outside():
    fig = figures.heatmap_grid({"weak": _M(np.array([[0.05, 0.1], [0.12, 0.16]])),
                                "strong": _M(np.array([[0.2, 0.57], [0.3, 0.4]]))}, chance=0.04)
    ims = [ax.images[0] for ax in fig.axes if ax.images]
    assert [im.get_clim() for im in ims] == [pytest.approx((0.0, 0.57))] * 2
    assert fig.dpi >= 150 and len(fig.legends) == 1
    assert fig.get_size_inches()[0] <= 10
    titles = [ax.get_title() for ax in fig.axes if ax.images]
    assert titles[0].endswith("max 0.160 (★) · final 0.160 (□)")
    panel = figures.heatmap_grid({"weak": _M(np.array([[0.05, 0.1], [0.12, 0.16]]))}, chance=0.04, scale="panel")
    assert panel.axes[0].images[0].get_clim() == pytest.approx((0.04, 0.16))


def test_grid_chance_corrected_scale():
    fig = figures.heatmap_grid({"p": _M(np.array([[0.04, 0.52], [0.28, 0.16]]))}, chance=0.04,
                               scale="chance-corrected")
    data = fig.axes[0].images[0].get_array()
    assert float(data[0, 0]) == pytest.approx(0.0) and float(data[0, 1]) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="chance"):
        figures.heatmap_grid({"p": _M(np.eye(2))}, scale="chance-corrected")


# ------------------------------------------------------------------- which pairs a figure draws


def test_figure_pairs_cap_the_panels_and_say_which_pairs_are_left_to_the_tables():
    comparisons = [[f"v{i}", f"l{j}"] for i in range(3) for j in range(21)]  # the paper's 63 pairs
    drawn, note = figures.figure_pairs_of(comparisons, panels_per_pair=4)  # four datasets
    assert drawn == [("v0", f"l{j}") for j in range(figures.MAX_PANELS // 4)]
    assert note.startswith(f"The figures draw {figures.MAX_PANELS // 4} of the 63 model pairs")
    assert "v0 × l2" in note and "set `figure_pairs`" in note
    # named pairs come back in the comparisons' order, whatever order they were asked in
    drawn, note = figures.figure_pairs_of(comparisons, [["v2", "l5"], ["v0", "l1"]])
    assert drawn == [("v0", "l1"), ("v2", "l5")] and "2 of the 63" in note
    # every pair drawn: nothing to say
    assert figures.figure_pairs_of(comparisons[:3]) == ([("v0", "l0"), ("v0", "l1"), ("v0", "l2")], "")
    with pytest.raises(ValueError, match=r"\[\['v9', 'l0'\]\] are not among the comparisons"):
        figures.figure_pairs_of(comparisons, [["v9", "l0"]])
    with pytest.raises(ValueError, match="figure_pairs is empty"):
        figures.figure_pairs_of(comparisons, [])


def test_paper_profile_figure_pairs_are_scored_pairs_of_every_chapter():
    from prh_lib.profiles import get_profile

    p = get_profile("paper")
    assert 1 <= len(p["figure_pairs"]) * len(p["datasets"]) <= figures.MAX_PANELS
    for pairs in (p["comparisons"], [[v, m] for v in p["vision_models"] for m in p["language_models"]]):
        drawn, note = figures.figure_pairs_of(pairs, p["figure_pairs"])
        assert [list(d) for d in drawn] == p["figure_pairs"] and "3 of the 63" in note
