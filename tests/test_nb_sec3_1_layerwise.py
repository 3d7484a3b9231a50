"""The Section 3.1 notebook, executed on small parameters: what it reports must match the library."""

import math

import numpy as np
import pytest

from prh_lib import analysis, data, extract, report
from prh_lib.metrics import mutual_knn_layerwise

LAYERS = {"dinov2-small": 13, "smollm2-135m": 31, "minilm-l6": 7, "efficientnet-lite0": 9}


@pytest.fixture(scope="module")
def nb(executed_notebook):
    return executed_notebook("sec3_1_layerwise")


@pytest.fixture(scope="module")
def rec(nb):
    return report.read_record(nb, "sec3_1_layerwise")


def test_reports_the_requested_setting(rec):
    assert rec["n_pairs"] == 48 and rec["k"] == 5
    assert rec["chance"] == pytest.approx(5 / 47)
    assert set(rec["matrices"]) == {"dinov2-small × smollm2-135m", "dinov2-small × minilm-l6",
                                    "efficientnet-lite0 × smollm2-135m", "dinov2-small × efficientnet-lite0",
                                    "smollm2-135m × minilm-l6"}


def test_heatmaps_cover_every_layer_pair_with_valid_scores(rec):
    for label, m in rec["matrices"].items():
        x, y = label.split(" × ")
        scores = np.array(m["scores"], dtype=float)  # None (NaN) -> nan
        assert scores.shape == (LAYERS[x], LAYERS[y]) == (len(m["x_labels"]), len(m["y_labels"]))
        assert m["x_labels"][0] in ("embed", "stem") and m["y_labels"][0] in ("embed", "stem")
        finite = np.isfinite(scores)
        assert ((scores[finite] >= 0) & (scores[finite] <= 1)).all()
        # exactly a ViT's embedding-output CLS token (constant over images) is undefined
        expected_nan = np.zeros_like(finite)
        expected_nan[0, :] |= x == "dinov2-small"
        expected_nan[:, 0] |= y == "dinov2-small"
        np.testing.assert_array_equal(~finite, expected_nan)


def test_summary_is_consistent_with_the_matrices(rec):
    for label, row in rec["summary"].items():
        scores = np.array(rec["matrices"][label]["scores"], dtype=float)
        assert row["peak"] == pytest.approx(np.nanmax(scores))
        assert row["final layers"] == pytest.approx(scores[-1, -1])
        assert row["peak"] >= row["final layers"]
        lo, hi = (float(v) for v in row["peak 95% CI"].strip("[]").split(","))
        assert lo <= hi and 0 <= lo and hi <= 1
        assert 0 <= row["calibrated (max)"] <= 1 and 0 < row["p (max)"] <= 1
        assert row["chance"] == pytest.approx(rec["chance"])
        # the shuffled-pairs control sits near chance, far below the peak
        assert row["shuffled (mean)"] == pytest.approx(rec["chance"], abs=0.05)


def test_same_modality_pairs_are_significant_and_above_control(rec):
    for label in ("dinov2-small × efficientnet-lite0", "smollm2-135m × minilm-l6"):
        row = rec["summary"][label]
        assert row["peak"] > 2 * row["shuffled (max)"]
        assert row["p (max)"] <= 0.05


def test_numbers_equal_a_recomputation_from_the_feature_cache(rec):
    pairs = data.sample_pairs(data.load_dataset(), n=48, seed=0)
    x = analysis.clip_features(extract.get_features("dinov2-small", pairs, batch_size=16, progress=False), q=0.95)
    y = analysis.clip_features(extract.get_features("minilm-l6", pairs, batch_size=16, progress=False), q=0.95)
    expected = mutual_knn_layerwise(x.values, y.values, k=5)
    got = np.array(rec["matrices"]["dinov2-small × minilm-l6"]["scores"], dtype=float)
    np.testing.assert_allclose(got, expected, atol=1e-12, equal_nan=True)


def test_the_page_shows_its_heatmaps(nb):
    import nbformat

    cells = nbformat.read(str(nb), as_version=4).cells
    images = [o for c in cells if c.cell_type == "code" for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 1
    errors = [o for c in cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    text = "".join(o["data"].get("text/markdown", "") for c in cells if c.cell_type == "code"
                   for o in c.get("outputs", []) if "data" in o)
    assert "× chance" in text and not math.isnan(len(text))
