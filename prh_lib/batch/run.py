"""Running the study's jobs: one job (:func:`run_job`), and many through submitit (:func:`run_jobs`).

Jobs are idempotent: a worker skips a job whose file exists and writes atomically
(:func:`prh_lib.extract.save_features`), so a rerun after a failure or preemption repeats no finished job. Execution
goes through submitit (Rapin & Paszke, facebookincubator/submitit; see :func:`run_jobs`)."""

from __future__ import annotations

import math
import socket
import sys
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Sequence

import submitit

from prh_lib import extract, paths
from prh_lib.data import paper
from prh_lib.models.loaded import dtype_bytes
from prh_lib.batch.plan import Job

EXECUTORS = ("inline", "debug", "local", "slurm")


@dataclass
class JobOutcome:
    """What happened to one job: ``"cached"`` (skipped), ``"done"`` (extracted now) or ``"failed"``."""

    job: Job
    status: str
    seconds: float = 0.0
    batch_size: int | None = None
    error: str | None = None
    host: str = ""


def is_out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` is a CUDA (or other accelerator) out-of-memory error."""
    import torch

    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(err, oom) or (isinstance(err, RuntimeError) and "out of memory" in str(err).lower())


def choose_batch_size(run: Callable[[int], object], batch_size: int, *, min_batch_size: int = 1):
    """Call ``run(batch_size)``; on out-of-memory free the cache, halve the batch size and retry.

    Returns
    -------
    (result, batch_size)
        The result of the first call that fit and the batch size it used.

    Raises
    ------
    ValueError
        If ``batch_size < min_batch_size`` or ``min_batch_size < 1``.
    Exception
        Whatever ``run`` raises other than out-of-memory, or out-of-memory at ``min_batch_size``.
    """
    if min_batch_size < 1 or batch_size < min_batch_size:
        raise ValueError(f"need 1 <= min_batch_size <= batch_size, got {min_batch_size} and {batch_size}")
    import gc

    import torch

    while True:
        try:
            return run(batch_size), batch_size
        except Exception as err:
            if not is_out_of_memory(err) or batch_size <= min_batch_size:
                raise
        # outside the except block, so the traceback's frames (model, activations) can be freed
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        batch_size = max(min_batch_size, batch_size // 2)
        print(f"[prh-batch] out of memory; retrying with batch_size={batch_size}", file=sys.stderr, flush=True)


def run_job(job: Job, extractor: Callable | None = None) -> JobOutcome:
    """Run one job unless its feature file exists; failures are returned, not raised.

    ``extractor`` has the signature of :func:`prh_lib.extract.get_features` (the default); tests pass a
    stand-in. Interrupts and signals (preemption) are not caught."""
    host = socket.gethostname()
    if job.is_done():
        return JobOutcome(job, "cached", host=host)
    fn = extractor or extract.get_features
    t0 = time.perf_counter()
    try:
        pairs = job.pairs()
        if job.note and job.cache_file is None:
            # raises the planning-time error again, with its traceback
            extract.features_path(job.model, pairs, dtype=job.dtype, max_length=job.max_length)
        _, used = choose_batch_size(
            lambda b: fn(job.model, pairs, device=job.device, dtype=job.dtype, batch_size=b,
                         max_length=job.max_length, progress=False),
            job.batch_size,
        )
        if job.cache_file is not None and not job.is_done():
            raise RuntimeError(f"extraction finished but wrote no file at the planned {job.cache_file}; is "
                               "PRH_CACHE_DIR the same here as where the study was planned, and the data unchanged?")
        return JobOutcome(job, "done", time.perf_counter() - t0, batch_size=used, host=host)
    except Exception as err:
        print(f"[prh-batch] FAILED {job.label}", file=sys.stderr, flush=True)
        traceback.print_exc()
        return JobOutcome(job, "failed", time.perf_counter() - t0, error=f"{type(err).__name__}: {err}", host=host)


class StudyTask(submitit.helpers.Checkpointable):
    """The picklable task every executor runs: groups of jobs, one after another.

    On SLURM preemption or timeout submitit calls :meth:`checkpoint`, which requeues the same call; finished jobs are
    then skipped (their files exist)."""

    def __call__(self, groups: Sequence[Sequence[Job]], extractor: Callable | None = None) -> list[JobOutcome]:
        outcomes = []
        for group in groups:
            for job in group:
                outcome = run_job(job, extractor)
                print(f"[prh-batch] {outcome.status:6s} {outcome.seconds:7.1f} s  {job.label}", flush=True)
                outcomes.append(outcome)
        return outcomes


# --------------------------------------------------------------------------------------------------------
# running many jobs


@dataclass
class RunSummary:
    """Result of :func:`run_jobs`: jobs skipped as cached, outcomes of the jobs run, submitit job ids."""

    jobs: list[Job]
    skipped: list[Job]
    outcomes: list[JobOutcome]
    executor: str
    folder: str | None = None
    submitted: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[JobOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def done(self) -> list[JobOutcome]:
        return [o for o in self.outcomes if o.status == "done"]

    @property
    def ok(self) -> bool:
        return not self.failed

    def __str__(self) -> str:
        lines = [f"{len(self.jobs)} jobs: {len(self.skipped)} already cached, {len(self.done)} extracted now, "
                 f"{len(self.failed)} failed ({self.executor})"]
        if self.submitted and not self.outcomes:
            lines.append(f"submitted {len(self.submitted)} submitit jobs ({', '.join(self.submitted[:6])}"
                         f"{', ...' if len(self.submitted) > 6 else ''}); logs in {self.folder}. "
                         "Run `prh-batch plan` to follow progress and `prh-batch run` again to redo failures.")
        for o in self.failed:
            lines.append(f"  FAILED {o.job.label}: {o.error}")
        return "\n".join(lines)


def gpus_needed(model: str, *, dtype: str = "bfloat16", gpu_mem_gb: float = 80.0, overhead: float = 1.3) -> int:
    """GPUs to hold a model's weights with headroom: ``ceil(params * bytes * overhead / gpu_mem)``, at least 1.

    The parameter count comes from :data:`prh_lib.data.paper.MODELS`; other models get one GPU."""
    info = paper.model_info(model)
    if info is None:
        return 1
    need_gb = info["params_b"] * dtype_bytes(dtype) * overhead
    return max(1, math.ceil(need_gb / gpu_mem_gb))


def group_by_model(jobs: Iterable[Job]) -> list[list[Job]]:
    """Jobs grouped by model in first-seen order (one group is one array task: the model loads on one node)."""
    groups: dict[str, list[Job]] = OrderedDict()
    for job in jobs:
        groups.setdefault(job.model, []).append(job)
    return list(groups.values())


def _collect(jobs_and_groups, summary: RunSummary) -> None:
    for sjob, groups in jobs_and_groups:
        try:
            summary.outcomes.extend(sjob.result())
        except Exception as err:  # the whole task died (killed, out of host memory, import error, ...)
            msg = f"{type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}"
            for job in (j for g in groups for j in g):
                status = "cached" if job.is_done() else "failed"
                summary.outcomes.append(JobOutcome(job, status, error=None if status == "cached" else msg))


def run_jobs(
    jobs: Sequence[Job],
    *,
    executor: str = "inline",
    folder: str | Path | None = None,
    wait: bool = True,
    extractor: Callable | None = None,
    gpu_mem_gb: float = 80.0,
    gpus_per_node: int | None = None,
    local_gpus: Sequence[Sequence[int]] | None = None,
    timeout_min: int = 240,
    slurm_partition: str | None = None,
    cpus_per_task: int = 8,
    mem_gb: int | None = None,
    array_parallelism: int = 64,
    slurm_additional: dict | None = None,
    slurm_setup: Sequence[str] = (),
) -> RunSummary:
    """Run the jobs that are not cached, grouped by model, through one of :data:`EXECUTORS`.

    Parameters
    ----------
    jobs : sequence of Job
        From :func:`plan_study`.
    executor : {"inline", "debug", "local", "slurm"}
        ``"inline"``: this process, one job after another. ``"debug"``: ``submitit.DebugExecutor`` (in process,
        through submitit). ``"local"``: ``submitit.LocalExecutor``, one subprocess per lane of ``local_gpus``
        (default: one lane with every visible GPU), jobs one after another within a lane. ``"slurm"``: one
        submitit job array per GPU count, one array task per model.
    folder : path, optional
        submitit's folder for pickles and logs (default ``<PRH_CACHE_DIR>/batch/submitit``).
    wait : bool
        Wait for the jobs and collect their outcomes (``False`` returns after submission).
    extractor : callable, optional
        Stand-in for :func:`prh_lib.extract.get_features` (tests); must be picklable for subprocess executors.
    gpu_mem_gb, gpus_per_node
        Memory of one GPU, used to request ``gpus_needed`` GPUs per model; or a fixed count for all.
    local_gpus : sequence of sequences of int, optional
        GPU indices of each local lane, e.g. ``[[0], [1], [2, 3]]``.
    timeout_min, slurm_partition, cpus_per_task, mem_gb, array_parallelism, slurm_additional, slurm_setup
        SLURM request (``slurm_additional``: extra ``#SBATCH`` options such as ``{"account": "x"}``; ``slurm_setup``:
        shell lines run before the task, e.g. activating the environment).

    Returns
    -------
    RunSummary
        Jobs skipped because cached, the outcome of each job run, submitit job ids.

    Raises
    ------
    ValueError
        If ``executor`` is unknown.
    """
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; use one of {EXECUTORS}")
    jobs = list(jobs)
    skipped = [j for j in jobs if j.is_done()]
    pending = [j for j in jobs if not j.is_done()]
    folder = Path(folder) if folder is not None else paths.cache_dir("batch") / "submitit"
    summary = RunSummary(jobs, skipped, [], executor, str(folder))
    groups = group_by_model(pending)
    if not groups:
        return summary
    task = StudyTask()
    if executor == "inline":
        summary.outcomes.extend(task(groups, extractor))
        return summary
    if executor == "debug":
        ex = submitit.DebugExecutor(folder=folder)
        submitted = [(ex.submit(task, [g], extractor), [g]) for g in groups]
    elif executor == "local":
        if local_gpus is not None:
            lanes = [tuple(int(g) for g in lane) for lane in local_gpus] or [()]
        else:
            import torch

            lanes = [tuple(range(torch.cuda.device_count() if torch.cuda.is_available() else 0))]
        plan: list[list[list[Job]]] = [[] for _ in lanes]
        load = [0.0] * len(lanes)
        for g in groups:  # largest model first onto the least loaded lane with enough GPUs
            need = gpus_per_node or gpus_needed(g[0].model, dtype=g[0].dtype, gpu_mem_gb=gpu_mem_gb)
            fits = [i for i, lane in enumerate(lanes) if len(lane) >= need or not lane] or list(range(len(lanes)))
            i = min(fits, key=lambda k: load[k])
            plan[i].append(g)
            load[i] += len(g) * (paper.model_info(g[0].model) or {"params_b": 1.0})["params_b"]
        submitted = []
        for lane, lane_groups in zip(lanes, plan):
            if not lane_groups:
                continue
            ex = submitit.LocalExecutor(folder=folder)
            ex.update_parameters(timeout_min=timeout_min, gpus_per_node=len(lane), visible_gpus=lane)
            submitted.append((ex.submit(task, lane_groups, extractor), lane_groups))
    else:
        ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
        by_gpus: dict[int, list[list[Job]]] = OrderedDict()
        for g in groups:
            need = gpus_per_node or gpus_needed(g[0].model, dtype=g[0].dtype, gpu_mem_gb=gpu_mem_gb)
            by_gpus.setdefault(need, []).append(g)
        submitted = []
        for n_gpus, gs in by_gpus.items():
            params = dict(name=f"prh-batch-{n_gpus}gpu", timeout_min=timeout_min, gpus_per_node=n_gpus, nodes=1,
                          tasks_per_node=1, cpus_per_task=cpus_per_task, slurm_array_parallelism=array_parallelism,
                          slurm_setup=list(slurm_setup))
            if mem_gb is not None:
                params["mem_gb"] = mem_gb
            if slurm_partition:
                params["slurm_partition"] = slurm_partition
            if slurm_additional:
                params["slurm_additional_parameters"] = dict(slurm_additional)
            ex.update_parameters(**params)
            sjobs = ex.map_array(task, [[g] for g in gs], [extractor] * len(gs))
            submitted.extend((s, [g]) for s, g in zip(sjobs, gs))
    summary.submitted = [str(s.job_id) for s, _ in submitted]
    if wait:
        _collect(submitted, summary)
    return summary
