"""Killed and concurrent runs (issue 27, items 2 and 3) at the level where a run's results are written.

``kill -9`` of a run while it writes a results part (inside the Parquet write) and then the same run again:
the table holds the rerun's rows once, nothing partial from the killed run. Two runs of the same chapter at
once on one results folder: both complete, and every ``(chapter, params, dataset, draw)`` holds the rows of
exactly one of them, never an interleaving. (Feature files under ``kill -9`` are covered by
``tests/test_cache_integrity.py::test_killed_write_leaves_nothing_that_is_read...``.)
"""

import os
import subprocess
import sys

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
