"""The two real datasets of issue 25, read through their loaders on small copies made in ``tmp_path``.

- ``flickr8k-1k`` (COCO caption folder, 5 captions per image, sha256 per image) through ``coco-folder``;
- ``coco-val2017-captions`` (official COCO caption JSON, no images) through ``coco-captions-text``: text
  only (image access raises a DataError naming the dataset), disjoint draws, held-out text.

The shared folders are only read (a few files copied out); nothing is written under ``../shared``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from prh_lib.data import (DataError, DatasetSpec, disjoint_pairs, heldout_texts, is_text_only, load_dataset,
    sample_pairs, study_draws)
from prh_lib.data import study as data_study

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
if not SHARED.is_dir():  # a worktree of /work/main: the shared data sit next to main
    SHARED = Path("/work/shared/data")
FLICKR = SHARED / "flickr8k-1k"
COCO_TEXT = SHARED / "coco-val2017-captions" / "captions_val2017.json"
#: From ../shared/data/coco-val2017-captions/README.md.
COCO_TEXT_SHA256 = "1018a8760deaf1fc71be2f1b8da1a1348b9c35994af4322ca2fd795a78abb79c"

needs_flickr = pytest.mark.skipif(not (FLICKR / "captions.json").is_file(), reason="flickr8k-1k not available")
needs_coco_text = pytest.mark.skipif(not COCO_TEXT.is_file(), reason="coco-val2017-captions not available")


@pytest.fixture(autouse=True)
def _fresh_caches():
    data_study._load.cache_clear(), data_study.study_pairs.cache_clear()
    yield
    data_study._load.cache_clear(), data_study.study_pairs.cache_clear()


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def flickr_copy(tmp_path) -> Path:
    """The first 6 images of flickr8k-1k (by id) with their captions, as a COCO caption folder."""
    meta = json.loads((FLICKR / "captions.json").read_text(encoding="utf-8"))
    keep = sorted(meta["images"], key=lambda im: im["id"])[:6]
    ids = {im["id"] for im in keep}
    root = tmp_path / "flickr8k-6"
    (root / "images").mkdir(parents=True)
    for im in keep:
        shutil.copyfile(FLICKR / "images" / im["file_name"], root / "images" / im["file_name"])
    small = dict(meta, images=keep, annotations=[a for a in meta["annotations"] if a["image_id"] in ids])
    (root / "captions.json").write_text(json.dumps(small), encoding="utf-8")
    return root


@pytest.fixture
def coco_text_copy(tmp_path) -> Path:
    """The official val2017 caption JSON trimmed to its first 40 images (by id)."""
    meta = json.loads(COCO_TEXT.read_text(encoding="utf-8"))
    keep = sorted(meta["images"], key=lambda im: im["id"])[:40]
    ids = {im["id"] for im in keep}
    small = dict(meta, images=keep, annotations=[a for a in meta["annotations"] if a["image_id"] in ids])
    path = tmp_path / "coco-text-40" / "captions_val2017.json"
    path.parent.mkdir()
    path.write_text(json.dumps(small), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------------
# flickr8k-1k through the COCO caption folder source


@needs_flickr
def test_flickr_copy_loads_through_coco_folder(flickr_copy):
    meta = json.loads((flickr_copy / "captions.json").read_text())
    ds = load_dataset("coco-folder", flickr_copy)
    assert len(ds) == 6
    records = {str(im["id"]): im for im in meta["images"]}
    assert list(ds.sample_ids) == sorted(ds.sample_ids, key=int)  # sorted by COCO image id
    for sid, path, caps in zip(ds.sample_ids, ds.images, ds.captions):
        rec = records[sid]
        assert len(caps) == 5 and all(c.strip() == c and c for c in caps)  # README: exactly 5 human captions
        assert _sha256(Path(path)) == rec["sha256"]  # the README's per-image checksum holds for the copy
        assert rec["flickr8k_name"].split("_")[0] == sid  # image id = numeric prefix of the Flickr8k name
        assert max(rec["width"], rec["height"]) == 200  # longest side 200 px
    # the same caption order as the annotation ids in the JSON
    first = min((a for a in meta["annotations"] if str(a["image_id"]) == ds.sample_ids[0]), key=lambda a: a["id"])
    assert ds.captions[0][0] == first["caption"].strip()


@needs_flickr
def test_flickr_copy_images_open_and_caption_draws(flickr_copy):
    spec = DatasetSpec(name="flickr8k-6", source="coco-folder", location=str(flickr_copy), n_pairs=None,
                       repetitions=5, draws="captions")
    draws = study_draws([spec])
    assert [d.draw for d in draws] == [0, 1, 2, 3, 4] and all(d.repeatable for d in draws)
    assert len({d.pairs.sample_ids for d in draws}) == 1  # the same images in every caption draw
    texts = [d.pairs.texts for d in draws]
    assert all(len(set(col)) == 5 for col in zip(*texts))  # each image paired with its 5 different captions
    images = draws[0].pairs.load_images([0, 1])
    assert all(im.mode == "RGB" and max(im.size) == 200 for im in images)
    assert len(draws[0].pairs.image_fingerprint()) == 16


@needs_flickr
def test_flickr_copy_missing_image_names_the_file(flickr_copy):
    victim = sorted((flickr_copy / "images").iterdir())[0]
    victim.unlink()
    with pytest.raises(DataError, match=victim.name):
        load_dataset("coco-folder", flickr_copy)


# ------------------------------------------------------------------------------------------------------
# coco-val2017-captions through the text-only source


@needs_coco_text
def test_coco_text_copy_loads_as_text_only(coco_text_copy):
    meta = json.loads(coco_text_copy.read_text())
    for location in (coco_text_copy, coco_text_copy.parent):  # the file, or its folder
        ds = load_dataset("coco-captions-text", location, name="coco-text-40")
        assert len(ds) == 40 and is_text_only(ds)
        assert sum(len(c) for c in ds.captions) == len(meta["annotations"])
        assert list(ds.sample_ids) == sorted(ds.sample_ids, key=int)
        assert Path(ds.source) == coco_text_copy.resolve()
    by_id = {}
    for ann in sorted(meta["annotations"], key=lambda a: a["id"]):
        by_id.setdefault(str(ann["image_id"]), []).append(ann["caption"].strip())
    assert {s: list(c) for s, c in zip(ds.sample_ids, ds.captions)} == by_id


@needs_coco_text
def test_coco_text_refuses_images_naming_the_dataset(coco_text_copy):
    ds = load_dataset("coco-captions-text", coco_text_copy, name="coco-text-40")
    pairs = sample_pairs(ds, n=8, seed=0)
    assert len(pairs.text_fingerprint()) == 16  # the text side works
    for access in (lambda: pairs.load_images([0]), pairs.image_fingerprint):
        with pytest.raises(DataError, match=r"'coco-text-40' is text-only"):
            access()


@needs_coco_text
def test_coco_text_disjoint_draws_and_heldout(coco_text_copy):
    spec = DatasetSpec(name="coco-text-40", source="coco-captions-text", location=str(coco_text_copy), n_pairs=7,
                       repetitions=5, draws="disjoint", first_seed=3)
    draws = study_draws([spec])
    ids = [set(d.pairs.sample_ids) for d in draws]
    assert [len(s) for s in ids] == [7] * 5
    assert len(set().union(*ids)) == 35  # pairwise disjoint
    ds = load_dataset("coco-captions-text", coco_text_copy)
    first = dict(zip(ds.sample_ids, (c[0] for c in ds.captions)))
    assert all(t == first[s] for d in draws for s, t in zip(d.pairs.sample_ids, d.pairs.texts))  # first caption
    assert draws[2].pairs.sample_ids == disjoint_pairs(ds, n=7, draw=2, n_draws=5, seed=3).sample_ids
    assert study_draws([spec], n_draws=2)[1].pairs.sample_ids == draws[1].pairs.sample_ids  # a prefix, same draws
    # held-out text: the captions of the 5 images in no draw, and none of any aligned image
    used = set().union(*ids)
    held = heldout_texts(ds, exclude=used)
    spare = [c for s, caps in zip(ds.sample_ids, ds.captions) if s not in used for c in caps]
    assert held == spare and len(held) >= 5 * 5
    assert heldout_texts(ds, exclude=used, per_image=1, max_texts=3) == \
        [caps[0] for s, caps in zip(ds.sample_ids, ds.captions) if s not in used][:3]


@needs_coco_text
def test_coco_text_disjoint_errors(coco_text_copy):
    too_many = DatasetSpec(name="t", source="coco-captions-text", location=str(coco_text_copy), n_pairs=9,
                           repetitions=5, draws="disjoint")
    with pytest.raises(ValueError, match=r"need 45 images, it has 40 \(at most 4 disjoint draws of N = 9\)"):
        study_draws([too_many])
    ok = DatasetSpec(name="t", source="coco-captions-text", location=str(coco_text_copy), n_pairs=8,
                     repetitions=5, draws="disjoint")
    with pytest.raises(ValueError, match="asks for more"):
        study_draws([ok], n_draws=6)
    with pytest.raises(ValueError, match="needs n_pairs"):
        DatasetSpec(name="t", source="coco-captions-text", n_pairs=None, draws="disjoint")
    ds = load_dataset("coco-captions-text", coco_text_copy)
    with pytest.raises(ValueError, match="every image"):
        heldout_texts(ds, exclude=ds.sample_ids)
    with pytest.raises(ValueError, match="not in dataset"):
        heldout_texts(ds, exclude=["not-an-id"])


def test_coco_text_missing_file_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="not found"):
        load_dataset("coco-captions-text", tmp_path / "absent.json")
    (tmp_path / "a.json").write_text("{}")
    (tmp_path / "b.json").write_text("{}")
    with pytest.raises(DataError, match="exactly one"):
        load_dataset("coco-captions-text", tmp_path)


@needs_coco_text
def test_shared_coco_text_file_as_documented():
    """The full shared file, read only: the README's checksum and counts, and what they allow."""
    assert _sha256(COCO_TEXT) == COCO_TEXT_SHA256
    ds = load_dataset("coco-captions-text", COCO_TEXT)
    assert len(ds) == 5000 and sum(len(c) for c in ds.captions) == 25014
    assert sorted({len(c) for c in ds.captions}) == [5, 6, 7]
    # 5 disjoint draws of N = 1,024 need 5,120 images: only 4 fit, leaving 904 images of held-out text
    with pytest.raises(ValueError, match="at most 4 disjoint draws of N = 1024"):
        disjoint_pairs(ds, n=1024, draw=0, n_draws=5)
    used = set().union(*(disjoint_pairs(ds, n=1024, draw=r, n_draws=4).sample_ids for r in range(4)))
    assert len(used) == 4096 and len(ds) - len(used) == 904


@needs_coco_text
def test_vision_extraction_on_text_only_pairs_is_refused(coco_text_copy):
    from prh_lib import extract
    from prh_lib.models import ModelNotAvailableError

    pairs = sample_pairs(load_dataset("coco-captions-text", coco_text_copy, name="coco-text-40"), n=4, seed=0)
    try:
        with pytest.raises(DataError, match=r"'coco-text-40' is text-only.*language models only"):
            extract.get_features("dinov2-small", pairs, progress=False)  # refused at the cache key, nothing loaded
    except ModelNotAvailableError:
        pytest.skip("dinov2-small is not installed in the zoo")


@needs_coco_text
def test_default_location_is_next_to_the_data_root(coco_text_copy, tmp_path, monkeypatch):
    root = tmp_path / "data"
    (root / "coco-mini").mkdir(parents=True)
    shutil.copytree(coco_text_copy.parent, root / "coco-val2017-captions")
    monkeypatch.setenv("PRH_DATA_ROOT", str(root / "coco-mini"))
    spec = DatasetSpec.coerce({"name": "coco-val2017-captions", "source": "coco-captions-text", "n_pairs": 10,
                               "repetitions": 4, "draws": "disjoint"})
    draws = study_draws([spec])
    assert len(draws) == 4 and all(len(d.pairs) == 10 for d in draws)
    assert "disjoint draws of 40 images" in draws[0].what_varies


# ------------------------------------------------------------------------------------------------------
# a dataset named by its folder next to the data root, and the dataset the verdicts read


@needs_flickr
def test_bare_folder_name_is_found_next_to_the_data_root(flickr_copy, tmp_path, monkeypatch):
    # a data root with a sibling folder holding the small flickr copy; nothing resolves from the working directory
    coco = tmp_path / "coco-root"
    coco.mkdir()
    monkeypatch.setenv("PRH_DATA_ROOT", str(coco))
    monkeypatch.chdir(tmp_path / "coco-root")
    ds = load_dataset("coco-folder", "flickr8k-6")
    assert len(ds) == 6 and ds.name == "flickr8k-6"
    from prh_lib import paths
    assert paths.sibling_dataset("flickr8k-6") == flickr_copy.resolve()
    assert paths.sibling_dataset("../flickr8k-6") is None  # only bare names
    assert paths.sibling_dataset("no-such-folder") is None
    with pytest.raises(DataError, match="no-such-folder"):
        load_dataset("coco-folder", "no-such-folder")


def _draws(sizes):
    from types import SimpleNamespace
    return [SimpleNamespace(dataset=name, pairs=range(n), draw=0) for name, n in sizes]


def test_headline_dataset_is_the_papers_coco_else_the_largest_n():
    from prh_lib.data.study import headline_dataset
    assert headline_dataset(_draws([("coco-mini", 239), ("flickr8k-1k", 1000)])) == "flickr8k-1k"
    assert headline_dataset(_draws([("flickr8k-1k", 1000), ("coco-mini", 239)])) == "flickr8k-1k"
    assert headline_dataset(_draws([("docci", 1024), ("coco", 1024)])) == "coco"
    assert headline_dataset(_draws([("a", 239), ("b", 239)])) == "a"  # ties: the first listed
    with pytest.raises(ValueError, match="at least one draw"):
        headline_dataset([])


@needs_flickr
def test_default_studies_read_flickr8k_at_the_papers_n():
    """The chapters' own defaults put flickr8k-1k (N = 1,000) in the study, and it is what their verdicts read."""
    from prh_lib import paths
    from prh_lib.data.study import headline_dataset
    for nb in ("sec3_1_layerwise", "sec3_1b_pca", "sec3_3_regimes", "appg_k_n_ablation", "ch_displacement",
               "robustness"):
        src = (Path(paths.notebooks_dir()) / f"{nb}.py").read_text()
        cell = src.split('# %% tags=["parameters"]', 1)[1].split("# %%", 1)[0]
        scope: dict = {}
        exec(cell, scope)  # the parameters cell is plain assignments
        draws = study_draws(scope["datasets"], n_draws=1)
        assert headline_dataset(draws) == "flickr8k-1k", nb
        assert {len(d.pairs) for d in draws if d.dataset == "flickr8k-1k"} == {1000}, nb


@needs_coco_text
def test_bits_per_byte_text_comes_from_images_no_draw_aligns(coco_text_copy):
    """3.2's held-out text from a text-only set: captions of images outside every draw, none of an aligned image."""
    from prh_lib.analysis.capability.study import heldout_texts as study_heldout_texts

    spec = {"name": "val-40", "source": "coco-captions-text", "location": str(coco_text_copy), "n_pairs": 10,
            "repetitions": 2, "draws": "disjoint"}
    draws = study_draws([spec])
    used = {s for d in draws for s in d.pairs.sample_ids}
    ds = load_dataset("coco-captions-text", str(coco_text_copy))
    texts, source = study_heldout_texts([spec], draws, per_image=1, max_texts=None,
                                        text_dataset={"name": "val-40", "source": "coco-captions-text",
                                                      "location": str(coco_text_copy)})
    assert source == "heldout-images" and len(texts) == len(ds) - len(used) == 20
    first = {sid: caps[0] for sid, caps in zip(ds.sample_ids, ds.captions)}
    assert set(texts) == {first[s] for s in ds.sample_ids if s not in used}
    assert not set(texts) & {first[s] for s in used}
    few, _ = study_heldout_texts([spec], draws, per_image=1, max_texts=5, text_dataset={
        "name": "val-40", "source": "coco-captions-text", "location": str(coco_text_copy)})
    assert few == texts[:5]


@needs_coco_text
def test_text_only_draws_score_language_pairs_only_and_are_never_the_headline(coco_text_copy):
    from prh_lib.analysis.regimes import language_only, regime_comparisons
    from prh_lib.data.study import headline_dataset

    comps = regime_comparisons(unimodal=[["dinov2-small", "smollm2-135m"]],
                               same_modality=[["dinov2-small", "efficientnet-lite0"], ["smollm2-135m", "minilm-l6"]])
    assert [(c.x, c.y) for c in language_only(comps)] == [("smollm2-135m", "minilm-l6")]
    text = study_draws([{"name": "val-40", "source": "coco-captions-text", "location": str(coco_text_copy),
                         "n_pairs": 20, "repetitions": 2, "draws": "disjoint"}])
    images = _draws([("coco-mini", 8)])
    assert headline_dataset(text + images) == "coco-mini"  # 20 text-only pairs, 8 with images: images win
    assert headline_dataset(text) == "val-40"  # only text: it is all there is


def test_sibling_location_names_the_folder_even_without_a_data_root(tmp_path, monkeypatch):
    from prh_lib import paths
    from prh_lib.data import text_only

    monkeypatch.setenv("PRH_DATA_ROOT", str(tmp_path / "missing" / "coco-mini"))  # no such folder
    want = (tmp_path / "missing").resolve() / "coco-val2017-captions"
    assert paths.sibling_location("coco-val2017-captions") == want == text_only._default_location()
    assert paths.sibling_dataset("coco-val2017-captions") is None
    (tmp_path / "d" / "coco-mini").mkdir(parents=True)
    monkeypatch.setenv("PRH_DATA_ROOT", str(tmp_path / "d" / "coco-mini"))
    assert paths.sibling_location("flickr8k-1k") == (tmp_path / "d").resolve() / "flickr8k-1k"
