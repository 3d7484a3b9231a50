"""Capability scores as a batch step: the LM Evaluation Harness (``lm-eval``) per model, one job per model.

Following the paper (Herbst et al., Section 3.2), each language model is scored with EleutherAI's harness on
MMLU (5-shot accuracy), ARC-Challenge (4-shot accuracy) and GSM8K (5-shot exact match, strict answer
extraction) (:data:`PAPER_TASKS`). A job runs every task of one model and writes one JSON file per model
(atomically) under ``PRH_CACHE_DIR/capability/``, holding each score with the harness version and the
task's full config as the harness resolved it; :func:`capability_table` gathers them into one tidy table,
with the packaged published values (:mod:`prh_lib.data.benchmarks`) as a cross-check column only.

Jobs go through submitit like the extraction jobs (``inline``, ``local``, ``slurm``;
:func:`run_capability_jobs`); a model whose file exists is skipped. The rehearsal runs the same path on a
stand-in with a tiny local task in the harness's own YAML format (:func:`write_rehearsal_tasks`)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import submitit

from prh_lib import paths


@dataclass(frozen=True)
class CapabilityTask:
    """One harness task: its name, shots, and the metric (and filter) reported."""

    task: str
    num_fewshot: int
    metric: str
    filter: str = "none"


#: The paper's capability tasks.
PAPER_TASKS = (CapabilityTask("mmlu", 5, "acc"), CapabilityTask("arc_challenge", 4, "acc"),
               CapabilityTask("gsm8k", 5, "exact_match", "strict-match"))
#: The rehearsal's tiny local tasks (:func:`write_rehearsal_tasks`): one multiple-choice, one generation.
REHEARSAL_TASKS = (CapabilityTask("prh_rehearsal_mc", 2, "acc"),
                   CapabilityTask("prh_rehearsal_gen", 1, "exact_match", "none"))


def capability_file(model: str, tasks: Sequence[CapabilityTask]) -> Path:
    """The result file of one model's job (its name encodes the model and the tasks)."""
    key = [model, [t.__dict__ for t in tasks]]
    return paths.cache_file("capability", model, key, prefix="lm-eval", suffix=".json")


def run_capability(model: str, tasks: Sequence[CapabilityTask] = PAPER_TASKS, *, device: str = "cpu",
                   dtype: str = "bfloat16", batch_size: int | str = "auto", include_path: str | None = None,
                   limit: int | None = None) -> Path:
    """Run the harness on one model for every task; write and return its result file (skipped if present).

    Raises
    ------
    ImportError
        If ``lm-eval`` is not installed (``pip install lm-eval``).
    """
    import lm_eval
    from lm_eval.tasks import TaskManager

    from prh_lib.models.spec import location, parse_model_name

    out = capability_file(model, tasks)
    if out.is_file():
        return out
    manager = TaskManager(include_path=include_path) if include_path else TaskManager()
    rows = []
    for t in tasks:
        t0 = time.perf_counter()
        res = lm_eval.simple_evaluate(
            model="hf", model_args={"pretrained": location(parse_model_name(model)), "dtype": dtype}, tasks=[t.task],
            num_fewshot=t.num_fewshot, batch_size=batch_size, device=device, limit=limit, task_manager=manager,
            log_samples=False, bootstrap_iters=0)
        scores = res["results"][t.task]
        key = f"{t.metric},{t.filter}"
        rows.append({"model": model, "task": t.task, "num_fewshot": t.num_fewshot, "metric": t.metric,
                     "filter": t.filter, "value": scores.get(key), "stderr": scores.get(f"{t.metric}_stderr,{t.filter}"),
                     "n_samples": (res.get("n-samples") or {}).get(t.task), "limit": limit,
                     "lm_eval_version": lm_eval.__version__, "dtype": dtype, "device": device,
                     "task_config": json.dumps(res["configs"].get(t.task, {}), sort_keys=True, default=str),
                     "seconds": time.perf_counter() - t0})
    with paths.atomic_path(out) as tmp:
        tmp.write_text(json.dumps(rows, indent=1, default=str))
    return out


class _CapabilityTaskFn(submitit.helpers.Checkpointable):
    def __call__(self, model, tasks, options):
        return str(run_capability(model, tasks, **options))


def run_capability_jobs(models: Sequence[str], tasks: Sequence[CapabilityTask] = PAPER_TASKS, *,
                        executor: str = "inline", folder: str | Path | None = None, slurm: dict | None = None,
                        **options) -> dict[str, str]:
    """One job per model (skipping models whose result file exists): ``{model: result file or error}``.

    ``executor``: ``"inline"`` (here), ``"local"`` (submitit's local executor, one subprocess per model) or
    ``"slurm"`` (one array task per model; ``slurm``: extra ``update_parameters``)."""
    if executor not in ("inline", "local", "slurm"):
        raise ValueError(f"unknown executor {executor!r}; use inline, local or slurm")
    todo = [m for m in dict.fromkeys(models) if not capability_file(m, tasks).is_file()]
    done = {m: str(capability_file(m, tasks)) for m in models if m not in todo}
    fn = _CapabilityTaskFn()
    if executor == "inline":
        for m in todo:
            try:
                done[m] = fn(m, tasks, options)
            except Exception as err:
                done[m] = f"FAILED {type(err).__name__}: {err}"
        return done
    folder = Path(folder) if folder else paths.cache_dir("batch") / "submitit-capability"
    ex = submitit.AutoExecutor(folder=folder, cluster="local" if executor == "local" else "slurm")
    ex.update_parameters(timeout_min=240, **(slurm or {}))
    jobs = ex.map_array(fn, todo, [tasks] * len(todo), [options] * len(todo))
    for m, j in zip(todo, jobs):
        try:
            done[m] = j.result()
        except Exception as err:
            done[m] = f"FAILED {type(err).__name__}: {str(err).strip().splitlines()[-1] if str(err).strip() else ''}"
    return done


def capability_table(models: Sequence[str], tasks: Sequence[CapabilityTask] = PAPER_TASKS):
    """The tidy capability table of the models' result files, one row per (model, task), with the published
    value (packaged table) in ``published`` as a cross-check; models without a file are left out."""
    import pandas as pd

    rows = []
    for m in models:
        f = capability_file(m, tasks)
        if f.is_file():
            rows += json.loads(f.read_text())
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    from prh_lib.data import benchmarks

    published = benchmarks.load_capability_table()  # percent, indexed by model
    column = {"mmlu": "mmlu_5shot", "arc_challenge": "arc_challenge", "gsm8k": "gsm8k_5shot"}
    table["published"] = [float(published.at[m, column[t]]) / 100 if t in column and m in published.index
                          else float("nan") for m, t in zip(table["model"], table["task"])]
    return table


# --------------------------------------------------------------------------------------------------------
# the rehearsal's tiny tasks, in the harness's own format


_MC = [("The sky on a clear day is", ["blue", "green", "red", "black"], 0),
       ("Snow is", ["hot", "white", "loud", "square"], 1),
       ("A cat says", ["moo", "quack", "meow", "woof"], 2),
       ("Two plus two is", ["three", "five", "six", "four"], 3),
       ("Fire is", ["cold", "hot", "wet", "blue"], 1),
       ("Grass is", ["green", "purple", "gold", "grey"], 0)]
_GEN = [("What is 1 + 1?", "2"), ("What is 2 + 1?", "3"), ("What is 3 + 1?", "4"), ("What is 4 + 1?", "5")]


def write_rehearsal_tasks(folder: Path) -> Path:
    """Write the rehearsal's two harness tasks (YAML + JSON lines data) into ``folder``; return it.

    ``prh_rehearsal_mc``: multiple choice (accuracy), 2-shot from its train split; ``prh_rehearsal_gen``:
    generation until a newline, exact match, 1-shot."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    mc = [{"question": q, "choices": c, "answer": a} for q, c, a in _MC]
    gen = [{"question": q, "answer": a} for q, a in _GEN]
    for name, rows in (("mc", mc), ("gen", gen)):
        (folder / f"{name}_train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
        (folder / f"{name}_test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[2:]))
    common = ("dataset_path: json\ndataset_kwargs:\n  data_files:\n    train: {d}/{n}_train.jsonl\n"
              "    test: {d}/{n}_test.jsonl\ntraining_split: train\nfewshot_split: train\ntest_split: test\n")
    (folder / "prh_rehearsal_mc.yaml").write_text(
        "task: prh_rehearsal_mc\n" + common.format(d=folder, n="mc") +
        "output_type: multiple_choice\ndoc_to_text: \"Question: {{question}}\\nAnswer:\"\n"
        "doc_to_choice: \"{{choices}}\"\ndoc_to_target: \"{{answer}}\"\n"
        "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\nmetadata:\n  version: 1.0\n")
    (folder / "prh_rehearsal_gen.yaml").write_text(
        "task: prh_rehearsal_gen\n" + common.format(d=folder, n="gen") +
        "output_type: generate_until\ndoc_to_text: \"Question: {{question}}\\nAnswer:\"\n"
        "doc_to_target: \" {{answer}}\"\ngeneration_kwargs:\n  until:\n    - \"\\n\"\n  do_sample: false\n"
        "  max_gen_toks: 4\nmetric_list:\n  - metric: exact_match\n    aggregation: mean\n"
        "    higher_is_better: true\n    ignore_case: true\nmetadata:\n  version: 1.0\n")
    return folder
