"""The data behind every figure: :func:`prh_lib.pages.plots.figure_data` reads back exactly the numbers a figure
draws, :func:`prh_lib.pages.report.show_figure` puts them under the figure as a CSV link, and the book's build
writes each CSV (and each chapter's rows of the results table) where the page's link points."""

from __future__ import annotations

import io
import sys

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from prh_lib import paths  # noqa: E402
from prh_lib.pages import plots, report  # noqa: E402


def _rows(df, kind, series=None):
    out = df[df["kind"] == kind]
    return out if series is None else out[out["series"] == series]


def assert_lines_in_csv(fig, csv_text: str) -> None:
    """Every visible Line2D of ``fig`` drawn in data coordinates (but an error bar's caps: its ``low`` and
    ``high``) has its (x, y) points, in order, in the CSV."""
    table = pd.read_csv(io.StringIO(csv_text))
    for i, ax in enumerate(plots._axes(fig), 1):
        panel = " ".join(ax.get_title().split()) or f"panel {i}"
        caps = {id(cap) for c in ax.containers if hasattr(c, "has_yerr") for cap in c.lines[1]}  # errorbar ends
        for line in ax.lines:
            if not line.get_visible() or line.get_transform() != ax.transData or id(line) in caps:
                continue
            xy = np.asarray(line.get_xydata(), dtype=float)
            rows = table[(table["panel"] == panel) & table["kind"].isin(["line", "marker", "errorbar"])]
            drawn = rows[["x", "y"]].to_numpy()
            found = any(np.array_equal(drawn[s:s + len(xy)], xy, equal_nan=True) for s in range(len(drawn) - len(xy) + 1))
            assert found, f"{panel}: a line's data {xy.tolist()[:5]}... is not in the figure's CSV"


def test_line_plot_with_bands_and_chance():
    x = np.array([1.0, 2.0, 4.0, 8.0])
    ys = {"a": np.array([0.11, 0.23, 0.31, 0.47]), "b": np.array([0.05, 0.07, 0.12, 0.2])}
    lo, hi = np.array([0.1, 0.2, 0.3, 0.4]), np.array([0.15, 0.25, 0.35, 0.5])
    ax = plots.line_plot(x, ys, bands={"a": (lo, hi)}, chance=0.02, title="two\nlines")
    df = plots.figure_data(ax.figure)
    assert list(df.columns) == plots.DATA_COLUMNS and set(df["panel"]) == {"two lines"}
    for label, y in ys.items():
        got = _rows(df, "line", label)
        assert np.array_equal(got["x"], x) and np.array_equal(got["y"], y)
    band = _rows(df, "band")
    assert np.array_equal(band["x"], x) and np.array_equal(band["low"], lo) and np.array_equal(band["high"], hi)
    chance = _rows(df, "hline", "chance")
    assert chance["y"].tolist() == [0.02] and chance["x"].isna().all()
    plt.close(ax.figure)


def test_scatter_keeps_the_points_drawn():
    x, y = np.array([1.0, 2.0, 4.0]), np.array([2.0, 3.5, 6.25])
    _, ax = plt.subplots()
    ax.scatter(x, y)
    ax.annotate("a", (x[0], y[0]))  # texts are not data
    ax.plot(np.linspace(1.0, 4.0, 50), np.linspace(2.0, 6.0, 50), color="grey", linestyle="--")
    df = plots.figure_data(ax.figure)
    pts = _rows(df, "scatter")
    assert np.array_equal(pts["x"], x) and np.array_equal(pts["y"], y)
    fit = _rows(df, "line")  # a fitted line, as drawn
    assert len(fit) == 50 and fit["x"].min() == 1.0 and fit["x"].max() == 4.0
    assert not df["series"].str.startswith("_").any()  # matplotlib's "_child0" labels are no names
    plt.close(ax.figure)


def test_regime_bars_give_bars_and_errorbars():
    groups = {"paired": {"p1 (seed 0)": (0.3, 0.2, 0.45), "p2 (seed 0)": (0.5, 0.4, 0.6)},
              "none": {}, "unpaired": {"p3 (seed 0)": (0.1, float("nan"), float("nan"))}}
    ax = plots.regime_bars(groups, chance=0.05)
    df = plots.figure_data(ax.figure)
    bars = _rows(df, "bar")
    assert np.array_equal(bars["x"], [0.0, 2.0]) and np.allclose(bars["y"], [0.4, 0.1], rtol=0, atol=1e-15)
    err = _rows(df, "errorbar")
    assert np.array_equal(err["y"], [0.3, 0.5, 0.1])
    assert np.allclose(err["low"], [0.2, 0.4, np.nan], rtol=0, atol=1e-15, equal_nan=True)
    assert np.allclose(err["high"], [0.45, 0.6, np.nan], rtol=0, atol=1e-15, equal_nan=True)
    assert len(_rows(df, "marker")) == len(_rows(df, "line")) == 0  # the error bars' lines: not twice
    assert _rows(df, "hline")["y"].tolist() == [0.05]
    assert _rows(df, "vspan")[["low", "high"]].values.tolist() == [[0.65, 1.35]]  # the "not run" slot
    assert_lines_in_csv(ax.figure, df.to_csv(index=False))
    plt.close(ax.figure)


def test_heatmap_gives_every_cell_with_its_labels():
    scores = np.array([[0.1, 0.2, 0.3], [0.4, np.nan, 0.6]])
    im = plots.alignment_heatmap(scores, ["embed", "layer.1"], ["a", "b", "c"], chance=0.15, title="heat")
    df = plots.figure_data(im.axes.figure)
    cells = _rows(df, "heatmap")
    assert set(cells["panel"]) == {"heat"}  # the colour bar's gradient is not data
    assert np.array_equal(cells["value"], scores.ravel(), equal_nan=True)
    assert cells["row"].tolist() == ["embed"] * 3 + ["layer.1"] * 3 and cells["column"].tolist() == list("abcabc")
    peak = _rows(df, "marker", "max 0.600")
    assert peak[["x", "y"]].values.tolist() == [[2.0, 1.0]]
    plt.close(im.axes.figure)


def test_errorbars_without_an_error_keep_their_points():
    fig, ax = plt.subplots()
    ax.errorbar([1.0, 2.0, 3.0], [0.5, 0.6, 0.7], yerr=np.array([0.1, np.nan, 0.25]), label="e")
    err = plots.figure_data(fig)
    assert np.array_equal(err["y"], [0.5, 0.6, 0.7]) and err["series"].tolist() == ["e"] * 3
    assert np.allclose(err["low"], [0.4, np.nan, 0.45], equal_nan=True)
    assert np.allclose(err["high"], [0.6, np.nan, 0.95], equal_nan=True)
    plt.close(fig)


def test_hidden_artists_are_not_data():
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4], label="shown")
    ax.plot([5, 6], [7, 8], label="hidden")[0].set_visible(False)
    ax.text(0.5, 0.5, "a note")
    df = plots.figure_data(fig)
    assert df["series"].tolist() == ["shown", "shown"]
    plt.close(fig)


def _show(fig, chapter, monkeypatch):
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append((obj, kw)))
    fit = report.show_figure(fig, chapter, {"k": 10})
    return fit, shown


def test_show_figure_links_the_csv_of_what_it_draws(monkeypatch):
    chapter = "demo_figure_data"
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot([0.0, 1.0, 2.0], [0.25, 0.5, 0.125], label="a")
    fit, shown = _show(fig, chapter, monkeypatch)
    (image, _), (link, meta) = shown
    n = int(fit["data"].rsplit("-", 1)[1].split(".")[0])
    assert fit["data"] == f"_static/data/{chapter}/figure-{n}.csv" and fit["data_rows"] == 3
    assert f'href="{fit["data"]}"' in link.data and f">figure-{n}.csv<" in link.data
    data = meta["metadata"][report.FIGURE_DATA_KEY]
    assert data["file"] == f"figure-{n}.csv"
    table = pd.read_csv(io.StringIO(data["csv"]))
    assert table["y"].tolist() == [0.25, 0.5, 0.125] and table["series"].tolist() == ["a"] * 3
    fig2, ax2 = plt.subplots()
    ax2.bar([1, 2], [3, 4])
    fit2, _ = _show(fig2, chapter, monkeypatch)
    assert fit2["data"] == f"_static/data/{chapter}/figure-{n + 1}.csv"  # numbered in the order shown


def test_a_line_missing_from_the_csv_fails_the_check(monkeypatch):
    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [1.0, 2.0, 3.0])
    ax.plot([0, 1, 2], [3.0, 1.0, 2.0], linestyle="none", marker="o")
    ax.axhline(0.5)
    csv = plots.figure_data(fig).to_csv(index=False)
    assert_lines_in_csv(fig, csv)
    partial = pd.read_csv(io.StringIO(csv))
    with pytest.raises(AssertionError, match="not in the figure's CSV"):
        assert_lines_in_csv(fig, partial[partial["y"] != 2.0].to_csv(index=False))
    _, shown = _show(fig, "demo_figure_data", monkeypatch)  # what show_figure keeps passes the check
    assert_lines_in_csv(fig, shown[1][1]["metadata"][report.FIGURE_DATA_KEY]["csv"])


def test_book_build_writes_the_figure_csvs_and_the_chapter_results(tmp_path, monkeypatch):
    """The extension's builder-inited step on a book with one executed page: the CSVs its links point to."""
    import nbformat

    sys.path.insert(0, str(paths.book_dir() / "_ext"))
    try:
        import prh_book
    finally:
        sys.path.remove(str(paths.book_dir() / "_ext"))
    from prh_lib import results

    book = tmp_path / "book"
    book.mkdir()
    (book / "_toc.yml").write_text("format: jb-book\nroot: intro\nparts:\n  - chapters:\n"
                                   "      - file: sec3_1_layerwise\n      - file: sec3_1b_pca\n")
    (book / "_static" / "data" / "gone").mkdir(parents=True)  # from an earlier build: removed
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))  # a results table of its own
    for run, score in (("run-a", 0.25), ("run-b", 0.3)):  # run-b, a later rerun, supersedes run-a's rows
        results.write(pd.DataFrame({"metric": ["mutual_knn"], "score": [score], "quantity": ["peak"]}),
                      chapter="sec3_1_layerwise", params={"k": 10}, dataset="d", draw=0, run_id=run)
    nb = nbformat.v4.new_notebook()
    out = nbformat.v4.new_output("display_data", data={"text/html": "<p>link</p>"},
                                 metadata={report.FIGURE_DATA_KEY: {"file": "figure-1.csv", "csv": "x,y\n1,2\n"}})
    nb.cells = [nbformat.v4.new_code_cell("show", outputs=[out])]
    nb.metadata["prh_inputs"] = {"run_id": "run-a"}  # the page was executed by run-a: its rows, not the latest
    nbformat.write(nb, str(book / "sec3_1_layerwise.ipynb"))
    app = type("App", (), {"srcdir": str(book)})()
    prh_book.write_data_files(app)
    data = book / "_static" / "data"
    assert sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file()) == [
        "sec3_1_layerwise/figure-1.csv", "sec3_1_layerwise/results.csv"]  # sec3_1b_pca: not executed
    assert (data / "sec3_1_layerwise" / "figure-1.csv").read_text() == "x,y\n1,2\n"
    rows = pd.read_csv(data / "sec3_1_layerwise" / "results.csv")
    assert rows["score"].tolist() == [0.25] and set(rows["chapter"]) == {"sec3_1_layerwise"}
    context = {"body": "<section><h1>Title</h1><p>text</p>", "pathto": lambda target, resource: target}
    prh_book.link_results(app, "sec3_1_layerwise", "page.html", context, None)
    assert context["body"].startswith('<section><h1>Title</h1>\n<p class="results-data">')
    assert 'href="_static/data/sec3_1_layerwise/results.csv"' in context["body"]
