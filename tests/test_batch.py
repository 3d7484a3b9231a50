"""Batch runs: planning, idempotent execution through every executor, failure and rerun, the paper's lists.

Most tests use a stand-in extractor (``fixtures.fake_extract``) that writes the cache exactly as
``extract.get_features`` does; ``test_real_tiny_models_*`` runs the real extraction on tiny random models.
The Hub is never contacted.
"""

import ast
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import stat  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from fixtures import fake_extract, hf_data  # noqa: E402
from prh_lib import batch, data, extract, models, paths
from prh_lib.data import paper
from prh_lib.data import study as data_study
from prh_lib.run import profiles  # noqa: E402

TESTS_DIR = Path(__file__).resolve().parent
REAL_RESOLVE_IDENTITY = models.resolve_identity  # the fixture below swaps in a fake for most tests
VISION, TEXT = "fake/vision-a", "fake/lm-b"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    import datasets
    import huggingface_hub

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(models, "resolve_identity", fake_extract.identity)
    paths.cache_root()
    forget = lambda: (data_study._load.cache_clear(), data_study.study_pairs.cache_clear())  # memoised datasets, pairs
    forget()
    yield
    forget()


@pytest.fixture
def study(tmp_path):
    wit = hf_data.save_wit(tmp_path / "data", n=12)
    coco = hf_data.coco_official(tmp_path / "data", n=10)
    specs = [
        {"name": "wit", "source": "wit", "location": str(wit), "n_pairs": 8, "repetitions": 3},
        {"name": "coco", "source": "coco-captions", "location": str(coco), "n_pairs": 5, "repetitions": 2},
    ]
    return batch.plan_study([VISION, TEXT], specs)


def _cells(jobs):
    return batch.plan_table(jobs).to_dict(orient="index")


# ----------------------------------------------------------------------------------------------- planning


def test_plan_enumerates_models_datasets_seeds_with_distinct_cache_files(study):
    assert len(study) == 2 * (3 + 2)
    assert [(j.model, j.dataset.name, j.seed) for j in study[:5]] == [
        (VISION, "wit", 0), (VISION, "wit", 1), (VISION, "wit", 2), (VISION, "coco", 0), (VISION, "coco", 1)]
    assert len({j.cache_file for j in study}) == len(study)
    assert all(j.status() == "left" for j in study)
    assert _cells(study) == {VISION: {"wit": "0/3", "coco": "0/2"}, TEXT: {"wit": "0/3", "coco": "0/2"}}
    # the planned file is the one get_features writes for the same pairs (vision: image key, text: text key)
    job = study[-1]
    pairs = job.pairs()
    assert len(pairs) == 5 and pairs.seed == 1
    fake_extract.get_features(job.model, pairs)
    assert job.is_done() and study[-2].status() == "left"


def test_plan_overrides_and_bad_input(study, tmp_path):
    jobs = batch.plan_study([VISION], [study[0].dataset], repetitions=1, n_pairs=4, dtype="bfloat16")
    assert len(jobs) == 1 and len(jobs[0].pairs()) == 4 and jobs[0].dtype == "bfloat16"
    assert batch.plan_study([VISION], [study[0].dataset], seeds=[7, 9])[1].seed == 9
    with pytest.raises(ValueError, match="at least one model"):
        batch.plan_study([], [study[0].dataset])
    with pytest.raises(ValueError, match="unknown source 'laion'.*coco-folder"):
        batch.plan_study([VISION], [{"name": "x", "source": "laion"}])
    with pytest.raises(ValueError, match="unknown paper dataset 'imagenet'"):
        batch.plan_study([VISION], ["imagenet"])
    with pytest.raises(data.DataError, match="no such file or folder"):
        batch.plan_study([VISION], [{"name": "w", "source": "wit", "location": str(tmp_path / "missing" / "w")}])


def test_unresolvable_model_is_planned_as_unknown_and_fails_with_the_reason(study, monkeypatch):
    def identity(model):
        if model == TEXT:
            raise OSError(f"{model} is gated: log in")
        return fake_extract.identity(model)

    monkeypatch.setattr(models, "resolve_identity", identity)
    jobs = batch.plan_study([VISION, TEXT], [study[0].dataset])
    assert [j.status() for j in jobs] == ["left"] * 3 + ["unknown"] * 3
    assert "gated" in batch.describe_plan(jobs) and "3 unknown" in batch.describe_plan(jobs)
    summary = batch.run_jobs(jobs, extractor=fake_extract.get_features)
    assert len(summary.done) == 3 and len(summary.failed) == 3
    assert all("gated" in o.error for o in summary.failed)


# ----------------------------------------------------------------------------------------------- running


def test_inline_run_then_rerun_repeats_nothing(study):
    first = batch.run_jobs(study, extractor=fake_extract.get_features)
    assert first.ok and len(first.done) == 10 and not first.skipped
    assert all(j.is_done() for j in study) and len(fake_extract.calls()) == 10
    feats = extract.load_features(study[0].cache_file, expected_sample_ids=study[0].pairs().sample_ids)
    assert feats.values.shape == (3, 8, 4)
    second = batch.run_jobs(study, extractor=fake_extract.get_features)
    assert len(second.skipped) == 10 and not second.outcomes and len(fake_extract.calls()) == 10
    assert _cells(study) == {VISION: {"wit": "3/3", "coco": "2/2"}, TEXT: {"wit": "3/3", "coco": "2/2"}}


def test_debug_executor_failed_model_is_rerun_alone(study):
    fake_extract.set_failing(TEXT)
    first = batch.run_jobs(study, executor="debug", folder=paths.cache_dir("sub"), extractor=fake_extract.get_features)
    assert not first.ok and {o.job.model for o in first.failed} == {TEXT} and len(first.failed) == 5
    assert all("simulated crash" in o.error for o in first.failed) and len(first.done) == 5
    assert _cells(study)[TEXT] == {"wit": "0/3", "coco": "0/2"} and _cells(study)[VISION]["wit"] == "3/3"
    fake_extract.set_failing(TEXT, False)
    second = batch.run_jobs(study, executor="debug", folder=paths.cache_dir("sub"), extractor=fake_extract.get_features)
    assert second.ok and len(second.skipped) == 5 and {o.job.model for o in second.done} == {TEXT}
    assert len(fake_extract.calls()) == 10  # the vision jobs ran once in all


def test_local_executor_subprocess_failure_and_rerun(study, monkeypatch):
    """submitit's LocalExecutor runs the task in a subprocess (pickled jobs, inherited environment)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")]))
    jobs = [j for j in study if j.seed == 0]  # 4 jobs keep the subprocess short
    fake_extract.set_failing(TEXT)
    first = batch.run_jobs(jobs, executor="local", local_gpus=[[]], folder=paths.cache_dir("sub"),
                           extractor=fake_extract.get_features)
    assert len(first.submitted) == 1 and len(first.done) == 2 and len(first.failed) == 2
    assert all(o.host for o in first.outcomes)
    fake_extract.set_failing(TEXT, False)
    second = batch.run_jobs(jobs, executor="local", local_gpus=[[]], folder=paths.cache_dir("sub"),
                            extractor=fake_extract.get_features)
    assert second.ok and len(second.skipped) == 2 and len(second.done) == 2
    # each job extracted exactly once over both runs: the vision jobs were not repeated by the rerun
    assert sorted(c.split("|")[0] for c in fake_extract.calls()) == sorted([VISION, VISION, TEXT, TEXT])


def test_interrupted_write_never_counts_as_done(study):
    job = study[0]
    final = Path(job.cache_file)

    def dies_mid_write(model, pairs, **kw):
        with paths.atomic_path(final) as tmp:
            tmp.write_bytes(b"half a safetensors file")
            raise KeyboardInterrupt  # like a preemption signal: not caught by the job
    with pytest.raises(KeyboardInterrupt):
        batch.run_job(job, extractor=dies_mid_write)
    assert not final.exists() and job.status() == "left"
    # a SIGKILL leaves the temporary folder behind; it is not the cache entry either
    leftover = final.parent / f".{final.name}.abc.tmp"
    leftover.mkdir()
    (leftover / final.name).write_bytes(b"half")
    assert job.status() == "left"
    assert batch.run_job(job, extractor=fake_extract.get_features).status == "done" and job.is_done()


def test_job_that_writes_elsewhere_is_reported(study):
    def writes_nothing(model, pairs, **kw):
        return None

    outcome = batch.run_job(study[0], extractor=writes_nothing)
    assert outcome.status == "failed" and "PRH_CACHE_DIR" in outcome.error


def test_choose_batch_size_halves_on_out_of_memory():
    tried = []

    def run(bs):
        tried.append(bs)
        if bs > 4:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return f"ok{bs}"

    assert batch.choose_batch_size(run, 32) == ("ok4", 4) and tried == [32, 16, 8, 4]
    with pytest.raises(torch.cuda.OutOfMemoryError):
        batch.choose_batch_size(run, 32, min_batch_size=8)
    with pytest.raises(ValueError, match="bad input"):
        batch.choose_batch_size(lambda bs: (_ for _ in ()).throw(ValueError("bad input")), 8)
    with pytest.raises(ValueError, match="min_batch_size"):
        batch.choose_batch_size(run, 2, min_batch_size=4)


def test_oom_during_a_job_is_retried_with_a_smaller_batch(study):
    def small_gpu(model, pairs, *, batch_size, **kw):
        if batch_size > 8:
            raise RuntimeError("CUDA error: out of memory")
        return fake_extract.get_features(model, pairs, batch_size=batch_size, **kw)

    outcome = batch.run_job(study[0], extractor=small_gpu)
    assert outcome.status == "done" and outcome.batch_size == 8
    assert fake_extract.calls()[-1].endswith("|8")


@pytest.mark.parametrize("model, mem, dtype, expected", [
    ("facebook/dinov2-large", 80, "bfloat16", 1),
    ("huggyllama/llama-30b", 80, "bfloat16", 2),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 80, "bfloat16", 2),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 141, "bfloat16", 1),
    ("Qwen/Qwen2.5-14B", 24, "bfloat16", 2),
    ("Qwen/Qwen2.5-14B", 80, "float32", 1),
    ("some/other-model", 16, "float32", 1),
])
def test_gpus_needed(model, mem, dtype, expected):
    assert batch.gpus_needed(model, dtype=dtype, gpu_mem_gb=mem) == expected


def test_slurm_path_submits_one_array_per_gpu_count(study, tmp_path, monkeypatch):
    """A fake sbatch/srun pair stands in for a cluster: the submitted scripts are checked, nothing runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "sbatch.log"
    (bin_dir / "srun").write_text("#!/bin/sh\necho 'slurm 23.02'\n")
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ncat \"$1\" >> {log}\necho '=====' >> {log}\n"
                                    "echo 'Submitted batch job 4242'\n")
    for f in bin_dir.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    spec = study[0].dataset
    jobs = batch.plan_study(["facebook/dinov2-large", "huggyllama/llama-30b", "Qwen/Qwen3-4B"], [spec],
                            repetitions=2, device="cuda", dtype="bfloat16")
    summary = batch.run_jobs(jobs, executor="slurm", wait=False, folder=tmp_path / "sub", slurm_partition="gpu",
                             timeout_min=90, mem_gb=64, slurm_additional={"account": "prh"},
                             slurm_setup=["source .venv/bin/activate"])
    # 1-GPU array: dinov2-large and Qwen3-4B; llama-30b (65 GB of bf16 weights) needs 2 GPUs, a one-task array
    assert summary.submitted == ["4242_0", "4242_1", "4242"] and not summary.outcomes
    scripts = log.read_text().split("=====\n")[:-1]
    assert len(scripts) == 2
    one, two = scripts
    assert "#SBATCH --array=0-1%2" in one and "#SBATCH --gpus-per-node=1" in one
    assert "#SBATCH --array" not in two and "#SBATCH --gpus-per-node=2" in two
    for s in scripts:
        assert "#SBATCH --partition=gpu" in s and "#SBATCH --account=prh" in s and "#SBATCH --time=90" in s
        assert "#SBATCH --mem=64GB" in s and "source .venv/bin/activate" in s
    assert "submitted 3 submitit jobs" in str(summary)


def test_unknown_executor(study):
    with pytest.raises(ValueError, match="unknown executor 'kubernetes'.*slurm"):
        batch.run_jobs(study, executor="kubernetes")


def test_real_tiny_models_through_submitit_then_get_features_reads_the_cache(tmp_path, monkeypatch):
    """Real extraction (models.load_model + extract.get_features) of tiny random models, in submitit's debug
    executor; the notebook-side call ``get_features`` afterwards finds every file without loading a model."""
    from fixtures import tiny_models
    from prh_lib import models

    wit = hf_data.save_wit(tmp_path / "d", n=12)
    texts = [c for caps in data.load_dataset("wit", wit).captions for c in caps]
    lm = str(tiny_models.tiny_llama(tmp_path / "tiny-llama", texts))
    vit = str(tiny_models.tiny_dinov2(tmp_path / "tiny-dinov2"))
    monkeypatch.setattr(models, "resolve_identity", REAL_RESOLVE_IDENTITY)
    spec = {"name": "wit", "source": "wit", "location": str(wit), "n_pairs": 10, "repetitions": 2}
    jobs = batch.plan_study([vit, lm], [spec], batch_size=4)
    assert [j.status() for j in jobs] == ["left"] * 4
    summary = batch.run_jobs(jobs, executor="debug", folder=paths.cache_dir("sub"))
    assert summary.ok and len(summary.done) == 4, str(summary)
    assert all(o.batch_size == 4 for o in summary.done)

    def no_loading(*a, **k):
        raise AssertionError("get_features loaded a model although the batch run cached its features")

    monkeypatch.setattr(models, "load_model", no_loading)
    for job in jobs:
        pairs = job.pairs()
        feats = extract.get_features(job.model, pairs, dtype=job.dtype)
        assert feats.values.shape == (3, 10, 16) and feats.layer_labels == ("embed", "layer.1", "layer.2")
        assert feats.sample_ids == pairs.sample_ids and feats.meta["model"] == job.model
        assert torch.isfinite(feats.values).all() and feats.values[1:].std() > 0
    assert batch.run_jobs(jobs).skipped == jobs


# ----------------------------------------------------------------------------------------------- CLI, profile, paper


def test_cli_plan_run_plan_with_the_paper_profile(tmp_path, monkeypatch, capsys):
    wit = hf_data.save_wit(tmp_path / "d", n=12)
    docci = hf_data.docci_official(tmp_path / "d")
    monkeypatch.setattr(extract, "get_features", fake_extract.get_features)
    args = ["--profile", "paper", "--models", "vision", "--datasets", "wit-1024", "docci",
            "--location", f"wit-1024={wit}", "--location", f"docci={docci}", "--n-pairs", "6", "--repetitions", "2"]
    assert batch.main(["plan", *args]) == 0
    out = capsys.readouterr().out
    assert "facebook/dinov3-vitl16-pretrain-lvd1689m" in out and "0/2" in out and "12 jobs: 0 cached, 12 left" in out
    assert batch.main(["run", *args]) == 0
    out = capsys.readouterr().out
    assert "12 extracted now, 0 failed" in out
    calls = fake_extract.calls()
    assert len(calls) == 12 and all(c.endswith("|32") for c in calls)  # the profile's batch size
    assert batch.main(["plan", *args]) == 0
    assert "12 jobs: 12 cached, 0 left" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        batch.main(["plan", "--profile", "paper", "--datasets", "imagenet"])
    assert "not in profile" in capsys.readouterr().err
    assert batch.main(["plan", "--profile", "paper", "--models", "vision", "--datasets", "cc3m-dreamlip"]) == 2
    err = capsys.readouterr().err
    assert "img2dataset" in err and "--location NAME=PATH" in err
    assert batch.main(["models"]) == 0
    assert capsys.readouterr().out.count("\n") == len(paper.MODELS) + 2  # header lines + one per model


def test_paper_lists_and_id_choices():
    assert len(paper.models("vision")) == 3 and len(paper.models("language")) == 21
    assert len(paper.models("embedding")) == 2 and len(paper.models("vlm")) == 3
    ids = paper.models()
    assert len(ids) == len(set(ids)) == 29
    for chosen in ["facebook/dinov2-large", "facebook/dinov3-vitl16-pretrain-lvd1689m", "facebook/vit-mae-large",
                   "huggyllama/llama-7b", "huggyllama/llama-13b", "huggyllama/llama-30b", "meta-llama/Llama-3.1-8B",
                   "mistralai/Mistral-7B-v0.3", "Qwen/Qwen3-8B", "google/gemma-2-9b",
                   "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "nvidia/NV-Embed-v2", "openai/clip-vit-large-patch14",
                   "google/siglip2-so400m-patch14-384", "Qwen/Qwen3-VL-Embedding-8B"]:
        assert chosen in ids, chosen
    assert all(m["params_b"] > 0 and m["modality"] in ("vision", "language", "vision-language") for m in paper.MODELS)
    assert {d["source"] for d in paper.DATASETS} <= set(data.SOURCES)
    assert [(d["name"], d["repetitions"], d["n_pairs"]) for d in paper.DATASETS] == [
        ("wit-1024", 1, 1024), ("coco", 5, 1024), ("docci", 5, 1024), ("cc3m-dreamlip", 5, 1024)]
    with pytest.raises(ValueError, match="valid groups"):
        paper.models("audio")


def _notebook_parameters(name):
    src = (Path(__file__).resolve().parents[1] / "notebooks" / f"{name}.py").read_text()
    cell = src.split('# %% tags=["parameters"]')[1].split("# %%")[0]
    return {t.id for node in ast.parse(cell).body if isinstance(node, ast.Assign) for t in node.targets}


def test_paper_profile_uses_the_notebook_parameter_names():
    prof = profiles.get_profile("paper")
    from prh_lib.run import book as run_book

    # every key of the profile reaches some notebook (a misspelt key would silently be ignored)
    declared = set().union(*(_notebook_parameters(n) for n in run_book.available_notebooks()))
    batch_only = {"vision_models", "language_models", "embedding_models", "vlm_models", "study_datasets"}
    assert set(prof) - batch_only <= declared, set(prof) - batch_only - declared
    assert prof["n_permutations"] == 500
    assert prof["device"] == "cuda" and prof["dtype"] == "bfloat16"
    assert len(prof["comparisons"]) == 3 * 21
    # no notebook takes a single dataset any more: the notebooks' datasets are the study's, the wit-1024 job first
    assert not {"dataset_source", "data_location", "n_pairs", "seed", "caption_policy"} & set(prof)
    models, specs, opts = batch.study_from_profile(prof)
    wit = specs[0]
    assert (wit.name, wit.source, wit.n_pairs, wit.seeds) == ("wit-1024", "wit", 1024, (0,))
    assert [s.name for s in specs] == [d["name"] for d in prof["datasets"]]
    assert len(models) == 29 and opts == {"device": "cuda", "dtype": "bfloat16", "batch_size": 32}


def test_profile_without_study_keys_plans_the_notebook_dataset():
    models, specs, _ = batch.study_from_profile({"comparisons": [["a", "b"], ["a", "c"]], "n_pairs": 48, "seed": 3})
    assert models == ["a", "b", "c"]
    assert [(s.source, s.location, s.n_pairs, s.seeds) for s in specs] == [("coco-folder", None, 48, (3,))]
