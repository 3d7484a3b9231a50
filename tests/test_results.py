"""The tidy results table: schema validation, reruns that replace, concurrent writers, aggregation."""

import multiprocessing as mp
import subprocess
import time

import numpy as np
import pandas as pd
import pytest

from prh_lib import __version__, paths, results
from prh_lib import formatting


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    return paths.cache_dir("results")


def _rows(n=3, *, quantity="layer_pair", offset=0.0, **cols):
    return [{"model_x": "dinov2-small", "model_y": "minilm-l6", "layer_x": f"layer.{i}", "layer_y": "layer.6",
             "depth_x": i / max(n - 1, 1), "depth_y": 1.0, "metric": "mutual_knn", "score": offset + i / 10,
             "quantity": quantity, **cols} for i in range(n)]


def test_write_then_load_round_trips_rows_and_provenance(root):
    params = {"k": 10, "clip_q": 0.95, "comparisons": [["a", "b"]], "data_location": None}
    path = results.write(pd.DataFrame(_rows(3, ci_low=0.01)), chapter="sec3_1_layerwise", params=params,
                         dataset="coco-mini/first", draw=0, k=10, n=239, seed=0,
                         preprocessing="clip_outliers(q=0.95)")
    assert path.parent == root / "sec3_1_layerwise" and path.suffix == ".parquet"
    assert path.name.startswith(f"sec3_1_layerwise__{results.params_hash(params)}__{results.current_run_id()}__")
    df = results.load()
    assert list(df.columns) == list(results.COLUMNS)
    assert len(df) == 3
    assert df["score"].tolist() == pytest.approx([0.0, 0.1, 0.2])
    assert df["layer_x"].tolist() == ["layer.0", "layer.1", "layer.2"]
    assert set(df["k"]) == {10} and str(df["k"].dtype) == "Int64" and str(df["draw"].dtype) == "Int64"
    assert df["tau"].isna().all() and df["calibrated"].isna().all()  # not given: NaN, not 0
    row = df.iloc[0]
    assert (row["chapter"], row["dataset"], row["draw"], row["n"], row["seed"]) == (
        "sec3_1_layerwise", "coco-mini/first", 0, 239, 0)
    assert row["preprocessing"] == "clip_outliers(q=0.95)"
    assert row["lib_version"] == __version__
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=paths.repo_root(), capture_output=True, text=True)
    assert row["commit"] == (head.stdout.strip() if head.returncode == 0 else "")
    assert row["params_hash"] == results.params_hash(dict(reversed(params.items())))  # key order is irrelevant
    assert row["params"] == '{"clip_q":0.95,"comparisons":[["a","b"]],"data_location":null,"k":10}'
    assert abs(pd.Timestamp.now(tz="UTC") - row["created"]) < pd.Timedelta(minutes=5)
    assert results.load(expand_extra=True)["ci_low"].tolist() == [0.01] * 3
    assert row["extra"] == '{"ci_low":0.01}'


def test_params_hash_distinguishes_values_and_accepts_numpy():
    assert results.params_hash({"k": 10}) != results.params_hash({"k": 20})
    assert results.params_hash({"k": np.int64(10), "q": np.float32(0.5)}) == results.params_hash({"k": 10, "q": 0.5})
    assert len(results.params_hash({})) == 16


def test_a_rerun_replaces_its_rows_and_other_parameters_are_kept(root):
    params = {"k": 10}
    first, second = results.new_run_id(), results.new_run_id()
    results.write(_rows(3), chapter="ch", params=params, dataset="d", draw=0, run_id=first)
    results.write(_rows(3, offset=1.0), chapter="ch", params=params, dataset="d", draw=0, run_id=second)
    df = results.load()
    assert len(df) == 3 and set(df["run_id"]) == {second}
    assert df["score"].tolist() == pytest.approx([1.0, 1.1, 1.2])
    assert len(results.load(include_superseded=True)) == 6
    # other parameters, another draw, another chapter: not reruns of the first, all kept
    results.write(_rows(3), chapter="ch", params={"k": 20}, dataset="d", draw=0)
    results.write(_rows(3), chapter="ch", params=params, dataset="d", draw=1, run_id=results.new_run_id())
    results.write(_rows(3), chapter="other", params=params, dataset="d", draw=0)
    assert len(results.load()) == 12
    assert len(results.load(chapter="ch", params=params)) == 6
    assert sorted(results.load(chapter="ch", params=params)["draw"].unique()) == [0, 1]


def test_superseding_follows_write_time_not_file_order(root):
    # the run that started writing last wins, even when its id sorts first
    results.write(_rows(2), chapter="ch", params={}, dataset="d", draw=0, run_id="zzz-early")
    time.sleep(0.002)
    results.write(_rows(2, offset=5.0), chapter="ch", params={}, dataset="d", draw=0, run_id="aaa-late")
    assert set(results.load()["run_id"]) == {"aaa-late"}


def test_one_run_keeps_all_its_parts_and_replaces_a_repeated_part(root):
    rid = results.new_run_id()
    results.write(_rows(3), chapter="ch", params={}, dataset="d", draw=0, run_id=rid)
    results.write(_rows(1, quantity="peak"), chapter="ch", params={}, dataset="d", draw=0, run_id=rid)
    results.write(_rows(1, quantity="peak"), chapter="ch", params={}, dataset="d", draw=0, run_id=rid)  # cell re-run
    df = results.load()
    assert df["quantity"].value_counts().to_dict() == {"layer_pair": 3, "peak": 1}
    assert len(list((root / "ch").glob("*.parquet"))) == 2


def test_rows_may_carry_dataset_and_draw_columns(root):
    rows = [{"metric": "mutual_knn", "quantity": "peak", "dataset": "d", "draw": r, "score": r / 10.0}
            for r in range(5)]
    results.write(rows, chapter="ch", params={})
    assert results.load()["draw"].tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("change, kwargs, column", [
    ({"metric": None}, {}, "metric"),
    ({"score": "high"}, {}, "score"),
    ({"score": True}, {}, "score"),
    ({"depth_x": 1.5}, {}, "depth_x"),
    ({"p": -0.1}, {}, "p"),
    ({"layer_x": 3}, {}, "layer_x"),
    ({"k": 5.5}, {}, "k"),
    ({"k": "10"}, {}, "k"),
    ({"chapter": "x"}, {}, "chapter"),
    ({}, {"dataset": None}, "dataset"),
    ({}, {"draw": None}, "draw"),
    ({}, {"topk": 10}, "topk"),
    ({"k": 10}, {"k": 10}, "k"),
])
def test_invalid_rows_raise_naming_the_column(root, change, kwargs, column):
    rows = [{**r, **change} for r in _rows(2)]
    if change.get("metric", "") is None:
        rows = [{k: v for k, v in r.items() if k != "metric"} for r in rows]
    kw = {"dataset": "d", "draw": 0, **kwargs}
    with pytest.raises(ValueError, match=repr(column)):
        results.write(rows, chapter="ch", params={}, **kw)
    assert results.load().empty  # nothing was written


@pytest.mark.parametrize("bad", ["a/b", "", "../up", ".hidden"])
def test_chapter_and_run_id_must_be_safe_file_names(root, bad):
    with pytest.raises(ValueError, match="file name"):
        results.write(_rows(1), chapter=bad, params={}, dataset="d", draw=0)
    with pytest.raises(ValueError, match="file name"):
        results.write(_rows(1), chapter="ch", params={}, dataset="d", draw=0, run_id=bad or "a b")


def test_empty_rows_write_nothing_and_an_empty_table_has_the_schema(root):
    assert results.write([], chapter="ch", params={}, dataset="d", draw=0) is None
    df = results.load()
    assert df.empty and list(df.columns) == list(results.COLUMNS)


def test_load_filters(root):
    results.write(_rows(3), chapter="a", params={"k": 5}, dataset="d", draw=0, k=5)
    results.write(_rows(2, quantity="peak"), chapter="b", params={"k": 10}, dataset="e", draw=0, k=10)
    assert len(results.load(chapter="a")) == 3
    assert len(results.load(quantity="peak")) == 2
    assert len(results.load(k=[5, 10])) == 5
    assert len(results.load(chapter="b", params={"k": 10})) == 2
    assert len(results.load(chapter="b", params={"k": 5})) == 0
    assert len(results.load(tau=None)) == 5  # null filter
    with pytest.raises(ValueError, match="unknown filter column.*'chaptr'"):
        results.load(chaptr="a")


def test_a_params_filter_reads_only_that_configurations_files(root, monkeypatch):
    # every run of every configuration stays in the table; a load for one configuration must not read
    # the others' files (a chapter's folder grows with every rerun), and must return the same rows
    for k in (5, 6, 7):
        for _ in range(3):
            results.write(_rows(2), chapter="a", params={"k": k}, dataset="d", draw=0, k=k,
                          run_id=results.new_run_id())
    full = results.load(chapter="a")
    read = []
    real = results._read
    monkeypatch.setattr(results, "_read", lambda files: (read.append(list(files)), real(read[-1]))[1])
    one = results.load(chapter="a", params={"k": 6})
    assert len(read[-1]) == 3 and all(results.params_hash({"k": 6}) in f.name for f in read[-1])
    pd.testing.assert_frame_equal(one, full[full["k"] == 6].reset_index(drop=True))
    assert len(one) == 2  # the latest of the three runs
    # a chapter name may end in "_" (the file name then holds "___"): still found by its params
    results.write(_rows(2), chapter="b_", params={"k": 5}, dataset="d", draw=0, k=5)
    assert len(results.load(chapter="b_", params={"k": 5})) == 2


def test_an_interrupted_write_leaves_nothing_and_stray_temp_files_are_ignored(root, monkeypatch):
    import pyarrow.parquet as pq

    results.write(_rows(2), chapter="ch", params={}, dataset="d", draw=0)

    def broken(table, where, **kw):
        open(where, "wb").write(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        results.write(_rows(2, quantity="peak"), chapter="ch", params={}, dataset="d", draw=0)
    assert [p.name.startswith(".") for p in (root / "ch").iterdir()] == [False]
    (root / "ch" / ".ch__x__y__z.parquet.123.tmp").write_bytes(b"PAR1 another writer, mid-write")
    assert len(results.load()) == 2


def test_compact_deletes_only_superseded_files(root):
    for offset in (0.0, 1.0, 2.0):
        results.write(_rows(2, offset=offset), chapter="ch", params={}, dataset="d", draw=0,
                      run_id=results.new_run_id())
    results.write(_rows(2), chapter="ch", params={"k": 1}, dataset="d", draw=0)
    before = results.load()
    gone = results.compact()
    assert len(gone) == 2 and not any(p.exists() for p in gone)
    pd.testing.assert_frame_equal(results.load(), before)
    assert len(results.load(include_superseded=True)) == 4
    assert results.compact() == []



def test_compact_keeps_exactly_the_parts_of_each_keys_winning_run(root):
    """compact() reduces each part to its runs' first writes; what it keeps must equal the winners found on
    every row of the table (``_latest_only``): parts holding several draws, runs spanning several parts, a
    part superseded for one draw but not for another, two chapters and two parameter sets."""
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    for i in range(8):
        rid = results.new_run_id()
        for quantity in ("layer_pair", "peak"):  # two parts per run, written apart in time
            for dataset in ("d", "e"):
                draws = [d for d in range(3) if rng.random() < 0.6]  # the other draws: left to earlier runs
                if not draws:
                    continue
                rows = [r | {"draw": d} for d in draws for r in _rows(2, quantity=quantity, offset=i)]
                results.write(rows, chapter=("ch", "ch2")[i % 2], params={"k": i % 3 == 0}, dataset=dataset,
                              run_id=rid)
    files = results._files(root)
    every_row = pd.concat([pq.read_table(f).to_pandas().assign(_file=str(f)) for f in files], ignore_index=True)
    expected_kept = set(results._latest_only(every_row)["_file"])
    assert 0 < len(expected_kept) < len(files)  # the table has something to keep and something to drop
    live = results.load()
    gone = results.compact()
    assert {str(p) for p in gone} == {str(f) for f in files} - expected_kept
    pd.testing.assert_frame_equal(results.load(), live)


# ------------------------------------------------------------------------------------- concurrency

N_WRITERS, N_RUNS, N_ROWS = 8, 3, 10


def _writer(w, root, start):
    """Write N_RUNS runs of two parts each; run 0 is written twice (a rerun that must replace, not add)."""
    start.wait(120)  # all writers begin together, after their imports
    for r in range(N_RUNS):
        for attempt in range(2 if r == 0 else 1):
            rid = results.new_run_id()
            for quantity in ("layer_pair", "peak"):
                rows = [{"metric": "mutual_knn", "quantity": quantity, "layer_x": f"layer.{i}",
                         "score": w + r / 10 + i / 1000, "attempt": attempt} for i in range(N_ROWS)]
                results.write(rows, chapter=f"conc{w % 2}", params={"worker": w, "run": r}, dataset="toy",
                              draw=0, run_id=rid, root=root)


def test_archiving_moves_superseded_runs_out_of_the_live_table_and_keeps_them(root, monkeypatch):
    for offset in (0.0, 1.0, 2.0):
        results.write(_rows(2, offset=offset), chapter="ch", params={}, dataset="d", draw=0,
                      run_id=results.new_run_id())
    live, history = results.load(), results.load(include_superseded=True)
    moved = results.compact(archive=True)
    assert len(moved) == 2 and not any(p.exists() for p in moved)
    assert sorted(p.name for p in (root / "ch" / results.SUPERSEDED).iterdir()) == sorted(p.name for p in moved)
    assert len(list((root / "ch").glob("*.parquet"))) == 1  # only the latest run is read by load()
    pd.testing.assert_frame_equal(results.load(), live)
    pd.testing.assert_frame_equal(results.load(include_superseded=True), history)
    assert results.compact(archive=True) == []  # nothing left to move; archived parts are not live


def test_concurrent_writers_lose_no_rows_and_a_reader_never_fails(tmp_path):
    root = tmp_path / "results"
    ctx = mp.get_context("spawn")  # no fork of a process whose pyarrow threads are running
    start = ctx.Barrier(N_WRITERS)
    procs = [ctx.Process(target=_writer, args=(w, root, start)) for w in range(N_WRITERS)]
    for p in procs:
        p.start()
    reads = 0
    ident = ["chapter", "params_hash", "quantity", "layer_x"]
    while True:
        alive = any(p.is_alive() for p in procs)
        df = results.load(root=root)  # must never raise while files appear
        assert not df.duplicated(subset=ident).any(), "a reader saw a row twice"
        reads += 1
        if not alive:
            break
        time.sleep(0.01)
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * N_WRITERS
    df = results.load(root=root, expand_extra=True)
    assert len(df) == N_WRITERS * N_RUNS * 2 * N_ROWS
    assert not df.duplicated(subset=ident).any()
    assert df["params_hash"].nunique() == N_WRITERS * N_RUNS
    assert (df["attempt"] == 1).sum() == N_WRITERS * 2 * N_ROWS  # the rerun of run 0 replaced the first try
    assert df.groupby("params_hash").size().eq(2 * N_ROWS).all()
    raw = results.load(root=root, include_superseded=True)
    assert len(raw) == N_WRITERS * (N_RUNS + 1) * 2 * N_ROWS  # every written row is on disk
    assert reads >= 2


# ------------------------------------------------------------------------------------- aggregation


@pytest.mark.parametrize("seed", [0, 1])
def test_aggregate_equals_a_recomputation_by_hand(root, seed):
    rng = np.random.default_rng(seed)
    pairs = [("dinov2-small", "smollm2-135m"), ("dinov2-small", "minilm-l6"), ("efficientnet-lite0", "minilm-l6")]
    truth = {}
    for draw in range(5):
        rows = []
        for mx, my in pairs:
            s, c = rng.uniform(0, 0.3), rng.uniform(-0.1, 0.2)
            truth.setdefault((mx, my), []).append((s, c))
            rows.append({"model_x": mx, "model_y": my, "metric": "mutual_knn", "quantity": "peak",
                         "score": s, "calibrated": c})
        results.write(rows, chapter="ch", params={"n_draws": 5}, dataset="coco-mini/caption-r", draw=draw,
                      seed=draw)
    results.write([{"model_x": "dinov2-small", "model_y": "smollm2-135m", "metric": "mutual_knn",
                    "quantity": "peak", "score": 0.2}], chapter="ch", params={"n_draws": 5}, dataset="wit-1024",
                  draw=0)
    df = results.load(chapter="ch", quantity="peak")
    agg = results.aggregate(df, by=["dataset", "model_x", "model_y"], values=["score", "calibrated"])
    assert len(agg) == 4
    for (mx, my), vals in truth.items():
        got = agg[(agg["dataset"] == "coco-mini/caption-r") & (agg["model_x"] == mx) & (agg["model_y"] == my)]
        s, c = np.array(vals).T
        assert got["score_mean"].item() == pytest.approx(np.mean(s), abs=1e-12)
        assert got["score_std"].item() == pytest.approx(np.std(s, ddof=1), abs=1e-12)
        assert got["calibrated_mean"].item() == pytest.approx(np.mean(c), abs=1e-12)
        assert got["calibrated_std"].item() == pytest.approx(np.std(c, ddof=1), abs=1e-12)
        assert got["n_draws"].item() == 5 and not got["single_draw"].item()
    wit = agg[agg["dataset"] == "wit-1024"]
    assert wit["score_mean"].item() == 0.2
    assert np.isnan(wit["score_std"].item())  # one draw: no band, not a zero-width one
    assert wit["n_draws"].item() == 1 and wit["single_draw"].item()


def test_aggregate_rejects_groups_that_hold_two_rows_per_draw(root):
    results.write(_rows(3), chapter="ch", params={}, dataset="d", draw=0)
    df = results.load()
    with pytest.raises(ValueError, match=r"vary within the groups: \['layer_x', 'depth_x'"):
        results.aggregate(df, by=["model_x", "model_y"])
    with pytest.raises(ValueError, match="'nope'"):
        results.aggregate(df, by=["nope"])
    assert len(results.aggregate(df, by=["model_x", "layer_x"])) == 3


def test_format_mean_std():
    assert formatting.format_mean_std(0.12345, 0.0041, 5) == "0.123 ± 0.004 (5 draws)"
    assert formatting.format_mean_std(0.2, float("nan"), 1) == "0.200 (one draw; cannot be repeated)"


def test_numeric_columns_are_coerced_as_arrays_exactly_as_value_by_value():
    """results_schema._coerce checks a numeric column as one array; the same values given as Python objects
    (an object column: checked one by one) must give the same frame, and the same errors."""
    from prh_lib.results.schema import _validate_rows

    n = 7
    frame = pd.DataFrame({
        "metric": ["mutual_knn"] * n, "quantity": ["layer_pair"] * n, "dataset": ["d"] * n,
        "draw": np.arange(n), "k": pd.array([10, None, 10, 5, 5, 10, 10], dtype="Int64"),
        "n": np.array([239.0, np.nan, 239.0, 1024.0, 1.0, 0.0, -3.0]),  # whole floats and NaN: integers
        "seed": np.arange(n, dtype=np.int32), "score": np.linspace(-0.1, 0.9, n).astype(np.float32),
        "depth_x": pd.array([0.0, None, 0.5, 1.0, 0.25, 0.75, 1.0], dtype="Float64"),
        "tau": np.array([1, 2, 3, 4, 5, 6, 7], dtype=np.int64),  # integers in a float column
        "p": np.array([0.01, np.nan, 1.0, 0.0, 0.5, 0.2, 0.3]), "ci_low": np.arange(n) / 10,
    })
    as_objects = frame.astype(object).where(frame.notna(), None)
    fast, slow = _validate_rows(frame), _validate_rows(as_objects)
    pd.testing.assert_frame_equal(fast, slow)
    assert str(fast["k"].dtype) == "Int64" and fast["k"].isna().tolist() == [False, True] + [False] * 5
    for column, values, message in [
        ("n", np.array([1.0, 2.5] + [1.0] * (n - 2)), r"column 'n' must hold integers \(int64\); got 2.5"),
        ("n", np.array([1.0, np.inf] + [1.0] * (n - 2)), r"column 'n' must hold integers \(int64\); got inf"),
        ("k", np.array([1.0, 1e20] + [1.0] * (n - 2)), r"column 'k' must hold integers \(int64\); got 1e\+20"),
        ("seed", np.array([1.0, 2.0 ** 63] + [1.0] * (n - 2)), r"column 'seed' must hold integers \(int64\)"),
        ("p", np.array([0.5, 1.5] + [0.5] * (n - 2)), r"column 'p' must lie in \[0.0, 1.0\]; got \[1.5\]"),
        ("score", np.array([True] * n), r"column 'score' must hold numbers"),
        ("draw", pd.array([0, None] + [1] * (n - 2), dtype="Int64"), r"required column 'draw' has null values in rows \[1\]"),
    ]:
        for given in (frame.assign(**{column: values}), as_objects.assign(**{column: list(values)})):
            with pytest.raises(ValueError, match=message):
                _validate_rows(given)


def test_expand_extra_parses_each_distinct_text_once_and_matches_row_by_row():
    """expand_extra_columns parses the distinct ``extra`` texts only; the frame must equal parsing each row:
    keys missing in some rows (NaN), ints, floats with NaN, strings, lists, and a non-default index."""
    import json

    texts = ['{"a":1,"b":"x"}', '{"a":2}', '{"a":1,"b":"x"}', '{"c":NaN,"d":[1,2]}', '{}', '{"a":2}']
    df = pd.DataFrame({"score": np.arange(len(texts), dtype=float), "extra": texts},
                      index=pd.Index([10, 3, 7, 1, 2, 5], name="row"))
    by_row = pd.DataFrame([json.loads(t) for t in texts], index=df.index)
    expected = pd.concat([df, by_row], axis=1)
    got = results.expand_extra_columns(df)
    pd.testing.assert_frame_equal(got, expected)
    assert got.loc[7, "b"] == "x" and np.isnan(got.loc[3, "c"]) and got.loc[1, "d"] == [1, 2]
