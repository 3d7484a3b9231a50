"""Data loading and pair sampling on the real coco-mini folder and on small folders made here."""

import json
import shutil

import pytest

from prh_lib import data, paths


@pytest.fixture(scope="module")
def coco():
    return data.load_dataset("coco-folder")


def test_coco_mini_is_read_completely(coco):
    assert len(coco) == 239
    assert all(len(caps) == 5 for caps in coco.captions)
    assert list(coco.sample_ids) == sorted(coco.sample_ids, key=int)
    assert all(p.is_file() for p in coco.images)
    # COCO image 139 (val2017) is a living room; its captions talk about a room
    i = coco.sample_ids.index("139")
    assert coco.images[i].name == "000000000139.jpg"
    assert any("room" in c.lower() for c in coco.captions[i])


def test_sample_is_seeded_and_keeps_ids_in_row_order(coco):
    a = data.sample_pairs(coco, n=50, seed=3)
    b = data.sample_pairs(coco, n=50, seed=3)
    c = data.sample_pairs(coco, n=50, seed=4)
    assert a.sample_ids == b.sample_ids and a.texts == b.texts
    assert a.sample_ids != c.sample_ids
    assert len(set(a.sample_ids)) == 50
    for sid, img, text in zip(a.sample_ids, a.images, a.texts):
        i = coco.sample_ids.index(sid)
        assert img == coco.images[i]
        assert text == coco.captions[i][0]


def test_caption_policies(coco):
    first = data.sample_pairs(coco, caption_policy="first")
    rand = data.sample_pairs(coco, caption_policy="random", seed=1)
    cat = data.sample_pairs(coco, caption_policy="concat", n_captions=3)
    assert first.sample_ids == rand.sample_ids == cat.sample_ids == coco.sample_ids
    assert all(t in caps for t, caps in zip(rand.texts, coco.captions))
    assert sum(t != f for t, f in zip(rand.texts, first.texts)) > 100  # 4/5 expected to differ
    assert all(t == " ".join(caps[:3]) for t, caps in zip(cat.texts, coco.captions))
    assert first.text_fingerprint() != cat.text_fingerprint()
    assert first.image_fingerprint() == cat.image_fingerprint()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"n": 0}, "n=0"),
        ({"n": 240}, "has 239 images"),
        ({"caption_policy": "longest"}, "unknown caption_policy"),
        ({"caption_policy": "concat", "n_captions": 6}, "n_captions=6"),
        ({"caption_policy": "first", "n_captions": 2}, "only applies"),
    ],
)
def test_bad_sampling_arguments(coco, kwargs, message):
    with pytest.raises(ValueError, match=message):
        data.sample_pairs(coco, **kwargs)


def test_missing_and_unreadable_data_name_the_path(tmp_path, monkeypatch):
    with pytest.raises(data.DataError, match="does not exist"):
        data.load_coco_folder(tmp_path / "nowhere")
    with pytest.raises(data.DataError, match="captions.json"):
        data.load_coco_folder(tmp_path)
    (tmp_path / "captions.json").write_text("{not json")
    with pytest.raises(data.DataError, match="not in COCO caption format"):
        data.load_coco_folder(tmp_path)
    monkeypatch.setenv("PRH_DATA_ROOT", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="PRH_DATA_ROOT"):
        paths.data_root()
    with pytest.raises(ValueError, match="known sources"):
        data.load_dataset("laion")


def test_unreadable_image_is_named(tmp_path, coco):
    (tmp_path / "images").mkdir()
    src = coco.images[0]
    shutil.copy(src, tmp_path / "images" / src.name)
    (tmp_path / "images" / "broken.jpg").write_bytes(b"not a jpeg")
    meta = {
        "images": [{"id": 1, "file_name": src.name}, {"id": 2, "file_name": "broken.jpg"}],
        "annotations": [{"id": 10, "image_id": 1, "caption": "a photo"}, {"id": 11, "image_id": 2, "caption": "x"}],
    }
    (tmp_path / "captions.json").write_text(json.dumps(meta))
    ds = data.load_coco_folder(tmp_path)
    pairs = data.sample_pairs(ds)
    assert pairs.load_images([0])[0].mode == "RGB"
    with pytest.raises(data.DataError, match="broken.jpg"):
        pairs.load_images([1])


# ------------------------------------------------------------------ locations as pages show them (issue 13)


def test_display_path_shows_no_machine_specific_absolute_path(tmp_path, monkeypatch):
    root = tmp_path / "data" / "coco-mini"
    (root / "images").mkdir(parents=True)
    monkeypatch.setenv("PRH_DATA_ROOT", str(root))
    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    assert paths.display_path(root) == "PRH_DATA_ROOT (coco-mini)"
    assert paths.display_path(root / "images" / "1.jpg") == "PRH_DATA_ROOT/images/1.jpg"
    assert paths.display_path(tmp_path / "cache" / "features" / "m") == "PRH_CACHE_DIR/features/m"
    assert paths.display_path(paths.repo_root() / "notebooks" / "x.py") == "notebooks/x.py"
    assert paths.display_path(tmp_path / "elsewhere" / "wit") == ".../wit"
    assert paths.display_path("hf://datasets/google/wit@main") == "hf://datasets/google/wit@main"
    assert paths.display_path("owner/name") == "owner/name"


def test_dataset_and_pairs_reprs_show_no_absolute_path(coco):
    texts = [repr(coco), repr(data.sample_pairs(coco, n=5, seed=0)), coco.display_source]
    for text in texts:
        assert str(paths.data_root()) not in text and "/work/" not in text and "/tmp/" not in text, text
    assert coco.display_source == f"PRH_DATA_ROOT ({paths.data_root().name})"
    assert repr(coco) == (f"ImageCaptionDataset(name={coco.name!r}, n_images={len(coco)}, "
                          f"n_captions={sum(map(len, coco.captions))}, source={coco.display_source!r})")
    assert coco.source == str(paths.data_root())  # provenance keeps the full path
