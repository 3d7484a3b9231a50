"""Tests for prh_lib.analysis.displacement.draws: the displacement chapter's rows over datasets and draws."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from threadpoolctl import threadpool_limits

from prh_lib import results
from prh_lib.analysis.displacement import study as displacement_study
from prh_lib.analysis import study
from prh_lib.analysis.displacement import draws as ds
from prh_lib.data.study import Draw
from prh_lib.extract import LayerFeatures

N = 60
K = 5
OPTS = {"k": K, "n_components": 4, "test_fraction": 0.5, "n_pairs": 400, "split_seed": 0}
COMPARISONS = [("vit", "lm"), ("vit", "cnn")]


# the constant embedding layer of the fake ViT is NaN by design (a RuntimeWarning says so)
pytestmark = pytest.mark.filterwarnings("ignore:.*degenerate.*:RuntimeWarning")


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    with threadpool_limits(1):  # tiny matrices: extra BLAS threads only spin-wait on a shared CPU
        yield


def _features(seed: int, n: int = N) -> dict[str, LayerFeatures]:
    """Three fake models sharing a 3-D latent; ``vit`` has a constant first layer (a CLS token at ``embed``)."""
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((n, 3))
    ids = tuple(f"s{i}" for i in range(n))

    def view(d, noise):
        return S @ rng.standard_normal((3, d)) + noise * rng.standard_normal((n, d))

    def lf(values, name, modality, labels):
        return LayerFeatures(torch.tensor(values, dtype=torch.float32), labels, ids, {"model": name, "modality": modality})

    vit = np.stack([np.tile(rng.standard_normal(8), (n, 1)), rng.standard_normal((n, 8)), view(8, 0.3)])
    lm = np.stack([rng.standard_normal((n, 8)), view(8, 0.5), view(8, 1.5)])
    cnn = np.stack([rng.standard_normal((n, 8)), view(8, 0.4)])
    return {"vit": lf(vit, "vit", "vision", ("embed", "layer.1", "layer.2")),
            "lm": lf(lm, "lm", "language", ("embed", "layer.1", "layer.2")),
            "cnn": lf(cnn, "cnn", "vision", ("stem", "stage.1"))}


# two datasets: one with three draws, one with a single draw that cannot be repeated
DRAWS = [Draw("a", 0, 0, list(range(N)), True, "captions"), Draw("a", 1, 1, list(range(N)), True, "captions"),
         Draw("a", 2, 2, list(range(N)), True, "captions"), Draw("b", 0, 7, list(range(N)), False, "nothing")]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The study on fake features (the draw's seed picks them), written to a private results table."""
    root = tmp_path_factory.mktemp("results")
    feats = {d.seed: _features(d.seed) for d in DRAWS}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(study, "prepare_features", lambda comparisons, pairs, **kw: feats[_current[0]])
        mp.setattr(study, "prefetch_features", lambda comparisons, draws, **kw: None)  # fake features: nothing to fetch
        out = {}
        for d in DRAWS:  # one draw at a time so the fake extraction knows which draw it serves
            _current[0] = d.seed
            out |= ds.run_study([d], COMPARISONS, chapter="demo", params={"p": 1}, keep=[("a", 0)], root=root,
                                **OPTS)
    return out, feats, root


_current = [0]


def test_every_draw_is_scored_and_only_the_kept_draw_keeps_features(run):
    out, _, _ = run
    assert list(out) == [(d.dataset, d.draw) for d in DRAWS]
    assert out[("a", 0)].features is not None and all(v.features is None for k, v in out.items() if k != ("a", 0))
    assert all([c.label for c in v.views] == ["vit × lm", "vit × cnn"] for v in out.values())


def test_rows_are_the_matrices_of_every_draw(run):
    out, _, root = run
    df = ds.load_rows(chapter="demo", params={"p": 1}, root=root)
    for (dataset, draw), sd in out.items():
        for comp in sd.views:
            sub = df[(df["dataset"] == dataset) & (df["draw"] == draw) & (df["model_x"] == comp.knn.x_name)
                     & (df["model_y"] == comp.knn.y_name) & (df["quantity"] == "layer_pair")]
            for name, metric in ds.METRICS.items():
                m = comp.knn if name == "mutual_knn" else comp.displacement[name]
                rows = sub[sub["metric"] == metric]
                got = np.array(rows["score"], dtype=float).reshape(m.scores.shape)  # written row-major
                np.testing.assert_array_equal(got, m.scores)
                assert list(rows["layer_x"])[:: len(m.y_labels)] == list(m.x_labels)
                assert (rows["k"].dropna() == K).all() and (rows["k"].isna().all() != (name == "mutual_knn"))
    # the provenance columns: the draw's seed, N, the clipping label
    assert set(map(tuple, df[["dataset", "draw", "seed"]].drop_duplicates().to_numpy())) == {
        (d.dataset, d.draw, d.seed) for d in DRAWS}
    assert (df["n"] == N).all() and (df["preprocessing"] == "clip(stack, q=0.95)").all()
    assert df["depth_x"].dropna().between(0, 1).all()
    # the constant embedding layer is NaN in every view, never a number
    vit_embed = df[(df["layer_x"] == "embed") & (df["quantity"] == "layer_pair")]
    assert len(vit_embed) and vit_embed["score"].isna().all()


def test_best_rows_sit_at_each_draws_cross_model_maximum(run):
    out, _, root = run
    df = ds.load_rows(chapter="demo", params={"p": 1}, root=root)
    best = df[df["quantity"] == ds.BEST]
    for (dataset, draw), sd in out.items():
        table = displacement_study.best_pair_table(sd.views, {})  # the chapter's own single-draw table, no re-splits
        for comp in sd.views:
            b = table.loc[comp.label]
            rows = best[(best["dataset"] == dataset) & (best["draw"] == draw) & (best["model_x"] == comp.knn.x_name)
                        & (best["model_y"] == comp.knn.y_name)].set_index("metric")
            assert len(rows) == 4
            assert set(rows["layer_x"]) == {b["layer x"]} and set(rows["layer_y"]) == {b["layer y"]}
            for name in displacement_study.MEASURE_NAMES:
                assert rows.loc[ds.METRICS[name], "score"] == pytest.approx(b[displacement_study.MEASURE_NAMES[name]])
            i, j = comp.knn.x_labels.index(b["layer x"]), comp.knn.y_labels.index(b["layer y"])
            assert rows.loc["mutual_knn", "score"] == pytest.approx(comp.knn.scores[i, j])
            assert int(rows.loc[ds.METRICS["cross_model"], "r"]) == b["r"]


def test_aggregate_equals_a_plain_recomputation(run):
    _, _, root = run
    df = ds.load_rows(chapter="demo", params={"p": 1}, root=root)
    agg = ds.aggregate_best(df).set_index(["dataset", "model_x", "model_y"])
    assert list(agg.index) == [("a", "vit", "lm"), ("a", "vit", "cnn"), ("b", "vit", "lm"), ("b", "vit", "cnn")]
    reordered = ds.aggregate_best(df, datasets=["b", "a"])  # the study's order, not the table's sorted one
    assert list(zip(reordered["dataset"], reordered["pair"])) == [("b", "vit × lm"), ("b", "vit × cnn"),
                                                                  ("a", "vit × lm"), ("a", "vit × cnn")]
    for (dataset, x, y), row in agg.iterrows():
        sel = df[(df["dataset"] == dataset) & (df["model_x"] == x) & (df["model_y"] == y)]
        for name, metric in ds.METRICS.items():
            vals = sel[(sel["quantity"] == ds.BEST) & (sel["metric"] == metric)].sort_values("draw")["score"]
            vals = np.asarray(vals, dtype=float)
            assert row[f"{name}_mean"] == pytest.approx(vals.mean())
            if len(vals) > 1:
                assert row[f"{name}_std"] == pytest.approx(np.std(vals, ddof=1))
            else:  # one draw: undefined spread, not zero
                assert np.isnan(row[f"{name}_std"])
        shuffled = sel[(sel["quantity"] == "control:shuffled") & (sel["metric"] == ds.METRICS["cross_model"])]
        assert row["shuffled_cross_model_mean"] == pytest.approx(shuffled["score"].mean())
        assert row["n_draws"] == (3 if dataset == "a" else 1) and row["single_draw"] == (dataset == "b")
        assert row["chance"] == pytest.approx(K / (N - 1)) and row["r"] == 4
        counts = sel[(sel["quantity"] == ds.BEST) & (sel["metric"] == ds.METRICS["cross_model"])]
        layers = (counts["layer_x"] + " × " + counts["layer_y"]).value_counts()
        assert row["best_layers_draws"] == layers.max() and row["best_layers"] in layers[layers == layers.max()]


def test_headline_table_and_prose_say_when_a_draw_cannot_be_repeated(run):
    _, _, root = run
    agg = ds.aggregate_best(ds.load_rows(chapter="demo", params={"p": 1}, root=root))
    table = ds.headline_table(agg)
    assert table.loc[("b", "vit × lm"), "draws"] == "1 (not repeatable)"
    assert table.loc[("a", "vit × lm"), "draws"] == "3"
    assert " ± " in table.loc[("a", "vit × lm"), "Cross-Model"] and " ± " not in table.loc[("b", "vit × lm"), "Cross-Model"]
    text = ds.describe_study(agg, DRAWS)
    assert "**b** (N = 60, 1 draw; one draw that cannot be repeated, so no spread):" in text
    assert "**a** (N = 60, 3 draws; what varies: captions):" in text
    row = agg.iloc[0]
    assert (f"  - vit × lm: Pointwise {row['pointwise_mean']:.3f} ± {row['pointwise_std']:.3f}; Cross-Model "
            f"{row['cross_model_mean']:.3f} ± {row['cross_model_std']:.3f}") in text
    assert "identical in every draw" not in text  # every fake draw has its own features


def test_a_rerun_replaces_its_rows_and_a_run_id_selects_one_run(run, tmp_path):
    _, feats, _ = run
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(study, "prepare_features", lambda comparisons, pairs, **kw: feats[0])
        mp.setattr(study, "prefetch_features", lambda comparisons, draws, **kw: None)
        for run_id in ("run-1", "run-2"):
            mp.setenv("PRH_RUN_ID", run_id)
            ds.run_study(DRAWS[:2], COMPARISONS, chapter="demo", params={"p": 2}, root=tmp_path, **OPTS)
    df = ds.load_rows(chapter="demo", params={"p": 2}, root=tmp_path)
    assert set(df["run_id"]) == {"run-2"}
    assert ds.load_rows(chapter="demo", params={"p": 2}, run_id="run-1", root=tmp_path).empty
    best = df[df["quantity"] == ds.BEST].assign(pair=lambda f: f["model_x"] + " × " + f["model_y"])
    coverage = best.pivot_table(index=["dataset", "draw", "seed"], columns="pair", values="score", aggfunc="count")
    assert coverage.to_numpy().tolist() == [[4, 4], [4, 4]]  # four metrics per pair at its best layer pair
    # both draws saw the same features: zero spread, and the prose says why rather than showing "± 0.000"
    agg = ds.aggregate_best(df)
    assert (agg[[f"{m}_std" for m in displacement_study.MEASURE_NAMES]] == 0).all().all()
    assert ds.describe_study(agg, DRAWS[:2]).count("identical in every draw") == 2


def test_aggregate_needs_best_rows():
    with pytest.raises(ValueError, match="at_cross_model_peak"):
        ds.aggregate_best(pd.DataFrame({"quantity": ["layer_pair"], "metric": ["mutual_knn"], "score": [0.1]}))


def test_rows_are_valid_results_rows():
    feats = _features(3)
    comp = displacement_study.compare_views(feats, COMPARISONS[:1], k=K, n_components=4, n_pairs=200, seed=0)[0]
    rows = ds.view_rows(comp, k=K)
    assert len(rows) == 4 * 3 * 3 + 4 + 3 + 1
    assert {r["quantity"] for r in rows} == set(ds.QUANTITIES)
    assert {r["metric"] for r in rows} == set(ds.METRICS.values())
    frame = results._validate_rows(rows, dataset="x", draw=0)  # the table's own validation accepts them
    assert len(frame) == len(rows)
