"""MS-COCO caption files: a local folder in COCO caption format, and the official COCO layout.

Both read a COCO caption JSON (``images`` + ``annotations``) with one parser (:func:`read_coco_captions`):
images sorted by COCO image id, the captions of each image sorted by annotation id.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import paths
from .pairs import DataError, ImageCaptionDataset

__all__ = ["load_coco_folder", "load_coco_official", "read_coco_captions"]


def read_coco_captions(ann_path: Path) -> tuple[list[dict], dict[int, list[str]]]:
    """Image records (sorted by id) and the captions of each image id (sorted by annotation id) of a COCO JSON.

    Raises
    ------
    DataError
        If the file is not in COCO caption format (``images`` and ``annotations`` lists).
    """
    try:
        meta = json.loads(Path(ann_path).read_text())
        records = sorted(meta["images"], key=lambda im: im["id"])
        by_image: dict[int, list[tuple[int, str]]] = {}
        for ann in meta["annotations"]:
            by_image.setdefault(ann["image_id"], []).append((ann["id"], ann["caption"].strip()))
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise DataError(f"{ann_path} is not in COCO caption format ({err!r})") from err
    return records, {image: [c for _, c in sorted(caps)] for image, caps in by_image.items()}


def _coco_dataset(records, captions, image_dir: Path, *, name: str, source: str) -> ImageCaptionDataset:
    return ImageCaptionDataset(
        name=name,
        sample_ids=tuple(str(im["id"]) for im in records),
        images=tuple(image_dir / im["file_name"] for im in records),
        captions=tuple(tuple(captions.get(im["id"], [])) for im in records),
        source=source,
    )


def load_coco_folder(root: str | Path | None = None, *, name: str | None = None) -> ImageCaptionDataset:
    """Load a folder in COCO caption format: ``captions.json`` (``images`` + ``annotations``) and ``images/``.

    Parameters
    ----------
    root : path, optional
        The folder. Default: :func:`prh_lib.paths.data_root` (``PRH_DATA_ROOT``).
    name : str, optional
        Dataset name for labels and cache keys. Default: the folder's name.

    Returns
    -------
    ImageCaptionDataset
        Images sorted by COCO image id; captions of each image sorted by annotation id.

    Raises
    ------
    DataError
        If the folder, ``captions.json`` or an image file listed in it is missing, or the JSON is not in
        COCO caption format.
    """
    root = paths.data_root() if root is None else Path(root).expanduser()
    ann_path = root / "captions.json"
    if not root.is_dir():
        raise DataError(f"dataset folder {root} does not exist; set PRH_DATA_ROOT to a COCO-format folder")
    if not ann_path.is_file():
        raise DataError(
            f"{ann_path} not found: a COCO caption folder needs captions.json (with 'images' and "
            "'annotations') next to images/"
        )
    records, captions = read_coco_captions(ann_path)
    missing = [im["file_name"] for im in records if not (root / "images" / im["file_name"]).is_file()]
    if missing:
        raise DataError(f"{len(missing)} image files listed in {ann_path} are missing under {root / 'images'}: {missing[:3]}")
    return _coco_dataset(records, captions, root / "images", name=name or root.name, source=str(root.resolve()))


def load_coco_official(root: Path, split: str, *, name: str) -> ImageCaptionDataset:
    """The official COCO layout: ``annotations/captions_<split>.json`` next to the images in ``<split>/``.

    Raises
    ------
    DataError
        If the annotation file or an image it lists is missing, or the JSON is not in COCO caption format.
    """
    ann_path = root / "annotations" / f"captions_{split}.json"
    if not ann_path.is_file():
        raise DataError(f"{name}: {ann_path} not found (official COCO layout: annotations/captions_{split}.json "
                        f"next to {split}/)")
    records, captions = read_coco_captions(ann_path)
    missing = [str(root / split / im["file_name"]) for im in records if not (root / split / im["file_name"]).is_file()]
    if missing:
        raise DataError(f"{name}: {len(missing)} images listed in {ann_path} are missing: {missing[:3]}")
    return _coco_dataset(records, captions, root / split, name=name, source=str(ann_path.resolve()))
