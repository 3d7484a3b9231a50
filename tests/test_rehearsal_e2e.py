"""The paper's study end to end on stand-ins (issue 12): prh-batch plan and run (submitit's local executor),
then every notebook with ``--params rehearsal``, then the book, whose pages must show their figures, and the
results table, which must hold every dataset and draw of the study.

Slow (minutes on a CPU): 224 extraction jobs of tiny models, then the notebooks. Features go to the
session's ``PRH_CACHE_DIR`` like the other notebook tests, so a rerun skips finished jobs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest
from PIL import Image

from prh_lib.data import paper
from prh_lib import paths
from prh_lib.run import book as run_book
from prh_lib.run import rehearsal
from prh_lib.run.profiles import get_profile

#: Tallest figure a page may show, in pixels: 12 panels (figures.MAX_PANELS) in two columns and a legend.
MAX_FIGURE_HEIGHT = 5000

pytestmark = pytest.mark.slow


def _batch(*args, timeout=3600):
    env = {**os.environ, "PYTHONPATH": str(paths.repo_root()), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "prh_lib.batch", *args, "--profile", "rehearsal"], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def study():
    """Plan, run (local executor), plan again: the three outputs."""
    before = _batch("plan")
    assert before.returncode == 0, before.stderr[-3000:]
    run = _batch("run", "--executor", "local")
    assert run.returncode == 0, (run.stdout[-3000:], run.stderr[-3000:])
    after = _batch("plan")
    return before.stdout, run.stdout, after.stdout


def test_batch_plans_every_standin_and_tower_and_runs_them_all(study):
    before, run, after = study
    for m in paper.models():
        for name in paper.expand_towers(f"{m}{paper.STANDIN_SUFFIX}"):
            assert re.search(rf"^{re.escape(name)}\s", before, flags=re.M), f"{name} not planned"
    n_jobs = sum(len(paper.expand_towers(m)) for m in paper.models()) * (1 + 3 * rehearsal.N_DRAWS)
    assert f"{n_jobs} jobs:" in before
    assert "0 failed" in run, run[-2000:]
    assert f"{n_jobs} jobs: {n_jobs} cached, 0 left" in after


@pytest.fixture(scope="module")
def executed(study, tmp_path_factory):
    """Every notebook executed on the rehearsal profile, side by side as prh-run runs them: {name: path}, or
    {name: error} of the first that failed."""
    from conftest import execute_side_by_side
    from prh_lib.run.schedule import NotebookFailed

    names = run_book.available_notebooks()
    try:
        return execute_side_by_side(names, get_profile("rehearsal"), tmp_path_factory.mktemp("rehearsal-executed"))
    except NotebookFailed as err:  # "<name> failed: ...": the first that failed; the others were stopped
        return {str(err).split(" failed", 1)[0]: err}


def test_every_notebook_runs_on_the_rehearsal_profile(executed):
    failed = {n: f"{type(e).__name__}: {str(e)[-600:]}" for n, e in executed.items() if isinstance(e, Exception)}
    assert not failed, failed


def test_book_renders_every_page_with_figures_and_the_results_fill(executed, tmp_path_factory):
    from prh_lib import results

    if any(isinstance(e, Exception) for e in executed.values()):
        pytest.fail("some notebooks failed (see test_every_notebook_runs_on_the_rehearsal_profile)")
    book = tmp_path_factory.mktemp("rehearsal-book") / "book"
    shutil.copytree(paths.book_dir(), book, ignore=shutil.ignore_patterns("_build", "*.ipynb"))
    for name, path in executed.items():
        shutil.copy(path, book / f"{name}.ipynb")
    html = run_book.build_book(book, strict=True, quiet=True)
    for name in executed:
        page = (html / f"{name}.html").read_text()
        images = re.findall(r"<img[^>]+src=\"([^\"]+\.png)\"", page)
        assert images and all((html / s).is_file() for s in images), f"{name}.html: no or missing figures"
        # the paper's 63 pairs on four datasets once drew figures 73,420 pixels tall: they draw figure_pairs
        tall = {s: Image.open(html / s).size for s in images if Image.open(html / s).size[1] > MAX_FIGURE_HEIGHT}
        assert not tall, f"{name}.html: figures taller than {MAX_FIGURE_HEIGHT} px (width, height): {tall}"
        assert "Traceback" not in page and "~rehearsal" in page  # a rehearsal page says it is one
        # under every figure, the link to the CSV of what it draws; under the title, the chapter's results rows
        after = re.split(r"<img[^>]+src=\"[^\"]+\.png\"", page)[1:]
        links = [re.search(r"Data behind this figure: <a href=\"([^\"]+\.csv)\"", a) for a in after]
        assert all(links), f"{name}.html: a figure without the link to its data"
        assert all((html / m.group(1)).is_file() for m in links), f"{name}.html: a figure's data file is missing"
        assert (html / "_static" / "data" / name / "results.csv").is_file() and "results.csv</a>" in page
    table = results.load()
    table = table[table["params"].str.contains("~rehearsal", regex=False)]
    expected = {("wit-1024", 0)} | {(d, r) for d in ("coco", "docci", "cc3m-dreamlip") for r in range(rehearsal.N_DRAWS)}
    got = set(zip(table["dataset"], table["draw"].astype(int)))
    assert expected <= got, f"results lack {sorted(expected - got)}"
