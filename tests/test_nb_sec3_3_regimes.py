"""The Section 3.3 notebook (four regimes), executed on small parameters: what it reports must match the library."""

import nbformat
import numpy as np
import pytest

from prh_lib import analysis, data, extract, report
from prh_lib.metrics import mutual_knn_layerwise

UNIMODAL = ["dinov2-small × smollm2-135m", "dinov2-small × minilm-l6", "efficientnet-lite0 × smollm2-135m"]


@pytest.fixture(scope="module")
def nb(executed_notebook):
    return executed_notebook("sec3_3_regimes")  # the same run as the book test's


@pytest.fixture(scope="module")
def rec(nb):
    return report.read_record(nb, "sec3_3_regimes")


def test_reports_every_regime_of_the_offline_setting(rec):
    assert rec["n_pairs"] == 48 and rec["k"] == 5
    assert rec["chance"] == pytest.approx(5 / 47)
    seeds = rec["random_init_seeds"]
    assert len(seeds) >= 1 and rec["aligned_models"] == []
    regimes_of = {label: row["regime"] for label, row in rec["table"].items()}
    assert sorted(label for label, r in regimes_of.items() if r == "unimodal") == sorted(UNIMODAL)
    assert sorted(label for label, r in regimes_of.items() if r == "random-init") == sorted(
        f"{p} (seed {s})" for p in UNIMODAL for s in seeds)
    assert sorted(label for label, r in regimes_of.items() if r == "same-modality") == sorted(
        ["dinov2-small × efficientnet-lite0", "smollm2-135m × minilm-l6"])
    assert rec["summary"]["aligned"]["n"] == 0


def test_scores_are_valid_and_consistent(rec):
    for label, row in rec["table"].items():
        assert 0 <= row["final"] <= row["max"] <= 1, label
        assert 0 <= row["max low"] <= row["max high"] <= 1, label
        assert 0 <= row["calibrated low"] <= row["calibrated high"] <= 1 and 0 <= row["calibrated"] <= 1, label
        assert 0 < row["p"] <= 1 and row["projection"] is None
    for key, srow in rec["summary"].items():
        rows = [r for r in rec["table"].values() if r["regime"] == key]
        assert srow["n"] == len(rows)
        if rows:
            assert srow["max (mean)"] == pytest.approx(np.mean([r["max"] for r in rows]))


def test_regimes_are_ordered_as_the_paper_reports(rec):
    s = rec["summary"]
    assert s["random-init"]["max (mean)"] < s["unimodal"]["max (mean)"] < s["same-modality"]["max (mean)"]
    # every random-init pair scores below the same pair trained, and its maximum stays near chance
    for label, row in rec["table"].items():
        if row["regime"] == "random-init":
            trained = rec["table"][label.rsplit(" (seed", 1)[0]]
            assert row["max"] < trained["max"]
            assert row["max"] < 2 * rec["chance"]
    assert all(rec["table"][p]["p"] <= 0.05 for p in UNIMODAL)


@pytest.mark.filterwarnings("ignore:.*degenerate")  # the ViT embedding-output CLS token (see Section 3.1)
def test_random_init_numbers_equal_a_recomputation_from_the_feature_cache(rec):
    seed = rec["random_init_seeds"][0]
    pairs = data.sample_pairs(data.load_dataset(), n=48, seed=0)
    x, y = (analysis.clip_features(extract.get_features(f"{m}@random-init:{seed}", pairs, batch_size=16,
                                                        progress=False), q=0.95)
            for m in ("dinov2-small", "minilm-l6"))
    assert x.meta["revision"].startswith(f"random-init:seed={seed}:")
    expected = np.nanmax(mutual_knn_layerwise(x.values, y.values, k=5))
    assert rec["table"][f"dinov2-small × minilm-l6 (seed {seed})"]["max"] == pytest.approx(expected, abs=1e-12)


def test_the_page_shows_its_figure_and_marks_the_missing_regime(nb):
    cells = nbformat.read(str(nb), as_version=4).cells
    outputs = [o for c in cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 1
    text = "".join(o["data"].get("text/markdown", "") for o in outputs if "data" in o)
    assert "needs the paper profile" in text and "× chance" in text
