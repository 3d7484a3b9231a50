"""Silence library chatter (logs, progress bars, load-time warnings) while models load and run, for clean pages.

Loading a causal LM prints a lot on stderr: "Loading weights" progress bars, GGUF dequantisation bars,
generation-config notes and deprecation warnings from ``transformers`` and ``torch``. A book page must show
none of it (the executed notebook keeps stderr). :func:`quiet` scopes the silence to one block and restores
every setting afterwards; nothing global is flipped for the rest of the process."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import warnings

_LOGGERS = ("transformers", "huggingface_hub", "accelerate", "torch", "timm", "prh_lib", "gguf")


def quiet_hub_for_session() -> None:
    """``transformers`` logs at ERROR and its and the Hub's progress bars off for the rest of the process,
    without importing ``transformers`` (about 1 s) in a kernel that loads no model.

    A library not imported yet is set through the environment variables it reads when it is imported
    (``TRANSFORMERS_VERBOSITY=error``, ``HF_HUB_DISABLE_PROGRESS_BARS=1``); one already imported through its
    own switches (``set_verbosity_error``, ``disable_progress_bar``). For a notebook page whose models load
    only when their features are not cached; :func:`quiet` scopes the same silence to one block instead."""
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()  # the Hub's bars too
        return
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    if "huggingface_hub" in sys.modules:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    else:
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"


@contextlib.contextmanager
def quiet(enabled: bool = True):
    """A context in which library logs, progress bars and warnings are not shown.

    Inside the block: ``transformers`` verbosity is ERROR and its progress bars are off
    (``transformers.logging.set_verbosity_error`` / ``disable_progress_bar``, restored on exit), the loggers of
    :data:`_LOGGERS` are at ERROR, warnings are ignored, and whatever is still written to ``sys.stderr`` (e.g. tqdm bars
    of other libraries) is captured. If the block raises, the captured text is written to the real stderr before the
    exception propagates, so nothing that explains a failure is lost.

    Parameters
    ----------
    enabled : bool, default True
        False: a no-op context (e.g. ``quiet(not progress)``).
    """
    if not enabled:
        yield
        return
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    levels = {name: logging.getLogger(name).level for name in _LOGGERS}
    for name in _LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    captured = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(captured):
            warnings.simplefilter("ignore")
            yield
    except BaseException:
        sys.stderr.write(captured.getvalue())
        raise
    finally:
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
