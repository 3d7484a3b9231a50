"""Plan and run the study's feature extraction (models x datasets x repetitions), locally or on SLURM.

Usage (console script ``prh-batch`` or ``python -m prh_lib.batch``)::

    prh-batch plan --profile paper                      # what the study needs, what is cached, what is left
    prh-batch run --profile paper                       # run what is left here, one job after another
    prh-batch run --profile paper --executor local --local-gpus 0 1 2,3   # three lanes on one machine
    prh-batch run --profile paper --executor slurm --partition gpu --timeout-min 240 --no-wait
    prh-batch plan --models vision --datasets coco --repetitions 2 --location coco=/data/coco
    prh-batch models                                    # the paper's model list

The plan (:class:`Job`: one model on one set of pairs, one feature file, the one ``prh-run --params paper``
reads) is :mod:`prh_lib.batch.plan`; running it (idempotent jobs through submitit, :class:`StudyTask` on the
jobs of one model; a model larger than one GPU is sharded by ``device_map="auto"``) is :mod:`prh_lib.batch.run`."""


from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from prh_lib import data, paths
from prh_lib.data import paper
from prh_lib.models.loaded import DTYPES
from prh_lib.run.profiles import PROFILES, get_profile
from prh_lib.batch.plan import Job, describe_plan, plan_study, plan_table, study_from_profile  # noqa: F401
from prh_lib.batch.run import EXECUTORS, StudyTask, choose_batch_size, gpus_needed, run_job, run_jobs  # noqa: F401


def _expand_models(names: Sequence[str]) -> list[str]:
    out = []
    for n in names:
        out.extend(paper.feature_models(n) if n in paper.MODEL_GROUPS else paper.expand_towers(n))
    return out


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not of the form KEY=VALUE")
    return key, value


def _study_args(args, parser) -> list[Job]:
    from prh_lib.run.runner import parse_override

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


def _capability(args) -> int:
    from prh_lib.batch import capability

    params = get_profile(args.profile)
    models = args.models or list(params.get("language_models") or [])
    options = {"device": args.device or params.get("device", "cpu"), "dtype": params.get("dtype", "bfloat16"),
               "limit": args.limit}
    if args.profile == "rehearsal":  # the harness's own task format, tiny local tasks
        tasks = capability.REHEARSAL_TASKS
        options["include_path"] = str(capability.write_rehearsal_tasks(paths.cache_dir("rehearsal-lm-eval-tasks")))
        options["dtype"] = "float32"
    else:
        tasks = capability.PAPER_TASKS
    out = capability.run_capability_jobs(models, tasks, executor=args.executor, **options)
    table = capability.capability_table(models, tasks)
    print(table.drop(columns=["task_config"], errors="ignore").to_string() if len(table) else "no results")
    failed = {m: r for m, r in out.items() if r.startswith("FAILED")}
    for m, r in failed.items():
        print(f"  {m}: {r}", file=sys.stderr)
    return 1 if failed else 0


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
    cap = sub.add_parser("capability", help="lm-eval capability scores, one job per language model")
    cap.add_argument("--profile", default="paper", help=f"named parameter set: {', '.join(PROFILES)}")
    cap.add_argument("--models", nargs="+", help="default: the profile's language_models")
    cap.add_argument("--executor", choices=("inline", "local", "slurm"), default="inline")
    cap.add_argument("--limit", type=int, help="items per task (a quick check; not for the paper's numbers)")
    cap.add_argument("--device", help="default: the profile's")
    args = parser.parse_args(argv)

    if args.command == "capability":
        return _capability(args)

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
    from prh_lib.run.schedule import RunStopped, stopping_on_signals

    try:  # stopped while it waits: the local jobs it started are ended with it (SLURM's jobs are the cluster's)
        with stopping_on_signals() if args.executor != "slurm" else contextlib.nullcontext():
            summary = run_jobs(
                jobs, executor=args.executor, folder=args.folder, wait=not args.no_wait, gpu_mem_gb=args.gpu_mem_gb,
                gpus_per_node=args.gpus_per_node, local_gpus=lanes, timeout_min=args.timeout_min,
                slurm_partition=args.partition, cpus_per_task=args.cpus_per_task, mem_gb=args.mem_gb,
                array_parallelism=args.array_parallelism, slurm_additional=dict(args.slurm_args) or None,
                slurm_setup=args.slurm_setup,
            )
    except RunStopped as stop:
        print(f"prh-batch: {stop}: its local jobs were ended; each finished job's file is complete (written "
              "atomically), and a rerun does what is left", file=sys.stderr, flush=True)
        return 128 + stop.signum
    print(summary, flush=True)
    return 0 if summary.ok else 1

