"""Plan and run the study's feature extraction (models x datasets x repetitions), locally or on SLURM.

Usage (console script ``prh-batch`` or ``python -m prh_lib.batch``)::

    prh-batch plan --profile paper                      # what the study needs, what is cached, what is left
    prh-batch run --profile paper                       # run what is left here, one job after another
    prh-batch run --profile paper --executor local --local-gpus 0 1 2,3   # three lanes on one machine
    prh-batch run --profile paper --executor slurm --partition gpu --timeout-min 240 --no-wait
    prh-batch plan --models vision --datasets coco --repetitions 2 --location coco=/data/coco
    prh-batch models                                    # the paper's model list

A :class:`Job` is one model on one set of pairs (dataset, N, seed, caption policy) and produces one feature
file in the extraction cache, the very file :func:`prh_lib.extract.get_features` reads when a notebook later
runs with the same parameters (``prh-run --params paper``). Jobs are idempotent: a worker skips a job whose
file exists and writes through :func:`prh_lib.extract.save_features`, which renames a complete file into
place, so a rerun after a failure or preemption repeats no finished job and never reads a half-written one.

Execution goes through submitit (the engine; Rapin & Paszke, facebookincubator/submitit): ``"slurm"``
submits one job array per GPU count (a model larger than one GPU gets several, sharded by
``device_map="auto"`` in :func:`prh_lib.models.load_model`), ``"local"`` runs submitit's local executor (one
subprocess per lane of GPUs), ``"debug"`` runs submitit's in-process debug executor, and ``"inline"`` calls
the same task function directly. All of them run :class:`StudyTask` on groups of jobs of one model.
"""

from __future__ import annotations

import argparse
import functools
import math
import socket
import sys
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable, Sequence

import submitit

from . import data, extract, paper, paths
from .models import DTYPES, dtype_bytes
from .profiles import PROFILES, get_profile

EXECUTORS = ("inline", "debug", "local", "slurm")



# --------------------------------------------------------------------------------------------------------
# the plan


@dataclass(frozen=True)
class DatasetSpec:
    """One dataset of the study: where it comes from and which pairs are drawn from it.

    Attributes
    ----------
    name : str
        Label in plans and tables (e.g. ``"coco"``).
    source : str
        A name in :data:`prh_lib.data.SOURCES`.
    location : str, optional
        Hub id or local path handed to the source (None: the source's default).
    options : tuple of (str, value)
        Extra keyword options of the source, sorted by name.
    n_pairs : int, optional
        Pairs per repetition (None: every image in dataset order).
    repetitions : int
        Number of seeded draws; repetition r uses seed ``first_seed + r``.
    first_seed : int
    caption_policy, n_captions
        As in :func:`prh_lib.data.sample_pairs`.
    """

    name: str
    source: str = "coco-folder"
    location: str | None = None
    options: tuple = ()
    n_pairs: int | None = 1024
    repetitions: int = 1
    first_seed: int = 0
    caption_policy: str = "first"
    n_captions: int = 1

    def __post_init__(self):
        if self.source not in data.SOURCES:
            raise ValueError(f"dataset {self.name!r}: unknown source {self.source!r}; known: {sorted(data.SOURCES)}")
        if self.repetitions < 1:
            raise ValueError(f"dataset {self.name!r}: repetitions must be >= 1, got {self.repetitions}")

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(range(self.first_seed, self.first_seed + self.repetitions))

    @classmethod
    def coerce(cls, spec: "DatasetSpec | dict | str") -> "DatasetSpec":
        """A spec from a :class:`DatasetSpec`, a dict (as in :data:`prh_lib.paper.DATASETS`) or a paper dataset name."""
        if isinstance(spec, DatasetSpec):
            return spec
        if isinstance(spec, str):
            spec = paper.dataset_info(spec)
        if not isinstance(spec, dict):
            raise TypeError(f"a dataset spec is a DatasetSpec, dict or name, got {type(spec).__name__}")
        fields = {k: v for k, v in spec.items() if k in cls.__dataclass_fields__}
        opts = fields.get("options") or {}
        fields["options"] = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in dict(opts).items()))
        if fields.get("location") is not None:
            fields["location"] = str(fields["location"])
        return cls(**fields)


@dataclass(frozen=True)
class Job:
    """One model on one set of pairs; produces one file in the feature cache.

    ``cache_file`` is computed when the job is planned (the path :func:`prh_lib.extract.get_features` will
    write); it is None when the model could not be resolved then (``note`` says why), and the worker
    extracts anyway.
    """

    model: str
    dataset: DatasetSpec
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    batch_size: int = 32
    max_length: int | None = None
    cache_file: str | None = None
    note: str = field(default="", compare=False)

    @property
    def label(self) -> str:
        return f"{self.model} | {self.dataset.name} seed={self.seed}"

    def pairs(self) -> data.Pairs:
        """The job's pairs (the dataset is loaded once per process)."""
        return study_pairs(self.dataset, self.seed)

    def cache_path(self) -> Path | None:
        return None if self.cache_file is None else Path(self.cache_file)

    def is_done(self) -> bool:
        """Whether the job's feature file exists (written atomically, so existing means complete)."""
        return self.cache_file is not None and Path(self.cache_file).is_file()

    def status(self) -> str:
        """``"cached"``, ``"left"`` or ``"unknown"`` (cache path not resolvable at planning time)."""
        if self.cache_file is None:
            return "unknown"
        return "cached" if self.is_done() else "left"


@functools.lru_cache(maxsize=8)
def _load(source: str, location: str | None, options: tuple) -> data.ImageCaptionDataset:
    return data.load_dataset(source, location, **dict(options))


@functools.lru_cache(maxsize=64)
def study_pairs(spec: DatasetSpec, seed: int) -> data.Pairs:
    """The pairs of one repetition of a dataset (loaded once per process and memoised)."""
    dataset = _load(spec.source, spec.location, spec.options)
    return data.sample_pairs(dataset, n=spec.n_pairs, seed=seed, caption_policy=spec.caption_policy,
                             n_captions=spec.n_captions)


def clear_caches() -> None:
    """Forget memoised datasets and pairs (after data on disk changed within one process)."""
    _load.cache_clear()
    study_pairs.cache_clear()


def planned_cache_file(model: str, pairs: data.Pairs, *, dtype: str, max_length: int | None = None) -> Path:
    """The file :func:`prh_lib.extract.get_features` writes for ``model`` on ``pairs`` (same key, same function).

    Raises
    ------
    prh_lib.models.ModelNotAvailableError
        If the model cannot be resolved (without loading it) here.
    """
    return extract.features_path(model, pairs, dtype=dtype, max_length=max_length)


def plan_study(
    models: Sequence[str],
    datasets: Sequence["DatasetSpec | dict | str"],
    *,
    n_pairs: int | None = None,
    repetitions: int | None = None,
    seeds: Sequence[int] | None = None,
    caption_policy: str | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    batch_size: int = 32,
    max_length: int | None = None,
) -> list[Job]:
    """Every (model, dataset, seed) job of a study, model by model, with its cache file.

    Parameters
    ----------
    models : sequence of str
        Model names as understood by :func:`prh_lib.models.load_model` (zoo names, Hub ids, folders).
    datasets : sequence of DatasetSpec, dict or str
        Dataset specs; a string names one of :data:`prh_lib.paper.DATASETS`.
    n_pairs, repetitions, caption_policy : optional
        Override every dataset's value.
    seeds : sequence of int, optional
        Explicit seeds for every dataset (overrides repetitions).
    device, dtype, batch_size, max_length
        Extraction options (``batch_size`` is the first try; it is halved on CUDA out-of-memory).

    Returns
    -------
    list of Job
        Ordered by model, then dataset, then seed. Loading each dataset once is part of planning: the
        cache key hashes the sampled pairs.

    Raises
    ------
    ValueError
        If no model or dataset is given, or a dataset spec is invalid.
    prh_lib.data.DataError
        If a dataset cannot be loaded (the message says how to provide it).
    """
    if not models:
        raise ValueError("plan_study needs at least one model")
    if not datasets:
        raise ValueError("plan_study needs at least one dataset")
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPES)}")
    specs = []
    for d in datasets:
        s = DatasetSpec.coerce(d)
        over = {}
        if n_pairs is not None:
            over["n_pairs"] = n_pairs
        if repetitions is not None:
            over["repetitions"] = repetitions
        if caption_policy is not None:
            over["caption_policy"] = caption_policy
        specs.append(replace(s, **over) if over else s)
    seed_lists = {s: tuple(seeds) if seeds is not None else s.seeds for s in specs}
    idents: dict[str, str] = {}
    jobs = []
    for model in dict.fromkeys(models):
        for spec in specs:
            for seed in seed_lists[spec]:
                pairs = study_pairs(spec, seed)
                cache_file, note = None, idents.get(model, "")
                if not note:
                    try:
                        cache_file = str(planned_cache_file(model, pairs, dtype=dtype, max_length=max_length))
                    except Exception as err:  # unresolvable model: plan it anyway, the worker reports the error
                        note = idents[model] = f"{type(err).__name__}: {err}"
                jobs.append(Job(model, spec, seed, device=device, dtype=dtype, batch_size=batch_size,
                                max_length=max_length, cache_file=cache_file, note=note))
    return jobs


def plan_table(jobs: Sequence[Job]):
    """Cached / planned jobs per model (rows) and dataset (columns), as a ``pandas.DataFrame`` of strings.

    A cell reads ``"3/5"`` (3 of 5 repetitions cached); ``"?"`` marks jobs whose cache file is unknown.
    """
    import pandas as pd

    cells: dict[str, dict[str, list[int]]] = OrderedDict()
    unknown: dict[tuple[str, str], bool] = {}
    for job in jobs:
        row = cells.setdefault(job.model, OrderedDict())
        done_total = row.setdefault(job.dataset.name, [0, 0])
        status = job.status()
        done_total[0] += status == "cached"
        done_total[1] += 1
        if status == "unknown":
            unknown[(job.model, job.dataset.name)] = True
    table = pd.DataFrame({
        m: {d: f"{c}/{t}" + ("?" if unknown.get((m, d)) else "") for d, (c, t) in row.items()}
        for m, row in cells.items()
    }).T.fillna("-")
    table.index.name = "model"
    return table


def describe_plan(jobs: Sequence[Job]) -> str:
    """A printable summary: the table of :func:`plan_table` and the counts of cached and left jobs."""
    import pandas as pd

    counts = {s: sum(j.status() == s for j in jobs) for s in ("cached", "left", "unknown")}
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.max_colwidth", 60):
        text = plan_table(jobs).to_string()
    lines = [text, "", f"{len(jobs)} jobs: {counts['cached']} cached, {counts['left']} left"
             + (f", {counts['unknown']} unknown (model not resolvable now)" if counts["unknown"] else "")]
    notes = dict.fromkeys(f"  {j.model}: {j.note}" for j in jobs if j.note)
    if notes:
        lines += ["unresolved models:", *notes]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------
# running one job (what a worker executes)


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
    stand-in. Interrupts and signals (preemption) are not caught.
    """
    host = socket.gethostname()
    if job.is_done():
        return JobOutcome(job, "cached", host=host)
    fn = extractor or extract.get_features
    t0 = time.perf_counter()
    try:
        pairs = job.pairs()
        if job.note and job.cache_file is None:
            # raises the planning-time error again, with its traceback
            planned_cache_file(job.model, pairs, dtype=job.dtype, max_length=job.max_length)
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

    On SLURM preemption or timeout submitit calls :meth:`checkpoint`, which requeues the same call; the
    jobs already finished are then skipped because their files exist.
    """

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

    The parameter count comes from :data:`prh_lib.paper.MODELS`; other models get one GPU.
    """
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


def _local_lanes(local_gpus: Sequence[Sequence[int]] | None) -> list[tuple[int, ...]]:
    if local_gpus is not None:
        return [tuple(int(g) for g in lane) for lane in local_gpus] or [()]
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [tuple(range(n))]


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
        SLURM request (``slurm_additional``: extra ``#SBATCH`` options such as ``{"account": "x"}``;
        ``slurm_setup``: shell lines run before the task, e.g. activating the environment).

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
        lanes = _local_lanes(local_gpus)
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


# --------------------------------------------------------------------------------------------------------
# from a profile / the command line


def study_from_profile(params: dict) -> tuple[list[str], list[DatasetSpec], dict]:
    """Models, dataset specs and extraction options of a notebook parameter set.

    Models: ``vision_models`` + ``language_models`` + ``embedding_models`` + ``vlm_models`` when present,
    else every model in ``comparisons``. Datasets: ``study_datasets`` when present, else the notebook's own
    dataset parameters (``dataset_source``, ``data_location``, ``n_pairs``, ``seed``, ``caption_policy``) as
    one dataset with one repetition, so the files are the ones the notebook will read.
    """
    models = [m for key in ("vision_models", "language_models", "embedding_models", "vlm_models")
              for m in params.get(key) or []]
    if not models:
        models = [m for pair in params.get("comparisons") or [] for m in pair]
    if "study_datasets" in params:
        datasets = [DatasetSpec.coerce(d) for d in params["study_datasets"]]
    else:
        source = params.get("dataset_source", "coco-folder")
        datasets = [DatasetSpec(name=source, source=source, location=params.get("data_location"),
                                n_pairs=params.get("n_pairs"), repetitions=1, first_seed=int(params.get("seed", 0)),
                                caption_policy=params.get("caption_policy", "first"))]
    options = {k: params[k] for k in ("device", "dtype", "batch_size") if k in params}
    return list(dict.fromkeys(models)), datasets, options


def _expand_models(names: Sequence[str]) -> list[str]:
    out = []
    for n in names:
        out.extend(paper.models(n) if n in paper.MODEL_GROUPS else [n])
    return out


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not of the form KEY=VALUE")
    return key, value


def _study_args(args, parser) -> list[Job]:
    from .runner import parse_override

    try:
        params = get_profile(args.profile)
        params.update(dict(parse_override(o) for o in args.overrides))
    except ValueError as err:
        parser.error(str(err))
    models, datasets, options = study_from_profile(params)
    if args.models:
        models = _expand_models(args.models)
    if not models:
        parser.error(f"profile {args.profile!r} lists no models; name them with --models")
    if args.datasets:
        known = {d.name: d for d in datasets}
        missing = [n for n in args.datasets if n not in known]
        if missing:
            parser.error(f"datasets {missing} are not in profile {args.profile!r}: {sorted(known)}")
        datasets = [known[n] for n in args.datasets]
    locations = dict(args.locations)
    unknown = sorted(set(locations) - {d.name for d in datasets})
    if unknown:
        parser.error(f"--location names unknown datasets {unknown}; datasets: {[d.name for d in datasets]}")
    datasets = [replace(d, location=locations.get(d.name, d.location)) for d in datasets]
    return plan_study(models, datasets, n_pairs=args.n_pairs, repetitions=args.repetitions,
                      device=args.device or options.get("device", "cpu"),
                      dtype=args.dtype or options.get("dtype", "float32"),
                      batch_size=args.batch_size or options.get("batch_size", 32))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prh-batch", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--profile", default="paper", help=f"named parameter set: {', '.join(PROFILES)}")
    common.add_argument("-p", "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override one profile parameter (repeatable), as in prh-run")
    common.add_argument("--models", nargs="+", help=f"model names or groups ({', '.join(paper.MODEL_GROUPS)})")
    common.add_argument("--datasets", nargs="+", help="dataset names of the profile (default: all)")
    common.add_argument("--location", dest="locations", action="append", default=[], type=_key_value,
                        metavar="DATASET=PATH", help="where a dataset is (Hub id or local path); repeatable")
    common.add_argument("--repetitions", type=int, help="seeded draws per dataset (default: the profile's)")
    common.add_argument("--n-pairs", type=int, help="pairs per draw (default: the profile's)")
    common.add_argument("--device", help="default: the profile's")
    common.add_argument("--dtype", choices=sorted(DTYPES), help="default: the profile's")
    common.add_argument("--batch-size", type=int, help="first batch size tried (halved on out-of-memory)")
    sub.add_parser("plan", parents=[common], help="show what is cached and what is left")
    run = sub.add_parser("run", parents=[common], help="run what is left")
    run.add_argument("--executor", choices=EXECUTORS, default="inline")
    run.add_argument("--folder", type=Path, help="submitit folder for logs (default: <PRH_CACHE_DIR>/batch/submitit)")
    run.add_argument("--no-wait", action="store_true", help="return after submitting (local, slurm)")
    run.add_argument("--gpu-mem-gb", type=float, default=80.0, help="memory of one GPU, sizes GPU requests")
    run.add_argument("--gpus-per-node", type=int, help="GPUs for every model (default: from its size)")
    run.add_argument("--local-gpus", nargs="+", metavar="I[,J]", help="local lanes: GPU indices, e.g. 0 1 2,3")
    run.add_argument("--partition", help="SLURM partition")
    run.add_argument("--timeout-min", type=int, default=240)
    run.add_argument("--cpus-per-task", type=int, default=8)
    run.add_argument("--mem-gb", type=int)
    run.add_argument("--array-parallelism", type=int, default=64)
    run.add_argument("--slurm-arg", dest="slurm_args", action="append", default=[], type=_key_value,
                     metavar="KEY=VALUE", help="extra #SBATCH option, e.g. account=abc (repeatable)")
    run.add_argument("--slurm-setup", action="append", default=[], metavar="LINE",
                     help="shell line run before each task, e.g. 'source .venv/bin/activate' (repeatable)")
    sub.add_parser("models", help="list the paper's models")
    args = parser.parse_args(argv)

    if args.command == "models":
        import pandas as pd

        with pd.option_context("display.width", 200, "display.max_colwidth", 70):
            print(paper.table().to_string())
        return 0
    try:
        jobs = _study_args(args, parser)
    except data.DataError as err:  # a dataset is not available here: say so without a traceback
        print(f"prh-batch: {err}\nprh-batch: give a dataset's location with --location NAME=PATH, or plan "
              "without it with --datasets NAME ...", file=sys.stderr)
        return 2
    print(describe_plan(jobs), flush=True)
    if args.command == "plan":
        return 0
    lanes = [[int(g) for g in lane.split(",") if g != ""] for lane in args.local_gpus] if args.local_gpus else None
    summary = run_jobs(
        jobs, executor=args.executor, folder=args.folder, wait=not args.no_wait, gpu_mem_gb=args.gpu_mem_gb,
        gpus_per_node=args.gpus_per_node, local_gpus=lanes, timeout_min=args.timeout_min,
        slurm_partition=args.partition, cpus_per_task=args.cpus_per_task, mem_gb=args.mem_gb,
        array_parallelism=args.array_parallelism, slurm_additional=dict(args.slurm_args) or None,
        slurm_setup=args.slurm_setup,
    )
    print(summary, flush=True)
    return 0 if summary.ok else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
