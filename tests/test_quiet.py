"""``prh_lib.lm.quiet.quiet_hub_for_session``: the silence a page asks for, with or without transformers imported."""

import subprocess
import sys

import pytest

CHECK = """
import sys
{before}
from prh_lib.lm.quiet import quiet_hub_for_session
quiet_hub_for_session()
imported_by_it = "transformers" in sys.modules
from transformers.utils import logging as hf_logging
from huggingface_hub.utils import are_progress_bars_disabled
print(imported_by_it, hf_logging.get_verbosity() == hf_logging.ERROR, hf_logging.is_progress_bar_enabled(),
      are_progress_bars_disabled())
"""


@pytest.mark.parametrize("before, imported", [("", "False"), ("import transformers.utils.logging", "True"),
                                              ("import huggingface_hub", "False")])
def test_quiet_hub_for_session_silences_transformers_whenever_it_is_imported(before, imported, monkeypatch):
    for var in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS"):
        monkeypatch.delenv(var, raising=False)
    out = subprocess.run([sys.executable, "-c", CHECK.format(before=before)], capture_output=True, text=True,
                         check=True).stdout.split()
    # not imported by the call itself; ERROR verbosity; transformers' bars off; the Hub's bars off
    assert out == [imported, "True", "False", "True"]


LOAD = """
import sys
from transformers.utils import logging as hf_logging
from prh_lib import models
models.load_model("minilm-l6")
print("bars after the load:", hf_logging.is_progress_bar_enabled())
"""


def test_load_model_shows_no_weight_loading_bar_and_restores_the_setting():
    # transformers 5 draws "Loading weights: 100%|...| 103/103" on stderr for every from_pretrained; on a cold
    # prh-run that bar ended up on the book's pages (found with transformers 5.25)
    done = subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, check=True)
    assert "Loading weights" not in done.stderr and "it/s" not in done.stderr, done.stderr[-500:]
    assert done.stdout.strip() == "bars after the load: True"  # the user's setting is back after the load
