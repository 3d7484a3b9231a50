"""The robustness page (issue 43): each alternative protocol on a planted pair where its effect is known, the grid's
verdicts, and the notebook (notebooks/robustness.py) executed on small parameters."""

import dataclasses

import nbformat
import torch
import numpy as np
import pandas as pd
import pytest

from prh_lib.analysis import robustness as R
from prh_lib.analysis.core import clip_features
from prh_lib.extract.features import LayerFeatures
from prh_lib.pages import report, robustness as page
from prh_lib.stats.selection import crossfit_peak


def _feats(values, name="m"):
    v = np.asarray(values, dtype=np.float32)
    return LayerFeatures(values=torch.from_numpy(v), layer_labels=tuple(f"l{i}" for i in range(len(v))),
                         sample_ids=tuple(str(i) for i in range(v.shape[1])), meta={"model": name})


def _held(X, Y, **kw):
    return crossfit_peak(X, Y, n_splits=2, n_boot=0, **kw).heldout


@pytest.mark.parametrize("seed", [0, 1])
def test_centring_removes_a_shared_offset_that_hides_the_structure(seed):
    # Y carries X's structure on top of a large shared offset: cosine neighbourhoods see mostly the offset's
    # direction; centring (the registered preprocessing) removes it and the pair aligns as without the offset
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(1, 80, 20))
    X = _feats(Z)
    noisy = Z + 0.3 * rng.normal(size=Z.shape)
    Y = _feats(noisy + 40.0)
    raw = _held(X.values, Y.values)
    cen = _held(R.centred(X).values, R.centred(Y).values)
    assert raw < cen - 0.1
    assert cen == pytest.approx(_held(X.values, R.centred(_feats(noisy)).values), abs=0.02)
    np.testing.assert_allclose(R.centred(Y).values.mean(axis=1), 0, atol=1e-4)


def test_centring_before_clipping_differs_from_after_when_the_offset_dominates():
    rng = np.random.default_rng(0)
    f = _feats(rng.normal(size=(2, 50, 4)) + 10.0)
    after = R.centred(clip_features(f, q=0.95, clip="stack")).values
    before = R.centred_then_clipped(f).values
    # clipping first flattens the offset-dominated entries; centring first clips the structure itself
    assert not np.allclose(after, before)
    assert float(before.abs().max()) < float(R.centred(f).values.abs().max())
    bow = dataclasses.replace(f, meta={"model": "tfidf-svd100"})  # the bag of words is centred, never clipped
    np.testing.assert_allclose(R.centred_then_clipped(bow).values, R.centred(bow).values)
    assert R.clipped(bow, clip="layer") is bow


def test_normalisation_off_lets_row_length_decide_the_neighbours():
    # the same directions in X and Y; Y's rows get random lengths. Cosine neighbourhoods ignore the lengths
    # (identical), inner-product ones follow them (long rows are everyone's neighbours)
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(1, 80, 8))
    Ys = Z * rng.lognormal(0, 1.5, size=(1, 80, 1))
    assert _held(Z, Ys, metric="mutual_knn") == pytest.approx(1.0)
    assert _held(Z, Ys, metric="mutual_knn_dot") < 0.6


@pytest.mark.parametrize("seed", [0, 1])
def test_clipping_removes_an_outlier_dimension(seed):
    # one extra dimension of huge, unrelated values dominates Y's cosines; clipping at the 0.95 quantile (per stack
    # or per layer) clamps it to the scale of the others, and the shared structure shows again
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(1, 80, 20))
    Y = _feats(np.concatenate([Z + 0.2 * rng.normal(size=Z.shape), 100 * rng.normal(size=(1, 80, 1))], axis=-1))
    off = _held(Z, Y.values)
    for scope in ("stack", "layer"):  # the registered steps: the protocol's clipping and "clipping per layer"
        assert off < _held(Z, R.clipped(Y, clip=scope).values) - 0.15
    assert R.ALTERNATIVES["clipping off"].clip_q is None


def test_metric_alternative_cka_is_scored_held_out_and_is_rotation_invariant():
    # unbiased linear CKA is invariant to an orthogonal rotation of one side; its held-out peak sits at the
    # planted layer pair like mutual k-NN's
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3, 60, 5))
    Q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    Y = np.stack([rng.normal(size=(60, 5)), X[1] @ Q, rng.normal(size=(60, 5))])
    r = crossfit_peak(X, Y, metric="cka_linear_unbiased", n_splits=2, n_boot=0)
    assert r.heldout == pytest.approx(1.0, abs=1e-5)
    assert r.selected[1, 1] == r.selected.sum()
    assert _held(X, Y, metric="mutual_knn") == pytest.approx(1.0)


@pytest.mark.parametrize("metric", ["cknna", "cycle_knn"])
def test_neighbourhood_metric_alternatives_find_the_planted_layer_pair(metric):
    # Y's middle layer is X's middle layer rotated (cosines and inner products kept) plus a little noise, its other
    # layers unrelated: CKNNA and cycle k-NN, scored held out, pick the planted pair on every split and score it far
    # above an unrelated pair
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3, 80, 6))
    Q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    Y = np.stack([rng.normal(size=(80, 6)), X[1] @ Q + 0.05 * rng.normal(size=(80, 6)), rng.normal(size=(80, 6))])
    r = crossfit_peak(X, Y, metric=metric, n_splits=2, n_boot=0)
    assert r.selected[1, 1] == r.selected.sum()
    unrelated = _held(rng.normal(size=(1, 80, 6)), rng.normal(size=(1, 80, 6)), metric=metric)
    assert r.heldout > unrelated + 0.4 and r.heldout > 0.7


def test_k_alternative_moves_chance_with_k_over_n():
    # unrelated features score about k/(N-1) at every k: the matched-k alternatives compare like with like
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(1, 400, 8)), rng.normal(size=(1, 400, 8))
    low, high = (crossfit_peak(X, Y, k=k, n_splits=4, n_boot=0) for k in (4, 40))
    assert low.heldout == pytest.approx(4 / 399, abs=0.01)
    assert high.heldout == pytest.approx(40 / 399, abs=0.02) and high.heldout > 3 * low.heldout


def _summary(alt, *, peak, floor, final, depth=0.8, same=0.5, same_floor=0.2, metric="mutual_knn"):
    """A held-out summary of one cross-modal pair, its floors and a same-modality pair, with replicates."""
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.005, 40)

    def row(pair, quantity, score, regime="", kind="", bounds=(), **kw):
        x, y = pair.split(" × ")
        return {"pair": pair, "model_x": x, "model_y": y, "quantity": quantity, "regime": regime, "kind": kind,
                "score": score, "ci_low": score - 0.01, "ci_high": score + 0.01, "final_half": final,
                "reps": score + noise, "final_reps": final + noise, "chance": 0.01, "n": 1000, "n_boot": 40,
                "depth_x": depth, "depth_y": depth, "depth_x_low": depth - 0.1, "depth_x_high": depth + 0.1,
                "depth_y_low": depth - 0.1, "depth_y_high": depth + 0.1, "bounds": list(bounds),
                "alternative": alt, "metric": metric, **kw}
    return pd.DataFrame([
        row("v × l", "heldout", peak, "cross-modal"),
        row("v × tfidf", "heldout:control:tfidf", floor, kind="tfidf", bounds=["v × l"]),
        row("v × l@random-init:0", "heldout:control:random-language", 0.02, kind="random-language",
            bounds=["v × l"]),
        row("v × w", "heldout", same, "vision-vision"),
        row("v@random-init:0 × w", "heldout:control:random-vision", same_floor, kind="random-vision",
            bounds=["v × w"]),
    ])


def test_grid_reads_each_finding_symmetrically_and_marks_changes():
    held = pd.concat([_summary(R.BASELINE, peak=0.10, floor=0.05, final=0.06),
                      _summary("centred", peak=0.10, floor=0.15, final=0.12, depth=0.5),
                      _summary("CKA", peak=0.40, floor=0.10, final=0.30, metric="cka_linear_unbiased")],
                     ignore_index=True)
    pca = pd.DataFrame([  # the PCA claims: relative score with its paired interval, per probe and space
        {"pair": "v × l", "alternative": R.BASELINE, "probe": "40% variance", "n_components": 12, "relative": 0.97,
         "low": 0.96, "high": 0.99},
        {"pair": "v × l", "alternative": R.BASELINE, "probe": "8 dims", "n_components": 8, "relative": 0.7,
         "low": 0.6, "high": 0.78},
        {"pair": "v × l", "alternative": "centred", "probe": "40% variance", "n_components": 9, "relative": 0.9,
         "low": 0.85, "high": 0.93},
        {"pair": "v × l", "alternative": "centred", "probe": "8 dims", "n_components": 8, "relative": 0.75,
         "low": 0.6, "high": 0.85}])
    g = page.grid(held, [R.BASELINE, "centred", "CKA", "missing"], pca)
    v = g.set_index(["finding", "alternative"])["verdict"]
    assert set(v.xs(R.BASELINE, level="alternative")) == {"holds"}
    assert v["PCA: 40 % of the variance keeps 95 %", "centred"] == "fails"  # 0.93 < 0.95: off the claim's side
    assert v["PCA: 8 dimensions keep under 80 %", "centred"] == "undecided"  # [0.6, 0.85] straddles 0.8
    assert v["PCA: 8 dimensions keep under 80 %", "CKA"] == "not run"  # the PCA is read in two spaces only
    assert v["peak above chance and bag of words", "centred"] == "fails"  # the floor now beats the pair
    assert v["peak not at the final layers", "centred"] == "fails"
    assert v["peak in the later half", "centred"] == "not testable"  # no pair beats its floors: no peak to locate
    assert v["peak above chance and bag of words", "CKA"] == "holds"  # no chance test for CKA, floors only
    assert g.set_index(["finding", "alternative"]).loc[("peak above chance and bag of words", "CKA"), "n_tests"] == 1
    assert set(v.xs("missing", level="alternative")) == {"not run"}
    rows = g.set_index(["finding", "alternative"])
    assert rows.loc[("peak above chance and bag of words", "CKA"), "floors_only"]
    assert not rows.loc[("peak above chance and bag of words", R.BASELINE), "floors_only"]
    table = page.finding_table(g, "peak above chance and bag of words")
    assert table.loc["CKA", "verdict"] == "holds (floors only)" and table.loc["centred", "changes the verdict"] == "yes"
    assert "needs > 0, got" in table.loc[R.BASELINE, "weakest test [95 % CI]"]
    assert rows.loc[("PCA: 8 dimensions keep under 80 %", "CKA"), "numbers"].startswith("not run: the PCA findings")
    assert rows.loc[("regime order", "missing"), "numbers"] == "not run: k too large for the halves of this N"
    # the same-modality pair's own random-init floor is part of the regime order
    assert any("v@random-init:0 × w" in t for t in rows.loc[("regime order", R.BASELINE), "numbers"].split("; "))
    assert page.headline(g).endswith("Of the 10 finding × alternative cells that ran, 5 keep the verdict the "
                                     "finding has under the book's protocol and 5 change it.")
    ch = page.changes(g)
    by = {c["finding"]: c["alternatives"] for c in ch}
    assert by == {"peak above chance and bag of words": [["centred", "fails"]],
                  "peak not at the final layers": [["centred", "fails"]],
                  "peak in the later half": [["centred", "not testable"]],
                  "PCA: 40 % of the variance keeps 95 %": [["centred", "fails"]],
                  "PCA: 8 dimensions keep under 80 %": [["centred", "undecided"]]}  # CKA keeps every verdict
    assert not g["changed"][g["alternative"] == R.BASELINE].any()
    fig = page.grid_figure(g)
    from prh_lib.pages.plots import figure_data
    data = figure_data(fig)
    assert len(data) == len(page.FINDINGS) * 4
    assert set(data["value"].dropna()) == {-1.0, 0.0, 1.0}


def test_a_registry_alternative_with_an_unknown_dataset_is_refused():
    class D:
        dataset, pairs = "a", list(range(10))
    with pytest.raises(ValueError, match="no draws"):
        R.robustness_study([D()], [("x", "y")], alternatives={"b": R.Alternative(dataset="b")}, dataset="a",
                           chapter="c", params={}, write=False)


# -- the notebook on small parameters ---------------------------------------------------------------------------

_ALTS = [R.BASELINE, "centred after clipping", "unbiased linear CKA", "k = 42 (k/N of coco-mini at k = 10)",
         "coco-mini, k = 2 (k/N of flickr8k-1k at k = 10)"]


@pytest.fixture(scope="module")
def executed(executed_notebook):
    return executed_notebook("robustness", alternatives=_ALTS,
                             comparisons=[["dinov2-small", "smollm2-135m"], ["dinov2-small", "efficientnet-lite0"]])


def test_page_has_the_grid_its_data_and_a_table_per_finding(executed):
    nb = nbformat.read(str(executed), as_version=4)
    outs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert not [o for o in outs if o.get("output_type") == "error" or o.get("name") == "stdout"]
    assert sum("image/png" in o.get("data", {}) for o in outs) == 1
    csvs = [o["metadata"][report.FIGURE_DATA_KEY]["csv"] for o in outs
            if report.FIGURE_DATA_KEY in o.get("metadata", {})]
    assert len(csvs) == 1
    import io
    data = pd.read_csv(io.StringIO(csvs[0]))
    assert len(data) == len(page.FINDINGS) * len(_ALTS)  # one cell per finding x alternative
    pca = data[data["row"].str.startswith("PCA")]
    assert pca[pca["column"].isin([R.BASELINE, "centred after clipping"])]["value"].notna().all()  # read, decided
    assert pca[~pca["column"].isin([R.BASELINE, "centred after clipping"])]["value"].isna().all()  # not run
    assert set(data["row"]) == set(page.FINDINGS) and set(data["column"]) == set(_ALTS)
    assert set(data["value"].dropna()) <= {-1.0, 0.0, 1.0}
    # k = 42 is too large for halves of 48 images: not run, drawn blank
    assert data[data["column"] == _ALTS[3]]["value"].isna().all()
    assert data[data["column"] == R.BASELINE]["value"].notna().any()
    tables = [o for o in outs if "text/html" in o.get("data", {}) and "weakest test" in o["data"]["text/html"]]
    assert len(tables) == len(page.FINDINGS)
    assert isinstance(report.read_record(executed, "robustness"), list)


def test_nothing_to_read_says_so_and_tells_the_front_page_nothing():
    # tiny datasets (the rehearsal profile): every k too large for the halves, no row to read
    class D:
        dataset, pairs = "a", list(range(6))
    held = R.robustness_study([D()], [("x", "y")], alternatives={R.BASELINE: R.Alternative()}, dataset="a",
                              chapter="c", params={}, write=False)
    assert held.empty and "alternative" in held
    g = page.grid(held, [R.BASELINE, "centred"], None)
    assert set(g["verdict"]) == {"not run"}
    assert page.changes(g) is None and "Nothing could be read" in page.headline(g)
    from prh_lib.pages import front
    assert front.robustness_markdown(page.changes(g)) == ""
