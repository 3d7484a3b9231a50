"""Figures: shapes checked, NaN-aware markers and colour range."""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from prh_lib.pages import figures, plots
from prh_lib.pages import figures_sweeps as pages_figures_sweeps


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
    from prh_lib.run.profiles import get_profile

    p = get_profile("paper")
    assert 1 <= len(p["figure_pairs"]) * len(p["datasets"]) <= figures.MAX_PANELS
    for pairs in (p["comparisons"], [[v, m] for v in p["vision_models"] for m in p["language_models"]]):
        drawn, note = figures.figure_pairs_of(pairs, p["figure_pairs"])
        assert [list(d) for d in drawn] == p["figure_pairs"] and "3 of the 63" in note


def test_rendered_scale_is_the_page_magnification():
    # a 5-inch figure at 100 dpi is 500 px: shown at true size x 100/96; a 14-inch one at 150 dpi is shrunk
    assert plots.rendered_scale(5.0, 100, page_width_px=720) == pytest.approx(100 / 96)
    assert plots.rendered_scale(14.0, 150, page_width_px=720) == pytest.approx(720 / (96 * 14))
    with pytest.raises(ValueError, match="positive"):
        plots.rendered_scale(0.0, 100)


def test_readable_enlarges_small_text_of_a_wide_figure_to_nine_points_as_rendered():
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(14, 3), dpi=150)
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="a line")
        ax.set_title("title", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6)
    fit = plots.readable(fig, page_width_px=720)
    # independent check: the saved PNG's width in pixels and every text's size after the change
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi, bbox_inches="tight", pad_inches=0.1)
    px = Image.open(buf).size[0]
    assert px / fig.dpi == pytest.approx(fit["width_in"], abs=0.05)
    scale = min(px, 720) / (96 * px / fig.dpi)
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    assert min(sizes) * scale >= 9.0 - 0.05
    assert fit["min_rendered_pt"] >= 9.0 - 0.05
    plt.close(fig)


def test_readable_leaves_a_figure_that_already_reads_well_untouched():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3), dpi=100)
    ax.plot([0, 1], [0, 1])
    ax.set_title("title", fontsize=12)
    ax.tick_params(labelsize=10)
    fit = plots.readable(fig)
    assert [t.get_fontsize() for t in ax.get_xticklabels()][0] == 10
    assert ax.title.get_fontsize() == 12
    assert fit["min_rendered_pt"] == pytest.approx(10 * fit["scale"], abs=0.01)
    plt.close(fig)


def test_show_figure_writes_the_measurements_into_the_png(monkeypatch):
    import io
    import json

    import matplotlib.pyplot as plt
    from PIL import Image

    from prh_lib.pages import report

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append(obj))
    fig, ax = plt.subplots(figsize=(12, 3), dpi=150)
    ax.plot([0, 1], [0, 1])
    ax.tick_params(labelsize=6)
    fit = report.show_figure(fig, "demo", {"k": 10})
    assert not plt.fignum_exists(fig.number)  # closed: shown once, by show_figure
    img, _ = shown  # the PNG, then the link to its data
    png = Image.open(io.BytesIO(img.data))
    meta = json.loads(png.text[report.FIGURE_METADATA_KEY])
    assert meta == fit
    assert png.size[0] / 150 == pytest.approx(meta["width_in"], abs=0.05)
    assert meta["min_rendered_pt"] >= 9.0 - 0.05


def _sweep_agg(score=0.2, n=239, k=10):
    import pandas as pd

    rows = [{"quantity": "pca:reference", "role": "peak", "model_x": "a", "model_y": "b", "dataset": "d",
             "compress": "none", "x": float("nan"), "relative_mean": 1.0, "relative_std": 0.0, "score_mean": score,
             "n": n, "k": k}]
    for side in ("x", "y"):
        for x in (0.2, 0.4, 0.6, 0.9):
            rows.append({"quantity": "pca:variance", "role": "peak", "model_x": "a", "model_y": "b", "dataset": "d",
                         "compress": side, "x": x, "relative_mean": x, "relative_std": 0.02, "score_mean": score * x,
                         "n": n, "k": k})
    return pd.DataFrame(rows)


def test_pca_bands_draw_chance_on_the_relative_scale_and_the_verdicts_thresholds():
    import matplotlib.pyplot as plt

    from prh_lib.pages import sec3_1b_pca as compression

    marks = compression.claim_marks("variance", n=239)
    assert marks == [(0.4, 0.95, "3.1/pca-40: needs ≥ 95 % at 40 % variance")]
    (share, y_share, _), low = compression.claim_marks("dims", n=1024)
    assert (share(1023), y_share, low[:2]) == (100, 0.9, (8, 0.8))  # read on the panel's own rank
    assert share(238) == 23 and share(384) == 38  # 9.8 % of rank 238, of a 384-dim language side
    with pytest.raises(ValueError, match="sweep"):
        compression.claim_marks("rank", n=239)
    fig = pages_figures_sweeps.plot_sweep_bands(_sweep_agg(score=0.2), sweep="variance", thresholds=marks)
    ax = fig.axes[0]
    flat = [ln for ln in ax.lines if len(set(ln.get_ydata())) == 1 and len(ln.get_ydata()) == 2]
    levels = sorted(round(float(ln.get_ydata()[0]), 4) for ln in flat)
    chance_rel = round(10 / 238 / 0.2, 4)  # k/(N-1) over the uncompressed score
    assert levels == sorted([1.0, chance_rel, 0.95])
    verticals = [ln for ln in ax.lines if len(set(ln.get_xdata())) == 1 and len(ln.get_xdata()) == 2]
    assert [float(ln.get_xdata()[0]) for ln in verticals] == [0.4]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend[1].startswith("chance") and legend[2].startswith("3.1/pca-40")
    plt.close(fig)


def test_capability_points_are_numbered_in_order_of_capability_with_a_key():
    import matplotlib.pyplot as plt
    import pandas as pd

    summary = pd.DataFrame({"dataset": "d", "vision": ["v"] * 3, "family": "independent", "n": 239,
                            "language": ["big", "small", "mid"], "bpb": [0.8, 1.4, 1.1],
                            "peak": [0.2, 0.1, 0.15], "chance": 0.04})
    fig = figures.capability_panels(summary, x="bpb", y="peak")
    numbers = {t.get_text(): t.xy[0] for t in fig.axes[0].texts if t.get_text().isdigit()}
    assert numbers == {"1": 0.8, "2": 1.1, "3": 1.4}
    key = [t.get_text() for t in fig.texts if t.get_text().startswith("points:")]
    assert key == ["points: 1 big   2 mid   3 small"]
    plt.close(fig)


@pytest.mark.parametrize("n_pairs", [1, 4])
def test_k_sweep_grid_fits_the_page_with_one_legend(n_pairs):
    import matplotlib.pyplot as plt
    import pandas as pd

    ks = [1, 2, 5, 10, 20, 50]
    df = pd.DataFrame({"k": ks * 2, "seed": [0] * 6 + [1] * 6})
    for kind in ("raw", "corrected", "calibrated"):
        for s in ("fixed", "max"):
            df[f"{kind} {s}"] = np.linspace(0.1, 0.5, 12)
    df["chance"] = df["k"] / 238
    fig = pages_figures_sweeps.plot_sweep({f"pair {i}": df for i in range(n_pairs)}, x="k")
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    assert len(fig.axes) == 3 * n_pairs
    fit = plots.readable(fig)
    assert fit["width_in"] * fit["dpi"] <= plots.PAGE_WIDTH_PX * 1.7  # not shrunk to well under true size
    assert fit["min_rendered_pt"] >= 9.0 - 0.05
    plt.close(fig)


def test_footers_and_a_legend_outside_never_overlap_the_panels_after_text_is_enlarged(monkeypatch):
    """report.show_figure on a figure that needs larger text: the layout runs again, the figure legend stays
    outside the panels and the footers (key, provenance) stay under everything."""
    import matplotlib.pyplot as plt

    from prh_lib.pages import report

    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: None)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), dpi=150, layout="constrained")
    for ax in axes.flat:
        ax.plot([0, 1], [0, 1], label="a line")
        ax.set_xlabel("an x label", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.legend(handles=axes[0, 0].lines, loc="outside lower center", fontsize=7)
    plots.add_footer(fig, "points: " + "1 first model   2 second model   " * 6)
    closed = []
    monkeypatch.setattr("matplotlib.pyplot.close", lambda f: closed.append(f))
    fit = report.show_figure(fig, "demo", {"k": 10})
    assert fit["min_rendered_pt"] >= 9.0 - 0.05 and closed == [fig]
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    panels = [ax.get_tightbbox(r) for ax in fig.axes]
    legend = fig.legends[0].get_window_extent(r)
    footers = [t.get_window_extent(r) for t in fig._prh_footer_artists]
    assert len(footers) == 2
    assert legend.y1 <= min(p.y0 for p in panels) + 1  # under the panels, their labels included
    assert max(f.y1 for f in footers) <= legend.y0 + 1  # the footers under the legend
    assert footers[0].y0 >= footers[1].y1 - 1  # and under each other, in the order added
    plt.close(fig)
