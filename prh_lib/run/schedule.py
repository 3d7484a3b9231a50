"""Executing several notebooks side by side: ``prh-run --jobs N``.

Lanes follow the cores this process may use (:func:`plan_lanes`); each kernel is told its share
(``PRH_CORES`` and :data:`THREAD_VARIABLES`), so kernels never oversubscribe the cores. Notebooks share only
content-keyed caches, written atomically, so their order changes no number; the longest runs first (the last
``prh-run``'s wall times in ``PRH_CACHE_DIR/index/notebook-seconds.json``, else :data:`TYPICAL_SECONDS`).

A stopped run stops everything it started: :func:`stopping_on_signals` turns SIGTERM, SIGINT and SIGHUP
into :class:`RunStopped` after ending every descendant process (workers and notebook kernels), so no page or
results part is written after the signal.

On a GPU (a profile with ``device`` other than ``"cpu"``) the default is one at a time: two kernels would
share its memory."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Mapping, Sequence

from prh_lib import paths
from prh_lib.parallel import available_cores


class NotebookFailed(RuntimeError):
    """A notebook raised while executing; the message names it and gives the error's last lines."""


class RunStopped(BaseException):
    """The run received a stop signal; its descendant processes have been ended. Like ``KeyboardInterrupt`` it is
    not an ``Exception``, so no ``except Exception`` (a sweep's per-combination handler) swallows it."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(f"stopped by {signal.Signals(signum).name}")


#: Signals that stop a run (terminal Ctrl-C, ``kill``, a closed terminal).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def end_descendants(timeout: float = 3.0) -> int:
    """Terminate every descendant of this process (SIGTERM, then SIGKILL after ``timeout`` s); return how many."""
    import psutil

    children = psutil.Process().children(recursive=True)  # one snapshot: a worker's kernel is listed with it
    for child in children:
        with _gone_ok(psutil):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=timeout)
    for child in alive:
        with _gone_ok(psutil):
            child.kill()
    psutil.wait_procs(alive, timeout=timeout)
    return len(children)


@contextmanager
def _gone_ok(psutil):
    try:
        yield
    except psutil.NoSuchProcess:
        pass


@contextmanager
def stopping_on_signals():
    """While the body runs, a stop signal ends every descendant process and raises :class:`RunStopped`.

    Workers and notebook kernels are this process's descendants (kernels in sessions of their own, so a terminal's
    Ctrl-C reaches only this process and the workers, which ignore it); a signal to this process alone (``kill PID``, a
    supervisor's ``terminate()``) would otherwise leave them writing pages after the run has gone. Further stop signals
    are ignored while the first is handled."""
    def stop(signum, frame):
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        end_descendants()
        raise RunStopped(signum)

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    old = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def plan_lanes(cores: int, n_notebooks: int, *, device: str = "cpu") -> tuple[int, int]:
    """``(lanes, cores per lane)``: notebooks run side by side and the cores each kernel may use.

    On a CPU with up to 3 cores two lanes of one core (the reference machine's plan: one notebook's scoring leaves its
    other core idle); with more, one lane per two cores (each kernel scores two draws side by side), never more lanes
    than notebooks. On a GPU one lane (two kernels would share its memory) with every core. Cores are split evenly; a
    remainder stays with the system."""
    cores, n = max(1, int(cores)), max(1, int(n_notebooks))
    if str(device) != "cpu":
        return 1, cores
    lanes = min(n, min(2, cores) if cores <= 3 else cores // 2)
    return lanes, max(1, cores // lanes)


def default_jobs(params: Mapping[str, object], n_notebooks: int = 8) -> int:
    """Notebooks run side by side by default: ``PRH_JOBS`` when set, else :func:`plan_lanes` of this machine.

    Raises
    ------
    ValueError
        If ``PRH_JOBS`` is not a positive integer.
    """
    env = os.environ.get("PRH_JOBS")
    if env is not None:
        if not env.strip().isdigit() or int(env) < 1:
            raise ValueError(f"PRH_JOBS must be a positive integer; got {env!r}")
        return int(env)
    return plan_lanes(available_cores(), n_notebooks, device=str(params.get("device", "cpu")))[0]


def _seconds_file() -> Path:
    return paths.cache_dir("index") / "notebook-seconds.json"


#: Cold wall times (s) of the offline profile's notebooks on the 2-core reference machine, after the extraction step
#: (fresh clone of 4f780a4, Section 3.1 less its pooling variants' extraction, now planned): the order when no run has
#: been timed here yet (a fresh clone). Only the order depends on them.
TYPICAL_SECONDS = {"sec3_1_layerwise": 250, "appg_k_n_ablation": 314, "sec3_3_regimes": 311,
                   "appf_caption_detail": 262, "sec3_2_capability": 250, "robustness": 234, "ch_displacement": 204,
                   "sec3_1b_pca": 156, "ch_concepts": 57}


def remembered_seconds() -> dict[str, float]:
    """Wall time of each notebook in the last ``prh-run`` that timed it (empty when unreadable or none)."""
    try:
        data = json.loads(_seconds_file().read_text())
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def _remember(seconds: Mapping[str, float]) -> None:
    stored = {**remembered_seconds(), **seconds}
    try:
        with paths.atomic_path(_seconds_file()) as tmp:
            tmp.write_text(json.dumps(stored, indent=1, sort_keys=True))
    except OSError:
        pass


#: Thread-count variables a kernel's libraries read when they start (torch's intra-op pool, BLAS).
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _execute(run, name: str, params: dict, output_dir, prefix: str, threads: int) -> tuple[str, float]:
    """One notebook in a worker process: (executed path, wall seconds); errors come back as NotebookFailed.

    The kernel inherits ``threads`` threads per library (unless already set): two kernels with two threads each on two
    cores wait on each other's descheduled threads (measured: 100 bootstrap replicates of mutual k-NN on 239 pairs took
    11.0 s with 2 threads beside another job, 0.41 s with 1)."""
    for var in THREAD_VARIABLES:
        os.environ.setdefault(var, str(threads))
    os.environ["PRH_CORES"] = str(threads)  # the kernel's share (available_cores): its scoring workers

    print(f"[prh-run] executing {name}", flush=True)
    t0 = time.perf_counter()
    try:
        out = run(name, params, output_dir=output_dir, prefix=prefix)
    except Exception as err:  # the worker's exception may not pickle; its text always does
        text = str(err).strip().splitlines()
        raise NotebookFailed(f"{name} failed: {type(err).__name__}: " + "\n".join(text[-30:])) from None
    return str(out), time.perf_counter() - t0


def worker_signals() -> None:
    """A worker leaves stopping to the parent (:func:`stopping_on_signals`), which ends it and its kernel."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def run_notebooks(names: Sequence[str], params: dict, *, run, what: str, jobs: int = 1,
                  output_dir: Path | None = None) -> dict[str, float]:
    """Execute ``names`` (``jobs`` at a time), printing a line as each starts and ends; return their wall times.

    Parameters
    ----------
    names : sequence of str
        Notebooks, in the table of contents' order.
    params : dict
        The profile and overrides (each notebook takes what it declares).
    run : callable
        ``run(name, params, output_dir=..., prefix=...) -> Path`` executes one notebook
        (:func:`prh_lib.run.runner.run_notebook`, passed in so this module does not import the runner).
    what : str
        How the parameters are described in the start lines (``"offline"``, ``"paper, k=20"``).
    jobs : int, >= 1
        Notebooks executed at once; 1 runs them in order in this process, as before.
    output_dir : Path, optional
        Where executed notebooks go (default ``book/``).

    Raises
    ------
    NotebookFailed
        If a notebook raised. With ``jobs > 1`` the notebooks already running finish, none other starts.
    ValueError
        If ``jobs < 1``.
    """
    if int(jobs) < 1:
        raise ValueError(f"jobs must be >= 1; got {jobs}")
    seconds: dict[str, float] = {}
    if jobs == 1 or len(names) == 1:
        for i, n in enumerate(names, 1):
            print(f"[prh-run] {i}/{len(names)} executing {n} ({what})", flush=True)
            t0 = time.perf_counter()
            try:
                out = run(n, params, output_dir=output_dir)
            except Exception as err:
                raise NotebookFailed(f"{n} failed: {type(err).__name__}: {err}") from err
            seconds[n] = time.perf_counter() - t0
            print(f"[prh-run] wrote {paths.display_path(out)} in {seconds[n]:.1f} s", flush=True)
        _remember(seconds)
        return seconds
    known = {**TYPICAL_SECONDS, **remembered_seconds()}
    order = sorted(names, key=lambda n: (-known.get(n, 0.0), list(names).index(n)))
    width = max(map(len, names))
    print(f"[prh-run] executing {len(names)} notebooks, {jobs} at a time, the longest first ({what})", flush=True)
    # fork where there is one: the workers start at once and see this process's settings as they are
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    failed = None
    with ProcessPoolExecutor(max_workers=int(jobs), mp_context=multiprocessing.get_context(method),
                             initializer=worker_signals) as pool:
        threads = max(1, available_cores() // int(jobs))
        pending = {pool.submit(_execute, run, n, params, output_dir, f"[{n:<{width}}] ", threads): n for n in order}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                n = pending.pop(future)
                if future.cancelled():
                    continue
                err = future.exception()
                if err is not None:
                    failed = failed or err
                    for other in pending:
                        other.cancel()
                    continue
                out, seconds[n] = future.result()
                print(f"[prh-run] wrote {paths.display_path(out)} in {seconds[n]:.1f} s", flush=True)
    _remember(seconds)
    if failed is not None:
        raise failed if isinstance(failed, NotebookFailed) else NotebookFailed(str(failed))
    return seconds
