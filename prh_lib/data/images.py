"""Decoding one image into the 8-bit RGB every model's preprocessing expects, with the awkward cases stated.

:func:`to_rgb` is what :meth:`prh_lib.data.Pairs.load_images` applies to each image:

* a file that is missing, is not an image, or is cut short (a truncated JPEG) raises
  :class:`~prh_lib.data.DataError` naming the file (decoding is forced here, so a truncated file fails now,
  not later inside a model's processor);
* grayscale (``L``, ``1``) is replicated to three channels; CMYK and YCbCr are converted by Pillow's
  formulas (no colour profile is applied); palette images are expanded;
* an alpha channel (``RGBA``, ``LA``, ``PA``, or a palette with a transparent colour) is composited onto
  white, as ``transformers.image_transforms.convert_to_rgb`` does, so transparent pixels do not show
  whatever colour happens to be stored under them (often black);
* 16- and 32-bit integer or float images (``I;16``, ``I``, ``F``) are refused with a :class:`DataError`:
  Pillow's conversion clips them to 255 and would silently give a white image;
* any size is accepted, 1 x 1 included: every model's processor resizes (a 1 x 1 image becomes a flat
  colour, which is correct if pointless).
"""

from __future__ import annotations

from pathlib import Path

from prh_lib.data.errors import DataError

_HIGH_DEPTH = ("I", "F")  # I;16, I;16B, I;16L, I, F


def to_rgb(image, *, where: str = "image"):
    """An 8-bit RGB copy of a decoded ``PIL.Image`` (see the module notes for each mode).

    Parameters
    ----------
    image : PIL.Image.Image
    where : str
        What to name in errors (a file and its sample).

    Raises
    ------
    DataError
        If the image has 16- or 32-bit integer or float pixels.
    """
    from PIL import Image

    mode = image.mode
    if mode.startswith(_HIGH_DEPTH):
        raise DataError(f"{where} has {mode} pixels (16/32-bit or float): converting them to 8-bit RGB would "
                        "clip every value above 255; convert it to an 8-bit image first")
    has_alpha = mode in ("RGBA", "LA", "PA", "RGBa", "La") or (mode == "P" and "transparency" in image.info)
    if has_alpha:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def open_rgb(path: str | Path, *, where: str | None = None):
    """Open, fully decode and convert an image file with :func:`to_rgb`.

    Raises
    ------
    DataError
        If the file is missing, is not an image, cannot be decoded completely (truncated), or has pixels
        :func:`to_rgb` refuses; the message names the file.
    """
    from PIL import Image, UnidentifiedImageError

    where = where or f"image {path}"
    try:
        with Image.open(path) as im:
            im.load()
            return to_rgb(im, where=where)
    except FileNotFoundError as err:
        raise DataError(f"cannot read {where}: the file does not exist") from err
    except UnidentifiedImageError as err:
        raise DataError(f"cannot read {where}: it is not an image Pillow can identify") from err
    except OSError as err:  # e.g. "image file is truncated (12 bytes not processed)"
        raise DataError(f"cannot read {where}: {err} (the file is damaged or cut short)") from err
