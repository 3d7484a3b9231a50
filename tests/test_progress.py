"""Live progress (prh_lib.progress): a side channel to the terminal of ``prh-run``, never into the page."""

import io
import re
import json

import pytest

from prh_lib import progress
from prh_lib.run import runner


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_without_a_channel_nothing_is_written(monkeypatch, capsys):
    monkeypatch.delenv(progress.ENV, raising=False)
    progress.note("loading x")
    bar = progress.bar(total=3, desc="x")
    bar.update(3)
    bar.close()
    assert bar.disable
    assert capsys.readouterr() == ("", "")


def test_notes_and_bars_go_to_the_channel(tmp_path, monkeypatch, capsys):
    log = tmp_path / "progress.log"
    monkeypatch.setenv(progress.ENV, str(log))
    progress.note("extracting smollm2-135m on coco-mini")
    with progress.bar(total=4, desc="smollm2-135m (text)", unit="caption") as bar:
        for _ in range(4):
            bar.update(1)
    text = log.read_text()
    assert re.match(r"  · \d\d:\d\d:\d\d extracting smollm2-135m on coco-mini\n", text)
    assert "smollm2-135m (text)" in text and "4/4" in text
    assert capsys.readouterr() == ("", "")  # nothing on the notebook's own streams (they become the page)


def test_follow_collapses_redraws_into_lines_off_a_terminal(tmp_path):
    log, out = tmp_path / "p.log", io.StringIO()
    with progress.follow(log, out, interval=0.01):
        with open(log, "a") as fh:
            fh.write("  · loading x\n\r bar 10%\r bar 50%\r bar 100%\n  · scoring a × b")  # last line unfinished
    assert out.getvalue() == "  · loading x\n bar 100%\n  · scoring a × b\n"


def test_follow_copies_as_written_to_a_terminal(tmp_path):
    log, out = tmp_path / "p.log", _Tty()
    with progress.follow(log, out, interval=0.01):
        with open(log, "a") as fh:
            fh.write("\r bar 10%\r bar 100%\n")
    assert out.getvalue() == "\r bar 10%\r bar 100%\n"


NOTEBOOK = '''# %% tags=["parameters"]
a = 1

# %%
from prh_lib import progress
progress.note(f"step {a} of the notebook")
print("on the page")
'''


@pytest.fixture
def tiny_notebook(tmp_path, monkeypatch):
    from prh_lib import paths

    src = tmp_path / "notebooks"
    src.mkdir()
    (src / "tiny.py").write_text(NOTEBOOK)
    monkeypatch.setattr(paths, "notebooks_dir", lambda: src)
    monkeypatch.delenv(progress.ENV, raising=False)
    return "tiny"


def test_run_notebook_shows_the_kernels_progress_in_the_terminal_not_on_the_page(tiny_notebook, tmp_path, capfd):
    out = runner.run_notebook("tiny", {"a": 7}, output_dir=tmp_path / "out", quiet=False)
    err = capfd.readouterr().err
    assert "step 7 of the notebook" in err
    page = json.dumps(json.loads(out.read_text())["cells"])
    assert "on the page" in page and "step 7" not in page
    import os

    assert progress.ENV not in os.environ  # restored after the run


def test_quiet_runs_have_no_channel(tiny_notebook, tmp_path, capfd):
    runner.run_notebook("tiny", {"a": 3}, output_dir=tmp_path / "out", quiet=True)
    assert "step 3" not in capfd.readouterr().err


def test_an_inner_bar_can_be_silent_even_on_the_channel(tmp_path, monkeypatch):
    log = tmp_path / "progress.log"
    monkeypatch.setenv(progress.ENV, str(log))
    with progress.bar(total=1, desc="inner", show=None) as bar:
        bar.update(1)
    assert not log.exists() or "inner" not in log.read_text()
