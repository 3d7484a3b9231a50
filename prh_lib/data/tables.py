"""Image-caption tables read with the ``datasets`` library, from the Hugging Face Hub or a local path.

:func:`open_table` opens a Hub id, a ``save_to_disk`` folder, a folder of data files or one data file;
:func:`table_to_dataset` turns a table with named columns into an :class:`~prh_lib.data.ImageCaptionDataset`.
Images stored in a table stay in the (memory-mapped) table as :class:`TableImage` objects, decoded only when a batch
needs them (a 5000-image pool costs no memory), and :class:`~prh_lib.data.Pairs` uses them like ``PIL`` images. An
unreachable Hub id (no network, ``HF_HUB_OFFLINE=1`` and no cached copy) raises :class:`~prh_lib.data.DataError` naming
the dataset and how to provide a local copy."""

from __future__ import annotations

import ast
import os
import warnings
from pathlib import Path
from typing import Sequence

from prh_lib import paths
from prh_lib.data.errors import DataError, DataWarning
from prh_lib.data.pairs import ImageCaptionDataset

_TABLE_SUFFIXES = {".parquet": "parquet", ".arrow": "arrow", ".csv": "csv", ".json": "json", ".jsonl": "json"}


# --------------------------------------------------------------------------------------------------------
# images kept in a table


class TableImage:
    """One image stored in a ``datasets`` table, decoded on demand.

    Behaves like a ``PIL.Image`` for :class:`prh_lib.data.Pairs`: :meth:`convert` decodes it, :meth:`tobytes` returns
    the stored (encoded) bytes that key the cache without decoding. Equal when pointing to the same row of the same
    table."""

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

    def content_digest(self) -> str:
        """SHA-256 (hex) of the stored bytes (a stored path: of the file, through :func:`prh_lib.paths.file_digests`)."""
        import hashlib

        stored = self._stored()
        if stored.get("bytes") is not None:
            return hashlib.sha256(stored["bytes"]).hexdigest()
        return paths.file_digests([stored["path"]])[0]

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
        if isinstance(table, datasets.DatasetDict):
            if split not in table:
                raise DataError(f"{label}: {path} has no split {split!r}; splits: {sorted(table)}")
            return table[split]
        return table
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


def _blank_count(value) -> int:
    """Empty or whitespace-only strings in a caption cell (``None``, a column without a value, does not count)."""
    if isinstance(value, str):
        return int(not value.strip())
    if isinstance(value, (list, tuple)):
        return sum(_blank_count(v) for v in value)
    return 0


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
        If a column is missing (the message lists the table's columns), a caption cell is neither a string nor a list
        (naming the row and sample), or a row has no caption. Empty captions are skipped with one counting
        :class:`~prh_lib.data.DataWarning`.
    """
    import datasets

    wanted = [image_column, *caption_columns] + ([id_column] if id_column else [])
    missing = [c for c in wanted if c not in table.column_names]
    if missing:
        raise DataError(f"{name}: columns {missing} not found in {source}; columns are {table.column_names}")
    n = len(table)
    ids = [str(v) for v in _column(table, id_column)] if id_column else [str(i) for i in range(n)]
    per_column = [_column(table, c) for c in caption_columns]
    captions, empty = [], 0
    for i in range(n):
        texts = []
        for column, values in zip(caption_columns, per_column):
            cell = values[i]
            try:
                found = _texts(cell, join_lists=join_lists)
            except DataError as err:
                raise DataError(f"{name}: row {i} (sample {ids[i]!r}), column {column!r} of {source}: {err}") from err
            empty += _blank_count(cell)
            texts += found
        captions.append(tuple(texts))
    if empty:
        warnings.warn(f"{name}: skipped {empty} empty caption(s) in {source}", DataWarning, stacklevel=2)
    uncaptioned = [ids[i] for i in range(n) if not captions[i]]
    if uncaptioned:
        raise DataError(f"{name}: {len(uncaptioned)} row(s) of {source} have no caption in columns "
                        f"{list(caption_columns)}: samples {uncaptioned[:5]}")

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
