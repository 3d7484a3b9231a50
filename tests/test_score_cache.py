"""The score cache: keyed by feature content and options, identical to a recomputation, healing, atomic."""

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from prh_lib.results import score_cache
from prh_lib.analysis import core
from prh_lib.stats import bootstrap as stats_bootstrap
from prh_lib.stats import calibration as stats_calibration
from prh_lib.extract.features import LayerFeatures


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PRH_SCORE_CACHE", raising=False)
    return tmp_path / "scores"


def _features(name, seed, n=40, layers=3, dim=8):
    g = torch.Generator().manual_seed(seed)
    return LayerFeatures(torch.randn(layers, n, dim, generator=g), tuple(f"layer.{i}" for i in range(layers)),
                         tuple(f"s{i}" for i in range(n)), {"model": name})


def _entries(cache):
    return sorted(cache.rglob("*.pkl")) if cache.exists() else []


def test_second_call_is_served_and_equals_the_first(cache):
    calls = []

    def compute():
        calls.append(1)
        return {"scores": np.arange(6.0).reshape(2, 3)}

    key = {"x": score_cache.features_key(_features("a", 0)), "k": 5}
    first = score_cache.cached("toy", key, compute)
    second = score_cache.cached("toy", key, compute)
    assert len(calls) == 1 and len(_entries(cache)) == 1
    np.testing.assert_array_equal(first["scores"], second["scores"])
    # another option, kind or code digest is another entry
    score_cache.cached("toy", {**key, "k": 6}, compute)
    score_cache.cached("other", key, compute)
    assert len(calls) == 3 and len(_entries(cache)) == 3


def test_the_key_follows_values_rows_and_in_place_edits():
    a = _features("a", 0)
    base = score_cache.features_key(a)
    assert score_cache.features_key(_features("a", 0)) == base  # same content, another object: same key
    b = _features("a", 0)
    b.values[1, 3, 2] += 1e-6  # one value, in place: the version counter tells the memo
    assert score_cache.features_key(b)["values"] != base["values"]
    order = list(range(40))
    order[0], order[1] = 1, 0
    swapped = LayerFeatures(a.values[:, order], a.layer_labels, tuple(a.sample_ids[i] for i in order), a.meta)
    key = score_cache.features_key(swapped)
    assert key["values"] != base["values"] and key["samples"] != base["samples"]
    renamed = LayerFeatures(a.values, a.layer_labels, a.sample_ids, {"model": "b"})
    assert score_cache.features_key(renamed)["name"] != base["name"]
    # the same padded values with other true widths are another input (clip thresholds read the widths)
    narrower = LayerFeatures(a.values, a.layer_labels, a.sample_ids, a.meta, layer_dims=(8, 8, 4))
    assert score_cache.features_key(narrower) != base


def test_an_unreadable_entry_is_recomputed_and_replaced(cache):
    key = {"k": 1}
    score_cache.cached("toy", key, lambda: [1, 2, 3])
    (entry,) = _entries(cache)
    entry.write_bytes(b"\x80\x05truncated")
    assert score_cache.cached("toy", key, lambda: [4, 5]) == [4, 5]
    assert pickle.loads(entry.read_bytes())[0] == [4, 5]


def test_a_failing_computation_leaves_no_entry(cache):
    with pytest.raises(RuntimeError, match="boom"):
        score_cache.cached("toy", {"k": 1}, lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert _entries(cache) == [] and not any(p.name.endswith(".tmp") for p in cache.rglob("*"))


def test_an_edit_of_the_metric_code_names_other_entries(cache, monkeypatch):
    calls = []
    score_cache.cached("toy", {"k": 1}, lambda: calls.append(1))
    monkeypatch.setattr(score_cache, "score_code_digest", lambda: "0" * 64)
    score_cache.cached("toy", {"k": 1}, lambda: calls.append(1))
    assert len(calls) == 2 and len(_entries(cache)) == 2


def test_cached_score_pair_is_bit_for_bit_the_recomputed_one(cache, monkeypatch):
    x, y = _features("x", 1, n=60, layers=4, dim=16), _features("y", 2, n=60, layers=3, dim=12)
    y = LayerFeatures(y.values + 0.8 * x.values[:3, :, :12], y.layer_labels, y.sample_ids, y.meta)  # related
    options = dict(k=5, n_permutations=30, n_boot=20, seed=3)
    first = core.score_pair(x, y, **options)
    assert len(_entries(cache)) >= 1
    served = core.score_pair(x, y, **options)
    monkeypatch.setenv("PRH_SCORE_CACHE", "0")
    fresh = core.score_pair(x, y, **options)
    for r in (served, fresh):
        np.testing.assert_array_equal(r.matrix.scores, first.matrix.scores)
        np.testing.assert_array_equal(r.control.scores, first.control.scores)
        assert r.matrix.peak == first.matrix.peak and r.label == first.label == "x × y"
        np.testing.assert_array_equal(r.calibration.null_max, first.calibration.null_max)
        np.testing.assert_array_equal(r.calibration.p_value, first.calibration.p_value)
        assert (r.peak_ci.low, r.peak_ci.high) == (first.peak_ci.low, first.peak_ci.high)
    # another seed is another result, computed
    other = core.score_pair(x, y, **{**options, "seed": 4})
    assert not np.array_equal(other.control.scores, first.control.scores)


def test_another_alpha_recalibrates_the_stored_null_bit_for_bit(cache, monkeypatch):
    x, y = _features("x", 1, n=60, layers=4, dim=16), _features("y", 2, n=60, layers=3, dim=12)
    y = LayerFeatures(y.values + 0.5 * x.values[:3, :, :12], y.layer_labels, y.sample_ids, y.meta)
    options = dict(k=5, n_permutations=40, n_boot=0, seed=3)
    at_05 = core.score_pair(x, y, alpha=0.05, **options)
    n_entries = len(_entries(cache))
    served = core.score_pair(x, y, alpha=0.1, **options)
    assert len(_entries(cache)) == n_entries  # served from the alpha = 0.05 entry, not a new computation
    monkeypatch.setenv("PRH_SCORE_CACHE", "0")
    fresh = core.score_pair(x, y, alpha=0.1, **options)
    c, f = served.calibration, fresh.calibration
    assert c.alpha == f.alpha == 0.1
    for name in ("threshold", "p_value", "calibrated", "null_max"):
        np.testing.assert_array_equal(getattr(c, name), getattr(f, name))
    assert (c.threshold_max, c.p_max, c.calibrated_max) == (f.threshold_max, f.p_max, f.calibrated_max)
    # a larger alpha lowers the threshold (a lower quantile of the same null), never raises it
    assert c.threshold_max <= at_05.calibration.threshold_max
    assert np.all(c.threshold <= at_05.calibration.threshold)
    with pytest.raises(ValueError, match="too small for alpha"):
        at_05.calibration.at_alpha(0.01)  # 40 permutations cannot reach p <= 0.01


def test_the_null_and_the_bootstrap_are_cached_apart_so_chapters_of_other_sizes_share_them(cache, monkeypatch):
    """Section 3.1 scores without a bootstrap and Section 3.3 with one: the null is computed once for both,
    the bootstrap only where asked, and every part equals a computation without the cache bit for bit."""
    x, y = _features("x", 1, n=60, layers=4, dim=16), _features("y", 2, n=60, layers=3, dim=12)
    y = LayerFeatures(y.values + 0.8 * x.values[:3, :, :12], y.layer_labels, y.sample_ids, y.meta)
    calls = {"null": 0, "boot": 0}
    real_null, real_boot = stats_calibration.permutation_test_layerwise, stats_bootstrap.bootstrap_ci

    def null(*a, **kw):
        calls["null"] += 1
        return real_null(*a, **kw)

    def boot(*a, **kw):
        calls["boot"] += 1
        return real_boot(*a, **kw)

    monkeypatch.setattr(core, "permutation_test_layerwise", null)
    monkeypatch.setattr(core, "bootstrap_ci", boot)
    without = core.score_pair(x, y, k=5, n_permutations=30, n_boot=0, seed=3)
    assert calls == {"null": 1, "boot": 0} and without.peak_ci is None
    with_boot = core.score_pair(x, y, k=5, n_permutations=30, n_boot=20, seed=3, alpha=0.1)
    assert calls == {"null": 1, "boot": 1}  # the null served, only the bootstrap computed
    again = core.score_pair(x, y, k=5, n_permutations=30, n_boot=20, seed=3, control=False, label="other")
    assert calls == {"null": 1, "boot": 1} and again.control is None and again.label == "other"
    core.score_pair(x, y, k=5, n_permutations=30, n_boot=20, seed=4)  # another seed: both computed again
    core.score_pair(x, y, k=6, n_permutations=30, n_boot=20, seed=3)  # another k: both computed again
    assert calls == {"null": 3, "boot": 3}
    monkeypatch.setenv("PRH_SCORE_CACHE", "0")
    fresh = core.score_pair(x, y, k=5, n_permutations=30, n_boot=20, seed=3, alpha=0.1)
    np.testing.assert_array_equal(with_boot.calibration.null, fresh.calibration.null)
    np.testing.assert_array_equal(without.calibration.null, fresh.calibration.null)
    np.testing.assert_array_equal(with_boot.calibration.threshold, fresh.calibration.threshold)
    assert with_boot.calibration.alpha == fresh.calibration.alpha == 0.1 and without.calibration.alpha == 0.05
    assert (with_boot.peak_ci.low, with_boot.peak_ci.high) == (fresh.peak_ci.low, fresh.peak_ci.high)
    np.testing.assert_array_equal(with_boot.peak_ci.replicates, fresh.peak_ci.replicates)
    np.testing.assert_array_equal(with_boot.control.scores, without.control.scores)


def test_misaligned_features_still_raise_before_any_lookup(cache):
    from prh_lib.extract.features import FeatureMismatchError

    x = _features("x", 1)
    y = LayerFeatures(x.values, x.layer_labels, tuple(reversed(x.sample_ids)), {"model": "y"})
    with pytest.raises(FeatureMismatchError):
        core.score_pair(x, y, k=5, n_permutations=0, n_boot=0)
    with pytest.raises(FeatureMismatchError):
        core.layerwise_alignment(x, y, k=5)
    assert _entries(cache) == []


def test_memoized_sweeps_key_on_every_argument_and_equal_a_recomputation(cache, monkeypatch):
    from prh_lib.analysis.ablation import study as ablation_study
    from prh_lib.analysis.compression import study as compression_study

    x, y = _features("x", 1, n=50, layers=3, dim=10), _features("y", 2, n=50, layers=2, dim=6)
    first = ablation_study.k_sweep(x, y, ks=[2, 5])
    n_entries = len(_entries(cache))
    again = ablation_study.k_sweep(x, y, ks=[2, 5], reference_k=10)  # the default spelled out: the same entry
    assert len(_entries(cache)) == n_entries
    other = ablation_study.k_sweep(x, y, ks=[2, 6])
    assert len(_entries(cache)) > n_entries and list(other["k"]) == [2, 6]
    monkeypatch.setenv("PRH_SCORE_CACHE", "0")
    fresh = ablation_study.k_sweep(x, y, ks=[2, 5])
    for df in (again, fresh):
        assert df.equals(first) and df.attrs == first.attrs
    monkeypatch.delenv("PRH_SCORE_CACHE")
    a = compression_study.compress_layer_pairs(x, y, {"peak": (1, 1)}, dims=[2, 4], variance=[0.5, 1.0], k=5)
    b = compression_study.compress_layer_pairs(x, y, {"peak": (1, 1)}, dims=[2, 4], variance=[0.5, 1.0], k=5)
    c = compression_study.compress_layer_pairs(x, y, {"peak": (2, 1)}, dims=[2, 4], variance=[0.5, 1.0], k=5)
    assert [s.labels for s in a] == [s.labels for s in b] and all(
        np.array_equal(s.scores, t.scores) for s, t in zip(a, b))
    assert a[0].labels["layer x"] == "layer.1" and c[0].labels["layer x"] == "layer.2"


def test_a_served_score_warns_as_the_computed_one_did(cache):
    import warnings

    def compute():
        warnings.warn("layers [0] are degenerate", RuntimeWarning)
        return 1.0

    for _ in range(2):  # computed, then served: the same warning both times
        with pytest.warns(RuntimeWarning, match=r"layers \[0\] are degenerate"):
            assert score_cache.cached("toy", {"k": 1}, compute) == 1.0
    assert len(_entries(cache)) == 1
    with warnings.catch_warnings():  # and through the caller's filters
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=".*degenerate")
        assert score_cache.cached("toy", {"k": 1}, compute) == 1.0


def test_memoize_refuses_arguments_it_cannot_key_by_content(cache):
    @score_cache.memoize("toy")
    def f(x, obj=None):
        return 1

    assert f(_features("a", 0), obj=torch.device("cpu")) == 1
    with pytest.raises(TypeError, match="cannot key an argument of type object"):
        f(_features("a", 0), obj=object())


def test_memoize_keys_data_frames_by_content(cache):
    import pandas as pd

    calls = []

    @score_cache.memoize("toy-frame")
    def f(table):
        calls.append(1)
        return float(table["a"].sum())

    table = pd.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]}, index=["p", "q"])
    assert f(table) == 3.0 and f(table.copy()) == 3.0 and len(calls) == 1  # same content: one entry
    edited = table.copy()
    edited.loc["q", "a"] = 5.0
    assert f(edited) == 6.0 and len(calls) == 2
    f(table.rename(index={"q": "r"}))  # another index is another input
    f(table.rename(columns={"b": "c"}))  # so are other column names
    assert len(calls) == 4


def test_memoize_keys_on_the_code_it_is_told_of(cache, tmp_path, monkeypatch):
    import importlib.util
    import sys

    source = tmp_path / "toy_code.py"
    source.write_text("SCALE = 2\n")
    spec = importlib.util.spec_from_file_location("toy_code", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "toy_code", module)
    calls = []

    def make():
        @score_cache.memoize("toy-code", code=(module,))
        def f(x):
            calls.append(1)
            return x * module.SCALE
        return f

    assert make()(3) == 6 and make()(3) == 6 and len(calls) == 1
    source.write_text("SCALE = 2  # edited\n")  # an edit of that module's file is another entry
    make()(3)
    assert len(calls) == 2


@pytest.mark.parametrize("seed", [0, 3, 11])
def test_score_pair_control_is_the_shuffled_pairing_recomputed(cache, seed):
    """With a null, the control is read off its first permutation; it must equal mutual k-NN recomputed
    on ``shuffled_pairing(y, seed)`` bit for bit (ties and a constant layer included), as it does without."""
    x, y = _features("x", 5, n=50, layers=4, dim=10), _features("y", 6, n=50, layers=3, dim=10)
    values = y.values + 0.7 * x.values[:3]
    values[1] = torch.round(values[1])  # ties at the k-th place
    values[0] = 1.0  # constant layer: NaN column
    y = LayerFeatures(values, y.layer_labels, y.sample_ids, y.meta)
    ref = core.layerwise_alignment(x, core.shuffled_pairing(y, seed=seed), metric="mutual_knn", k=5, device=None)
    with_null = core.score_pair(x, y, k=5, n_permutations=19, n_boot=0, seed=seed)
    without = core.score_pair(x, y, k=5, n_permutations=0, n_boot=0, seed=seed)
    for r in (with_null, without):
        np.testing.assert_array_equal(r.control.scores, ref.scores)
        assert (r.control.x_labels, r.control.y_labels, r.control.options) == (ref.x_labels, ref.y_labels, ref.options)
    assert np.isnan(ref.scores[:, 0]).all() and not np.array_equal(ref.scores, with_null.matrix.scores)


def test_the_digest_covers_the_computation_recursively_and_never_the_pages(tmp_path):
    import shutil

    pkg = tmp_path / "prh_lib"
    shutil.copytree(Path(score_cache.__file__).resolve().parent.parent, pkg,
                    ignore=shutil.ignore_patterns("__pycache__", "resources"))
    files = {f.relative_to(pkg).as_posix() for f in score_cache.score_code_files(pkg)}
    assert {"metrics/knn.py", "stats/calibration.py", "analysis/core.py", "analysis/ablation/study.py",
            "extract/features.py"} <= files
    assert not any(f.startswith(("pages/", "run/")) for f in files) and "stats/decision.py" not in files
    before = score_cache.score_code_digest(pkg)
    page = pkg / "pages" / "sec3_1_layerwise.py"
    page.write_text(page.read_text() + "\n# a sentence of page prose edited\n")
    assert score_cache.score_code_digest.__wrapped__(pkg) == before  # editing a page recomputes nothing
    study = pkg / "analysis" / "ablation" / "study.py"  # a file in a subfolder of analysis/ is covered
    study.write_text(study.read_text() + "\n# edited\n")
    assert score_cache.score_code_digest.__wrapped__(pkg) != before
