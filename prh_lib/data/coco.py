"""MS-COCO caption files: a local folder in COCO caption format, and the official COCO layout.

Both read a COCO caption JSON (``images`` + ``annotations``) with one parser (:func:`read_coco_captions`):
images sorted by COCO image id, the captions of each image sorted by annotation id."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from prh_lib import paths
from prh_lib.data.errors import DataError, DataWarning
from prh_lib.data.pairs import ImageCaptionDataset


def _decode_utf8(raw: bytes, ann_path: Path) -> str:
    """The file's text as UTF-8 (a byte-order mark is allowed), whatever the locale's encoding.

    Raises
    ------
    DataError
        At a byte that is not UTF-8, naming the file, the byte offset and, where the file is otherwise valid
        JSON, the image (and annotation) whose caption holds it.
    """
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        where = ""
        try:  # locate the bad byte: undecodable bytes become lone surrogates, which json keeps in strings
            meta = json.loads(raw.decode("utf-8", errors="surrogateescape"))
            for ann in meta.get("annotations", []):
                caption = ann.get("caption") if isinstance(ann, dict) else None
                if isinstance(caption, str) and any("\udc80" <= c <= "\udcff" for c in caption):
                    where = f" in the caption of image {ann.get('image_id')!r} (annotation {ann.get('id')!r})"
                    break
        except (ValueError, AttributeError):
            pass
        raise DataError(f"{ann_path} is not valid UTF-8: byte 0x{raw[err.start]:02x} at offset {err.start}{where}; "
                        "caption files are read as UTF-8 whatever the locale (re-save the file as UTF-8)") from err


def read_coco_captions(ann_path: Path) -> tuple[list[dict], dict[int, list[str]]]:
    """Image records (sorted by id) and the captions of each image id (sorted by annotation id) of a COCO JSON.

    The file is read as UTF-8 whatever the locale. Captions are stripped; empty (or whitespace-only) ones are
    skipped with one :class:`~prh_lib.data.DataWarning` that counts them, so no text is ever empty.

    Raises
    ------
    DataError
        Naming the file and, where it applies, the image id: if the file is not UTF-8 or not in COCO caption
        format (``images`` and ``annotations`` lists), an image record lacks ``id`` or ``file_name`` or repeats
        an id, an annotation lacks ``image_id``, points to an image not in ``images``, or has a caption that is
        missing, ``null`` or not a string, or an image is left with no caption.
    """
    ann_path = Path(ann_path)
    try:
        meta = json.loads(_decode_utf8(ann_path.read_bytes(), ann_path))
    except json.JSONDecodeError as err:
        raise DataError(f"{ann_path} is not in COCO caption format: invalid JSON ({err})") from err
    if not isinstance(meta, dict) or not isinstance(meta.get("images"), list) \
            or not isinstance(meta.get("annotations"), list):
        raise DataError(f"{ann_path} is not in COCO caption format: it needs an 'images' list and an "
                        "'annotations' list")
    known: dict = {}
    for i, im in enumerate(meta["images"]):
        if not isinstance(im, dict) or "id" not in im or not isinstance(im.get("file_name"), str):
            raise DataError(f"{ann_path}: image record {i} ({im!r:.80}) needs an 'id' and a 'file_name'")
        if im["id"] in known:
            raise DataError(f"{ann_path}: image id {im['id']!r} appears twice in 'images'")
        known[im["id"]] = im
    by_image: dict = {image: [] for image in known}
    empty = []
    for i, ann in enumerate(meta["annotations"]):
        if not isinstance(ann, dict) or "image_id" not in ann:
            raise DataError(f"{ann_path}: annotation {i} ({ann!r:.80}) has no 'image_id'")
        image, ann_id = ann["image_id"], ann.get("id", i)
        label = f"{ann_path}: the caption of image {image!r} (annotation {ann_id!r})"
        if image not in known:
            raise DataError(f"{ann_path}: annotation {ann_id!r} points to image {image!r}, which is not in 'images'")
        if "caption" not in ann:
            raise DataError(f"{label} is missing (no 'caption' key)")
        caption = ann["caption"]
        if caption is None:
            raise DataError(f"{label} is null")
        if not isinstance(caption, str):
            raise DataError(f"{label} is a {type(caption).__name__} ({caption!r:.60}), not a string")
        if not caption.strip():
            empty.append(image)
            continue
        by_image[image].append((ann_id, caption.strip()))
    if empty:
        warnings.warn(f"{ann_path}: skipped {len(empty)} empty caption(s) (images {sorted(set(empty), key=str)[:5]}"
                      f"{' ...' if len(set(empty)) > 5 else ''})", DataWarning, stacklevel=2)
    uncaptioned = [image for image, caps in by_image.items() if not caps]
    if uncaptioned:
        raise DataError(f"{ann_path}: {len(uncaptioned)} image(s) have no caption"
                        f"{' left after skipping empty ones' if empty else ''}: ids {uncaptioned[:5]}")
    try:
        records = sorted(known.values(), key=lambda im: im["id"])
        captions = {image: [c for _, c in sorted(caps)] for image, caps in by_image.items()}
    except TypeError as err:
        raise DataError(f"{ann_path}: image or annotation ids of mixed types cannot be ordered ({err})") from err
    return records, captions


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
        The folder. Default: :func:`prh_lib.paths.data_root` (``PRH_DATA_ROOT``). A bare folder name that is
        not a folder from the working directory is looked up next to the data root
        (:func:`prh_lib.paths.sibling_dataset`): ``"flickr8k-1k"`` is ``../shared/data/flickr8k-1k`` offline.
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
    if root is None:
        root = paths.data_root()
    else:
        given = Path(root).expanduser()
        sibling = None if given.is_dir() else paths.sibling_dataset(str(root))
        root = sibling or given
    ann_path = root / "captions.json"
    if not root.is_dir():
        if len(root.parts) == 1 and not root.is_absolute():  # a bare name, found neither here nor beside the data root
            try:
                beside = str(paths.data_root().parent / root)
            except FileNotFoundError:
                beside = "next to PRH_DATA_ROOT (unset)"
            raise DataError(f"dataset folder {str(root)!r} not found, neither in the working directory nor at {beside}; "
                            "put the COCO-format folder (captions.json + images/) there, give its path as the "
                            "dataset's location, or leave the dataset out of the notebook's datasets "
                            "(prh-run NOTEBOOK -p 'datasets=[...]')")
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
