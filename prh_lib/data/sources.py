"""Dataset sources by name (:data:`SOURCES`): the local COCO folder and the paper's WIT-1024, COCO captions,
DOCCI and CC3M + DreamLIP.

Every source has the signature ``load_xxx(location=None, **options) -> ImageCaptionDataset`` and is listed
in :data:`SOURCES`. ``location`` is a Hugging Face Hub dataset id or a local path:

==================  =================================  ======================================================
source              default location                   local formats accepted
==================  =================================  ======================================================
``coco-folder``     ``PRH_DATA_ROOT``                  ``captions.json`` (COCO caption format) + ``images/``
``wit``             ``minhuh/prh`` @ ``wit_1024``      ``save_to_disk`` folder, parquet/arrow/csv/json files
                                                       or a downloaded copy of the Hub repository
``coco-captions``   ``lmms-lab/COCO-Caption2017``      as ``wit``, or the official COCO layout
                    split ``val`` (val2017)            (``annotations/captions_val2017.json`` + ``val2017/``)
``docci``           ``not-lain/docci`` split ``test``  as ``wit``, or the official release
                                                       (``docci_descriptions.jsonlines`` + ``images/``)
``cc3m-dreamlip``   none (images come from URLs)       an img2dataset ``files`` folder made from DreamLIP's
                                                       CSV, or a table with ``image`` + DreamLIP columns
``hf-table``        none                               any table; name the columns with options
``coco-captions-``  ``coco-val2017-captions`` next to  a COCO caption JSON (or a folder holding
``text``            ``PRH_DATA_ROOT``                  ``captions_val2017.json``); text only, no images
==================  =================================  ======================================================

Tables are read by :mod:`prh_lib.data.tables`; the local COCO caption folder by :mod:`prh_lib.data.coco`.

References
----------
Herbst et al., Section 2 (N = 1024 pairs per dataset, 5 seeded repetitions; WIT-1024 as in Huh et al. 2024).
Huh et al. 2024, *The Platonic Representation Hypothesis* (WIT-1024: ``minhuh/prh``, revision ``wit_1024``).
Onoe et al. 2024, *DOCCI: Descriptions of Connected and Contrasting Images*.
Zheng et al. 2024, *DreamLIP: Language-Image Pre-training with Long Captions* (CC3M long captions).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Sequence

from prh_lib.data.coco import load_coco_folder, load_coco_official
from prh_lib.data.errors import DataError
from prh_lib.data.pairs import ImageCaptionDataset
from prh_lib.data.tables import _describe, _texts, load_hf_table, open_table, table_to_dataset
from prh_lib.data.text_only import load_coco_captions_text


#: Default Hub location, revision and split of each source (``None``: the source needs a local path).
DEFAULTS: dict[str, dict[str, object]] = {
    "wit": {"location": "minhuh/prh", "revision": "wit_1024", "split": "train"},
    "coco-captions": {"location": "lmms-lab/COCO-Caption2017", "revision": None, "split": "val"},
    "docci": {"location": "not-lain/docci", "revision": None, "split": "test"},
    "cc3m-dreamlip": {"location": None, "revision": None, "split": "train"},
}

#: DreamLIP's caption columns (CSV ``cc3m_3long_3short_1raw_captions_url.csv``): IB = InstructBLIP,
#: SV = ShareGPT4V, LLA = LLaVA-1.5; the URL column is ``"Image Path"``.
DREAMLIP_COLUMNS = ("raw_caption", "shortIB_captions", "longIB_captions", "shortSV_captions",
                    "longSV_captions", "shortLLA_captions", "longLLA_captions")
DREAMLIP_LONG = ("longSV_captions", "longIB_captions", "longLLA_captions")


# --------------------------------------------------------------------------------------------------------
# the paper's datasets


def load_wit(location: str | Path | None = None, *, revision: str | None = "wit_1024", split: str = "train",
             name: str = "wit-1024") -> ImageCaptionDataset:
    """WIT-1024: the 1024 Wikipedia image-text pairs of Huh et al. (``minhuh/prh``, revision ``wit_1024``).

    Columns ``image`` (Image) and ``text`` (the image's captions, a list; Huh et al. use the first). Sample ids are row
    indices. The paper uses all 1024 pairs, once.

    Raises
    ------
    DataError
        If the dataset cannot be read (offline Hub id: the message says how to save a local copy).
    """
    location = DEFAULTS["wit"]["location"] if location is None else location
    table = open_table(location, label=name, revision=revision, split=split)
    return table_to_dataset(table, name=name, source=_describe(location, revision),
                            image_column="image", caption_columns=("text",))


def load_coco_captions(location: str | Path | None = None, *, split: str | None = None, revision: str | None = None,
                       name: str | None = None, image_column: str = "image", caption_column: str = "answer",
                       id_column: str = "id") -> ImageCaptionDataset:
    """MS-COCO 2017 captions (5 human captions per image), sampled N = 1024 per repetition.

    ``location`` is either the official COCO layout (a folder with ``annotations/captions_<split>.json`` and the images
    in ``<split>/``, split default ``val2017``), or a table such as the default ``lmms-lab/COCO-Caption2017`` (split
    ``val``: the 5000 val2017 images; columns ``image``, ``answer`` = the list of captions, ``id`` = the COCO image id).

    Raises
    ------
    DataError
        If files or columns are missing, or the Hub id cannot be loaded.
    """
    location = DEFAULTS["coco-captions"]["location"] if location is None else location
    path = Path(str(location)).expanduser()
    if path.is_dir() and (path / "annotations").is_dir():
        split = split or "val2017"
        return load_coco_official(path, split, name=name or f"coco-{split}")
    split = split or str(DEFAULTS["coco-captions"]["split"])
    label = name or f"coco-{split}"
    table = open_table(location, label=label, revision=revision, split=split)
    return table_to_dataset(table, name=label, source=_describe(location, revision), image_column=image_column,
                            caption_columns=(caption_column,), id_column=id_column)


def load_docci(location: str | Path | None = None, *, split: str = "test", revision: str | None = None,
               name: str | None = None) -> ImageCaptionDataset:
    """DOCCI: ~15k photographs with one long human description each (Onoe et al. 2024).

    ``location`` is the official release (a folder with ``docci_descriptions.jsonlines`` and the extracted ``images/``
    of ``docci_images.tar.gz``; rows of ``split`` are kept), or a table with columns ``image``, ``example_id`` and
    ``description``, such as the default ``not-lain/docci`` (a parquet copy: ``train`` 9647, ``test`` 5000). Sample ids
    are DOCCI example ids.

    Raises
    ------
    DataError
        If files or columns are missing, the split is empty, or the Hub id cannot be loaded.
    """
    location = DEFAULTS["docci"]["location"] if location is None else location
    label = name or f"docci-{split}"
    path = Path(str(location)).expanduser()
    if path.is_dir() and (path / "docci_descriptions.jsonlines").is_file():
        return _docci_official(path, split, name=label)
    table = open_table(location, label=label, revision=revision, split=split)
    return table_to_dataset(table, name=label, source=_describe(location, revision), image_column="image",
                            caption_columns=("description",), id_column="example_id")


def _docci_official(root: Path, split: str, *, name: str) -> ImageCaptionDataset:
    desc = root / "docci_descriptions.jsonlines"
    rows = []
    for i, line in enumerate(desc.read_text().splitlines()):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if rec["split"] == split:
                rows.append((str(rec["example_id"]), rec["image_file"], rec["description"].strip()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise DataError(f"{desc}, line {i + 1}: not a DOCCI description record ({err!r})") from err
    if not rows:
        raise DataError(f"{name}: no rows of split {split!r} in {desc}")
    rows.sort()
    images = tuple(root / "images" / f for _, f, _ in rows)
    missing = [str(p) for p in images if not p.is_file()]
    if missing:
        raise DataError(f"{name}: {len(missing)} images are missing under {root / 'images'} (extract "
                        f"docci_images.tar.gz there): {missing[:3]}")
    return ImageCaptionDataset(name=name, sample_ids=tuple(r[0] for r in rows), images=images,
                               captions=tuple((r[2],) for r in rows), source=str(desc.resolve()))


def load_cc3m_dreamlip(location: str | Path | None = None, *, captions: Sequence[str] | str = DREAMLIP_LONG,
                       split: str = "train", revision: str | None = None,
                       name: str = "cc3m-dreamlip") -> ImageCaptionDataset:
    """CC3M images with DreamLIP's long synthetic captions (Zheng et al. 2024).

    DreamLIP publishes captions with image URLs only (``qidouxiong619/dreamlip_long_captions``,
    ``cc3m_3long_3short_1raw_captions_url.csv``), so the images must be downloaded first, e.g.::

        img2dataset --url_list cc3m_3long_3short_1raw_captions_url.csv --input_format csv \\
            --url_col "Image Path" --caption_col raw_caption --output_format files \\
            --save_additional_columns '["longSV_captions","longIB_captions","longLLA_captions"]' \\
            --output_folder cc3m-dreamlip

    ``location`` is that img2dataset ``files`` folder (``<shard>/<key>.jpg`` next to ``<key>.json`` holding
    ``url`` and the caption columns; only successful downloads count), or a table with an ``image`` column
    and the DreamLIP caption columns. Sample ids are the first 16 hex digits of SHA-256 of the image URL,
    stable across downloads; rows are sorted by id.

    Parameters
    ----------
    captions : sequence of str
        Caption columns in order (default: the long captions of ShareGPT4V, InstructBLIP, LLaVA-1.5, so policy
        ``"first"`` takes ShareGPT4V's); a cell holding a list is joined into one caption.

    Raises
    ------
    DataError
        If ``location`` is None, holds no downloaded image, or lacks a caption column.
    """
    if isinstance(captions, str):
        captions = (captions,)
    unknown = [c for c in captions if c not in DREAMLIP_COLUMNS]
    if unknown:
        raise DataError(f"{name}: unknown DreamLIP caption columns {unknown}; valid: {list(DREAMLIP_COLUMNS)}")
    if location is None:
        raise DataError(
            f"{name}: DreamLIP's captions come with image URLs only, so this source needs a local folder of "
            "downloaded images: run img2dataset on cc3m_3long_3short_1raw_captions_url.csv (from the Hub "
            "dataset qidouxiong619/dreamlip_long_captions) with --output_format files and "
            "--save_additional_columns for the caption columns, then pass the output folder as the location "
            "(see prh_lib.data.load_cc3m_dreamlip)."
        )
    path = Path(str(location)).expanduser()
    if path.is_dir() and not (path / "state.json").is_file() and not (path / "dataset_dict.json").is_file() \
            and next(path.glob("*/*.json"), None) is not None:
        return _img2dataset_folder(path, tuple(captions), name=name)
    table = open_table(location, label=name, revision=revision, split=split)
    return table_to_dataset(table, name=name, source=_describe(location, revision), image_column="image",
                            caption_columns=tuple(captions), id_column=None, join_lists=True)


def _url_id(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def _img2dataset_folder(root: Path, captions: tuple[str, ...], *, name: str) -> ImageCaptionDataset:
    rows = {}
    for meta_path in sorted(root.glob("*/*.json")):
        try:
            meta = json.loads(meta_path.read_text())
        except json.JSONDecodeError as err:
            raise DataError(f"{meta_path} is not valid JSON ({err})") from err
        if meta.get("status", "success") != "success":
            continue
        image = next((meta_path.with_suffix(s) for s in (".jpg", ".jpeg", ".png", ".webp")
                      if meta_path.with_suffix(s).is_file()), None)
        if image is None:
            continue
        absent = [c for c in captions if c not in meta]
        if absent:
            raise DataError(f"{meta_path} lacks the caption columns {absent}; rerun img2dataset with "
                            f"--save_additional_columns '{json.dumps(list(captions))}'")
        texts = tuple(t for c in captions for t in _texts(meta[c], join_lists=True))
        if not texts:
            continue
        sid = _url_id(meta.get("url") or str(meta_path.relative_to(root).with_suffix("")))
        rows[sid] = (image, texts)
    if not rows:
        raise DataError(f"{name}: no downloaded image with captions found under {root} (expected img2dataset "
                        "'files' output: <shard>/<key>.jpg with <key>.json)")
    ids = sorted(rows)
    return ImageCaptionDataset(name=name, sample_ids=tuple(ids), images=tuple(rows[i][0] for i in ids),
                               captions=tuple(rows[i][1] for i in ids), source=str(root.resolve()))


#: Dataset sources by name. Each takes a location (or None for the default) and keyword options.
SOURCES: dict[str, Callable[..., ImageCaptionDataset]] = {
    "coco-folder": load_coco_folder,
    "wit": load_wit,
    "coco-captions": load_coco_captions,
    "docci": load_docci,
    "cc3m-dreamlip": load_cc3m_dreamlip,
    "hf-table": load_hf_table,
    "coco-captions-text": load_coco_captions_text,
}


def load_dataset(source: str = "coco-folder", location: str | Path | None = None, **options) -> ImageCaptionDataset:
    """Load a dataset through a named source (see :data:`SOURCES`).

    Raises
    ------
    ValueError
        If ``source`` is not a known source name (the message lists them).
    """
    if source not in SOURCES:
        raise ValueError(f"unknown dataset source {source!r}; known sources: {sorted(SOURCES)}")
    return SOURCES[source](location, **options)

