"""Bad images (issue 27, item 5): a truncated JPEG, a file that is not an image, a missing file listed in
``captions.json``, 1 x 1, grayscale, CMYK, alpha and 16-bit images. Each gives a DataError naming the file
or the stated handling (:mod:`prh_lib.data.images`)."""

import json

import numpy as np
import pytest
from PIL import Image

from prh_lib.data import DataError, Pairs
from prh_lib.data.coco import load_coco_folder


def _pairs(*files):
    return Pairs(dataset="bad-images", sample_ids=tuple(f"s{i}" for i in range(len(files))),
                 images=tuple(files), texts=tuple("a photo" for _ in files))


def _photo(path, mode="RGB", size=(32, 24), fmt="JPEG", **kw):
    rng = np.random.default_rng(0)
    arr = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(arr).convert(mode).save(path, fmt, **kw)
    return path


def test_truncated_jpeg_names_the_file(tmp_path):
    path = _photo(tmp_path / "cut.jpg", size=(256, 256), quality=95)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataError, match=r"cannot read image .*cut\.jpg \(sample 's0'\).*truncated"):
        _pairs(path).load_images()


def test_file_that_is_not_an_image_names_the_file(tmp_path):
    path = tmp_path / "notes.jpg"
    path.write_text("not an image at all")
    with pytest.raises(DataError, match=r"notes\.jpg \(sample 's0'\): it is not an image"):
        _pairs(path).load_images()


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(DataError, match=r"gone\.jpg \(sample 's0'\): the file does not exist"):
        _pairs(tmp_path / "gone.jpg").load_images()


def test_missing_file_listed_in_captions_json_names_it(tmp_path):
    (tmp_path / "images").mkdir()
    _photo(tmp_path / "images" / "a.jpg")
    captions = {"images": [{"id": 1, "file_name": "a.jpg"}, {"id": 2, "file_name": "b.jpg"}],
                "annotations": [{"id": 1, "image_id": 1, "caption": "a"}, {"id": 2, "image_id": 2, "caption": "b"}]}
    (tmp_path / "captions.json").write_text(json.dumps(captions))
    with pytest.raises(DataError, match=r"1 image files listed in .*captions\.json are missing.*b\.jpg"):
        load_coco_folder(tmp_path)


@pytest.mark.parametrize("mode", ["L", "1", "CMYK", "P"])
def test_grayscale_cmyk_and_palette_become_rgb(tmp_path, mode):
    fmt = "JPEG" if mode in ("L", "CMYK") else "PNG"
    path = _photo(tmp_path / f"x.{fmt.lower()}", mode=mode, fmt=fmt)
    [im] = _pairs(path).load_images()
    assert im.mode == "RGB" and im.size == (32, 24)
    if mode == "L":  # replicated to three equal channels
        arr = np.asarray(im)
        assert (arr[..., 0] == arr[..., 1]).all() and (arr[..., 1] == arr[..., 2]).all()


def test_one_by_one_image_is_kept(tmp_path):
    path = tmp_path / "dot.png"
    Image.new("RGB", (1, 1), (10, 20, 30)).save(path)
    [im] = _pairs(path).load_images()
    assert im.size == (1, 1) and im.getpixel((0, 0)) == (10, 20, 30)


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P"])
def test_transparent_pixels_are_composited_on_white(tmp_path, mode):
    """Fully transparent black pixels become white, opaque ones keep their colour (not black everywhere)."""
    rgba = Image.new("RGBA", (4, 2), (0, 0, 0, 0))
    rgba.putpixel((0, 0), (200, 100, 50, 255))
    path = tmp_path / "alpha.png"
    if mode == "P":
        pal = Image.new("P", (4, 2), 0)
        pal.putpalette([0, 0, 0, 200, 100, 50] + [0] * 762)
        pal.putpixel((0, 0), 1)
        pal.save(path, transparency=0)
    else:
        rgba.convert(mode).save(path)
    [im] = _pairs(path).load_images()
    assert im.mode == "RGB"
    assert im.getpixel((3, 1)) == (255, 255, 255)
    expected = (200, 100, 50) if mode != "LA" else (im.getpixel((0, 0))[0],) * 3
    assert im.getpixel((0, 0)) == expected and im.getpixel((0, 0)) != (255, 255, 255)


def test_16_bit_image_is_refused_not_clipped_to_white(tmp_path):
    path = tmp_path / "deep.png"
    Image.fromarray(np.full((4, 4), 40000, dtype=np.uint16)).save(path)
    assert Image.open(path).mode.startswith("I")
    with pytest.raises(DataError, match=r"deep\.png \(sample 's0'\) has I.* pixels .*clip"):
        _pairs(path).load_images()


def test_in_memory_alpha_image_is_composited_too():
    im = Image.new("RGBA", (2, 2), (0, 0, 0, 0))
    [out] = _pairs(im).load_images()
    assert out.getpixel((1, 1)) == (255, 255, 255)
