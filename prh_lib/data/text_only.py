"""Text-only caption sets: the COCO val2017 captions without their images.

``captions_val2017.json`` (5,000 images, 25,014 captions) serves language-language comparisons at N = 1,024 and held-out
text for bits per byte. :func:`load_coco_captions_text` (source ``"coco-captions-text"``) reads it (never writes it)
into a dataset whose images are :class:`TextOnlyImage` placeholders; :func:`disjoint_pairs` makes disjoint draws and
:func:`heldout_texts` the captions of images outside a set of ids.

References
----------
Lin et al. 2014, *Microsoft COCO: Common Objects in Context*; Chen et al. 2015, *Microsoft COCO Captions: Data
Collection and Evaluation Server* (the val2017 caption annotations). Herbst et al., Section 2 (N = 1024 pairs per
dataset, 5 seeded repetitions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import numpy as np

from prh_lib import paths
from prh_lib.data.coco import read_coco_captions
from prh_lib.data.errors import DataError
from prh_lib.data.pairs import ImageCaptionDataset, Pairs, sample_pairs

#: File name of the official val2017 caption annotations, looked for inside a folder location.
TEXT_ONLY_FILE = "captions_val2017.json"
#: Folder of the text-only captions next to ``PRH_DATA_ROOT`` (the default location).
_DEFAULT_FOLDER = "coco-val2017-captions"


class TextOnlyImage:
    """Placeholder for the image of a text-only sample: any use of it as an image raises :class:`DataError`.

    It stands where :class:`~prh_lib.data.Pairs` expects an image (a path, ``PIL.Image`` or
    :class:`~prh_lib.data.TableImage`), so text-side code runs unchanged and image-side code
    (:meth:`~prh_lib.data.Pairs.load_images`, :meth:`~prh_lib.data.Pairs.image_fingerprint`) fails with a message naming
    the dataset. Two placeholders are equal when they stand for the same sample of the same dataset."""

    __slots__ = ("dataset", "sample_id")

    def __init__(self, dataset: str, sample_id: str):
        self.dataset = str(dataset)
        self.sample_id = str(sample_id)

    def _refuse(self, what: str):
        raise DataError(f"dataset {self.dataset!r} is text-only (captions without images): cannot {what} for "
                        f"sample {self.sample_id!r}; use it with language models only, and take images from a "
                        "dataset that has them (e.g. coco-mini, flickr8k-1k)")

    def convert(self, mode: str = "RGB"):
        """Refuse: there is no image to decode. Raises :class:`DataError`."""
        self._refuse("open the image")

    def open(self):
        """Refuse: there is no image to decode. Raises :class:`DataError`."""
        self._refuse("open the image")

    def tobytes(self) -> bytes:
        """Refuse: there are no image bytes. Raises :class:`DataError`."""
        self._refuse("read the image bytes")

    def content_digest(self) -> str:
        """Refuse: there is no image content to key a cache by. Raises :class:`DataError`."""
        self._refuse("fingerprint the image")

    def __eq__(self, other) -> bool:
        return isinstance(other, TextOnlyImage) and (self.dataset, self.sample_id) == (other.dataset, other.sample_id)

    def __hash__(self) -> int:
        return hash(("TextOnlyImage", self.dataset, self.sample_id))

    def __repr__(self) -> str:
        return f"TextOnlyImage(dataset={self.dataset!r}, sample_id={self.sample_id!r})"


def is_text_only(data: ImageCaptionDataset | Pairs) -> bool:
    """True when every image of a dataset or of pairs is a :class:`TextOnlyImage` placeholder (and there is one)."""
    return len(data.images) > 0 and all(isinstance(im, TextOnlyImage) for im in data.images)


def _default_location() -> Path:
    return paths.sibling_location(_DEFAULT_FOLDER)


def load_coco_captions_text(location: str | Path | None = None, *, name: str = "coco-val2017-captions"
                            ) -> ImageCaptionDataset:
    """The captions of a COCO caption JSON without images (e.g. the official val2017 captions).

    Parameters
    ----------
    location : path, optional
        The JSON file, or a folder holding ``captions_val2017.json`` (or a single ``*.json``). Default: the folder
        ``coco-val2017-captions`` next to ``PRH_DATA_ROOT`` (offline: ``../shared/data``).
    name : str
        Dataset name for labels, cache keys and error messages.

    Returns
    -------
    ImageCaptionDataset
        One row per image id (sorted), all of its captions (by annotation id); ``images`` are :class:`TextOnlyImage`
        placeholders; ``source`` is the JSON's path.

    Raises
    ------
    DataError
        If the location does not exist, a folder holds no caption JSON, or the file is not in COCO caption format (see
        :func:`prh_lib.data.read_coco_captions`).
    """
    path = _default_location() if location is None else Path(str(location)).expanduser()
    if path.is_dir():
        candidates = [path / TEXT_ONLY_FILE] if (path / TEXT_ONLY_FILE).is_file() else sorted(path.glob("*.json"))
        if len(candidates) != 1:
            raise DataError(f"{name}: expected {TEXT_ONLY_FILE} (or exactly one .json caption file) in {path}, "
                            f"found {[c.name for c in candidates]}")
        path = candidates[0]
    if not path.is_file():
        raise DataError(f"{name}: caption file {path} not found (a COCO caption JSON with 'images' and "
                        f"'annotations', e.g. ../shared/data/{_DEFAULT_FOLDER}/{TEXT_ONLY_FILE})")
    records, captions = read_coco_captions(path)
    ids = tuple(str(im["id"]) for im in records)
    return ImageCaptionDataset(name=name, sample_ids=ids, images=tuple(TextOnlyImage(name, s) for s in ids),
                               captions=tuple(tuple(captions[im["id"]]) for im in records),
                               source=str(path.resolve()))


def check_disjoint(dataset: ImageCaptionDataset, n: int, n_draws: int) -> None:
    """Check that ``n_draws`` disjoint draws of ``n`` images fit in ``dataset``.

    Raises
    ------
    ValueError
        If ``n`` or ``n_draws`` is not an int >= 1, or ``n * n_draws > len(dataset)`` (the message gives the most
        disjoint draws of ``n`` that fit).
    """
    if not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    if not isinstance(n_draws, (int, np.integer)) or n_draws < 1:
        raise ValueError(f"n_draws must be an int >= 1, got {n_draws!r}")
    if n * n_draws > len(dataset):
        raise ValueError(f"dataset {dataset.name!r}: {n_draws} disjoint draws of N = {n} need {n * n_draws} images, "
                         f"it has {len(dataset)} (at most {len(dataset) // n} disjoint draws of N = {n})")


def disjoint_pairs(dataset: ImageCaptionDataset, *, n: int, draw: int, n_draws: int, seed: int = 0,
                   caption_policy: str = "first") -> Pairs:
    """Draw ``draw`` of ``n_draws`` pairwise disjoint draws of ``n`` images.

    One permutation of the images is made with ``np.random.default_rng(seed)``; draw r is its rows ``r * n`` to ``(r +
    1) * n``, so no image is in two draws and the ``len(dataset) - n * n_draws`` left over are in none (held out, see
    :func:`heldout_texts`).

    Parameters
    ----------
    dataset : ImageCaptionDataset
    n : int >= 1
        Images per draw.
    draw : int
        0-based index of the draw, ``0 <= draw < n_draws``.
    n_draws : int >= 1
        Number of draws; ``n * n_draws <= len(dataset)``.
    seed : int
        Seed of the permutation (the same for every draw).
    caption_policy : {"first", "random", "concat", "nth"}
        As in :func:`prh_lib.data.sample_pairs` (default: each image's first caption).

    Returns
    -------
    Pairs
        ``n`` rows in permutation order; ``seed`` is ``seed + draw`` and ``info`` records the draw.

    Raises
    ------
    ValueError
        If ``n`` or ``n_draws`` is below 1, the draws do not fit in the dataset (the message gives the most that do), or
        ``draw`` is out of range.
    """
    check_disjoint(dataset, n, n_draws)
    if not 0 <= int(draw) < n_draws:
        raise ValueError(f"draw must be in 0..{n_draws - 1}, got {draw!r}")
    order = np.random.default_rng(seed).permutation(len(dataset))
    rows = order[int(draw) * n:(int(draw) + 1) * n]
    whole = sample_pairs(dataset, n=None, seed=seed + int(draw), caption_policy=caption_policy)
    pairs = whole.subset(rows.tolist())
    pairs.info.update({"disjoint_draw": int(draw), "disjoint_draws": int(n_draws), "permutation_seed": int(seed)})
    return pairs


def heldout_texts(dataset: ImageCaptionDataset, *, exclude: Iterable[str], per_image: int | None = None,
                  max_texts: int | None = None) -> list[str]:
    """Captions of the images not in ``exclude``: held-out text disjoint from every aligned image.

    Parameters
    ----------
    dataset : ImageCaptionDataset
    exclude : iterable of str
        Sample ids whose captions must not be used (e.g. the union of every draw's ``sample_ids``).
    per_image : int >= 1, optional
        Captions per held-out image, in annotation order (None: all of them).
    max_texts : int >= 1, optional
        Keep the first ``max_texts`` captions, images in dataset order.

    Returns
    -------
    list of str
        Non-empty captions, images in dataset order.

    Raises
    ------
    ValueError
        If ``per_image`` or ``max_texts`` is below 1, an excluded id is not in the dataset (a likely mix-up of
        datasets), or no image is left.
    """
    for label, value in (("per_image", per_image), ("max_texts", max_texts)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{label} must be an int >= 1 or None, got {value!r}")
    excluded = {str(s) for s in exclude}
    unknown = excluded - set(dataset.sample_ids)
    if unknown:
        raise ValueError(f"{len(unknown)} excluded ids are not in dataset {dataset.name!r}: {sorted(unknown)[:5]}")
    out = []
    for sid, caps in zip(dataset.sample_ids, dataset.captions):
        if sid not in excluded:
            out.extend(caps if per_image is None else caps[:per_image])
    if not out:
        raise ValueError(f"no held-out text: every image of {dataset.name!r} is excluded")
    return out if max_texts is None else out[:max_texts]
