"""The k and N ablation page (notebooks/appg_k_n_ablation.py), executed with the smoke profile."""

import nbformat
import numpy as np
import pytest

from prh_lib.pages import report
from prh_lib import results


@pytest.fixture(scope="module")
def executed(executed_notebook):
    return executed_notebook("appg_k_n_ablation")


@pytest.fixture(scope="module")
def rec(executed):
    return report.read_record(executed, "appg_k_n_ablation")


def test_figures_present_and_page_clean(executed):
    nb = nbformat.read(str(executed), as_version=4)
    outs = [o for c in nb.cells for o in c.get("outputs", [])]
    assert sum("image/png" in o.get("data", {}) for o in outs) == 3  # k sweep, N at fixed k, N at fixed k/N
    assert not [o for o in outs if o.get("output_type") == "error" or o.get("name") == "stdout"]
    assert "## The paper and this build" in "".join(c.source for c in nb.cells if c.cell_type == "markdown")


def test_recorded_numbers(rec):
    assert rec["n"] == 48 and rec["k"] == 5
    for label, ks in rec["k_sweep"].items():
        i = ks["k"].index(5)
        full = rec["n_full"][label]
        # the N sweep at full N equals the plain score, for every seed (smoke: 2 seeds)
        assert len(full["raw fixed"]) == 2
        assert set(full["raw fixed"]) == {ks["raw fixed"][i]}
        assert set(full["raw max"]) == {ks["raw max"][i]}
        # chance correction as documented: (score - k/(N-1)) / (1 - k/(N-1))
        for k, c, raw, cor in zip(ks["k"], ks["chance"], ks["raw fixed"], ks["corrected fixed"]):
            assert c == pytest.approx(k / 47)
            assert cor == pytest.approx((raw - c) / (1 - c))
        assert ks["raw fixed"][-1] > ks["raw fixed"][0]
        assert all(r > c for r, c in zip(ks["raw fixed"], ks["chance"]))


def test_study_table_equals_a_recomputation_from_the_results_table(rec):
    df = results.load(chapter="appg_k_n_ablation", params_hash=rec["params_hash"], expand_extra=True)
    assert set(df["dataset"]) == {"coco-mini", "coco-mini, 5 captions"} and set(df["draw"]) == {0, 1}
    q = {"k": "k-sweep:fixed", "N at fixed k": "n-sweep:fixed-k:fixed", "N at fixed k/N": "n-sweep:fixed-ratio:fixed"}
    for row in rec["study"]:
        x, y = row["pair"].split(" × ")
        sel = (df["dataset"] == row["dataset"]) & (df["model_x"] == x) & (df["model_y"] == y) & (df["quantity"] == q[row["sweep"]])
        col = "k" if row["sweep"] == "k" else "n"
        per_draw = df[sel].groupby([col, "draw"])["score"].mean().groupby(col).mean()  # subsets, then draws
        assert row["raw_from"] == pytest.approx(per_draw.loc[row["from"]])
        assert row["raw_to"] == pytest.approx(per_draw.loc[row["to"]])
        assert row["spread"] == pytest.approx(per_draw.max() - per_draw.min())


def test_verdicts_follow_the_numbers(rec):
    rows = {r["id"]: r for r in rec["claims"]}
    t = [r for r in rec["study"] if r["dataset"] == "coco-mini"]
    fr = [r for r in t if r["sweep"] == "N at fixed k/N"]
    ri = {r["pair"]: r for r in rec["ratio_intervals"]}
    assert set(ri) == {r["pair"] for r in fr}
    for r in fr:  # the interval's estimate is the table's relative spread
        assert ri[r["pair"]]["relative"] == pytest.approx(r["spread"] / r["mean"])
        assert ri[r["pair"]]["low"] <= ri[r["pair"]]["relative"] <= ri[r["pair"]]["high"]
    if any(r["low"] > 0.25 for r in ri.values()):  # symmetric: a whole interval above the bound
        expected = "differs"
    elif all(r["high"] < 0.25 for r in ri.values()):
        expected = "reproduces in kind"
    else:
        expected = "inconclusive"
    assert rows["G/fixed-ratio"]["verdict"] == expected
    assert "bound over the image subsets" in rows["G/fixed-ratio"]["rule"]
    # the rise is read over the paper's k range only; the order on chance-corrected scores, over three pair kinds
    assert "of the 3 pair kinds" in rows["G/k-order"]["this build"]
    assert "paired differences [95 % CI over images]" in rows["G/k-order"]["this build"]
    # inconclusive only when a paired interval over images of the regimes' order holds 0 (said in the note)
    verdict = rows["G/k-order"]["verdict"]
    assert verdict in ("reproduces in kind", "differs", "inconclusive")
    if verdict == "inconclusive":
        assert "over images, cannot decide" in rows["G/k-order"]["note"]
    assert "interval over images" in rows["G/k-order"]["rule"]
    iv = rec["intervals"]  # every pair's chance-corrected score at every k of the first draw, with its interval
    assert iv and {r["pair"] for r in iv} == {r["pair"] for r in t}
    assert all(r["chance"] == pytest.approx(r["k"] / (r["n"] - 1)) for r in iv)
    # half-sampling: an interval wherever k fits half the images, none beyond (k > N/2 - 2)
    assert all(r["low"] <= r["corrected"] <= r["high"] for r in iv if r["k"] <= round(r["n"] / 2) - 2)
    assert all(r["low"] is None or not np.isfinite(r["low"]) for r in iv if r["k"] > round(r["n"] / 2) - 2)
    assert "(s − c)/(1 − c)" in rows["G/k-order"]["rule"]
    assert np.isfinite([r["raw_from"] for r in t]).all()
