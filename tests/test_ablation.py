"""k and N sweeps (prh_lib.pages.appg_k_n_ablation): full-N equals the plain score, chance correction, validation."""

import numpy as np
import pandas as pd
import pytest
import torch

from prh_lib.pages import appg_k_n_ablation as ablation
from prh_lib.analysis.ablation import study as ablation_study
from prh_lib.extract import FeatureMismatchError, LayerFeatures
from prh_lib.metrics import mutual_knn, mutual_knn_layerwise


def _features(X3, name, ids=None):
    L, N, _ = X3.shape
    return LayerFeatures(torch.as_tensor(X3, dtype=torch.float32), tuple(f"layer.{i}" for i in range(L)),
                         ids or tuple(f"s{i}" for i in range(N)), {"model": name})


def _models(seed, n=80, noise=(0.3, 1.0, 3.0)):
    """x: 2 layers, y: 3 layers; y's layers share x's latent signal with decreasing fidelity."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 5))
    xs = np.stack([z @ rng.normal(size=(5, 8)) + s * rng.normal(size=(n, 8)) for s in (0.5, 2.0)])
    ys = np.stack([z @ rng.normal(size=(5, 8)) + s * rng.normal(size=(n, 8)) for s in noise])
    return _features(xs, "vis"), _features(ys, "lang")


def test_chance_corrected():
    assert ablation_study.chance_corrected(10 / 99, 100, 10) == pytest.approx(0.0, abs=1e-15)
    assert ablation_study.chance_corrected(1.0, 100, 10) == pytest.approx(1.0)
    np.testing.assert_allclose(ablation_study.chance_corrected(np.array([0.0, 0.5]), 11, 5), [-1.0, 0.0])
    with pytest.raises(ValueError, match="undefined"):
        ablation_study.chance_corrected(1.0, 11, 10)
    with pytest.raises(ValueError):
        ablation_study.chance_corrected(0.5, 10, 12)


def test_grids():
    assert ablation_study.k_grid(239) == [1, 2, 5, 10, 20, 30, 50, 75, 100, 150, 200]
    assert ablation_study.k_grid(48) == [1, 2, 5, 10, 20, 30]
    with pytest.raises(ValueError, match=r"\[1, 46\]"):
        ablation_study.k_grid(48, [5, 47])
    g = ablation_study.n_grid(239, k=10)
    assert g[-1] == 239 and g == sorted(set(g)) and min(g) >= 12
    with pytest.raises(ValueError, match="out of range"):
        ablation_study.n_grid(239, [11, 100], k=10)
    with pytest.raises(ValueError, match="out of range"):
        ablation_study.n_grid(239, [240], k=10)


def test_subsample_rows():
    a = ablation_study.subsample_rows(50, 20, seed=3)
    np.testing.assert_array_equal(a, ablation_study.subsample_rows(50, 20, seed=3))
    assert len(np.unique(a)) == 20 and np.all(np.diff(a) > 0) and a.max() < 50
    assert not np.array_equal(a, ablation_study.subsample_rows(50, 20, seed=4))
    np.testing.assert_array_equal(ablation_study.subsample_rows(50, 50, seed=9), np.arange(50))
    with pytest.raises(ValueError):
        ablation_study.subsample_rows(50, 51, seed=0)


@pytest.mark.parametrize("seed", [0, 1])
def test_n_sweep_at_full_n_equals_the_plain_score(seed):
    x, y = _models(seed)
    df = ablation_study.n_sweep(x, y, ns=[30, 80], k=5, n_seeds=3, seed=seed)
    plain = mutual_knn_layerwise(x.values, y.values, k=5)
    fixed = tuple(df.attrs["layer_pair"]["index"])
    assert fixed == np.unravel_index(np.nanargmax(plain), plain.shape)
    full = df[df["n"] == 80]
    assert len(full) == 3
    assert (full["raw fixed"] == plain[fixed]).all()
    assert (full["raw max"] == np.nanmax(plain)).all()
    assert (full["raw final"] == plain[-1, -1]).all()
    sub = df[df["n"] == 30]
    assert sub["raw fixed"].nunique() > 1  # different subsets, different scores
    np.testing.assert_allclose(sub["corrected fixed"], (sub["raw fixed"] - 5 / 29) / (1 - 5 / 29))


def test_subsample_scores_are_those_of_the_subset():
    x, y = _models(2)
    df = ablation_study.n_sweep(x, y, ns=[40], k=5, n_seeds=2, seed=7, layer_pair=(0, 2))
    for s, row in zip((7, 8), df.itertuples()):
        idx = ablation_study.subsample_rows(80, 40, seed=s)
        assert row.seed == s
        assert df.loc[row.Index, "raw fixed"] == mutual_knn(x.values[0, idx], y.values[2, idx], k=5)


def test_k_sweep_matches_mutual_knn_and_fixed_k_over_n_scales_k():
    x, y = _models(3)
    df = ablation_study.k_sweep(x, y, ks=[1, 5, 20], reference_k=5)
    i, j = df.attrs["layer_pair"]["index"]
    for row in df.itertuples():
        assert df.loc[row.Index, "raw fixed"] == mutual_knn(x.values[i], y.values[j], k=row.k)
        assert df.loc[row.Index, "chance"] == pytest.approx(row.k / 79)
    r = ablation_study.n_sweep(x, y, ns=[20, 40, 80], k=8, k_over_n=0.1, n_seeds=1)
    assert r["k"].tolist() == [2, 4, 8]
    assert r.attrs["regime"] == "fixed k/N"


def test_unrelated_pairing_scores_chance_after_correction():
    rng = np.random.default_rng(11)
    x = _features(rng.normal(size=(1, 200, 16)), "a")
    y = _features(rng.normal(size=(1, 200, 16)), "b")
    df = ablation_study.n_sweep(x, y, ns=[100, 200], k=10, n_seeds=4)
    assert abs(df["corrected fixed"].mean()) < 0.02
    assert abs(df["raw fixed"].mean() - df["chance"].mean()) < 0.02


def test_calibrated_columns_and_summaries():
    x, y = _models(4)
    res = ablation_study.run_ablation({"vis": x, "lang": y}, [("vis", "lang")], ks=[2, 5], ns=[40, 80], k=5, n_seeds=2,
                                      n_permutations=19)
    assert set(res) == {"k", "n fixed k", "n fixed k/N"}
    ksw = res["k"]["vis × lang"]
    assert {"calibrated fixed", "p fixed", "null mean fixed"} <= set(ksw.columns)
    assert ((ksw["calibrated fixed"] >= 0) & (ksw["calibrated fixed"] <= 1)).all()
    summ = ablation_study.summarize(res["n fixed k"]["vis × lang"])
    assert summ.loc[80, ("raw fixed", "std")] == 0  # every full-size subsample is all rows
    assert summ.loc[40, ("seeds", "")] == 2
    table = ablation.summary_table(res)
    assert len(table) == 3
    assert table.loc[("vis × lang", "n fixed k"), "raw @ to"] == ksw.loc[ksw["k"] == 5, "raw fixed"].item()
    with pytest.raises(KeyError, match="no features"):
        ablation_study.run_ablation({"vis": x}, [("vis", "lang")])


def test_bad_inputs():
    x, y = _models(5)
    with pytest.raises(ValueError, match="n_seeds"):
        ablation_study.n_sweep(x, y, n_seeds=0)
    with pytest.raises(ValueError, match="k_over_n"):
        ablation_study.n_sweep(x, y, k_over_n=1.5)
    with pytest.raises(ValueError, match="layer_pair"):
        ablation_study.k_sweep(x, y, layer_pair=(2, 0))
    shuffled = LayerFeatures(y.values, y.layer_labels, tuple(reversed(y.sample_ids)), {"model": "lang"})
    with pytest.raises(FeatureMismatchError):
        ablation_study.k_sweep(x, shuffled)


def _k_order_inputs(flip_at, regimes=("cross-modal", "vision-vision", "language-language"), raw_drop_at=None):
    """Hand-made sweep aggregates on N = 239: regime means ordered by their position, reversed at k = flip_at;
    the first pair's raw score drops to 0 at k = raw_drop_at."""
    import pandas as pd

    rows = []
    for k in (1, 5, 10, 200):
        for i, regime in enumerate(regimes):
            c = k / 238
            corrected = (0.1 * (i + 1)) if k != flip_at else (0.1 * (len(regimes) - i))
            raw = 0.0 if (k == raw_drop_at and i == 0) else c + corrected * (1 - c)
            rows.append({"dataset": "d", "quantity": "k-sweep:fixed", "k": k, "n": 239, "regime": regime,
                         "model_x": f"x{i}", "model_y": f"y{i}", "corrected_mean": corrected, "score_mean": raw})
    table = pd.DataFrame({"dataset": "d", "sweep": ["k"] * len(regimes), "raw_from": 0.1, "raw_to": 0.5,
                          "spread": 0.0, "mean": 0.3, "from": 1, "to": 200})
    return pd.DataFrame(rows), table


@pytest.mark.parametrize("flip_at, regimes, verdict", [
    (None, ("cross-modal", "vision-vision", "language-language"), "reproduces in kind"),
    (200, ("cross-modal", "vision-vision", "language-language"), "reproduces in kind"),  # beyond the paper's k/N
    (10, ("cross-modal", "vision-vision", "language-language"), "differs"),
    (None, ("cross-modal", "vision-vision"), "inconclusive"),  # two regimes: one comparison
])
def test_k_order_is_read_on_chance_corrected_scores_within_the_papers_k_range(flip_at, regimes, verdict):
    from prh_lib.pages import appg_k_n_ablation as ablation

    agg, table = _k_order_inputs(flip_at, regimes)
    (row,) = [r for r in ablation.findings(agg, table, dataset="d") if r["id"] == "G/k-order"]
    assert row["verdict"] == verdict, row
    assert "k = 1-10" in row["this build"]  # 200 / 238 is beyond 100 / 1023: not read
    assert "(s − c)/(1 − c)" in row["rule"]


@pytest.mark.parametrize("drop_at, verdict", [(200, "reproduces in kind"), (10, "differs")])
def test_k_order_reads_the_raw_rise_over_the_papers_k_range_only(drop_at, verdict):
    # raw mutual k-NN tends to 1 as k nears N for any features, so a rise up to k = 200 of 238 cannot fail;
    # the rise is read up to the paper's largest k/(N - 1) (k = 10 here)
    from prh_lib.pages import appg_k_n_ablation as ablation

    agg, table = _k_order_inputs(None, raw_drop_at=drop_at)
    (row,) = [r for r in ablation.findings(agg, table, dataset="d") if r["id"] == "G/k-order"]
    assert row["verdict"] == verdict, row
    assert ("for 3 of 3 pairs" if verdict != "differs" else "for 2 of 3 pairs") in row["this build"]
    assert "pair kinds" in row["this build"] and "same-modality regime split" in row["this build"]


def _intervals(spread, regimes=("cross-modal", "vision-vision", "language-language"), n_boot=200, seed=0):
    """Hand-made k-sweep intervals: one pair per regime, means 0.1 (i + 1), replicates with a shared image noise
    (paired) and a per-regime noise of sd ``spread``."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for k in (1, 5, 10, 200):
        common = 0.05 * rng.normal(size=n_boot)  # one resampled image set moves every pair alike
        for i, regime in enumerate(regimes):
            est = 0.1 * (i + 1)
            reps = est + common + spread * rng.normal(size=n_boot)
            rows.append({"pair": f"p{i}", "regime": regime, "k": k, "n": 239, "chance": k / 238, "raw": np.nan,
                         "corrected": est, "low": np.nan, "high": np.nan, "reps": reps})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("spread, verdict", [(0.005, "reproduces in kind"), (0.2, "inconclusive")])
def test_k_order_verdict_uses_the_paired_intervals_over_images(spread, verdict):
    from prh_lib.pages import appg_k_n_ablation as ablation
    from prh_lib.analysis.ablation.intervals import regime_order_tests

    agg, table = _k_order_inputs(None)
    iv = _intervals(spread)
    tests, order = regime_order_tests(iv[iv["k"] <= 10])
    assert order == ("language-language", "vision-vision", "cross-modal") and len(tests) == 3 * 2
    # paired: the shared image noise cancels, so a small per-regime noise resolves every step of the order
    assert all(t.estimate == pytest.approx(0.1) for t in tests)
    (row,) = [r for r in ablation.findings(agg, table, dataset="d", intervals=iv) if r["id"] == "G/k-order"]
    assert row["verdict"] == verdict, row
    if verdict == "inconclusive":
        assert "over images" in row["note"]
        assert "k = 200" not in row["note"]  # beyond the paper's k/N: not tested
    # the means alone (no intervals) would pass: the intervals are what makes it inconclusive
    (bare,) = [r for r in ablation.findings(agg, table, dataset="d") if r["id"] == "G/k-order"]
    assert bare["verdict"] == "reproduces in kind"


def test_k_sweep_intervals_are_paired_over_pairs_and_ks():
    import torch

    from prh_lib.analysis.ablation.intervals import k_sweep_intervals
    from prh_lib.extract.features import LayerFeatures

    rng = np.random.default_rng(0)
    Z = rng.normal(size=(60, 3))
    mk = lambda noise, name: LayerFeatures(  # noqa: E731
        torch.as_tensor(np.stack([Z @ rng.normal(size=(3, 6)) + noise * rng.normal(size=(60, 6)) for _ in range(2)]),
                        dtype=torch.float32), ["embed", "layer.1"], list(range(60)), name)
    feats = {"a": mk(0.3, "a"), "b": mk(0.3, "b"), "c": mk(3.0, "c")}
    iv = k_sweep_intervals(feats, {"a × b": (1, 1), "a × c": (1, 0)}, {"a × b": "vision-vision", "a × c": "x"},
                           ks=[2, 5], n_boot=30, seed=1)
    assert len(iv) == 4 and (iv["low"] <= iv["high"]).all()
    ab = iv[(iv["pair"] == "a × b") & (iv["k"] == 5)].iloc[0]
    ac = iv[(iv["pair"] == "a × c") & (iv["k"] == 5)].iloc[0]
    assert ab["corrected"] > ac["corrected"] and ab["low"] > 0.1
    again = k_sweep_intervals(feats, {"a × b": (1, 1)}, {}, ks=[5], n_boot=30, seed=1)
    np.testing.assert_array_equal(again.iloc[0]["reps"], ab["reps"])  # the same seed: the same resamples



def _ratio_rows(means_by_n, noise=0.0, units=6, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for n, m in means_by_n.items():
        for u in range(units):
            rows.append({"dataset": "d", "model_x": "a", "model_y": "b", "quantity": "n-sweep:fixed-ratio:fixed",
                         "n": n, "draw": u % 2, "subset_seed": u, "score": m + noise * rng.standard_normal()})
    return pd.DataFrame(rows)


def test_fixed_ratio_intervals_estimate_and_interval():
    from prh_lib.analysis.ablation import intervals as AI

    exact = AI.fixed_ratio_intervals(_ratio_rows({50: 0.30, 100: 0.33, 200: 0.36}), dataset="d")
    (r,) = exact.to_dict(orient="records")
    assert r["pair"] == "a × b" and r["n_sizes"] == 3 and r["units_min"] == 6
    assert r["relative"] == pytest.approx(0.06 / 0.33) and r["low"] == pytest.approx(r["high"])  # no noise
    raw = _ratio_rows({50: 0.30, 100: 0.33, 200: 0.36}, noise=0.03)
    (noisy,) = AI.fixed_ratio_intervals(raw, dataset="d").to_dict(orient="records")
    assert noisy["low"] < noisy["relative"] < noisy["high"]
    # recomputed: Bonferroni-simultaneous normal intervals of the three means (z for 0.05 / (2 * 3))
    from scipy.stats import norm

    g = raw.groupby("n")["score"]
    m, se = g.mean().to_numpy(), (g.std(ddof=1) / np.sqrt(g.count())).to_numpy()
    z = norm.ppf(1 - 0.05 / 6)
    assert noisy["high"] == pytest.approx(((m + z * se).max() - (m - z * se).min()) / m.mean())
    assert noisy["low"] == pytest.approx(max(0, (m - z * se).max() - (m + z * se).min()) / m.mean())
    with pytest.raises(ValueError, match="ci"):
        AI.fixed_ratio_intervals(_ratio_rows({50: 0.3, 100: 0.3}), dataset="d", ci=1.5)
    with pytest.raises(ValueError, match="lack columns"):
        AI.fixed_ratio_intervals(_ratio_rows({50: 0.3, 100: 0.3}).drop(columns="draw"), dataset="d")


def test_fixed_ratio_verdict_reads_the_interval_over_image_subsets():
    """A spread below 25 % whose interval reaches 25 % cannot decide; one clearly below holds; above differs."""
    from prh_lib.analysis.ablation import intervals as AI

    def verdict(means, noise):
        raw = _ratio_rows(means, noise=noise)
        iv = AI.fixed_ratio_intervals(raw, dataset="d")
        agg = pd.DataFrame(columns=["dataset", "quantity"])
        table = pd.DataFrame({"dataset": ["d"], "sweep": ["N at fixed k/N"], "spread": iv["spread"],
                              "mean": iv["mean"], "from": [50], "to": [200]})
        (row,) = [r for r in ablation.findings(agg, table, dataset="d", ratio_intervals=iv) if r["id"] == "G/fixed-ratio"]
        return row

    assert verdict({50: 0.30, 100: 0.31, 200: 0.32}, 0.001)["verdict"] == "reproduces in kind"
    wide = verdict({50: 0.28, 100: 0.31, 200: 0.34}, 0.08)
    assert wide["verdict"] == "inconclusive" and "conservative bound over image subsets" in wide["note"]
    # a spread is >= 0: what the interval could detect is read within [0, inf), never as a difference beyond 0.25
    assert ("detects a difference from 0.25 of" in wide["note"]
            or "no difference from 0.25 within the range of the statistic (0 or more)" in wide["note"])
    wider = verdict({50: 0.30, 100: 0.31, 200: 0.32}, 0.05)
    assert wider["verdict"] == "inconclusive", wider["note"]
    assert "no difference from 0.25 within the range of the statistic (0 or more)" in wider["note"], wider["note"]
    assert verdict({50: 0.20, 100: 0.30, 200: 0.40}, 0.001)["verdict"] == "differs"


def test_k_sweep_matrices_equal_mutual_knn_layerwise_at_every_k_bit_for_bit():
    """The k sweep forms each stack's similarity once and selects every k from it: the same bits as scoring
    each k from the features, with ties (integer-valued features) and a constant layer."""
    import torch

    from prh_lib.analysis.ablation.study import _matrices_at_ks
    from prh_lib.metrics import mutual_knn_layerwise

    rng = np.random.default_rng(3)
    X = rng.integers(-2, 3, size=(3, 60, 4)).astype(np.float32)
    X[0] = 1.0  # degenerate
    Y = rng.normal(size=(4, 60, 5)).astype(np.float32)
    Y[2] = np.round(Y[2])
    ks = [1, 2, 5, 10, 30]
    got = _matrices_at_ks(torch.from_numpy(X), torch.from_numpy(Y), ks, None)
    for k in ks:
        with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
            want = mutual_knn_layerwise(X, Y, k=k)
        np.testing.assert_array_equal(got[k], want)


def test_subset_matrices_equal_mutual_knn_layerwise_of_each_subset():
    """The N sweep forms each stack's similarity once on all samples and reads every subset's neighbourhoods off
    it: the same scores as mutual_knn_layerwise of the subset, with ties (integer-valued features), a constant layer,
    fixed k and k growing with the subset, and all rows."""
    import torch

    from prh_lib.analysis.ablation.study import _subset_matrices, subsample_rows
    from prh_lib.metrics import mutual_knn_layerwise

    rng = np.random.default_rng(4)
    X = rng.integers(-2, 3, size=(3, 90, 4)).astype(np.float32)
    X[0] = 1.0  # degenerate
    Y = rng.normal(size=(4, 90, 6)).astype(np.float32)
    Y[1] = np.round(Y[1])
    subsets = [(subsample_rows(90, n, seed=s), k) for n, k in ((12, 2), (30, 5), (30, 3), (60, 10), (90, 10))
               for s in (0, 1)]
    got = _subset_matrices(torch.from_numpy(X), torch.from_numpy(Y), subsets, None)
    for (rows, k), m in zip(subsets, got):
        with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
            want = mutual_knn_layerwise(X[:, rows], Y[:, rows], k=k)
        np.testing.assert_array_equal(m, want)


def test_the_default_fixed_ratio_sizes_realise_the_ratio():
    from prh_lib.analysis.ablation.study import ratio_grid

    # 1,000 pairs at k/N = 0.01: 150 would run k = round(1.5) = 2, k/N 0.013; it becomes 200 (k = 2), once
    assert ratio_grid(ablation_study.n_grid(1000, k=1), 0.01, 1000) == [100, 200, 300, 400, 500, 600, 800, 1000]
    for n_total in (239, 1000, 5000):
        ratio = 10 / n_total
        for n in ratio_grid(ablation_study.n_grid(n_total, k=1), ratio, n_total):
            k = max(1, round(ratio * n))
            assert abs(k / n - ratio) <= 0.5 / n  # the nearest integer size: within half a pair of exact
    # the sweep itself runs at those sizes with the default grid, and keeps explicit sizes as given
    rng = np.random.default_rng(0)
    x, y = _features(rng.normal(size=(2, 200, 6)), "x"), _features(rng.normal(size=(2, 200, 6)), "y")
    df = ablation_study.n_sweep(x, y, k=10, k_over_n=0.05, n_seeds=1)
    assert sorted(set(df["n"])) == [20, 40, 60, 80, 100, 120, 160, 200]  # 30 (k = 2 at 1.5) moved to 40
    assert np.allclose(df["k"] / df["n"], 0.05)
    assert sorted(set(ablation_study.n_sweep(x, y, ns=[30, 200], k=10, k_over_n=0.05, n_seeds=1)["n"])) == [30, 200]
