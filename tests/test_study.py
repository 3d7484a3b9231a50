"""Datasets x draws (prh_lib.data.study) and the parameters a page hashes (prh_lib.pages.report)."""

import pytest

from prh_lib import data
from prh_lib.pages import report
from prh_lib.data import study
from prh_lib import formatting

COCO = {"name": "coco-mini", "source": "coco-folder"}


def test_caption_draws_hold_images_fixed_and_vary_the_caption(coco_root):
    dataset = data.load_dataset("coco-folder", coco_root)
    draws = study.study_draws([dict(COCO, location=str(coco_root), n_pairs=None, repetitions=3, draws="captions")])
    assert [d.draw for d in draws] == [0, 1, 2] and all(d.repeatable for d in draws)
    assert len({d.pairs.sample_ids for d in draws}) == 1
    for d in draws:
        assert list(d.pairs.texts) == [caps[d.draw] for caps in dataset.captions]


def test_whole_set_seed_draws_collapse_to_one_not_repeatable(coco_root):
    draws = study.study_draws([dict(COCO, location=str(coco_root), n_pairs=None, repetitions=5)])
    assert len(draws) == 1 and not draws[0].repeatable and "whole set" in draws[0].what_varies


def test_seeded_subsets_differ_and_match_the_batch_pairs(coco_root):
    spec = study.DatasetSpec.coerce(dict(COCO, location=str(coco_root), n_pairs=20, repetitions=2))
    a, b = study.study_draws([spec])
    assert a.pairs.sample_ids != b.pairs.sample_ids
    assert a.pairs == data.sample_pairs(data.load_dataset("coco-folder", coco_root), n=20, seed=0)


def test_bad_specs_name_the_problem(coco_root):
    with pytest.raises(ValueError, match="unknown keys \\['kk'\\]"):
        study.DatasetSpec.coerce(dict(COCO, kk=1))
    with pytest.raises(ValueError, match="unique"):
        study.study_draws([COCO, COCO])
    with pytest.raises(ValueError, match="captions"):
        study.study_draws([dict(COCO, location=str(coco_root), n_pairs=None, repetitions=9, draws="captions")])
    with pytest.raises(ValueError, match="unknown draws"):
        study.DatasetSpec.coerce(dict(COCO, draws="nope"))
    with pytest.raises(ValueError, match="no datasets"):
        study.study_draws([])


def test_nth_caption_policy_checks_its_index(coco_root):
    dataset = data.load_dataset("coco-folder", coco_root)
    with pytest.raises(ValueError, match="caption_index=7"):
        data.sample_pairs(dataset, caption_policy="nth", caption_index=7)
    with pytest.raises(ValueError, match="only applies"):
        data.sample_pairs(dataset, caption_policy="first", caption_index=1)


def test_page_parameters_are_the_declared_ones():
    names = report.declared_parameters("sec3_1_layerwise")
    assert "k" in names and "comparisons" in names
    namespace = {n: i for i, n in enumerate(names)} | {"unrelated": 1}
    assert report.page_parameters("sec3_1_layerwise", namespace) == {n: i for i, n in enumerate(names)}


def test_p_at_the_permutation_floor_is_written_as_a_bound():
    assert formatting.format_p(1 / 201, 200) == "p ≤ 0.005 (1/201)"
    assert formatting.format_p(0.0301, 200) == "p = 0.030"
    assert formatting.format_p(float("nan"), 200) == "p = n/a"


def test_provenance_names_notebook_parameters_and_commit():
    line = report.provenance("sec3_1_layerwise", {"k": 10})
    assert line.startswith("notebook sec3_1_layerwise.py · parameters ") and "commit " in line


def test_paper_profile_uses_the_papers_same_modality_pairs():
    """Sec. 3.3 of arXiv 2611.12869: DINOv2-DINOv3 and NV-Embed-v2-Qwen3-Embedding-8B."""
    from prh_lib.run.profiles import get_profile

    pairs = {tuple(p) for p in get_profile("paper")["same_modality_pairs"]}
    assert pairs == {("facebook/dinov2-large", "facebook/dinov3-vitl16-pretrain-lvd1689m"),
                     ("nvidia/NV-Embed-v2", "Qwen/Qwen3-Embedding-8B")}
