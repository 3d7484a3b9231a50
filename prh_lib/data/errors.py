"""The data layer's error and warning classes (re-exported by :mod:`prh_lib.data` and
:mod:`prh_lib.data.pairs`), in their own module so that every data module can raise them."""

from __future__ import annotations


class DataError(ValueError):
    """A dataset is missing, unreadable or malformed; the message names the path and the fix."""


class DataWarning(UserWarning):
    """Data was usable after a repair that the reader should know of (e.g. empty captions skipped, counted)."""
