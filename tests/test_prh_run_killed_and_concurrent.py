"""``prh-run`` itself killed with SIGKILL, and two ``prh-run`` of one chapter at once (issue 27, items 2 and 3).

Real subprocesses of the CLI (``python -m prh_lib.run.runner``) on the smallest chapter (``sec3_1b_pca``, the
``smoke`` profile on one model pair and one dataset of 24 pairs in two caption draws: two results parts) in a
cache of their own (zoo models linked in, features cold). The phase is read from what the run writes: its
progress lines on stderr (``extracting ...``) and the results parts that appear in the cache, never from
sleeps. Each check compares the results table with a clean single run of the same command.
"""

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from prh_lib import paths, results
from prh_lib.results.schema import PROVENANCE

CHAPTER = "sec3_1b_pca"
OVERRIDES = ['comparisons=[["efficientnet-lite0", "minilm-l6"]]',
             'datasets=[{"name": "coco-mini", "source": "coco-folder", "n_pairs": 24, "repetitions": 2, '
             '"draws": "captions"}]']
#: what identifies a row and what it says; the rest of the provenance (run id, time, commit) differs by run
COMPARED = [c for c in results.COLUMNS if c not in PROVENANCE] + ["params_hash", "extra"]
#: what identifies a row: one row per value of these in one run
IDENTITY = [c for c in COMPARED if c not in ("score", "calibrated", "tau", "p")]
WAIT_S = 300  # the most any one step may take on a busy 2-core machine before the test gives up


class Run:
    """One ``prh-run`` subprocess on ``cache``, its output lines (stdout and stderr) collected by a thread."""

    def __init__(self, cache: Path, out: Path):
        env = {**os.environ, "PRH_CACHE_DIR": str(cache), "PYTHONPATH": str(paths.repo_root()),
               "PYTHONUNBUFFERED": "1"}
        env.pop("PRH_RUN_ID", None)
        cmd = [sys.executable, "-m", "prh_lib.run.runner", CHAPTER, "--params", "smoke", "--no-build",
               "--output-dir", str(out)]
        for o in OVERRIDES:
            cmd += ["-p", o]
        self.proc = subprocess.Popen(cmd, env=env, cwd=paths.repo_root(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._new: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            self._new.put(line)
        self._new.put(None)

    def wait_for_line(self, text: str) -> str:
        """Block until an output line contains ``text``; fail if the run ends first."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                line = self._new.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                pytest.fail(f"prh-run ended (rc {self.proc.wait()}) before printing {text!r}:\n{self.output}")
            if text in line:
                return line
        pytest.fail(f"prh-run printed no {text!r} within {WAIT_S} s:\n{self.output}")

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def finish(self) -> int:
        rc = self.proc.wait(timeout=WAIT_S)
        time.sleep(0.2)  # the reader thread takes the last lines
        return rc

    def kill(self, *, tree: bool = False) -> int:
        """SIGKILL the runner process: only it, as ``kill -9 <pid>`` does (its orphaned kernel notices within
        a second and exits, and may write a part meanwhile), or with ``tree`` its kernel first and then it (as
        the out-of-memory killer or ``kill -9`` of every process of the run: nothing is written after)."""
        import psutil

        if tree:
            for child in psutil.Process(self.proc.pid).children(recursive=True):
                child.send_signal(signal.SIGKILL)
        self.proc.send_signal(signal.SIGKILL)
        return self.finish()


def _parts(cache: Path) -> set[Path]:
    return set((cache / "results" / CHAPTER).glob("*.parquet"))


def _kill_after_first_part(cache: Path, out: Path, *, tree: bool = False) -> tuple[Run, set[Path]]:
    """Start a run, SIGKILL it (:meth:`Run.kill`) as soon as it has written its first results part; the parts
    it left."""
    before = _parts(cache)
    run = Run(cache, out)
    deadline = time.monotonic() + WAIT_S
    while not (_parts(cache) - before):
        assert run.proc.poll() is None, f"the run ended before writing a results part:\n{run.output}"
        assert time.monotonic() < deadline, f"no results part within {WAIT_S} s:\n{run.output}"
        time.sleep(0.01)
    assert run.kill(tree=tree) == -signal.SIGKILL, "the run finished before it could be killed between two parts"
    return run, _parts(cache) - before


def _rows(cache: Path) -> pd.DataFrame:
    """The chapter's rows that ``results.load`` returns from ``cache`` (compared columns, in a fixed order)."""
    table = results.load(root=cache / "results", chapter=CHAPTER)
    return table[COMPARED].sort_values(COMPARED).reset_index(drop=True) if len(table) else table[COMPARED]


def _table(cache: Path) -> pd.DataFrame:
    return results.load(root=cache / "results", chapter=CHAPTER)


@pytest.fixture(scope="module")
def caches(tmp_path_factory):
    """Two fresh caches with the zoo models linked in: ``faulty`` for the killed runs, ``clean`` for one
    clean run (its features linked from ``faulty`` once they are complete)."""
    made = {}
    for name in ("faulty", "clean"):
        cache = tmp_path_factory.mktemp(name)
        (cache / "models").symlink_to((paths.cache_root() / "models").resolve(), target_is_directory=True)
        made[name] = cache
    return made


@pytest.fixture(scope="module")
def killed_then_rerun(caches, tmp_path_factory):
    """SIGKILL during extraction, then during scoring (after the first results part), then the same command
    to the end; the table after each step, and the clean run's rows."""
    cache, out = caches["faulty"], tmp_path_factory.mktemp("out")
    seen = {}
    run = Run(cache, out)  # 1. killed while it extracts features (cold cache)
    run.wait_for_line("extracting ")
    assert run.kill() == -signal.SIGKILL
    seen["extraction"] = (_parts(cache), _table(cache))
    run, left = _kill_after_first_part(cache, out, tree=True)  # 2. killed (with its kernel) between two parts
    seen["scoring"] = (left, _table(cache))
    run = Run(cache, out)  # 3. the same command again
    assert run.finish() == 0, run.output
    seen["rerun"] = _table(cache)
    clean = caches["clean"]  # a clean single run of the same command (features computed above)
    (clean / "features").symlink_to(cache / "features", target_is_directory=True)
    run = Run(clean, tmp_path_factory.mktemp("clean-out"))
    assert run.finish() == 0, run.output
    seen["clean"] = _rows(clean)
    return seen


def test_killed_during_extraction_leaves_no_rows(killed_then_rerun):
    parts, table = killed_then_rerun["extraction"]
    assert not parts and table.empty


def test_killed_between_two_parts_leaves_no_partial_run(killed_then_rerun):
    left, table = killed_then_rerun["scoring"]
    assert len(left) == 1, f"the killed run left {len(left)} of its 2 parts: it was not killed between them"
    # its part is on disk, but a run that never completed is not in the table: no partial configuration
    assert table.empty, f"rows of a killed run are visible:\n{table[['dataset', 'draw', 'run_id']].drop_duplicates()}"


def test_rerun_after_kills_equals_a_clean_run(killed_then_rerun):
    table = killed_then_rerun["rerun"]
    assert table["run_id"].nunique() == 1  # one complete run, nothing of the killed ones
    assert not table.duplicated(IDENTITY).any()
    rows = table[COMPARED].sort_values(COMPARED).reset_index(drop=True)
    clean = killed_then_rerun["clean"]
    assert len(clean) > 0 and set(clean["draw"]) == {0, 1}
    pd.testing.assert_frame_equal(rows, clean)  # same row set, same scores


def test_killed_rerun_keeps_the_previous_complete_run(caches, killed_then_rerun, tmp_path):
    cache = caches["faulty"]
    before = _table(cache)
    _, left = _kill_after_first_part(cache, tmp_path)  # the runner only: its orphaned kernel may write on
    assert left
    after = _table(cache)
    # the complete run stays the latest for every draw: the killed run's first part replaces none of it
    assert set(after["run_id"]) == set(before["run_id"])
    pd.testing.assert_frame_equal(_rows(cache), killed_then_rerun["clean"])


def test_two_runs_at_once_take_turns_and_agree(caches, killed_then_rerun, tmp_path):
    cache = caches["faulty"]
    both = [Run(cache, tmp_path / "a"), Run(cache, tmp_path / "b")]  # started together: one finds the other
    for run in both:
        assert run.finish() == 0, run.output
    lock = cache / "locks" / f"{CHAPTER}.lock"
    waited = [line for run in both for line in run.lines if "waiting" in line]
    assert len(waited) == 1, "\n\n".join(run.output for run in both)  # one waited, once
    assert CHAPTER in waited[0] and str(lock) in waited[0]
    raw = results.load(root=cache / "results", chapter=CHAPTER, include_superseded=True)
    runs = raw.groupby("run_id")["created"].agg(["min", "max"]).sort_values("min").tail(2)
    assert runs["min"].iloc[1] >= runs["max"].iloc[0]  # never interleaved: one wrote after the other
    table = _table(cache)
    assert table["run_id"].nunique() == 1 and table["run_id"].iloc[0] == runs.index[1]
    for run_id in runs.index:  # each run complete, equal to the clean run
        rows = raw[raw["run_id"] == run_id][COMPARED].sort_values(COMPARED).reset_index(drop=True)
        pd.testing.assert_frame_equal(rows, killed_then_rerun["clean"])
