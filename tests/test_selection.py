"""Selection-free layer-pair estimates: cross-fitted peaks, half-sampling intervals over images, paired margins."""

import math

import numpy as np
import pytest
import torch

from prh_lib.metrics import mutual_knn_layerwise
from prh_lib.stats.intervals import bootstrap_interval, detectable_difference, paired_interval, percentile_interval
from prh_lib.stats.selection import crossfit_peak, half_k, resampled_halves, split_halves


def _planted(rng, n=96, L=5, d=12, strength=None):
    """Stacks X (L, n, d) and Y (L, n, d) sharing a latent signal whose strength grows with depth."""
    Z = rng.normal(size=(n, 6))
    strength = np.linspace(0, 2, L) if strength is None else strength
    X = np.stack([s * Z @ rng.normal(size=(6, d)) + rng.normal(size=(n, d)) for s in strength]).astype(np.float32)
    Y = np.stack([s * Z @ rng.normal(size=(6, d)) + rng.normal(size=(n, d)) for s in strength]).astype(np.float32)
    return X, Y


def test_half_k_keeps_the_chance_level():
    assert half_k(10, 239, 120) == 5 and half_k(10, 1000, 500) == 5 and half_k(10, 1024, 512) == 5
    for n in (60, 239, 1000):
        kh = half_k(10, n, n - n // 2)
        assert abs(kh / (n - n // 2 - 1) - 10 / (n - 1)) < 0.5 / (n - n // 2 - 1) + 1e-12


def test_splits_are_balanced_disjoint_and_resamples_stay_in_their_half():
    splits = split_halves(21, n_splits=4, seed=3)
    assert all((a == c).all() and (b == e).all() for (a, b), (c, e) in zip(splits, split_halves(21, n_splits=4, seed=3)))
    for A, B in splits:
        assert len(A) == 10 and len(B) == 11 and not set(A) & set(B) and set(A) | set(B) == set(range(21))
    reps = resampled_halves(splits, n_boot=9, seed=3)  # half-sampling: the procedure on 10 of the 21 images
    assert len(reps) == 9
    for b, (i, pairs) in enumerate(reps):
        assert i == b and len(pairs) == 3
        S = set(pairs[0][0]) | set(pairs[0][1])
        assert len(S) == 10  # drawn without replacement
        for A, B in pairs:
            assert not set(A) & set(B) and set(A) | set(B) == S and len(A) == 5 and len(B) == 5
            assert (np.diff(A) > 0).all() and (np.diff(B) > 0).all()
    assert len({tuple(sorted(set(p[0][0]) | set(p[0][1]))) for _, p in reps}) > 1  # replicates differ
    again = resampled_halves(splits, n_boot=9, seed=3)
    assert all((a == c).all() for (_, p), (_, q) in zip(reps, again) for (a, _), (c, _) in zip(p, q))
    boot = resampled_halves(splits, n_boot=9, seed=3, resampling="bootstrap")  # the old scheme, for comparison
    for b, (i, [(A, B)]) in enumerate(boot):
        s = b % 4
        assert set(A) <= set(splits[s][0]) and set(B) <= set(splits[s][1])  # no image crosses its split
        assert len(A) == 10 and len(B) == 11 and (np.diff(A) >= 0).all()
    with pytest.raises(ValueError, match="unknown resampling"):
        resampled_halves(splits, n_boot=2, resampling="jackknife")


def test_point_estimate_equals_a_plain_loop_over_splits_and_draws():
    rng = np.random.default_rng(0)
    X, Y1 = _planted(rng)
    _, Y2 = _planted(rng)
    r = crossfit_peak([X, X], [Y1, Y2], k=10, n_splits=3, n_boot=0, seed=5)
    n = X.shape[1]
    kh = half_k(10, n, n - n // 2)
    held, ins, fin = [], [], []
    for A, B in split_halves(n, n_splits=3, seed=5):
        for Y in (Y1, Y2):  # independent reference: the public layer-wise metric on the halves
            MA = mutual_knn_layerwise(X[:, A], Y[:, A], k=kh)
            MB = mutual_knn_layerwise(X[:, B], Y[:, B], k=kh)
            for sel, other in ((MA, MB), (MB, MA)):
                i, j = np.unravel_index(np.nanargmax(sel), sel.shape)
                held.append(other[i, j])
                ins.append(np.nanmax(other))
            fin += [MA[-1, -1], MB[-1, -1]]
    assert r.heldout == pytest.approx(np.mean(held), abs=1e-12)
    assert r.insample_half == pytest.approx(np.mean(ins), abs=1e-12)
    assert r.final == pytest.approx(np.mean(fin), abs=1e-12)
    assert r.selected.sum() == 3 * 2 * 2 and r.k_half == kh and r.n_draws == 2


@pytest.mark.parametrize("seed", [0, 1])
def test_on_unrelated_data_the_heldout_peak_sits_at_chance_and_the_insample_one_above(seed):
    rng = np.random.default_rng(seed)
    n = 160
    X = rng.normal(size=(6, n, 16)).astype(np.float32)
    Y = rng.normal(size=(8, n, 16)).astype(np.float32)
    r = crossfit_peak(X, Y, k=10, n_splits=10, n_boot=40, seed=seed)
    chance = 10 / (n - 1)
    assert abs(r.heldout - chance) < 0.012  # the held-out peak is unbiased for a chance-level pair
    assert r.insample_half > r.heldout + 0.005  # selection on the same images inflates the maximum
    lo, hi = r.interval("heldout")
    assert lo <= chance <= hi


def test_planted_late_alignment_is_found_late_with_a_positive_interval():
    rng = np.random.default_rng(2)
    X, Y = _planted(rng, n=120, L=6)
    r = crossfit_peak(X, Y, k=10, n_splits=6, n_boot=30, seed=0)
    assert r.depth_x > 0.7 and r.depth_y > 0.7 and r.late_minus_early > 0.2  # late-third share minus early-third share
    for q, (a, b) in (("depth_x", (0, 1)), ("depth_y", (0, 1)), ("late_minus_early", (-1, 1))):
        lo, hi = r.interval(q)  # centred on the estimate, clipped to the statistic's range
        assert a <= lo <= getattr(r, q) <= hi <= b, q
    lo, hi = r.interval("heldout")
    assert lo > 10 / 119 + 0.05 and lo <= r.heldout <= hi
    assert np.isfinite(r.heldout_reps).all() and r.heldout_reps.shape == (30,)


def test_comparisons_on_the_same_images_get_the_same_resamples_so_margins_are_paired():
    rng = np.random.default_rng(3)
    X, Y = _planted(rng, n=80)
    a = crossfit_peak(X, Y, k=10, n_splits=4, n_boot=20, seed=1)
    b = crossfit_peak(X, Y, k=10, n_splits=4, n_boot=20, seed=1)
    np.testing.assert_array_equal(a.heldout_reps, b.heldout_reps)  # the same inputs give the same bits
    assert paired_interval(a.heldout_reps, b.heldout_reps, estimates=(a.heldout, b.heldout)) == (0.0, 0.0)
    c = crossfit_peak(X, Y[:, :, ::-1].copy(), k=10, n_splits=4, n_boot=20, seed=1)  # columns permuted: equal
    np.testing.assert_allclose(a.heldout_reps, c.heldout_reps)
    with pytest.raises(ValueError, match="one length"):
        paired_interval(a.heldout_reps, a.heldout_reps[:5])


def _population(rng, n, L=4):
    """A sample of ``n`` rows from a fixed population: a heavy-tailed latent seen through ``L`` noisy layers per
    side, least noisy at 60 % depth (an interior peak, so selection matters)."""
    pop = np.random.default_rng(123)
    W = [[pop.normal(size=(8, 24)) for _ in range(L)] for _ in range(2)]
    noise = 1.5 + 12 * (np.linspace(0, 1, L) - 0.6) ** 2
    Z = rng.standard_t(df=4, size=(n, 8))
    return [np.stack([Z @ W[s][l] + noise[l] * rng.normal(size=(n, 24)) for l in range(L)]).astype(np.float32)
            for s in (0, 1)]


def test_half_sampling_intervals_match_the_sampling_spread_and_sit_on_the_estimate():
    # the spread of the half-sampling replicates (the interval's width) against the true spread of the estimate
    # over independent samples of one population; the with-replacement bootstrap is about 2x too wide here and
    # its reflected interval sits about one standard error above the estimate (benchmarks/crossfit_interval_coverage.py)
    rng = np.random.default_rng(7)
    est, half, mid = [], [], []
    for i in range(30):
        X, Y = _population(rng, 120)
        r = crossfit_peak(X, Y, k=10, n_splits=6, n_boot=30, seed=i)
        lo, hi = r.interval("heldout")
        est.append(r.heldout), half.append((hi - lo) / 2), mid.append((lo + hi) / 2 - r.heldout)
        f_lo, f_hi = r.interval("final")
        assert f_lo <= r.final <= f_hi
    ratio = np.mean(half) / 1.96 / np.std(est, ddof=1)
    assert 0.8 < ratio < 1.6, ratio
    assert abs(np.mean(mid)) < 0.25 * np.std(est, ddof=1)


def test_bad_input_is_refused_with_the_problem_named():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 40, 4)).astype(np.float32)
    with pytest.raises(ValueError, match="at least 8"):
        crossfit_peak(X[:, :6], X[:, :6])
    with pytest.raises(ValueError, match="same samples"):
        crossfit_peak(X, X[:, :30])
    with pytest.raises(ValueError, match="same number of draws"):
        crossfit_peak([X, X], [X])
    with pytest.raises(ValueError, match="unknown metric"):
        crossfit_peak(X, X, metric="cka_nope")
    with pytest.raises(ValueError, match="too large"):
        crossfit_peak(X, X, k=60)
    with pytest.raises(ValueError, match="half-sampling"):  # halves of 10 in the replicates: k_half 9 is too many
        crossfit_peak(X, X, k=18, n_boot=2)
    with pytest.raises(ValueError, match="unknown resampling"):
        crossfit_peak(X, X, k=4, n_boot=2, resampling="jackknife")
    with pytest.raises(ValueError, match="one shape"):
        crossfit_peak([X, X[:1]], [X, X])
    bad = X.copy()
    bad[0, 3, 1] = np.nan
    with pytest.raises(ValueError):
        crossfit_peak(bad, X)


def test_percentile_interval_and_detectable_difference_reference_values():
    assert all(math.isnan(v) for v in percentile_interval([np.nan, np.nan]))
    lo, hi = percentile_interval(np.arange(101.0))
    assert (lo, hi) == pytest.approx((2.5, 97.5))
    # (z_.975 + z_.8) / (2 z_.975) of the width: 2.8016 / 3.9199 = 0.71472
    assert detectable_difference(-0.1, 0.1) == pytest.approx(0.2 * 0.714716, rel=1e-4)
    assert math.isnan(detectable_difference(math.nan, 0.1))


def test_models_needed_for_the_papers_correlation():
    from prh_lib.pages.verdicts import fisher_n_for_r

    # ((1.95996 + 0.84162) / atanh(0.66))^2 + 3 = 15.49 -> 16 (Cohen 1988, Table 3.4.1 gives 15-16 for r = .65)
    assert fisher_n_for_r(0.66) == 16
    assert fisher_n_for_r(0.3) == 85  # Cohen's table: 84-85 for r = .30 at 80 % power
    with pytest.raises(ValueError):
        fisher_n_for_r(0)


def _shifted_bootstrap(rng, *, theta=0.3, bias=0.017, sigma=0.017, n_sim=2000, n_boot=400):
    """Estimates with a known bias and replicates that reproduce it (as the peaks' replicates do).

    ``θ̂ ~ N(θ − b, σ)`` and, given ``θ̂``, ``θ* ~ N(θ̂ − b, σ)``: the replicates sit ``b`` below the estimate,
    and the estimate ``b`` below the truth (b = σ = 0.017, the shift measured on the 3.1 peaks).
    """
    est = theta - bias + sigma * rng.normal(size=n_sim)
    reps = est[:, None] - bias + sigma * rng.normal(size=(n_sim, n_boot))
    return est, reps


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bias_aware_intervals_cover_the_truth_where_percentiles_miss_it(seed):
    rng = np.random.default_rng(seed)
    theta = 0.3
    est, reps = _shifted_bootstrap(rng, theta=theta)

    def coverage(method):
        iv = np.array([bootstrap_interval(e, r, method=method) for e, r in zip(est, reps)])
        return np.mean((iv[:, 0] <= theta) & (theta <= iv[:, 1])), iv

    cov_basic, basic = coverage("basic")
    cov_pct, pct = coverage("percentile")
    # normal theory: the basic interval covers 95 %; the percentile interval, centred 2b below the truth,
    # covers P(|Z - 2| < 1.96) = 0.48
    assert abs(cov_basic - 0.95) < 0.02
    assert cov_pct < 0.6
    # centring: the bias-aware midpoint sits b above the estimate (the bias undone), the percentile one b below
    assert np.median(basic.mean(1) - est) == pytest.approx(0.017, abs=0.002)
    assert np.median(pct.mean(1) - est) == pytest.approx(-0.017, abs=0.002)


def test_bc_interval_covers_at_a_small_shift_and_needs_extreme_quantiles_at_a_large_one():
    rng = np.random.default_rng(4)
    theta = 0.3
    for bias, expect in ((0.017 / 4, 0.95), (0.017, None)):
        est, reps = _shifted_bootstrap(rng, theta=theta, bias=bias, n_sim=1500, n_boot=400)
        iv = np.array([bootstrap_interval(e, r, method="bc") for e, r in zip(est, reps)])
        cov = np.mean((iv[:, 0] <= theta) & (theta <= iv[:, 1]))
        if expect:
            assert abs(cov - expect) < 0.025
        else:  # z0 = 1: the upper level is Φ(3.96), beyond 400 replicates (why "basic" is the default)
            assert cov < 0.9


def test_interval_reference_values_and_refusals():
    reps = np.arange(101.0)  # 2.5 %, 50 % and 97.5 % quantiles: 2.5, 50 and 97.5
    assert bootstrap_interval(60.0, reps) == pytest.approx((60 + 2.5 - 50, 60 + 97.5 - 50))  # centred (default)
    skew = np.r_[np.zeros(50), np.linspace(0, 10, 51)]  # the spread is placed around the estimate as it is
    assert bootstrap_interval(1.0, skew) == pytest.approx((1.0 + np.quantile(skew, 0.025) - np.median(skew),
                                                           1.0 + np.quantile(skew, 0.975) - np.median(skew)))
    assert bootstrap_interval(60.0, reps, method="basic") == pytest.approx((2 * 60 - 97.5, 2 * 60 - 2.5))
    assert bootstrap_interval(50.0, reps, method="percentile") == pytest.approx((2.5, 97.5))
    assert bootstrap_interval(50.0, reps, method="bc") == pytest.approx((2.5, 97.5))  # z0 = 0: the percentiles
    assert all(math.isnan(v) for v in bootstrap_interval(math.nan, reps))
    with pytest.raises(ValueError, match="unknown interval method"):
        bootstrap_interval(1.0, reps, method="bca")
    # paired: the difference's estimate comes from the point estimates, not from the replicates
    a, b = np.arange(101.0), np.zeros(101)
    assert paired_interval(a, b, estimates=(60.0, 0.0)) == pytest.approx((12.5, 107.5))
    assert paired_interval(a, b, estimates=(60.0, 0.0), method="basic") == pytest.approx((22.5, 117.5))
    assert paired_interval(a + 1, a, estimates=(3.0, 1.0), ratio=False) == pytest.approx((2.0, 2.0))
    with pytest.raises(ValueError, match="point estimates"):
        paired_interval(a, b)


def test_a_ratio_is_reflected_on_the_log_scale_and_stays_positive():
    rng = np.random.default_rng(0)
    b = 0.05 + 0.04 * rng.random(200)  # a denominator near chance: a long upper tail of the ratio
    a = 0.4 + 0.02 * rng.normal(size=200)
    lo, hi = paired_interval(a, b, ratio=True, estimates=(0.4, 0.07), method="basic")
    q_lo, q_med, q_hi = np.quantile(np.log(a / b), [0.025, 0.5, 0.975])
    assert (lo, hi) == pytest.approx((np.exp(2 * np.log(0.4 / 0.07) - q_hi), np.exp(2 * np.log(0.4 / 0.07) - q_lo)))
    assert 0 < lo < 0.4 / 0.07 < hi
    lo, hi = paired_interval(a, b, ratio=True, estimates=(0.4, 0.07))  # centred, on the log scale too
    assert (lo, hi) == pytest.approx((0.4 / 0.07 * np.exp(q_lo - q_med), 0.4 / 0.07 * np.exp(q_hi - q_med)))
    assert 0 < lo < 0.4 / 0.07 < hi


def test_crossfit_peaks_equal_each_comparison_alone_and_check_their_sizes():
    """Comparisons scored together share neighbourhoods per half; every field equals the lone computation."""
    import dataclasses

    from prh_lib.stats.selection import crossfit_peaks

    g = torch.Generator().manual_seed(0)
    X1, X2 = torch.randn(4, 120, 16, generator=g), torch.randn(3, 120, 8, generator=g)
    Y = [torch.randn(5, 120, 12, generator=g) for _ in range(2)]
    Y[1][:, :, :3] += X1[1:2, :, :3]  # a shared signal, so selections are not all ties
    comps = [([X1, X1], Y), ([X2, X2], Y), ([X1, X1.clone()], [X2, X2])]  # X1 twice: equal stacks dedupe
    together = crossfit_peaks(comps, k=5, n_splits=3, n_boot=7, seed=3)
    for got, (x, y) in zip(together, comps):
        alone = crossfit_peak(x, y, k=5, n_splits=3, n_boot=7, seed=3)
        for f in dataclasses.fields(alone):
            a, b = getattr(got, f.name), getattr(alone, f.name)
            assert (a == b) if isinstance(a, str) else np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), f.name
    assert together[2].heldout > together[1].heldout - 1  # sanity: numbers, not NaN
    with pytest.raises(ValueError, match="same images"):
        crossfit_peaks([(X1, Y[0]), (X1[:, :100], Y[0][:, :100])], k=5, n_splits=2, n_boot=0)
    with pytest.raises(ValueError, match="at least one comparison"):
        crossfit_peaks([], k=5)


@pytest.mark.parametrize("metric", ["mutual_knn", "jaccard_knn", "cycle_knn"])
def test_a_halfs_neighbourhoods_read_off_full_sample_candidates_equal_selecting_on_the_half(metric):
    """hoods_of_subsample equals hoods_from_similarity of the sub-stack in every field, with ties (integer-valued
    features, a constant layer, all-zero rows) and with rows whose candidates hold too few of the half."""
    from prh_lib.metrics._engines import get_engine

    engine = get_engine(metric)
    rng = np.random.default_rng(0)
    n = 120
    X = rng.integers(-2, 3, size=(4, n, 3)).astype(np.float32)  # few values: many exact ties
    X[1] = rng.normal(size=(n, 3))
    X[2] = 1.0  # a constant layer (degenerate)
    X[3, :5] = 0.0  # all-zero rows
    G, valid = engine.gram(torch.from_numpy(X))
    for T, m, k in ((8, 30, 3), (40, 60, 5), (119, 17, 2)):  # T = 8 leaves rows short of k members: exact path
        cands = engine.subsample_candidates(G, T)
        for seed in range(3):
            idx = torch.from_numpy(np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False)))
            got = engine.subsample_state(G, valid, cands, idx, k=k)
            want = engine.state(G[:, idx][:, :, idx].contiguous(), valid, k=k)
            for (f, a), b in zip(_hoods_fields(got).items(), _hoods_fields(want).values()):
                assert torch.equal(torch.as_tensor(a), torch.as_tensor(b)), (f, T, m, k, seed)


def test_crossfit_peaks_read_off_candidates_equal_selecting_on_every_half(monkeypatch):
    """The half-sample path through full-sample candidates gives the same CrossFitPeak, field for field."""
    import dataclasses

    from prh_lib.stats import selection
    from prh_lib.metrics import _engines as metrics_engines

    rng = np.random.default_rng(5)
    X, Y = _planted(rng, n=80)
    Xi = np.round(X).astype(np.float32)  # ties
    comps = [(X, Y), (Xi, Y), ([X, X], [Y, Xi])]
    fast = selection.crossfit_peaks(comps, k=6, n_splits=3, n_boot=7, seed=2)
    plain = dataclasses.replace(metrics_engines.get_engine("mutual_knn"), subsample_state=None,
                                subsample_candidates=None)
    monkeypatch.setattr(selection, "get_engine", lambda name: plain)
    slow = selection.crossfit_peaks(comps, k=6, n_splits=3, n_boot=7, seed=2)
    for a, b in zip(fast, slow):
        for f in dataclasses.fields(a):
            va, vb = getattr(a, f.name), getattr(b, f.name)
            np.testing.assert_array_equal(np.asarray(va), np.asarray(vb), err_msg=f.name)


def _hoods_fields(h):
    return {f: getattr(h, f) for f in ("idx", "straddle", "s_layer", "s_row", "s_code", "s_r", "s_t")}
