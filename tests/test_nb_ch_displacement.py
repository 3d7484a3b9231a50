"""Runs the displacement chapter (notebooks/ch_displacement.py) on smoke parameters and checks what it produced."""

from __future__ import annotations

import math

import nbformat
import numpy as np
import pandas as pd
import pytest

from prh_lib.pages import ch_displacement as da
from prh_lib.analysis.displacement import study as displacement_study
from prh_lib.analysis.displacement import draws as ds
from prh_lib.pages import report
from prh_lib import results
from prh_lib.data.study import study_draws
from prh_lib.run.profiles import get_profile

PAIRS = ["dinov2-small × smollm2-135m", "dinov2-small × minilm-l6", "dinov2-small × efficientnet-lite0",
         "smollm2-135m × minilm-l6"]


@pytest.fixture(scope="module")
def executed(executed_notebook):
    # no overrides: the book test reuses this execution (the smoke profile sizes it)
    return executed_notebook("ch_displacement")


@pytest.fixture(scope="module")
def rec(executed):
    return report.read_record(executed, "ch_displacement")


def _arr(x):
    return np.array([[np.nan if v is None else v for v in row] for row in x], dtype=float)


def test_figures_present(executed):
    nb = nbformat.read(str(executed), as_version=4)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    # heatmaps side by side, r sweep, depth profiles, consensus, the reference code's procedure
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 5
    assert not [o for o in outputs if o.get("output_type") == "error"]
    # no logs, warnings or print() on the page: the one-line summary of the data is Markdown
    streams = [o for o in outputs if o.get("output_type") == "stream"]
    assert streams == []
    assert any("held-out samples; r = " in str(o.get("data", {}).get("text/markdown", "")) for o in outputs)


def test_every_figure_carries_its_provenance(executed):
    nb = nbformat.read(str(executed), as_version=4)
    drawing = [c for c in nb.cells if c.cell_type == "code"
               and any("image/png" in o.get("data", {}) for o in c.get("outputs", []))]
    assert len(drawing) == 5
    import base64
    import io
    import json

    from PIL import Image

    from prh_lib.pages import report

    for cell in drawing:  # shown by report.show_figure: provenance drawn in, text sizes measured into the PNG
        assert "report.show_figure(" in cell.source, cell.source[:80]
        for out in cell.get("outputs", []):
            if "image/png" in out.get("data", {}):
                png = Image.open(io.BytesIO(base64.b64decode(out["data"]["image/png"])))
                fit = json.loads(png.text[report.FIGURE_METADATA_KEY])
                assert fit["min_rendered_pt"] >= 9.0 - 0.05


def test_page_has_the_new_sections(executed):
    nb = nbformat.read(str(executed), as_version=4)
    md = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    for title in ("## The reference code's procedure", "### Why the two procedures part",
                  "### A synthetic pair with a known shared component", "### The smaller differences",
                  "## The paper and this build"):
        assert title in md, title


def test_parameters_reached_the_record(rec):
    assert rec["n_pairs"] == 48 and rec["k"] == 5
    assert rec["n_displacement_pairs"] == get_profile("smoke").get("n_displacement_pairs", 10000)
    assert rec["chance"] == pytest.approx(5 / 47)


def test_heatmaps_undefined_exactly_at_the_constant_cls_layer_in_both_views(rec):
    for label, m in rec["matrices"].items():
        mk, cm = _arr(m["mutual_knn"]), _arr(m["cross_model"])
        assert mk.shape == cm.shape == (len(m["x_labels"]), len(m["y_labels"]))
        np.testing.assert_array_equal(np.isnan(mk), np.isnan(cm))
        if label.startswith("dinov2-small"):
            assert m["x_labels"][0] == "embed" and np.isnan(cm[0]).all() and np.isfinite(cm[1:]).all()
        else:
            assert np.isfinite(cm).all()
        assert np.nanmax(np.abs(cm)) <= 1.0 and np.nanmin(mk) >= 0.0


def test_best_pair_table_is_consistent_with_the_heatmaps_and_controls_are_chance(rec):
    assert set(rec["best"]) == set(rec["matrices"])
    for label, row in rec["best"].items():
        m = rec["matrices"][label]
        cm = _arr(m["cross_model"])
        i, j = m["x_labels"].index(row["layer x"]), m["y_labels"].index(row["layer y"])
        assert row["Cross-Model"] == pytest.approx(np.nanmax(cm)) == pytest.approx(cm[i, j])
        assert row["Pointwise"] == pytest.approx(_arr(m["pointwise"])[i, j])
        assert row["r"] == 23  # min(n_components = 32, n_train - 1 = 23)
        for name in ("Pointwise", "Cross-Model", "Cross-Object"):
            assert -1.0 <= row[name] <= 1.0 and abs(row[f"{name} (shuffled)"]) < 0.25, (label, name)
        assert row["Cross-Model"] > row["Cross-Model shuffled (max)"]
        # on whitened, train-centred features, displacement and pointwise cosines nearly coincide
        assert abs(row["Pointwise"] - row["Cross-Model"]) < 0.1
    # same-modality pairs above every vision-language pair, as with mutual k-NN
    kinds = {label: row["kind"] for label, row in rec["best"].items()}
    same = min(row["Cross-Model"] for label, row in rec["best"].items() if kinds[label] != "vision-language")
    cross = max(row["Cross-Model"] for label, row in rec["best"].items() if kinds[label] == "vision-language")
    assert same > cross


def test_views_table_reports_both_peaks(rec):
    for label, row in rec["views"].items():
        m = rec["matrices"][label]
        assert row["k-NN peak"] == pytest.approx(np.nanmax(_arr(m["mutual_knn"])))
        assert row["Cross-Model peak"] == pytest.approx(rec["best"][label]["Cross-Model"])
        assert -1.0 <= row["rank correlation"] <= 1.0


def test_sweep_caps_r_at_the_training_rows(rec):
    for row in rec["sweep"]:
        assert row["r"] == min(row["n_components"], 23)
        assert -1.0 <= row["cross_model"] <= 1.0


def test_depth_profiles_reuse_the_k_nn_row_and_the_split(rec):
    for label, prof in rec["depth_profiles"].items():
        m = rec["matrices"][label]
        x_model, x_layer = prof["layer x"].rsplit(" ", 1)
        i = m["x_labels"].index(x_layer)
        np.testing.assert_allclose(np.array(prof["mutual k-NN"], dtype=float), _arr(m["mutual_knn"])[i])
        # r = 32 is capped at 23 here, the r of the heatmaps: the profile is that row of the heatmap
        np.testing.assert_allclose(np.array(prof["Cross-Model, r=23"], dtype=float), _arr(m["cross_model"])[i])
        assert {"Cross-Model, r=4", "Cross-Model, r=8"} <= set(prof)


def test_consensus_outputs(rec):
    c = rec["consensus"]
    assert [m for m, _ in c["layers"]] == ["dinov2-small", "efficientnet-lite0", "smollm2-135m", "minilm-l6"]
    ev = np.array(c["eigenvalues"])
    assert len(ev) == len(c["held_out_eigenvalues"]) == 23
    assert np.all(np.diff(ev) <= 1e-12) and np.all(np.abs(ev) <= 1 + 1e-9)
    cols = {f"{m} | {s}" for m in ("mutual k-NN", "Cross-Model") for s in ("full", "shared", "random", "private")}
    assert set(c["table"]) == cols
    for col, values in c["table"].items():
        assert len(values) == 6  # 4 models: 6 pairs
        assert all(v is not None and math.isfinite(v) and -1.0 <= v <= 1.0 for v in values.values()), col


# --------------------------------------------------------------------------- the reference code's procedure
STEPS = ["our procedure", "reference code", "reference, means not added back", "reference, whitening on training rows",
         "reference, random pairs", "reference, all three steps ours", "reference, 30% training rows",
         "reference, 70% training rows", "reference, r = 100 (capped)"]


@pytest.fixture(scope="module")
def procs(rec):
    return rec["procedures"]


def _rows(procs, pair, step):
    return sorted((r for r in procs if r["pair"] == pair and r["step"] == step), key=lambda r: r["split"])


def test_both_procedures_for_every_pair_and_split(rec, procs):
    n_splits = get_profile("smoke")["n_splits"]
    for pair, best in rec["best"].items():
        for step in STEPS:
            rows = _rows(procs, pair, step)
            assert [r["split"] for r in rows] == list(range(n_splits)), (pair, step)
            assert all(r["layers"] == f"{best['layer x']} × {best['layer y']}" for r in rows)
            assert all(-1 <= r[k] <= 1 for r in rows for k in ("pointwise", "cross_model", "cross_object"))
        # like with like: the same r and training rows for both procedures (the chapter's r, capped)
        assert {r["r"] for r in procs if r["pair"] == pair and r["step"] != STEPS[-1]} == {best["r"]}
        both = _rows(procs, pair, "our procedure") + _rows(procs, pair, "reference code")
        assert {r["n_train"] for r in both} == {24}
        # split s of our procedure is the chapter's split with seed s: split 0 is the heatmaps' own
        assert _rows(procs, pair, "our procedure")[0]["cross_model"] == pytest.approx(best["Cross-Model"])


def test_means_added_back_leave_cross_model_and_open_the_gap(rec, procs):
    for pair in rec["best"]:
        ref, nomean, ours = (_rows(procs, pair, s) for s in ("reference code", "reference, means not added back",
                                                              "our procedure"))
        for a, b in zip(ref, nomean):
            assert a["cross_model"] == pytest.approx(b["cross_model"], abs=1e-9)  # offsets cancel
            assert a["offset2_a"] > 0 and b["offset2_a"] == 0
            assert a["pointwise"] < b["pointwise"] and a["cross_object"] > b["cross_object"] + 0.2
        assert all(abs(r["cross_model"] - r["pointwise"]) < 0.1 for r in ours)


def test_formula_predictions_against_measurements(rec, procs):
    ref = [r for r in procs if r["step"] == "reference code"]
    err = max(abs(r[k] - r[f"predicted_{k}"]) for r in ref for k in ("pointwise", "cross_model", "cross_object"))
    assert err < 0.15  # 24 evaluation rows at smoke size; the offline run is within 0.03
    syn = [r for r in rec["synthetic"] if r["procedure"] == "reference code"]
    err_syn = max(abs(r[k] - r[f"predicted_{k}"]) for r in syn for k in ("pointwise", "cross_model", "cross_object"))
    assert err_syn < 0.05
    # the verdict states exactly these numbers
    assert f"within {err:.3f} on the offline pairs" in rec["procedure_verdict"]
    assert f"within {err_syn:.3f} on the synthetic pairs" in rec["procedure_verdict"]
    assert rec["procedure_verdict"].count("**Verdict:") == 1
    # synthetic: Pointwise falls and Cross-Object rises with the offset, Cross-Model does not move
    by = {}
    for r in syn:
        by.setdefault(r["offset2"], []).append(r)
    offsets = sorted(by)
    mean = lambda o, k: np.mean([r[k] for r in by[o]])  # noqa: E731
    assert mean(offsets[-1], "pointwise") < mean(offsets[0], "pointwise") - 0.2
    assert mean(offsets[-1], "cross_object") > mean(offsets[0], "cross_object") + 0.5
    assert mean(offsets[-1], "cross_model") == pytest.approx(mean(offsets[0], "cross_model"), abs=1e-9)


def test_paper_table_verdicts_are_computed_from_the_recorded_draws(rec):
    claims = rec["claims"]
    # the sample level only: the concept-level claims are the concept chapter's (C/*), not "not testable" here
    assert len(claims) == len(da.SAMPLE_CLAIMS) == 3
    for claim, paper in zip(claims, da.SAMPLE_CLAIMS):
        assert paper["kind"] in claim["claim"] and "sample level" in claim["claim"]
        assert claim["paper"] == f"{paper['cross_model']:.2f} vs {paper['pointwise']:.2f}"
        for step in ("reference code", "our procedure"):
            draws = claim[f"{step} draws"]
            assert np.array(draws).shape == (get_profile("smoke")["n_splits"], 2)
            assert claim[f"{step} verdict"] == da.claim_verdict(
                (paper["cross_model"], paper["pointwise"]), draws, tol=rec["claim_tol"])


# --------------------------------------------------------------------------- datasets × draws, the results table
@pytest.fixture(scope="module")
def smoke_draws():
    smoke = get_profile("smoke")
    return study_draws(smoke["datasets"], n_draws=smoke["n_draws"])


@pytest.fixture(scope="module")
def rows(rec):
    """This run's rows of the results table (the kernel wrote them into the same cache)."""
    study = rec["study"]
    df = results.load(chapter="ch_displacement", params_hash=study["params_hash"], run_id=study["run_id"],
                      expand_extra=True)
    assert len(df), "the chapter wrote no rows"
    return df


def test_every_dataset_and_draw_of_the_profile_is_scored(rec, rows, smoke_draws):
    expected = [{"dataset": d.dataset, "draw": d.draw, "seed": d.seed, "n": len(d.pairs), "repeatable": d.repeatable}
                for d in smoke_draws]
    assert rec["study"]["draws"] == expected
    assert len({d["dataset"] for d in expected}) == 2 and len(expected) == 4  # two datasets, two draws each
    best = rows[rows["quantity"] == ds.BEST]
    for d in expected:
        sub = best[(best["dataset"] == d["dataset"]) & (best["draw"] == d["draw"])]
        assert set(sub["seed"]) == {d["seed"]} and set(sub["n"]) == {d["n"]}
        got = sorted(zip(sub["model_x"] + " × " + sub["model_y"], sub["metric"]))
        assert got == sorted((p, m) for p in PAIRS for m in ds.METRICS.values()), d
        assert sub["score"].notna().all()
    assert set(rows["chapter"]) == {"ch_displacement"} and set(rows["preprocessing"]) == {"clip(stack, q=0.95)"}
    # every layer pair of every metric on every draw, and the controls
    for (dataset, draw), g in rows.groupby(["dataset", "draw"]):
        for pair in PAIRS:
            m = rec["matrices"][pair]
            cells = len(m["x_labels"]) * len(m["y_labels"])
            lp = g[(g["model_x"] + " × " + g["model_y"] == pair) & (g["quantity"] == "layer_pair")]
            assert lp["metric"].value_counts().to_dict() == {metric: cells for metric in ds.METRICS.values()}
            ctrl = g[(g["model_x"] + " × " + g["model_y"] == pair) & g["quantity"].str.startswith("control:")]
            assert len(ctrl) == 4 and (ctrl["score"].abs() < 0.25).all()


def test_heatmap_draw_rows_are_the_page_heatmaps_and_best_table(rec, rows):
    shown = rows[(rows["dataset"] == rec["heatmap_dataset"]) & (rows["draw"] == rec["heatmap_draw"])]
    assert rec["heatmap_dataset"] == "coco-mini" and rec["heatmap_draw"] == 0
    for pair in PAIRS:
        m = rec["matrices"][pair]
        g = shown[shown["model_x"] + " × " + shown["model_y"] == pair]
        for metric, key in (("displacement_cross_model", "cross_model"), ("displacement_pointwise", "pointwise"),
                            ("mutual_knn", "mutual_knn")):
            lp = g[(g["quantity"] == "layer_pair") & (g["metric"] == metric)]
            np.testing.assert_allclose(lp["score"].to_numpy(dtype=float).reshape(_arr(m[key]).shape), _arr(m[key]))
        b = g[g["quantity"] == ds.BEST].set_index("metric")
        row = rec["best"][pair]
        assert set(b["layer_x"]) == {row["layer x"]} and set(b["layer_y"]) == {row["layer y"]}
        for name, display in displacement_study.MEASURE_NAMES.items():
            assert b.loc[ds.METRICS[name], "score"] == pytest.approx(row[display])


def test_page_aggregate_equals_a_recomputation_from_the_table(executed, rec, rows):
    best = rows[rows["quantity"] == ds.BEST].assign(pair=lambda f: f["model_x"] + " × " + f["model_y"])
    plain = best.groupby(["dataset", "pair", "metric"])["score"].agg(
        mean="mean", std=lambda x: np.std(x.to_numpy(dtype=float), ddof=1), draws="count")
    summary = pd.DataFrame(rec["study"]["summary"])
    assert len(summary) == 2 * len(PAIRS)
    nb = nbformat.read(str(executed), as_version=4)
    page = "\n".join(o.get("data", {}).get("text/plain", "") for c in nb.cells if c.cell_type == "code"
                     and "ds.headline_table(" in c.source for o in c.get("outputs", []))
    for _, r in summary.iterrows():
        assert r["n_draws"] == 2 and not r["single_draw"]
        for name, metric in ds.METRICS.items():
            ref = plain.loc[(r["dataset"], r["pair"], metric)]
            assert ref["draws"] == 2
            assert r[f"{name}_mean"] == pytest.approx(ref["mean"], abs=1e-12)
            assert r[f"{name}_std"] == pytest.approx(ref["std"], abs=1e-12)
        # what the page's table shows is these numbers, rounded
        assert f"{r['cross_model_mean']:.3f} ± {r['cross_model_std']:.3f}" in page
        assert f"{r['pointwise_mean']:.3f} ± {r['pointwise_std']:.3f}" in page
        # the best layer pair of each draw is the maximum of that draw's Cross-Model heatmap
        sel = rows[(rows["dataset"] == r["dataset"]) & (rows["model_x"] == r["model_x"])
                   & (rows["model_y"] == r["model_y"]) & (rows["metric"] == "displacement_cross_model")]
        for draw, g in sel.groupby("draw"):
            peak = g.loc[g["quantity"] == "layer_pair", "score"].max()
            assert g.loc[g["quantity"] == ds.BEST, "score"].item() == pytest.approx(peak)
        assert r["chance"] == pytest.approx(5 / 47)


def test_every_best_layer_pair_has_its_held_out_values_beside_the_in_sample_ones(executed, rec):
    """The layer pair is chosen on one half of the images and read on the other; the page shows both readings."""
    assert set(rec["heldout_best"]) == set(PAIRS)
    for label, h in rec["heldout_best"].items():
        cm, pw = h["heldout"]["cross_model"], h["heldout"]["pointwise"]
        assert -1 <= cm <= 1 and -1 <= pw <= 1
        # the maximum on a half is at least the value read there at the other half's choice
        assert h["insample_half"] >= cm - 1e-12
        assert sum(map(sum, h["selected"])) == 2 * h["n_splits"]
        reps = np.array([np.nan if v is None else v for v in h["reps"]["cross_model"]], dtype=float)
        assert len(reps) == h["n_boot"] > 0 and np.isfinite(reps).any()
        ok = reps[np.isfinite(reps)]
        q_lo, q_hi = np.quantile(ok - np.median(ok), [0.025, 0.975])  # subsampling interval, recomputed
        s = np.sqrt(0.5)  # subsamples of half of each half
        assert h["interval"] == pytest.approx([cm - s * q_hi, cm - s * q_lo], abs=1e-9)
    cells = nbformat.read(str(executed), as_version=4).cells
    html = "".join(o["data"].get("text/html", "") for c in cells if c.cell_type == "code"
                   for o in c.get("outputs", []) if "data" in o)
    assert "Cross-Model, in-sample (all images)" in html and "Cross-Model, held out [95 % CI]" in html
