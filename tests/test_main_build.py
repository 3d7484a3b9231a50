"""What the main job (``prh-run``, the README's first command) wrote into ``book/``: its pages, at full size.

The notebook tests run every page on the small ``smoke`` profile; some things only show at the offline
defaults (N = 1,000 Flickr8k pairs), e.g. a warning that fires only when an interval is narrow. ``.ci/run``
runs the main job before the tests, so these tests read its executed notebooks. Pages that were not run
(placeholders) are skipped, and so is the whole module when no page was run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prh_lib import paths
from prh_lib.run.book import is_placeholder

PAGES = sorted(p for p in paths.book_dir().glob("*.ipynb") if not is_placeholder(p))
BAD = ("Warning:", "Traceback", "[IPKernelApp]", "it/s]")
#: The pages whose default datasets hold flickr8k-1k and whose verdicts read it (issue 25).
FLICKR_PAGES = ("sec3_1_layerwise", "sec3_1b_pca", "sec3_3_regimes", "appg_k_n_ablation", "ch_displacement",
                "appf_caption_detail", "robustness")

pytestmark = pytest.mark.skipif(not PAGES, reason="the main job (prh-run) has not run: no executed page in book/")


def _outputs(nb: dict):
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            yield cell, out


def _text(out: dict) -> str:
    if out.get("output_type") == "stream":
        return "".join(out.get("text", ""))
    data = out.get("data", {})
    return "".join(data.get("text/markdown") or data.get("text/html") or data.get("text/plain") or "")


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_main_build_pages_carry_no_stderr_warnings_or_errors(page):
    nb = json.loads(page.read_text(encoding="utf-8"))
    problems = []
    for cell, out in _outputs(nb):
        if out.get("output_type") == "error":
            problems.append(f"error {out.get('ename')}: {out.get('evalue')}")
        elif out.get("output_type") == "stream" and out.get("name") == "stderr":
            problems.append("stderr: " + "".join(out.get("text", ""))[:200])
        else:
            hit = [w for w in BAD if w in _text(out)]
            if hit:
                problems.append(f"{hit} in: " + _text(out)[:200])
    assert not problems, f"{page.name}: " + " | ".join(problems[:5])


@pytest.mark.parametrize("name", FLICKR_PAGES)
def test_main_build_reads_flickr8k_at_the_papers_n_where_its_defaults_say_so(name):
    page = paths.book_dir() / f"{name}.ipynb"
    if page not in PAGES:
        pytest.skip(f"{name} was not run by the main job")
    nb = json.loads(page.read_text(encoding="utf-8"))
    params = "".join(next(("".join(c["source"]) for c in nb["cells"]
                           if "parameters" in c.get("metadata", {}).get("tags", [])), ""))
    injected = "".join("".join(c["source"]) for c in nb["cells"]
                       if "injected-parameters" in c.get("metadata", {}).get("tags", []))
    if "flickr8k-1k" not in params or "datasets" in injected:
        pytest.skip(f"{name} ran with other datasets")
    text = "\n".join(_text(out) for _, out in _outputs(nb))
    assert "flickr8k-1k" in text, f"{name}: the page shows no flickr8k-1k numbers"
    assert "1000" in text or "1,000" in text, f"{name}: no N = 1,000 on the page"


@pytest.mark.parametrize("name", FLICKR_PAGES)
def test_main_build_pages_state_the_dtype_of_their_features(name):
    """Issue 25, item 3: a page whose ``dtype`` is ``"auto"`` says which models ran in bfloat16 (with the
    benchmark's evidence) and which in float32, and the statement agrees with the committed bf16 table."""
    from prh_lib.models.precision import cpu_default_dtype

    page = paths.book_dir() / f"{name}.ipynb"
    if page not in PAGES:
        pytest.skip(f"{name} was not run by the main job")
    nb = json.loads(page.read_text(encoding="utf-8"))
    injected = "".join("".join(c["source"]) for c in nb["cells"]
                       if "injected-parameters" in c.get("metadata", {}).get("tags", []))
    if "dtype" in injected:
        pytest.skip(f"{name} ran with another dtype")
    text = "\n".join(_text(out) for _, out in _outputs(nb))
    statement = next((line for line in text.splitlines() if line.startswith("Features ")), None)
    assert statement and "`dtype = \"auto\"`" in statement, f"{name}: no dtype statement on the page"
    for model in ("dinov2-small", "smollm2-135m", "minilm-l6", "efficientnet-lite0", "gemma3-270m"):
        if model in statement:
            in_bf16 = "**bfloat16** for" in statement and model in statement.split("float32 for")[0]
            assert in_bf16 == (cpu_default_dtype(model) == "bfloat16"), f"{name}: {model} misstated"
