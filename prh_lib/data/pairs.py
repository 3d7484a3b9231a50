"""Image-caption pairs: a dataset of images with all their captions, and N pairs drawn from it.

An :class:`ImageCaptionDataset` holds every image of a source with all of its captions (the sources are in
:mod:`prh_lib.data.sources`). :func:`sample_pairs` draws ``n`` images with a seed and picks one text per image with a
caption policy, keeping sample ids in row order. Extraction reads :class:`Pairs` only. The paper samples N = 1024 pairs
per dataset (Herbst et al., Section 2); the offline default is the 239-image ``coco-mini`` folder found through
:func:`prh_lib.paths.data_root`."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from prh_lib import paths
from prh_lib.data.errors import DataError
from prh_lib.data.images import open_rgb, to_rgb

CAPTION_POLICIES = ("first", "random", "concat", "nth")


@dataclass(frozen=True)
class ImageCaptionDataset:
    """Every image of a source with all of its captions.

    Attributes
    ----------
    name : str
        Short name of the dataset (used in cache keys and figure labels).
    sample_ids : tuple of str, length n_images
        Stable identifier of each image (COCO: the image id), sorted.
    images : tuple, length n_images
        For each sample, a path to an image file or an in-memory ``PIL.Image``.
    captions : tuple of tuple of str, length n_images
        All captions of each image, in the source's order (COCO: by annotation id).
    source : str
        Where the data came from (folder path or dataset id and revision), in full, for provenance; pages and the repr
        show :attr:`display_source` (relative to ``PRH_DATA_ROOT`` or the dataset's name).
    """

    name: str
    sample_ids: tuple[str, ...]
    images: tuple
    captions: tuple[tuple[str, ...], ...]
    source: str

    def __post_init__(self):
        n = len(self.sample_ids)
        if len(self.images) != n or len(self.captions) != n:
            raise DataError(
                f"dataset {self.name!r}: {n} sample ids but {len(self.images)} images and "
                f"{len(self.captions)} caption lists"
            )
        if len(set(self.sample_ids)) != n:
            raise DataError(f"dataset {self.name!r}: sample ids are not unique")
        empty = [s for s, caps in zip(self.sample_ids, self.captions) if not caps]
        if empty:
            raise DataError(f"dataset {self.name!r}: images without captions: {empty[:5]}")

    def __len__(self) -> int:
        return len(self.sample_ids)

    @property
    def display_source(self) -> str:
        """:attr:`source` as a page may show it (:func:`prh_lib.paths.display_path`: no machine-specific paths)."""
        return _display_source(self.source)

    def __repr__(self) -> str:
        n_captions = sum(len(c) for c in self.captions)
        return (f"ImageCaptionDataset(name={self.name!r}, n_images={len(self)}, n_captions={n_captions}, "
                f"source={self.display_source!r})")


def _display_source(source: str) -> str:
    from prh_lib import paths

    return paths.display_path(source) if source else source


@dataclass(frozen=True)
class Pairs:
    """N image-caption pairs in a fixed row order: row i of every feature matrix is sample ``sample_ids[i]``.

    Attributes
    ----------
    dataset : str
        Name of the dataset the pairs come from.
    sample_ids : tuple of str, length n
    images : tuple, length n
        Image path or ``PIL.Image`` of each pair.
    texts : tuple of str, length n
        The text of each pair after the caption policy.
    caption_policy : str
        ``"first"``, ``"random"`` or ``"concat"`` (see :func:`sample_pairs`).
    n_captions : int
        Number of captions concatenated (``"concat"``) or 1.
    seed : int
        Seed of the sample and of the random caption choice.
    """

    dataset: str
    sample_ids: tuple[str, ...]
    images: tuple
    texts: tuple[str, ...]
    caption_policy: str = "first"
    n_captions: int = 1
    seed: int = 0
    info: dict = field(default_factory=dict, compare=False)

    def __len__(self) -> int:
        return len(self.sample_ids)

    def __repr__(self) -> str:
        source = self.info.get("source")
        where = f", source={_display_source(source)!r}" if source else ""
        return (f"Pairs(dataset={self.dataset!r}, n={len(self)}, caption_policy={self.caption_policy!r}, "
                f"n_captions={self.n_captions}, seed={self.seed}{where})")

    def load_images(self, indices: Sequence[int] | None = None):
        """Open the images of the given rows (all rows by default) as 8-bit RGB ``PIL.Image`` objects
        (:func:`prh_lib.data.images.to_rgb`: alpha composited onto white, grayscale and CMYK converted).

        Raises
        ------
        DataError
            If an image file is missing, is not an image, is truncated or has 16/32-bit pixels; the message names the
            file and its sample.
        """
        rows = range(len(self)) if indices is None else indices
        out = []
        for i in rows:
            item = self.images[i]
            where = f"image {item} (sample {self.sample_ids[i]!r})"
            if isinstance(item, (str, Path)):
                out.append(open_rgb(item, where=where))
            else:
                out.append(to_rgb(item.open() if hasattr(item, "content_digest") else item, where=where))
        return out

    def text_fingerprint(self) -> str:
        """SHA-256 (hex, 16 chars) of the sample ids and texts in row order: the text side's cache key."""
        return paths.digest_texts((f"{sid}\x00{text}" for sid, text in zip(self.sample_ids, self.texts)),
                                  separator=b"\x01")

    def image_fingerprint(self) -> str:
        """SHA-256 (hex, 16 chars) of the sample ids and image contents in row order: the image side's cache key.

        An image file counts by its bytes (:func:`prh_lib.paths.file_digests`: each file is read once and remembered by
        path, size and modification times, so replacing a photo by another of the same size changes the key); a table
        image (:class:`~prh_lib.data.TableImage`) by its stored encoded bytes; an in-memory ``PIL.Image`` by its mode,
        size and pixels.

        Raises
        ------
        DataError
            If an image file does not exist (the message names it and its sample).
        """
        files = [i for i, item in enumerate(self.images) if isinstance(item, (str, Path))]
        try:
            digests = dict(zip(files, paths.file_digests([self.images[i] for i in files])))
        except FileNotFoundError as err:
            missing = next(i for i in files if not Path(self.images[i]).is_file())
            raise DataError(f"cannot fingerprint the images of {self.dataset!r}: image file {self.images[missing]} "
                            f"(sample {self.sample_ids[missing]!r}) does not exist") from err
        h = hashlib.sha256()
        for i, (sid, item) in enumerate(zip(self.sample_ids, self.images)):
            if i in digests:
                ident = "sha256:" + digests[i]
            elif hasattr(item, "content_digest"):  # TableImage: its stored (encoded) bytes
                ident = item.content_digest()
            elif hasattr(item, "mode") and hasattr(item, "size"):  # PIL.Image: pixels alone omit the shape
                ident = f"pil:{item.mode}:{item.size[0]}x{item.size[1]}:" + hashlib.sha256(item.tobytes()).hexdigest()
            else:
                ident = hashlib.sha256(item.tobytes()).hexdigest()
            h.update(sid.encode() + b"\x00" + ident.encode() + b"\x01")
        return h.hexdigest()[:16]

    def subset(self, indices: Sequence[int]) -> "Pairs":
        """The pairs at the given rows, in the given order."""
        idx = list(indices)
        return Pairs(
            dataset=self.dataset,
            sample_ids=tuple(self.sample_ids[i] for i in idx),
            images=tuple(self.images[i] for i in idx),
            texts=tuple(self.texts[i] for i in idx),
            caption_policy=self.caption_policy,
            n_captions=self.n_captions,
            seed=self.seed,
            info=dict(self.info),
        )

    def with_texts(self, texts: Sequence[str], *, policy: str) -> "Pairs":
        """The same images and rows with other texts (e.g. summaries); ``policy`` names how they were made."""
        if len(texts) != len(self):
            raise DataError(f"with_texts: got {len(texts)} texts for {len(self)} pairs")
        return Pairs(
            dataset=self.dataset,
            sample_ids=self.sample_ids,
            images=self.images,
            texts=tuple(texts),
            caption_policy=policy,
            n_captions=self.n_captions,
            seed=self.seed,
            info=dict(self.info),
        )


def sample_pairs(
    dataset: ImageCaptionDataset,
    *,
    n: int | None = None,
    seed: int = 0,
    caption_policy: str = "first",
    n_captions: int = 1,
    caption_index: int = 0,
) -> Pairs:
    """Draw ``n`` image-caption pairs with a seed and a caption policy.

    Parameters
    ----------
    dataset : ImageCaptionDataset
    n : int, optional
        Number of pairs, ``1 <= n <= len(dataset)``. Default: all images, in dataset order.
    seed : int
        Seed of ``np.random.default_rng`` for the sample and for ``"random"`` captions.
    caption_policy : {"first", "random", "concat", "nth"}
        ``"first"``: each image's first caption; ``"random"``: one caption drawn with the seed; ``"concat"``: the first
        ``n_captions`` captions joined by a space (Appendix F's "more detail"); ``"nth"``: each image's caption number
        ``caption_index`` (0-based; draw r of a dataset with several human captions per image pairs every image with its
        r-th caption, see :mod:`prh_lib.data.study`).
    n_captions : int
        Captions to concatenate with ``"concat"`` (1 to the minimum captions per image); must be 1 otherwise.
    caption_index : int
        Caption used with ``"nth"`` (0 to the minimum captions per image - 1); must be 0 otherwise.

    Returns
    -------
    Pairs
        Rows sorted by the order of the draw (``n=None``: dataset order).

    Raises
    ------
    ValueError
        If ``n`` is out of range, the policy is unknown, or ``n_captions`` / ``caption_index`` exceeds the captions
        available.
    """
    if caption_policy not in CAPTION_POLICIES:
        raise ValueError(f"unknown caption_policy {caption_policy!r}; use one of {CAPTION_POLICIES}")
    total = len(dataset)
    if n is None:
        rows = np.arange(total)
    else:
        if not 1 <= int(n) <= total:
            raise ValueError(f"n={n} pairs requested but dataset {dataset.name!r} has {total} images")
        rows = np.random.default_rng(seed).choice(total, size=int(n), replace=False)
    if caption_policy != "concat" and n_captions != 1:
        raise ValueError(f"n_captions={n_captions} only applies to caption_policy='concat'")
    if caption_policy != "nth" and caption_index != 0:
        raise ValueError(f"caption_index={caption_index} only applies to caption_policy='nth'")
    min_caps = min(len(dataset.captions[i]) for i in rows)
    if caption_policy == "nth" and not 0 <= int(caption_index) < min_caps:
        raise ValueError(f"caption_index={caption_index} but some selected images have only {min_caps} captions "
                         f"(valid: 0 to {min_caps - 1})")
    if not 1 <= n_captions <= min_caps:
        raise ValueError(f"n_captions={n_captions} but some selected images have only {min_caps} captions")

    caption_rng = np.random.default_rng([seed, 1])
    texts = []
    for i in rows:
        caps = dataset.captions[i]
        if caption_policy == "first":
            texts.append(caps[0])
        elif caption_policy == "random":
            texts.append(caps[int(caption_rng.integers(len(caps)))])
        elif caption_policy == "nth":
            texts.append(caps[int(caption_index)])
        else:
            texts.append(" ".join(caps[:n_captions]))
    return Pairs(
        dataset=dataset.name,
        sample_ids=tuple(dataset.sample_ids[i] for i in rows),
        images=tuple(dataset.images[i] for i in rows),
        texts=tuple(texts),
        caption_policy=caption_policy,
        n_captions=n_captions,
        seed=seed,
        info={"source": dataset.source, **({"caption_index": int(caption_index)} if caption_policy == "nth" else {})},
    )
