"""Malformed ``captions.json`` files (issue 13): each case is a ``DataError`` naming the file and the image id.

Every fixture is a small COCO caption folder written into ``tmp_path``; the shared data is never touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

from prh_lib import data, paths
from prh_lib.data import DataError, DataWarning, load_coco_folder

CAPTIONS = {
    "images": [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}],
    "annotations": [
        {"id": 10, "image_id": 1, "caption": "A café on a corner."},
        {"id": 11, "image_id": 2, "caption": "Two dogs in the snow."},
        {"id": 12, "image_id": 2, "caption": "Dogs playing."},
    ],
}


def _folder(tmp_path, captions=CAPTIONS, raw: bytes | None = None):
    root = tmp_path / "mini"
    (root / "images").mkdir(parents=True)
    for name in ("a.jpg", "b.jpg"):
        (root / "images" / name).write_bytes(b"not decoded here")
    text = json.dumps(captions, ensure_ascii=False)  # real UTF-8 bytes for "café", not a \u escape
    (root / "captions.json").write_bytes(raw if raw is not None else text.encode("utf-8"))
    return root


def _with(annotation_index, **changes):
    anns = [dict(a) for a in CAPTIONS["annotations"]]
    anns[annotation_index].update(changes)
    for key, value in changes.items():
        if value is KeyError:
            del anns[annotation_index][key]
    return {**CAPTIONS, "annotations": anns}


def test_reads_utf8_whatever_the_locale(tmp_path):
    """In a process whose locale encoding is ASCII (LANG=C without UTF-8 mode), the caption is still read."""
    root = _folder(tmp_path)
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0",
           "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(paths.repo_root())}
    code = ("import locale, sys; from prh_lib.data import load_coco_folder; "
            "print(locale.getpreferredencoding(False)); print(load_coco_folder(sys.argv[1]).captions[0][0])")
    out = subprocess.run([sys.executable, "-c", code, str(root)], env=env, capture_output=True, text=True,
                         encoding="utf-8")
    assert out.returncode == 0, out.stderr[-2000:]
    encoding, caption = out.stdout.splitlines()
    assert encoding.upper() in ("ANSI_X3.4-1968", "ASCII", "US-ASCII")  # the test really ran under ASCII
    assert caption == "A café on a corner."
    ds = load_coco_folder(root)
    assert ds.captions[1] == ("Two dogs in the snow.", "Dogs playing.")


def test_utf8_byte_order_mark_is_accepted(tmp_path):
    root = _folder(tmp_path, raw=b"\xef\xbb\xbf" + json.dumps(CAPTIONS).encode())
    assert load_coco_folder(root).sample_ids == ("1", "2")


def test_non_utf8_byte_names_the_file_and_the_image(tmp_path):
    raw = json.dumps(CAPTIONS, ensure_ascii=False).encode("utf-8").replace("café".encode(), b"caf\xe9")  # latin-1
    root = _folder(tmp_path, raw=raw)
    with pytest.raises(DataError, match=r"not valid UTF-8: byte 0xe9 at offset \d+ in the caption of image 1 "
                                        r"\(annotation 10\)") as info:
        load_coco_folder(root)
    assert str(root / "captions.json") in str(info.value)


@pytest.mark.parametrize("captions, message", [
    (_with(1, caption=None), r"the caption of image 2 \(annotation 11\) is null"),
    (_with(1, caption=KeyError), r"the caption of image 2 \(annotation 11\) is missing \(no 'caption' key\)"),
    (_with(0, caption=42), r"the caption of image 1 \(annotation 10\) is a int \(42\), not a string"),
    (_with(0, caption=["a", "b"]), r"the caption of image 1 \(annotation 10\) is a list"),
    (_with(2, image_id=7), r"annotation 12 points to image 7, which is not in 'images'"),
    (_with(2, image_id=KeyError), r"annotation 2 .* has no 'image_id'"),
    ({"images": CAPTIONS["images"]}, r"not in COCO caption format"),
    ({**CAPTIONS, "images": [{"id": 1, "file_name": "a.jpg"}, {"id": 1, "file_name": "b.jpg"}]},
     r"image id 1 appears twice"),
    ({**CAPTIONS, "images": [{"id": 1}, {"id": 2, "file_name": "b.jpg"}]}, r"image record 0 .* needs an 'id' and a 'file_name'"),
], ids=["null", "missing-key", "int", "list", "unknown-image", "no-image-id", "no-annotations", "duplicate-id",
        "no-file-name"])
def test_malformed_caption_is_a_data_error_naming_file_and_image(tmp_path, captions, message):
    root = _folder(tmp_path, captions)
    with pytest.raises(DataError, match=message) as info:
        load_coco_folder(root)
    assert str(root / "captions.json") in str(info.value)


def test_invalid_json_names_the_file(tmp_path):
    root = _folder(tmp_path, raw=b'{"images": [')
    with pytest.raises(DataError, match="is not in COCO caption format: invalid JSON") as info:
        load_coco_folder(root)
    assert str(root / "captions.json") in str(info.value)


def test_empty_captions_are_skipped_with_one_warning_that_counts_them(tmp_path):
    captions = _with(1, caption="   ")
    captions["annotations"].append({"id": 13, "image_id": 1, "caption": ""})
    root = _folder(tmp_path, captions)
    with pytest.warns(DataWarning, match=r"skipped 2 empty caption\(s\) \(images \[1, 2\]\)") as caught:
        ds = load_coco_folder(root)
    assert len([w for w in caught if issubclass(w.category, DataWarning)]) == 1
    assert ds.captions == (("A café on a corner.",), ("Dogs playing.",))
    assert all(t.strip() for t in data.sample_pairs(ds).texts)


def test_an_image_left_without_caption_is_an_error_naming_it(tmp_path):
    root = _folder(tmp_path, _with(0, caption=" \n"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        with pytest.raises(DataError, match=r"1 image\(s\) have no caption left after skipping empty ones: ids \[1\]"):
            load_coco_folder(root)
    no_annotation = {**CAPTIONS, "annotations": CAPTIONS["annotations"][1:]}
    with pytest.raises(DataError, match=r"1 image\(s\) have no caption: ids \[1\]"):
        load_coco_folder(_folder(tmp_path / "second", no_annotation))


def test_an_empty_text_never_becomes_a_zero_feature_row():
    from prh_lib import extract

    class Model:  # extraction refuses before touching the model
        modality, name, text_chunking = "language", "m", None

    pairs = data.Pairs("d", ("1", "2"), (None, None), ("a caption", "  "))
    with pytest.raises(DataError, match=r"1 of the 2 texts of 'd' \(first\) are empty or not strings \(samples \['2'\]\)"):
        extract.extract_features(Model(), pairs, progress=False)


def test_table_captions_name_the_row_and_count_empty_ones():
    import datasets

    from prh_lib.data import table_to_dataset

    table = datasets.Dataset.from_dict({"image": ["/x/a.jpg", "/x/b.jpg", "/x/c.jpg"],
                                        "text": ["a cat", "  ", "a dog"], "id": ["p", "q", "r"]})
    with pytest.raises(DataError, match=r"row\(s\) of src have no caption in columns \['text'\]: samples \['q'\]"):
        with pytest.warns(DataWarning, match=r"skipped 1 empty caption\(s\)"):
            table_to_dataset(table, name="t", source="src", caption_columns=("text",), id_column="id",
                             images_root=None)
