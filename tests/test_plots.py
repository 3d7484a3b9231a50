"""Figures: shapes checked, NaN-aware markers and colour range."""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from prh_lib import figures, plots


def test_heatmap_marks_the_nan_aware_maximum_and_final_pair():
    scores = np.array([[np.nan, np.nan, np.nan], [0.1, 0.5, 0.2], [0.3, 0.2, 0.4]])
    im = plots.alignment_heatmap(scores, ["embed", "layer.1", "layer.2"], ["a", "b", "c"], chance=0.05)
    ax = im.axes
    star, square = ax.lines[0], ax.lines[1]
    assert (star.get_xdata()[0], star.get_ydata()[0]) == (1, 1)
    assert (square.get_xdata()[0], square.get_ydata()[0]) == (2, 2)
    assert im.get_clim() == pytest.approx((0.05, 0.5))
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["max 0.500", "final 0.400"]


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
    assert [ax.get_title() for ax in heat_axes] == ["p", "q", "r"]
