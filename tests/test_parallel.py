"""prh_lib.parallel: draws scored on several threads give what one after another gives (results, warnings,
errors), and Section 3.1's study is the same bits either way."""

from __future__ import annotations

import threading
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import torch

from prh_lib import results
from prh_lib.metrics import _parallel as metrics_parallel
from prh_lib.results import score_cache
from prh_lib.analysis import layerwise as ls, study
from prh_lib.data.study import Draw
from prh_lib.extract import LayerFeatures


class Odd(UserWarning):
    pass


def _slow_warner(barrier):
    def fn(i):
        barrier.wait(timeout=10)  # both workers inside at once: their warnings interleave in time
        time.sleep(0.02 * (3 - i % 3))  # later items finish first
        warnings.warn(f"item {i}", UserWarning)
        if i % 2:
            with metrics_parallel.ignoring(Odd):
                warnings.warn(f"silenced {i}", Odd)
            warnings.warn(f"odd {i}", Odd)
        return i * i

    return fn


def test_results_and_warnings_come_back_in_item_order_as_the_serial_loop_gives_them():
    serial_barrier = threading.Barrier(1)
    with warnings.catch_warnings(record=True) as serial:
        warnings.simplefilter("always")
        expected = metrics_parallel.map_threads(_slow_warner(serial_barrier), range(6), workers=1)
    with warnings.catch_warnings(record=True) as threaded:
        warnings.simplefilter("always")
        got = metrics_parallel.map_threads(_slow_warner(threading.Barrier(2)), range(6), workers=2)
    assert got == expected == [i * i for i in range(6)]
    messages = [str(w.message) for w in threaded]
    assert messages == [str(w.message) for w in serial]
    assert messages[:3] == ["item 0", "item 1", "odd 1"] and not any(m.startswith("silenced") for m in messages)
    assert [w.category for w in threaded][:3] == [UserWarning, UserWarning, Odd]


def test_the_callers_filters_apply_to_the_reissued_warnings():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", message="item [02]")
        metrics_parallel.map_threads(_slow_warner(threading.Barrier(2)), range(4), workers=2)
    assert [str(w.message) for w in seen] == ["item 1", "odd 1", "item 3", "odd 3"]


def test_the_first_failing_item_in_order_raises_after_the_warnings_before_it_and_the_queue_stops():
    def make(started):
        def fn(i):
            started.append(i)
            warnings.warn(f"before {i}", UserWarning)
            if i == 1:
                time.sleep(0.2)
                raise KeyError("model one")
            if i == 2:
                raise ValueError("model two")  # fails first in time, but item 1 comes first
            time.sleep(0.05)
            return i
        return fn

    filters = list(warnings.filters)
    seen = {}
    for workers in (1, 2):
        started = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(KeyError, match="model one"):
                metrics_parallel.map_threads(make(started), range(40), workers=workers)
        seen[workers] = [str(w.message) for w in caught]
        assert len(started) < 40  # the queue was cancelled
    assert seen[1] == seen[2] == ["before 0", "before 1"]  # the failing item's own warning included
    assert not metrics_parallel.in_worker() and warnings.showwarning is warnings._showwarning_orig
    assert warnings.filters == filters


def test_recording_in_a_worker_records_what_an_enclosing_ignoring_would_silence_as_the_serial_path_does():
    def fn(i):
        with metrics_parallel.ignoring(RuntimeWarning):
            _, log = metrics_parallel.recording(lambda: warnings.warn("kept", RuntimeWarning))
            warnings.warn("silenced", RuntimeWarning)
        return [m for _, m, _, _ in log]

    serial, threaded = (metrics_parallel.map_threads(fn, range(3), workers=w) for w in (1, 2))
    assert serial == threaded == [["kept"]] * 3


def test_cached_scores_in_workers_store_their_own_warnings_only(tmp_path, monkeypatch):
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("PRH_SCORE_CACHE", raising=False)
    barrier = threading.Barrier(2)

    def fn(i):
        def compute():
            barrier.wait(timeout=10)  # both computations run at once
            warnings.warn(f"from {i}", RuntimeWarning)
            time.sleep(0.01)
            return i

        return score_cache.cached("toy-thread", {"i": i}, compute)

    with warnings.catch_warnings(record=True) as first:
        warnings.simplefilter("always")
        assert metrics_parallel.map_threads(fn, [0, 1], workers=2) == [0, 1]
    assert [str(w.message) for w in first] == ["from 0", "from 1"]
    for i in (0, 1):  # each entry holds its own computation's warning, and warns it again when served
        with warnings.catch_warnings(record=True) as hit:
            warnings.simplefilter("always")
            assert score_cache.cached("toy-thread", {"i": i}, lambda: pytest.fail("recomputed")) == i
        assert [str(w.message) for w in hit] == [f"from {i}"]


N = 50
COMPARISONS = [("vit", "lm"), ("vit", "cnn"), ("lm", "cnn")]


def _features(seed: int) -> dict[str, LayerFeatures]:
    rng = np.random.default_rng(seed)
    S = rng.standard_normal((N, 3))
    ids = tuple(f"s{i}" for i in range(N))

    def view(d, noise):
        return S @ rng.standard_normal((3, d)) + noise * rng.standard_normal((N, d))

    def lf(values, name, modality):
        labels = ("embed",) + tuple(f"layer.{i}" for i in range(1, len(values)))
        return LayerFeatures(torch.tensor(np.stack(values), dtype=torch.float32), labels, ids,
                             {"model": name, "modality": modality})

    return {"vit": lf([np.tile(rng.standard_normal(8), (N, 1)), view(8, 0.3), view(8, 0.6)], "vit", "vision"),
            "lm": lf([rng.standard_normal((N, 6)), view(6, 0.5), view(6, 1.0), view(6, 2.0)], "lm", "language"),
            "cnn": lf([np.round(view(5, 0.4)), view(5, 0.8)], "cnn", "vision")}  # rounded: ties at the k-th place


@pytest.mark.filterwarnings("ignore:.*degenerate.*:RuntimeWarning")
@pytest.mark.parametrize("cache", ["0", "1"])
def test_section_3_1_study_on_two_threads_is_the_serial_study_bit_for_bit(tmp_path, monkeypatch, cache):
    monkeypatch.setenv("PRH_SCORE_CACHE", cache)
    draws = [Draw("a", r, r, list(range(N)), True, "captions") for r in range(4)] + \
        [Draw("b", 0, 9, list(range(N)), False, "nothing")]
    feats = {id(d.pairs): _features(d.seed) for d in draws}
    monkeypatch.setattr(study, "prefetch_features", lambda *a, **kw: None)
    monkeypatch.setattr(study, "prepare_features", lambda comparisons, pairs, clip=None, **kw: {
        m: LayerFeatures(f.values.clamp(-1, 1) if clip else f.values, f.layer_labels, f.sample_ids, f.meta)
        for m, f in feats[id(pairs)].items()})
    opts = dict(comparisons=COMPARISONS, params={"p": 1}, k=4, n_permutations=19, n_boot=7, clip_q=0.95)
    out, tables = {}, {}
    for workers in (2, 1):  # each its own score cache: both compute every score (recording in the workers)
        monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / f"cache{workers}"))
        root = tmp_path / f"results{workers}"
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out[workers] = ls.run_study(draws, chapter="demo", root=root, workers=workers, **opts)
            ls.clip_variants(draws[:4], COMPARISONS, chapter="demo", params={"p": 1}, k=4, clip_q=0.95,
                             variants=("layer", None), root=root, workers=workers)
        tables[workers] = (results.load(chapter="demo", params={"p": 1}, root=root)
                           .drop(columns=["created", "run_id"], errors="ignore"))
        out[workers, "warnings"] = [(w.category, str(w.message)) for w in seen]
    assert list(out[1]) == list(out[2]) == [(d.dataset, d.draw) for d in draws]
    for key in out[1]:
        for a, b in zip(out[1][key], out[2][key]):
            assert a.label == b.label
            np.testing.assert_array_equal(a.matrix.scores, b.matrix.scores)
            np.testing.assert_array_equal(a.calibration.null, b.calibration.null)
            assert (a.peak_ci.low, a.peak_ci.high) == (b.peak_ci.low, b.peak_ci.high)
    key = ["dataset", "draw", "preprocessing", "model_x", "model_y", "quantity", "layer_x", "layer_y"]
    t1, t2 = (tables[w].sort_values(key).reset_index(drop=True) for w in (1, 2))
    assert len(t1) > 5 * 3 * 12 and set(t1["preprocessing"]) >= {"none"}
    pd.testing.assert_frame_equal(t1, t2)
    assert out[1, "warnings"] == out[2, "warnings"] and out[1, "warnings"]  # the constant ViT layer's, in order


def test_score_workers_defaults_and_refuses_what_is_not_a_count(monkeypatch):
    monkeypatch.setattr(ls.os, "cpu_count", lambda: 8)
    monkeypatch.setenv("PRH_CORES", "5")  # a prh-run lane's share of the cores (prh_lib.run.schedule.plan_lanes)
    assert ls.score_workers("cpu") == 5 and ls.score_workers("cuda") == 1 and ls.score_workers("cuda", 3) == 3
    monkeypatch.setenv("PRH_CORES", "1")  # two draws side by side even on a one-core share, as before
    assert ls.score_workers("cpu") == 2
    monkeypatch.setattr(ls.os, "cpu_count", lambda: 1)
    assert ls.score_workers("cpu") == 1
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="workers must be a positive integer"):
            ls.score_workers("cpu", bad)
