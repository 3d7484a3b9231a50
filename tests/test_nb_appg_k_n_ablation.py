"""The k and N ablation page (notebooks/appg_k_n_ablation.py), executed with the smoke profile."""

import nbformat
import pytest

from prh_lib import report


@pytest.fixture(scope="module")
def executed(executed_notebook):
    return executed_notebook("appg_k_n_ablation")


def test_figures_present(executed):
    nb = nbformat.read(str(executed), as_version=4)
    n = sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))
    assert n == 3  # k sweep, N at fixed k, N at fixed k/N


def test_recorded_numbers(executed):
    rec = report.read_record(executed, "appg_k_n_ablation")
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
        # raw scores rise with k (the chance floor rises), and stay above chance
        assert ks["raw fixed"][-1] > ks["raw fixed"][0]
        assert all(r > c for r, c in zip(ks["raw fixed"], ks["chance"]))
        # at fixed k, the smallest subsets have the highest raw score (chance k/(N-1) is highest there)
        by_n = {int(n): v for n, v in rec["n_fixed_k"][label].items()}
        assert by_n[min(by_n)] > by_n[max(by_n)]
    rows = {(r["pair"], r["sweep"]) for r in rec["summary"]}
    assert len(rows) == 3 * len(rec["k_sweep"])
