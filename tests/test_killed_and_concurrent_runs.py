"""Killed and concurrent runs (issue 27, items 2 and 3) at the level where a run's results are written.

``kill -9`` of a run while it writes a results part (inside the Parquet write) and then the same run again:
the table holds the rerun's rows once, nothing partial from the killed run. Two runs of the same chapter at
once on one results folder: both complete, and every ``(chapter, params, dataset, draw)`` holds the rows of
exactly one of them, never an interleaving. (Feature files under ``kill -9`` are covered by
``tests/test_cache_integrity.py::test_killed_write_leaves_nothing_that_is_read...``.)

Below: the rule that makes a ``prh-run`` all or nothing (a started run is invisible until it completes,
:func:`prh_lib.results.start_run`) and the per-chapter lock (:func:`prh_lib.run.runner.chapter_lock`); the real CLI
killed and run twice at once is in ``tests/test_prh_run_killed_and_concurrent.py``.
"""

import os
import subprocess
import sys
import threading

import pytest

from prh_lib import paths, results

_RUN = """
import os, signal, sys, time
import pyarrow.parquet as pq
from prh_lib import results
root, n_draws, kill_at, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
real = pq.write_table
def dying(table, where, *a, **kw):  # half a Parquet file on disk, then SIGKILL
    with open(where, "wb") as fh:
        fh.write(b"PAR1" + b"x" * 100)
    os.kill(os.getpid(), signal.SIGKILL)
for draw in range(n_draws):
    pq.write_table = dying if draw == kill_at else real
    for part in range(2):  # a cell writing one configuration in two parts
        rows = [{"model_x": "a", "model_y": "b", "layer_x": f"layer.{i}", "layer_y": f"part.{part}",
                 "depth_x": i / 4, "depth_y": 1.0, "metric": "mutual_knn", "score": draw + i / 10,
                 "quantity": "layer_pair"} for i in range(5)]
        results.write(rows, chapter="ch", params={"k": 10}, dataset="d", draw=draw, root=root)
        time.sleep(pause)
"""


def _run(root, *, n_draws=3, kill_at=-1, pause=0.0, wait=True):
    env = {**os.environ, "PYTHONPATH": str(paths.repo_root())}
    env.pop("PRH_RUN_ID", None)
    proc = subprocess.Popen([sys.executable, "-c", _RUN, str(root), str(n_draws), str(kill_at), str(pause)], env=env)
    return proc.wait() if wait else proc


@pytest.mark.parametrize("kill_at", [0, 1])
def test_killed_run_then_rerun_leaves_each_row_once(tmp_path, kill_at):
    assert _run(tmp_path, kill_at=kill_at) == -9
    killed = results.load(root=tmp_path)
    assert set(killed["draw"]) == set(range(kill_at))  # the half-written part is never read
    assert _run(tmp_path) == 0
    table = results.load(root=tmp_path)
    assert len(table) == 3 * 2 * 5 and table["run_id"].nunique() == 1
    key = ["draw", "layer_x", "layer_y"]
    assert not table.duplicated(key).any()
    assert sorted(table["score"]) == sorted(d + i / 10 for d in range(3) for _ in range(2) for i in range(5))


def test_two_runs_at_once_complete_and_never_interleave(tmp_path):
    procs = [_run(tmp_path, n_draws=4, pause=0.05, wait=False) for _ in range(2)]
    assert [p.wait() for p in procs] == [0, 0]
    raw = results.load(root=tmp_path, include_superseded=True)
    assert raw["run_id"].nunique() == 2 and len(raw) == 2 * 4 * 2 * 5  # both complete, nothing lost
    table = results.load(root=tmp_path)
    assert len(table) == 4 * 2 * 5 and not table.duplicated(["draw", "layer_x", "layer_y"]).any()
    assert (table.groupby("draw")["run_id"].nunique() == 1).all()  # one run per configuration
    assert sorted(table["score"]) == sorted(raw.query(f"run_id == '{raw['run_id'].iloc[0]}'")["score"])


# ----------------------------------------------------------------------- runs of prh-run: all or nothing


def _write(root, run_id, draw, score):
    rows = [{"metric": "mutual_knn", "score": score, "quantity": "peak"}]
    return results.write(rows, chapter="ch", params={"k": 10}, dataset="d", draw=draw, run_id=run_id, root=root)


def test_a_started_run_is_invisible_until_it_completes(tmp_path, monkeypatch):
    monkeypatch.delenv("PRH_RUN_ID", raising=False)
    _write(tmp_path, "r1", 0, 0.1)  # a run without markers (papermill, Jupyter, a script): visible at once
    _write(tmp_path, "r1", 1, 0.1)
    assert set(results.load(root=tmp_path)["run_id"]) == {"r1"}
    marker = results.start_run("r2", root=tmp_path)
    assert marker.name == "r2.started" and results.unfinished_runs(root=tmp_path) == {"r2"}
    _write(tmp_path, "r2", 0, 0.2)  # one part of two, then the run is killed
    table = results.load(root=tmp_path)
    assert list(table["run_id"]) == ["r1", "r1"] and list(table["score"]) == [0.1, 0.1]
    assert len(results.load(root=tmp_path, include_superseded=True)) == 3  # every part on disk
    monkeypatch.setenv("PRH_RUN_ID", "r2")  # the run itself reads what it has written so far
    assert list(results.load(root=tmp_path, draw=0)["run_id"]) == ["r2"]
    monkeypatch.delenv("PRH_RUN_ID")
    assert results.compact(root=tmp_path, archive=True) == []  # the unfinished run supersedes nothing
    assert list(results.load(root=tmp_path)["run_id"]) == ["r1", "r1"]
    _write(tmp_path, "r2", 1, 0.2)
    assert results.complete_run("r2", root=tmp_path).name == "r2.complete"
    assert results.unfinished_runs(root=tmp_path) == set()
    table = results.load(root=tmp_path)
    assert list(table["run_id"]) == ["r2", "r2"] and list(table["score"]) == [0.2, 0.2]
    assert len(results.compact(root=tmp_path, archive=True)) == 2  # now r1 is superseded


def test_complete_run_of_a_run_never_started_names_the_marker(tmp_path):
    with pytest.raises(FileNotFoundError, match="never started.*r9.started"):
        results.complete_run("r9", root=tmp_path)


_HOLD = """
import sys, time
from prh_lib.run import runner
with runner.chapter_lock("ch"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_chapter_lock_waits_with_one_line_and_a_killed_holder_leaves_no_stale_lock(tmp_path, monkeypatch):
    import io

    from prh_lib.run import runner

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    env = {**os.environ, "PYTHONPATH": str(paths.repo_root())}
    holder = subprocess.Popen([sys.executable, "-c", _HOLD], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        log = io.StringIO()
        threading.Timer(0.5, holder.kill).start()  # kill -9 of the holder while this one waits
        with runner.chapter_lock("ch", log=log) as lock:
            assert holder.wait() == -9
        assert lock == tmp_path / "locks" / "ch.lock"
        assert log.getvalue().count("\n") == 1 and "ch: another prh-run" in log.getvalue()
        assert str(lock) in log.getvalue()
        with runner.chapter_lock("ch", log=log):  # released when the body ends: taken again at once
            pass
        assert log.getvalue().count("\n") == 1
    finally:
        holder.kill()
        holder.wait()


def test_chapter_lock_in_a_read_only_cache_names_the_lock_file(tmp_path, monkeypatch):
    from prh_lib.run import runner
    from prh_lib.paths import CacheWriteError

    cache = tmp_path / "ro"
    cache.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(cache)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a read-only tmpfs here (needs root and CAP_SYS_ADMIN)")
    monkeypatch.setenv("PRH_CACHE_DIR", str(cache))
    try:
        with pytest.raises(CacheWriteError, match=rf"{cache / 'locks' / 'ch.lock'}.*read-only"):
            with runner.chapter_lock("ch"):
                pass
    finally:
        subprocess.run(["umount", "-l", str(cache)], check=False)
