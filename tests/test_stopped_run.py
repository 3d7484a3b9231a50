"""A stopped ``prh-run`` stops everything it started (issue 45, item 2).

A real ``prh-run`` (``prh_lib.run.runner.main`` in a subprocess, its notebooks folder pointed at two tiny notebooks)
gets SIGTERM or SIGINT at its own pid alone, as ``kill PID``, a Python parent's ``terminate()`` or a supervisor
sends it, while both kernels are inside their cells. Afterwards no process it started survives, no page or
notebook is written later, the results table holds no row of the stopped runs, and it exits non-zero saying it
was stopped. The phase is read from files the kernels write, never from sleeps.
"""

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from prh_lib import paths, results

# each kernel says it is inside its cell (its pid in a marker file), writes one results part, then works for
# SLEEP_S before its page could be written
SLEEP_S = 8
NOTEBOOK = textwrap.dedent('''\
    # %% tags=["parameters"]
    k = 1

    # %%
    import os, time
    from pathlib import Path
    from prh_lib import results

    results.write([{{"model_x": "a", "model_y": "b", "metric": "mutual_knn", "quantity": "peak", "score": 0.5}}],
                  chapter="{name}", params={{"k": k}}, dataset="toy", draw=0, k=k)
    Path(os.environ["MARKERS"], f"{name}-{{k}}-{{os.getpid()}}").write_text("started")
    time.sleep({sleep})
    ''')

DRIVER = textwrap.dedent('''\
    import sys
    from pathlib import Path
    from prh_lib import paths
    from prh_lib.run import runner

    paths.notebooks_dir = lambda: Path(sys.argv[1])
    sys.exit(runner.main(sys.argv[2:]))
    ''')


def _wait(condition, what: str, timeout: float = 240.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


@pytest.mark.parametrize("signum, mode", [(signal.SIGTERM, "two notebooks"), (signal.SIGINT, "sweep")])
def test_a_stopped_run_leaves_nothing_running_and_writes_nothing_later(tmp_path, monkeypatch, signum, mode):
    nbs, markers, out, runs = (tmp_path / d for d in ("notebooks", "markers", "out", "runs"))
    for d in (nbs, markers):
        d.mkdir()
    for name in ("stop_a", "stop_b"):
        (nbs / f"{name}.py").write_text(NOTEBOOK.format(name=name, sleep=SLEEP_S))
    args = (["stop_a", "stop_b", "-j", "2", "--no-build", "--force", "--output-dir", str(out)]
            if mode == "two notebooks" else ["stop_a", "--sweep", "k=1,2"])
    env = {**os.environ, "PRH_CACHE_DIR": str(tmp_path / "cache"), "PRH_RUNS_DIR": str(runs), "MARKERS": str(markers),
           "PYTHONPATH": str(paths.repo_root()), "PYTHONUNBUFFERED": "1"}
    env.pop("PRH_RUN_ID", None)
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(nbs), *args], env=env, cwd=paths.repo_root(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    kernels = 2 if mode == "two notebooks" else 1
    try:
        _wait(lambda: len(list(markers.iterdir())) == kernels or proc.poll() is not None, "the kernels to start")
        assert proc.poll() is None, proc.communicate()[0]
        started = psutil.Process(proc.pid).children(recursive=True)  # workers, kernels (and their helpers)
        kernel_pids = {int(m.name.rsplit("-", 1)[1]) for m in markers.iterdir()}
        assert kernel_pids <= {p.pid for p in started}
        proc.send_signal(signum)  # to its pid alone, not to its process group
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, output
    assert f"stopped by {name}" in output
    _, alive = psutil.wait_procs(started, timeout=5)
    assert not alive, f"still running after the run stopped: {[(p.pid, p.name()) for p in alive]}"
    # nothing is written later: wait past the time the kernels would have needed to finish their cells
    time.sleep(SLEEP_S + 2)
    assert not out.exists() or not list(out.glob("*.ipynb"))
    assert not runs.exists() or not list(runs.rglob("*.ipynb"))
    assert len(list(markers.iterdir())) == kernels  # the sweep's second combination never started
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    for chapter in ("stop_a", "stop_b"):  # the stopped runs never completed: the table shows none of their rows
        assert results.load(chapter=chapter).empty


BATCH_DRIVER = textwrap.dedent('''\
    import os, sys, time
    from pathlib import Path
    import submitit
    from prh_lib import batch

    def job(markers):  # a local job that works for a while, then writes its output
        Path(markers, f"job-{os.getpid()}").write_text("started")
        time.sleep(20)
        Path(markers, "done").write_text("written after the stop")

    def run_jobs(jobs, *, executor, folder, wait, **_):
        ex = submitit.LocalExecutor(folder=folder or sys.argv[2])
        ex.update_parameters(timeout_min=5)
        return ex.submit(job, sys.argv[1]).result()

    batch._study_args, batch.describe_plan, batch.run_jobs = (lambda args, parser: []), (lambda jobs: ""), run_jobs
    sys.exit(batch.main(["run", "--profile", "rehearsal", "--executor", "local", "--folder", sys.argv[2]]))
    ''')


def test_a_stopped_prh_batch_run_ends_its_local_jobs(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {**os.environ, "PRH_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(paths.repo_root())}
    proc = subprocess.Popen([sys.executable, "-c", BATCH_DRIVER, str(markers), str(tmp_path / "submitit")], env=env,
                            cwd=paths.repo_root(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait(lambda: any(markers.iterdir()) or proc.poll() is not None, "the local job to start")
        assert proc.poll() is None, proc.communicate()[0]
        started = psutil.Process(proc.pid).children(recursive=True)
        job_pid = int(next(markers.iterdir()).name.split("-")[1])
        assert job_pid in {p.pid for p in started}
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM and "stopped by SIGTERM" in output, output
    _, alive = psutil.wait_procs(started, timeout=5)
    assert not alive, f"still running after prh-batch stopped: {[(p.pid, p.name()) for p in alive]}"
    assert not (markers / "done").exists()
