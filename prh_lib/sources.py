"""Dataset sources of the paper beyond the local COCO folder: WIT-1024, COCO captions, DOCCI, CC3M + DreamLIP.

Every source has the signature ``load_xxx(location=None, **options) -> ImageCaptionDataset`` and is listed
in :data:`prh_lib.data.SOURCES`. ``location`` is a Hugging Face Hub dataset id or a local path:

==================  =================================  ======================================================
source              default location                   local formats accepted
==================  =================================  ======================================================
``wit``             ``minhuh/prh`` @ ``wit_1024``      ``save_to_disk`` folder, parquet/arrow/csv/json files
                                                       or a downloaded copy of the Hub repository
``coco-captions``   ``lmms-lab/COCO-Caption2017``      as ``wit``, or the official COCO layout
                    split ``val`` (val2017)            (``annotations/captions_val2017.json`` + ``val2017/``)
``docci``           ``not-lain/docci`` split ``test``  as ``wit``, or the official release
                                                       (``docci_descriptions.jsonlines`` + ``images/``)
``cc3m-dreamlip``   none (images come from URLs)       an img2dataset ``files`` folder made from DreamLIP's
                                                       CSV, or a table with ``image`` + DreamLIP columns
``hf-table``        none                               any table; name the columns with options
==================  =================================  ======================================================

Tables are read with the ``datasets`` library. Images stored in a table stay in the (memory-mapped) table
as :class:`TableImage` objects and are decoded only when a batch needs them, so a 5000-image pool costs
no memory; :meth:`prh_lib.data.Pairs.load_images` and :meth:`~prh_lib.data.Pairs.image_fingerprint` use
them like ``PIL`` images. A Hub id that cannot be reached (no network, ``HF_HUB_OFFLINE=1`` and no cached
copy) raises :class:`~prh_lib.data.DataError` naming the dataset and how to provide a local copy.

References
----------
Herbst et al., Section 2 (N = 1024 pairs per dataset, 5 seeded repetitions; WIT-1024 as in Huh et al. 2024).
Huh et al. 2024, *The Platonic Representation Hypothesis* (WIT-1024: ``minhuh/prh``, revision ``wit_1024``).
Onoe et al. 2024, *DOCCI: Descriptions of Connected and Contrasting Images*.
Zheng et al. 2024, *DreamLIP: Language-Image Pre-training with Long Captions* (CC3M long captions).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from pathlib import Path
from typing import Sequence

from . import paths

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

_TABLE_SUFFIXES = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv", ".json": "json", ".jsonl": "json"}


# --------------------------------------------------------------------------------------------------------
# images kept in a table


class TableImage:
    """One image stored in a ``datasets`` table, decoded on demand.

    Behaves like a ``PIL.Image`` for :class:`prh_lib.data.Pairs`: :meth:`convert` decodes it, and
    :meth:`tobytes` returns the stored (encoded) bytes, which identify the image for the cache key
    without decoding it. Two objects are equal when they point to the same row of the same table.
    """

    __slots__ = ("table", "row", "column")

    def __init__(self, table, row: int, column: str):
        self.table = table  # a datasets.Dataset with ``column`` cast to Image(decode=False)
        self.row = int(row)
        self.column = column

    def _stored(self) -> dict:
        return self.table[self.row][self.column]

    def tobytes(self) -> bytes:
        stored = self._stored()
        if stored.get("bytes") is not None:
            return stored["bytes"]
        return Path(stored["path"]).read_bytes()

    def open(self):
        """The decoded ``PIL.Image``."""
        import io

        from PIL import Image

        stored = self._stored()
        src = io.BytesIO(stored["bytes"]) if stored.get("bytes") is not None else stored["path"]
        image = Image.open(src)
        image.load()
        return image

    def convert(self, mode: str):
        return self.open().convert(mode)

    def _key(self):
        return (self.table._fingerprint, self.row, self.column)

    def __eq__(self, other):
        return isinstance(other, TableImage) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"TableImage(row={self.row}, column={self.column!r})"


# --------------------------------------------------------------------------------------------------------
# opening a table from the Hub or a local path


def _looks_like_path(location: str) -> bool:
    """Hub ids are ``owner/name`` (or a bare name); anything else with a separator or a prefix is a path."""
    text = str(location)
    return text.startswith(("/", ".", "~")) or text.count("/") > 1 or os.sep != "/" and os.sep in text


def _offline_help(label: str, hub_id: str, revision: str | None, split: str) -> str:
    rev = f", revision={revision!r}" if revision else ""
    return (
        f"On a machine with Hub access, save a local copy and pass its folder as the location "
        f"(notebooks: -p data_location=<folder>; prh-batch: --location <dataset>=<folder>):\n"
        f"    python -c \"import datasets; datasets.load_dataset({hub_id!r}{rev}, split={split!r})"
        f".save_to_disk('{label}')\"\n"
        f"or download the repository files with `hf download {hub_id} --repo-type dataset"
        f"{' --revision ' + revision if revision else ''} --local-dir {label}`."
    )


def open_table(location: str | Path, *, label: str, revision: str | None = None, split: str = "train"):
    """Open a ``datasets.Dataset`` from a Hub id, a ``save_to_disk`` folder, a data folder or a data file.

    Parameters
    ----------
    location : str or Path
        Hub id (``owner/name``), a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``,
        a folder of data files (e.g. a downloaded copy of the Hub repository), or one ``.parquet``,
        ``.arrow``, ``.csv``, ``.json`` or ``.jsonl`` file.
    label : str
        Dataset name used in error messages.
    revision : str, optional
        Hub revision (branch, tag or commit); ignored for local paths.
    split : str
        Split to return when the location holds several.

    Raises
    ------
    DataError
        If the path does not exist, the split is missing, or the Hub id cannot be loaded (offline, not
        found); the message names the dataset and how to provide a local copy.
    """
    import datasets

    path = Path(str(location)).expanduser()
    if path.exists():
        try:
            if path.is_dir() and any((path / f).is_file() for f in ("state.json", "dataset_dict.json")):
                table = datasets.load_from_disk(str(path))
            elif path.is_file():
                builder = _TABLE_SUFFIXES.get(path.suffix.lower())
                if builder is None:
                    raise DataError(f"{label}: cannot read {path}; expected one of {sorted(_TABLE_SUFFIXES)}")
                table = datasets.load_dataset(builder, data_files=str(path), split="train",
                                              cache_dir=str(paths.cache_dir("hf-datasets")))
            else:
                table = datasets.load_dataset(str(path), cache_dir=str(paths.cache_dir("hf-datasets")))
        except DataError:
            raise
        except Exception as err:  # datasets raises many types for unreadable data
            raise DataError(f"{label}: cannot read {path} as a dataset ({type(err).__name__}: {err})") from err
        return _pick_split(table, split, label=label, where=str(path))
    if _looks_like_path(str(location)):
        raise DataError(f"{label}: no such file or folder {path}")
    try:
        table = datasets.load_dataset(str(location), revision=revision, split=split)
    except Exception as err:  # offline, unreachable, gated or missing: say how to get a local copy
        offline = datasets.config.HF_HUB_OFFLINE
        raise DataError(
            f"{label}: cannot load the Hugging Face dataset {location!r}"
            f"{' (revision ' + repr(revision) + ')' if revision else ''}, split {split!r}"
            f"{' because the Hub is offline (HF_HUB_OFFLINE=1) and no cached copy exists' if offline else ''}: "
            f"{type(err).__name__}: {err}\n{_offline_help(label, str(location), revision, split)}"
        ) from err
    return table


def _pick_split(table, split: str, *, label: str, where: str):
    import datasets

    if isinstance(table, datasets.DatasetDict):
        if split not in table:
            raise DataError(f"{label}: {where} has no split {split!r}; splits: {sorted(table)}")
        return table[split]
    return table


def _column(table, name: str) -> list:
    return list(table.select_columns([name]).with_format(None)[name])


def _texts(value, *, join_lists: bool = False) -> list[str]:
    """Captions held by one cell: a string, a list of strings, or a string holding a Python list literal."""
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            try:
                parsed = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                parsed = None
            if isinstance(parsed, list):
                return _texts(parsed, join_lists=join_lists)
        return [text] if text else []
    if isinstance(value, (list, tuple)):
        items = [t for v in value for t in _texts(v)]
        return [" ".join(items)] if join_lists and items else items
    raise DataError(f"caption cell of type {type(value).__name__} is neither a string nor a list: {value!r:.80}")


def table_to_dataset(
    table,
    *,
    name: str,
    source: str,
    image_column: str = "image",
    caption_columns: Sequence[str] = ("text",),
    id_column: str | None = None,
    images_root: str | Path | None = None,
    join_lists: bool = False,
) -> ImageCaptionDataset:
    """Turn a ``datasets`` table into an :class:`ImageCaptionDataset`, keeping the table's row order.

    Parameters
    ----------
    table : datasets.Dataset
    name, source : str
        Dataset name (cache keys, labels) and provenance (Hub id and revision, or path).
    image_column : str
        An ``Image`` feature (kept in the table as :class:`TableImage`) or a column of file paths
        (relative paths are resolved against ``images_root``).
    caption_columns : sequence of str
        Columns whose texts are the captions of a row, in this order; a cell may hold one string or a list.
    id_column : str, optional
        Column of sample ids; default: the row index.
    join_lists : bool
        Join a list-valued cell into one caption (one caption per column) instead of one caption per item.

    Raises
    ------
    DataError
        If a column is missing (the message lists the table's columns) or a row has no caption.
    """
    import datasets

    wanted = [image_column, *caption_columns] + ([id_column] if id_column else [])
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise DataError(f"{name}: columns {missing} not found in {source}; columns are {table.column_names}")
    n = len(table)
    ids = [str(v) for v in _column(table, id_column)] if id_column else [str(i) for i in range(n)]
    per_column = [_column(table, c) for c in caption_columns]
    captions = [tuple(t for col in per_column for t in _texts(col[i], join_lists=join_lists)) for i in range(n)]

    feature = table.features[image_column]
    if isinstance(feature, datasets.Image):
        stored = table.select_columns([image_column]).cast_column(image_column, datasets.Image(decode=False))
        images = [TableImage(stored, i, image_column) for i in range(n)]
    else:
        root = Path(images_root) if images_root is not None else None
        images = []
        for value in _column(table, image_column):
            p = Path(str(value))
            images.append(root / p if root is not None and not p.is_absolute() else p)
        absent = [str(p) for p in images if not p.is_file()]
        if absent:
            raise DataError(f"{name}: {len(absent)} image files listed in {source} are missing: {absent[:3]}")
    return ImageCaptionDataset(name=name, sample_ids=tuple(ids), images=tuple(images),
                               captions=tuple(captions), source=source)


def _describe(location, revision) -> str:
    path = Path(str(location)).expanduser()
    if path.exists():
        return str(path.resolve())
    return f"hf://datasets/{location}" + (f"@{revision}" if revision else "")


def load_hf_table(
    location: str | Path | None = None,
    *,
    name: str | None = None,
    revision: str | None = None,
    split: str = "train",
    image_column: str = "image",
    caption_columns: Sequence[str] | str = ("text",),
    id_column: str | None = None,
    images_root: str | Path | None = None,
) -> ImageCaptionDataset:
    """Any image-caption table (Hub id or local path, see :func:`open_table`) with named columns.

    Raises
    ------
    DataError
        If ``location`` is None, unreadable, or lacks a named column.
    """
    if location is None:
        raise DataError("source 'hf-table' needs a location (a Hub dataset id or a local path)")
    if isinstance(caption_columns, str):
        caption_columns = (caption_columns,)
    label = name or Path(str(location)).name
    table = open_table(location, label=label, revision=revision, split=split)
    return table_to_dataset(table, name=label, source=_describe(location, revision), image_column=image_column,
                            caption_columns=caption_columns, id_column=id_column, images_root=images_root)


# --------------------------------------------------------------------------------------------------------
# the paper's datasets


def load_wit(location: str | Path | None = None, *, revision: str | None = "wit_1024", split: str = "train",
             name: str = "wit-1024") -> ImageCaptionDataset:
    """WIT-1024: the 1024 Wikipedia image-text pairs of Huh et al. (``minhuh/prh``, revision ``wit_1024``).

    Columns ``image`` (Image) and ``text`` (the captions of the image; a list, the first is the one
    Huh et al. use). Sample ids are row indices. The paper uses all 1024 pairs, once.

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

    ``location`` is either the official COCO layout (a folder with ``annotations/captions_<split>.json``
    and the images in ``<split>/``, split default ``val2017``), or a table such as the default
    ``lmms-lab/COCO-Caption2017`` (split ``val``: the 5000 val2017 images; columns ``image``, ``answer``
    = the list of captions, ``id`` = the COCO image id).

    Raises
    ------
    DataError
        If files or columns are missing, or the Hub id cannot be loaded.
    """
    location = DEFAULTS["coco-captions"]["location"] if location is None else location
    path = Path(str(location)).expanduser()
    if path.is_dir() and (path / "annotations").is_dir():
        split = split or "val2017"
        return _coco_official(path, split, name=name or f"coco-{split}")
    split = split or str(DEFAULTS["coco-captions"]["split"])
    label = name or f"coco-{split}"
    table = open_table(location, label=label, revision=revision, split=split)
    return table_to_dataset(table, name=label, source=_describe(location, revision), image_column=image_column,
                            caption_columns=(caption_column,), id_column=id_column)


def _coco_official(root: Path, split: str, *, name: str) -> ImageCaptionDataset:
    ann_path = root / "annotations" / f"captions_{split}.json"
    if not ann_path.is_file():
        raise DataError(f"{name}: {ann_path} not found (official COCO layout: annotations/captions_{split}.json "
                        f"next to {split}/)")
    try:
        meta = json.loads(ann_path.read_text())
        records = sorted(meta["images"], key=lambda im: im["id"])
        by_image: dict[int, list[tuple[int, str]]] = {}
        for ann in meta["annotations"]:
            by_image.setdefault(ann["image_id"], []).append((ann["id"], ann["caption"].strip()))
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise DataError(f"{ann_path} is not in COCO caption format ({err!r})") from err
    images = tuple(root / split / im["file_name"] for im in records)
    missing = [str(p) for p in images if not p.is_file()]
    if missing:
        raise DataError(f"{name}: {len(missing)} images listed in {ann_path} are missing: {missing[:3]}")
    return ImageCaptionDataset(
        name=name, sample_ids=tuple(str(im["id"]) for im in records), images=images,
        captions=tuple(tuple(c for _, c in sorted(by_image.get(im["id"], []))) for im in records),
        source=str(ann_path.resolve()),
    )


def load_docci(location: str | Path | None = None, *, split: str = "test", revision: str | None = None,
               name: str | None = None) -> ImageCaptionDataset:
    """DOCCI: ~15k photographs with one long human description each (Onoe et al. 2024).

    ``location`` is either the official release (a folder with ``docci_descriptions.jsonlines`` and the
    extracted ``images/`` of ``docci_images.tar.gz``; rows of the requested ``split`` are kept), or a table
    with columns ``image``, ``example_id`` and ``description``, such as the default ``not-lain/docci`` (a
    parquet copy of the release: splits ``train`` 9647, ``test`` 5000). Sample ids are DOCCI example ids.

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
        Caption columns in order (default: the long captions of ShareGPT4V, InstructBLIP, LLaVA-1.5, so
        caption policy ``"first"`` takes ShareGPT4V's). A cell holding a list is joined into one caption.

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
            "(see prh_lib.sources.load_cc3m_dreamlip)."
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


# Imported last on purpose: prh_lib.data lists these loaders in its SOURCES registry and imports this module
# there, so either module can be imported first without a circular-import error.
from .data import DataError, ImageCaptionDataset  # noqa: E402
