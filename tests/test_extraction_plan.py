"""Extraction planned before scoring (prh_lib.run.extraction): the plan lists the files the notebooks read, at the paths
``get_features`` uses, and extracting it over the cores writes them once.

A chapter run alone still extracts on a cache miss: ``tests/test_extract.py::test_get_features_caches_and_reuses``
(``get_features`` computes, caches, then reads without loading the model)."""

from __future__ import annotations

import pytest

from prh_lib.extract.features import EXTRACTION_LOG

from prh_lib import data, extract
from prh_lib.models import precision
from prh_lib.run import extraction

VISION = {"dinov2-small", "efficientnet-lite0", "efficientnet-lite2"}
LANGUAGE = {"smollm2-135m", "minilm-l6", "gemma3-270m"}
TINY = [{"name": "coco-mini", "source": "coco-folder", "n_pairs": 6, "repetitions": 1, "draws": "seeds"}]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def cache_with_zoo(zoo_cache, tmp_path, monkeypatch):
    """An empty cache whose converted models are the session's (``zoo_cache``): planning 3.1 asks whether each language
    model is causal, which reads its converted config; converting the two GGUF models again costs ~100 s per test."""
    models = zoo_cache / "models"
    models.mkdir(parents=True, exist_ok=True)
    (tmp_path / "models").symlink_to(models, target_is_directory=True)
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_chapter_params_are_the_declared_defaults_updated_with_the_declared_keys_only():
    p = extraction.chapter_params("sec3_3_regimes", {"k": 3, "not_a_parameter": 1, "comparisons": [["a", "b"]]})
    assert p["k"] == 3 and p["dtype"] == "auto" and p["random_init_seeds"] == [0]
    assert "not_a_parameter" not in p and "comparisons" not in p  # 3.3 declares neither


def test_regimes_plan_has_every_model_and_twin_on_every_draw_and_the_text_only_draws_for_language_models(cache):
    p = extraction.chapter_params("sec3_3_regimes", {})
    draws = data.study_draws(p["datasets"], n_draws=p["n_draws"])
    text_only = {d.dataset for d in draws if data.is_text_only(d.pairs)}
    assert text_only == {"coco-val2017 captions"} and len({d.dataset for d in draws}) == 4
    expected = set()
    for d in draws:
        trained = LANGUAGE if d.dataset in text_only else VISION | LANGUAGE
        for m in trained | {f"{m}@random-init:0" for m in trained}:
            expected.add(extract.features_path(m, d.pairs, dtype=precision.feature_dtype(m, "auto", "cpu")))
    plan = extraction.plan_features(["sec3_3_regimes"], {})
    assert {f.path for f in plan} == expected
    assert len(plan) == len(expected)  # each file once (the images of caption draws share one)
    on_text = {f.model for f in plan if data.is_text_only(f.pairs)}
    assert on_text == LANGUAGE | {f"{m}@random-init:0" for m in LANGUAGE}


def _tiny_plan():
    # Section 3.1b's reads on 6 pairs: the smallest zoo model and its random-init twin
    return extraction.plan_features(["sec3_1b_pca"], {
        "datasets": TINY, "n_draws": None, "dtype": "float32",
        "comparisons": [["efficientnet-lite0", "efficientnet-lite0@random-init:0"]]})


def test_a_planned_path_is_the_file_get_features_writes_and_logs(cache, monkeypatch, capsys):
    plan = _tiny_plan()
    assert [f.model for f in plan] == ["efficientnet-lite0", "efficientnet-lite0@random-init:0"]
    log = cache / "extracted.txt"
    monkeypatch.setenv(EXTRACTION_LOG, str(log))
    pairs = data.study_draws(TINY)[0].pairs
    extract.get_features("efficientnet-lite0", pairs, batch_size=4, progress=False)
    written = list((cache / "features").rglob("*.safetensors"))
    assert written == [plan[0].path] and plan[0].path.is_file() and not plan[1].path.is_file()
    assert log.read_text().splitlines() == [str(plan[0].path)]
    extraction.report_misses(log)
    assert "the notebooks extracted 1 feature file(s) the plan did not" in capsys.readouterr().out


def test_parallel_extraction_writes_the_planned_files_and_a_second_call_finds_them_cached(cache):
    plan = _tiny_plan()
    first = extraction.extract_planned(plan, cores=2)
    assert first["errors"] == [] and (first["planned"], first["cached"], first["extracted"]) == (2, 0, 2)
    assert first["workers"] == 2 and all(f.path.is_file() for f in plan)
    meta = extract.load_features(plan[1].path).meta
    assert meta["model"] == "efficientnet-lite0@random-init:0" and meta["dtype"] == "float32"
    again = extraction.extract_planned(_tiny_plan(), cores=2)
    assert (again["cached"], again["extracted"], again["workers"]) == (2, 0, 0)


def test_prh_run_extracts_first_times_it_and_reports_what_the_notebooks_extracted_themselves(cache, monkeypatch,
                                                                                           capsys):
    from prh_lib.run import runner

    planned = data.study_draws(TINY)[0].pairs
    other = data.sample_pairs(data.load_dataset(), n=5, seed=1)
    monkeypatch.setitem(extraction.CHAPTER_READS, "sec3_1b_pca", lambda p: [(["efficientnet-lite0"], [("c", planned)])])

    def notebook(name, params, *, output_dir=None, prefix=""):  # finds the planned file cached, extracts another
        assert extract.features_path("efficientnet-lite0", planned).is_file()
        extract.get_features("efficientnet-lite0", other, progress=False)
        (cache / f"{name}.ipynb").write_text("{}")
        return cache / f"{name}.ipynb"

    monkeypatch.setattr(runner, "run_notebook", notebook)
    args = ["sec3_1b_pca", "--force", "--no-build", "--output-dir", str(cache / "book")]
    assert runner.main(args) == 0
    out = capsys.readouterr().out
    assert "[prh-run] extraction planned: 1 feature files, 0 cached, 1 extracted by 1 worker(s)" in out
    assert "  (extraction)  " in out and "the notebooks extracted 1 feature file(s) the plan did not" in out
    extract.features_path("efficientnet-lite0", other).unlink()
    assert runner.main([*args, "--no-plan"]) == 0
    out = capsys.readouterr().out
    assert "extraction planned" not in out and "(extraction)" not in out
    assert "the notebooks extracted 1 feature file(s)" in out  # the same miss, now without a plan


def test_layerwise_plans_the_twins_only_where_the_chapter_reads_them(cache_with_zoo):
    # the verdicts' floors on every draw of the headline dataset; the sanity check and poolings on draw 0 of the others
    plan = extraction.plan_features(["sec3_1_layerwise"], {})
    lm_twins = [f.group for f in plan if f.model in {f"{m}@random-init:0" for m in LANGUAGE}]
    assert {g: lm_twins.count(g) for g in set(lm_twins)} == {"flickr8k-1k": 3 * 5, "coco-mini": 3}
    trained = [f.group for f in plan if f.model in LANGUAGE]
    assert {g: trained.count(g) for g in set(trained)} == {"flickr8k-1k": 15, "coco-mini": 15, "coco-mini, 5 captions": 3}


def test_layerwise_plans_each_causal_lms_other_poolings_and_their_twins_on_draw_0_only(cache_with_zoo):
    # pooling_variants reads "<LM>@pool:<v>" and its twin for vision × causal-LM pairs on draw 0 of each one-caption
    # dataset; a bidirectional text encoder (minilm-l6) has none, and without held-out resamples nothing is read
    p = extraction.chapter_params("sec3_1_layerwise", {})
    causal = {y for x, y in p["comparisons"] if y in {"smollm2-135m", "gemma3-270m"}}
    assert causal and p["pooling_variants"]
    pooled = [f for f in extraction.plan_features(["sec3_1_layerwise"], {}) if "@pool:" in f.model]
    names = {f"{y}@pool:{v}" for y in causal for v in p["pooling_variants"]}
    assert {f.model for f in pooled} == names | {f"{m}@random-init:0" for m in names}
    assert sorted(f.group for f in pooled) == sorted(["flickr8k-1k", "coco-mini"] * 2 * len(names))
    assert {len(f.pairs) for f in pooled} == {1000, 239}  # one draw each, not five
    assert not [f for f in extraction.plan_features(["sec3_1_layerwise"], {"heldout_boot": 0}) if "@pool:" in f.model]
