"""Dataset sources of the paper (WIT-1024, COCO captions, DOCCI, CC3M + DreamLIP) on small fixtures in their formats.

The Hub is never contacted: fixtures are written to tmp folders in the real formats (column names as on the
Hub), and a Hub id with the Hub offline must fail with a message that says how to provide a local copy.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import csv  # noqa: E402
import pickle  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fixtures import hf_data  # noqa: E402
from prh_lib import data  # noqa: E402
from prh_lib.data import sources  # noqa: E402
from prh_lib.data import DataError  # noqa: E402


@pytest.fixture(autouse=True)
def _offline_and_private_cache(monkeypatch, tmp_path):
    import datasets
    import huggingface_hub

    monkeypatch.setenv("PRH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def wit_dir(tmp_path):
    return hf_data.save_wit(tmp_path, n=12)


def _pixels(img):
    return np.asarray(img.convert("RGB"))


# ------------------------------------------------------------------------------------------------ WIT


def test_wit_from_save_to_disk_keeps_rows_captions_and_pixels(wit_dir):
    ds = data.load_dataset("wit", wit_dir)
    ref = hf_data.wit_table(12)
    assert ds.name == "wit-1024" and len(ds) == 12
    assert ds.sample_ids == tuple(str(i) for i in range(12))
    assert ds.captions[3] == ("wiki caption 3", "reference description 3")
    assert all(isinstance(im, data.TableImage) for im in ds.images)
    pairs = data.sample_pairs(ds)  # all pairs in dataset order, first caption (as Huh et al.)
    assert pairs.texts[:2] == ("wiki caption 0", "wiki caption 1")
    loaded = pairs.load_images([0, 7])
    for img, i in zip(loaded, [0, 7]):
        assert img.mode == "RGB" and img.size == (24, 24)
        np.testing.assert_array_equal(_pixels(img), _pixels(ref[i]["image"]))  # PNG: lossless


def test_table_images_fingerprint_and_pickle(tmp_path):
    a = data.load_dataset("wit", hf_data.save_wit(tmp_path / "a", n=6, seed=0))
    b = data.load_dataset("wit", hf_data.save_wit(tmp_path / "b", n=6, seed=0))
    c = data.load_dataset("wit", hf_data.save_wit(tmp_path / "c", n=6, seed=9))  # other pictures, same texts
    pa, pb, pc = (data.sample_pairs(d, n=4, seed=1) for d in (a, b, c))
    assert pa.image_fingerprint() == pb.image_fingerprint()
    assert pa.image_fingerprint() != pc.image_fingerprint()
    assert pa.text_fingerprint() == pc.text_fingerprint()
    clone = pickle.loads(pickle.dumps(pa))  # batch jobs ship Pairs / datasets to worker processes
    assert clone.image_fingerprint() == pa.image_fingerprint()
    np.testing.assert_array_equal(_pixels(clone.load_images([2])[0]), _pixels(pa.load_images([2])[0]))


def test_wit_from_a_downloaded_repository_copy_equals_save_to_disk(tmp_path, wit_dir):
    repo = hf_data.save_wit_repo_copy(tmp_path, n=12)
    a, b = data.load_dataset("wit", repo), data.load_dataset("wit", wit_dir)
    assert a.sample_ids == b.sample_ids and a.captions == b.captions
    pa, pb = data.sample_pairs(a, n=5, seed=2), data.sample_pairs(b, n=5, seed=2)
    assert pa.text_fingerprint() == pb.text_fingerprint()
    assert pa.image_fingerprint() == pb.image_fingerprint()


@pytest.mark.parametrize("source, hub_id", [("wit", "minhuh/prh"), ("coco-captions", "lmms-lab/COCO-Caption2017"),
                                            ("docci", "not-lain/docci")])
def test_hub_id_offline_names_the_dataset_and_how_to_copy_it(source, hub_id):
    with pytest.raises(DataError) as info:
        data.load_dataset(source, None)  # the default location is the Hub id
    msg = str(info.value)
    assert hub_id in msg and "offline" in msg and "save_to_disk" in msg and "hf download" in msg
    if source == "wit":
        assert "wit_1024" in msg


def test_missing_paths_columns_and_splits_are_named(tmp_path, wit_dir):
    with pytest.raises(DataError, match="no such file or folder"):
        data.load_dataset("wit", tmp_path / "nowhere" / "wit")
    with pytest.raises(DataError, match=r"columns \['caption'\] not found.*columns are \['image', 'text'\]"):
        data.load_dataset("hf-table", wit_dir, caption_columns="caption")
    with pytest.raises(DataError, match=r"no split 'validation'; splits: \['test', 'train'\]"):
        data.load_dataset("docci", hf_data.docci_table(tmp_path), split="validation")
    with pytest.raises(DataError, match="needs a location"):
        data.load_dataset("hf-table")
    with pytest.raises(ValueError, match="known sources"):
        data.load_dataset("laion", wit_dir)


def test_hf_table_with_image_paths_and_id_column(tmp_path):
    (tmp_path / "imgs").mkdir()
    ims = hf_data.images(3)
    for i, im in enumerate(ims):
        im.save(tmp_path / "imgs" / f"{i}.png")
    with open(tmp_path / "t.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["file", "key", "alt", "cap"])
        for i, caps in enumerate([["c0"], ["c1", "d1"], ["c2"]]):
            w.writerow([f"{i}.png", "xyz"[i], f"a{i}", str(caps)])
    ds = data.load_dataset("hf-table", tmp_path / "t.csv", image_column="file", caption_columns=["cap", "alt"],
                           id_column="key", images_root=tmp_path / "imgs", name="mine")
    assert ds.sample_ids == ("x", "y", "z")
    assert ds.captions[1] == ("c1", "d1", "a1")  # the CSV holds the list as a literal string
    assert ds.images[2] == tmp_path / "imgs" / "2.png"
    np.testing.assert_array_equal(_pixels(data.sample_pairs(ds).load_images([1])[0]), _pixels(ims[1]))


# ------------------------------------------------------------------------------------------------ COCO


def test_coco_official_layout(tmp_path):
    ds = data.load_dataset("coco-captions", hf_data.coco_official(tmp_path, n=10))
    assert ds.name == "coco-val2017" and len(ds) == 10
    assert list(ds.sample_ids) == sorted(ds.sample_ids, key=int) and ds.sample_ids[0] == "139"
    assert ds.captions[0] == tuple(f"photo 139 caption {c}" for c in range(5))  # by annotation id, stripped
    cat = data.sample_pairs(ds, n=4, seed=0, caption_policy="concat", n_captions=2)
    assert all(t.endswith("caption 1") for t in cat.texts)
    assert cat.load_images([0])[0].size == (24, 24)


def test_coco_table_in_the_lmms_lab_format(tmp_path):
    ds = data.load_dataset("coco-captions", hf_data.coco_table(tmp_path, n=10))
    assert ds.name == "coco-val" and ds.sample_ids[:2] == ("139", "146")
    assert len(ds.captions[0]) == 5 and ds.captions[1][0] == "photo 146 caption 0"
    rnd = data.sample_pairs(ds, n=6, seed=3, caption_policy="random")
    assert all(t.startswith(f"photo {sid} caption") for sid, t in zip(rnd.sample_ids, rnd.texts))


# ------------------------------------------------------------------------------------------------ DOCCI


def test_docci_official_release_and_table_agree(tmp_path):
    off = data.load_dataset("docci", hf_data.docci_official(tmp_path))
    tab = data.load_dataset("docci", hf_data.docci_table(tmp_path))
    assert off.name == tab.name == "docci-test"
    assert off.sample_ids == tab.sample_ids == tuple(f"test_{k:05d}" for k in range(8))
    assert off.captions == tab.captions and all(len(c) == 1 for c in off.captions)
    train = data.load_dataset("docci", hf_data.docci_official(tmp_path / "o2"), split="train")
    assert train.sample_ids == tuple(f"train_{k:05d}" for k in range(8, 12))
    with pytest.raises(DataError, match="no rows of split 'qual_dev'"):
        data.load_dataset("docci", tmp_path / "docci", split="qual_dev")


# ------------------------------------------------------------------------------------------------ CC3M


def test_cc3m_dreamlip_img2dataset_folder(tmp_path):
    root = hf_data.cc3m_img2dataset(tmp_path, n=9)
    ds = data.load_dataset("cc3m-dreamlip", root)
    assert len(ds) == 7  # row 2 failed to download, row 5 has no image file
    assert list(ds.sample_ids) == sorted(ds.sample_ids) and all(len(s) == 16 for s in ds.sample_ids)
    k = 4
    sid = sources._url_id(f"https://example.org/cc3m/{k}.jpg")
    caps = ds.captions[ds.sample_ids.index(sid)]
    assert caps == (f"longSV_captions of image {k}.", f"First sentence {k}. Second sentence {k}.",
                    f"longLLA_captions of image {k}.")
    raw = data.load_dataset("cc3m-dreamlip", root, captions="raw_caption")
    assert raw.captions[raw.sample_ids.index(sid)] == (f"raw_caption of image {k}.",)
    assert data.sample_pairs(ds, n=3, seed=0).load_images([0])[0].size == (24, 24)


def test_cc3m_errors_say_what_to_do(tmp_path):
    with pytest.raises(DataError, match="img2dataset"):
        data.load_dataset("cc3m-dreamlip")
    root = hf_data.cc3m_img2dataset(tmp_path, n=3, columns=("raw_caption",))
    with pytest.raises(DataError, match="save_additional_columns"):
        data.load_dataset("cc3m-dreamlip", root)
    with pytest.raises(DataError, match="unknown DreamLIP caption columns"):
        data.load_dataset("cc3m-dreamlip", root, captions=["longGPT_captions"])
