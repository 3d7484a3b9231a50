"""Every notebook executed on small parameters, then the Jupyter Book built from them (in a temporary copy).

The build itself is the session fixture ``built_book`` (tests/conftest.py), shared with the browser test.
"""

import re
import shutil
from pathlib import Path

import nbformat
import pytest
from PIL import Image
import yaml

from prh_lib import paths
from prh_lib.run import book as run_book
from prh_lib.run import runner
from prh_lib import formatting

#: Tallest figure a page may show, in pixels: 12 panels (figures.MAX_PANELS) in two columns and a legend.
MAX_FIGURE_HEIGHT = 5000


def _toc_files():
    toc = yaml.safe_load((paths.repo_root() / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [ch["file"] for ch in part.get("chapters", [])]
    return files


def _text(html: str) -> str:
    """The text of an HTML fragment, tags dropped and entities decoded (inline code is split into spans)."""
    import html as html_lib

    return html_lib.unescape(re.sub(r"<[^>]+>", "", html))


def test_toc_lists_every_notebook_and_nothing_missing():
    files = _toc_files()
    notebooks = run_book.available_notebooks()
    assert sorted(set(notebooks) - set(files)) == []
    for f in files:
        assert f in notebooks or (paths.book_dir() / f"{f}.md").is_file(), f"_toc.yml names {f!r}, which has no source"
    assert run_book.toc_notebooks() == [f for f in files if f in notebooks]


def test_book_builds_with_every_page_and_its_figures(built_book):
    html = built_book
    assert (html / "index.html").is_file()
    for name in run_book.available_notebooks():
        page = (html / f"{name}.html").read_text()
        images = re.findall(r"<img[^>]+src=\"([^\"]+\.png)\"", page)
        assert images, f"{name}.html shows no figure"
        for src in images:
            assert (html / src).is_file(), f"{name}.html links a missing image {src}"
            assert Image.open(html / src).size[1] <= MAX_FIGURE_HEIGHT, f"{name}.html: {src} is over {MAX_FIGURE_HEIGHT} px tall"
        assert "Traceback" not in page
        assert "has not been run" not in page
        # under every figure, the link to the CSV of what it draws; under the title, the chapter's results rows
        after = re.split(r"<img[^>]+src=\"[^\"]+\.png\"", page)[1:]
        links = [re.search(r"Data behind this figure: <a href=\"([^\"]+\.csv)\"", a) for a in after]
        assert all(links), f"{name}.html: a figure without the link to its data"
        assert all((html / m.group(1)).is_file() for m in links), f"{name}.html: a figure's data file is missing"
        assert (html / "_static" / "data" / name / "results.csv").is_file() and "results.csv</a>" in page


def test_pages_show_no_stderr_and_the_parameters_once_folded(built_book):
    for name in run_book.available_notebooks():
        page = (built_book / f"{name}.html").read_text()
        assert "output stderr" not in page, f"{name}.html shows a stderr block"
        assert "Kernel is running over TCP" not in page
        reprs = re.findall(r"&lt;[\w.]+ object(?: at 0x[0-9a-f]+)?&gt;", page)  # e.g. an empty Markdown()'s repr
        assert not reprs, f"{name}.html shows Python object reprs {reprs}"
        # a bare return value printed as text (e.g. the dict report.show_figure returns, shown on 5 pages until
        # stop 32): what a reader sees is a figure, a table or prose, never a plain-text repr
        plain = [_text(m)[:80] for m in re.findall(r'class="output text_plain.*?</pre>', page, flags=re.S)]
        assert not plain, f"{name}.html shows {len(plain)} plain-text outputs, e.g. {plain[:2]}"
        folded = re.findall(r'<details class="[^"]*hide above-input">(.*?)</details>', page, flags=re.S)
        boxes = [b for b in folded if run_book.PARAMETERS_PROMPT in b]
        assert len(boxes) == 1, f"{name}.html has {len(boxes)} parameter boxes, expected one"
        assert f"defaults (notebooks/{name}.py)" in _text(boxes[0]) and "Set for this run" in boxes[0]
        assert page.count("tag_parameters") == 0, f"{name}.html still shows the notebook's own parameters cell"


#: what a reader never sees: set-up and bookkeeping code (tagged remove-cell in notebooks/*.py)
BOOKKEEPING = ("import ", "warnings.filterwarnings", "report.record(", "pd.set_option", "logging.getLogger")


def _code_cells(name):
    import jupytext

    return [c for c in jupytext.read(f"{paths.repo_root()}/notebooks/{name}.py").cells if c.cell_type == "code"]


@pytest.mark.parametrize("name", run_book.available_notebooks())
def test_every_code_cell_is_removed_folded_or_the_parameters(name):
    """Set-up and bookkeeping cells are removed from the page; analysis cells are folded under their output."""
    for cell in _code_cells(name):
        tags = set(cell.metadata.get("tags", []))
        kinds = tags & {"parameters", "remove-cell", "hide-input"}
        assert len(kinds) == 1, f"{name}: a code cell has tags {sorted(tags)}: {cell.source[:60]!r}"
        top = [ln for ln in cell.source.splitlines() if ln and not ln.startswith((" ", "#"))]
        if any(ln.startswith(BOOKKEEPING) for ln in top):
            assert kinds == {"remove-cell"}, f"{name}: set-up or bookkeeping cell not removed: {cell.source[:60]!r}"


def test_pages_show_no_setup_or_bookkeeping_code(built_book):
    for name in run_book.available_notebooks():
        page = (built_book / f"{name}.html").read_text()
        code = "".join(re.findall(r'<div class="highlight[^"]*"><pre>(.*?)</pre>', page, flags=re.S))
        text = re.sub(r"<[^>]+>", "", code)
        for marker in ("report.record(", "warnings.filterwarnings", "import matplotlib", "pd.set_option"):
            assert marker not in text, f"{name}.html shows {marker!r}"
        assert page.count('class="cell tag_hide-input') >= 5, f"{name}.html: analysis cells are not folded"


def test_mathjax_is_served_from_the_build(built_book):
    page = (built_book / "intro.html").read_text()
    scripts = re.findall(r'<script[^>]+src="([^"?]*mathjax[^"?]*)[^"]*"', page, flags=re.I)  # drop any ?v=
    assert scripts == ["_static/mathjax/tex-chtml.js"], scripts
    assert (built_book / scripts[0]).stat().st_size > 100_000
    assert (built_book / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").is_dir()


TINY = '''# %% [markdown]
# # A tiny chapter
#
# With math $k/(N-1)$.

# %% tags=["parameters"]
n = 3

# %%
import sys
print("on stderr", file=sys.stderr)
print("n =", n)
'''


def test_fold_parameters_merges_defaults_and_values_set(tmp_path, monkeypatch):
    src = tmp_path / "notebooks"
    src.mkdir()
    (src / "tiny.py").write_text(TINY)
    monkeypatch.setattr(paths, "notebooks_dir", lambda: src)
    out = runner.run_notebook("tiny", {"n": 5}, output_dir=tmp_path / "out", quiet=True)
    nb = nbformat.read(str(out), as_version=4)
    defaults = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(defaults) == 1 and "remove-cell" in defaults[0].metadata["tags"]
    assert len(injected) == 1 and "hide-input" in injected[0].metadata["tags"]
    text = injected[0].source
    assert text.index("n = 3") < text.index("# Set for this run") < text.index("n = 5")
    assert injected[0].metadata["mystnb"]["code_prompt_show"] == run_book.PARAMETERS_PROMPT
    assert "n = 5" in "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    before = out.read_text()
    run_book.fold_parameters(out)  # idempotent
    assert out.read_text() == before

    plain = runner.run_notebook("tiny", {}, output_dir=tmp_path / "plain", quiet=True)
    cells = [c for c in nbformat.read(str(plain), as_version=4).cells if "parameters" in c.metadata.get("tags", [])]
    assert "hide-input" in cells[0].metadata["tags"] and "nothing was set" in cells[0].source


def test_partial_build_gives_placeholder_pages_without_warnings(tmp_path, capsys):
    """Build with warnings as errors after running only one notebook: the others get a page saying how to run them."""
    book = tmp_path / "book"
    shutil.copytree(paths.book_dir(), book, ignore=shutil.ignore_patterns("_build", "*.ipynb"))
    run_one = run_book.toc_notebooks()[0]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Executed\n\nA page that was run.")]
    nbformat.write(nb, str(book / f"{run_one}.ipynb"))

    html = run_book.build_book(book, strict=True, quiet=True)
    missing = [n for n in run_book.toc_notebooks() if n != run_one]
    note = capsys.readouterr().out
    assert "not run yet" in note and all(n in note for n in missing)
    assert run_book.write_placeholders(book) == missing  # still placeholders; the executed one is kept
    assert not run_book.is_placeholder(book / f"{run_one}.ipynb")
    for name in missing:
        page = _text((html / f"{name}.html").read_text())
        assert "has not been run in this build" in page and f"prh-run {name}" in page
    assert "has not been run" not in (html / f"{run_one}.html").read_text()


def test_plain_jupyter_book_build_fails_clearly_without_the_executed_pages(tmp_path):
    """`jupyter-book build book` on a fresh clone (no page executed yet), and after a partial prh-run (placeholder
    pages): one clear error naming prh-run and the chapters, exit status 1, no book reported built."""
    import subprocess
    import sys

    book = tmp_path / "book"
    shutil.copytree(paths.book_dir(), book, ignore=shutil.ignore_patterns("_build", "*.ipynb"))
    exe = str(Path(sys.executable).with_name("jupyter-book"))
    env = {k: v for k, v in __import__("os").environ.items() if k != "PRH_PLACEHOLDERS_OK"}

    def build():
        return subprocess.run([exe, "build", str(book)], capture_output=True, text=True, env=env, cwd=tmp_path)

    proc = build()
    chapters = run_book.toc_notebooks()
    assert proc.returncode == 1, proc.stdout[-2000:]
    error = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(error) == 1 and "produced by prh-run" in error[0] and "`prh-run`" in error[0]
    assert f"not executed: {', '.join(chapters)}" in error[0]
    assert "Traceback" not in proc.stderr + proc.stdout and not (book / "_build" / "html" / "index.html").exists()

    run_book.write_placeholders(book)  # what a partial prh-run leaves: every chapter but one a placeholder
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Executed\n\nA page that was run.")]
    nbformat.write(nb, str(book / f"{chapters[0]}.ipynb"))
    proc = build()
    assert proc.returncode == 1 and f"only a placeholder: {', '.join(chapters[1:])}" in proc.stderr
    assert "prh-run --build-only" in proc.stderr


def test_plain_jupyter_book_build_succeeds_once_every_page_is_executed(built_book):
    """The same command on a book whose every chapter was executed (the session's smoke build) builds it."""
    import os
    import subprocess
    import sys

    book = built_book.parent.parent
    env = {k: v for k, v in os.environ.items() if k != "PRH_PLACEHOLDERS_OK"}
    proc = subprocess.run([str(Path(sys.executable).with_name("jupyter-book")), "build", str(book)],
                          capture_output=True, text=True, env=env, cwd=book.parent)
    assert proc.returncode == 0 and "error:" not in proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    assert all((built_book / f"{n}.html").is_file() for n in run_book.toc_notebooks(book))


def test_strict_build_fails_on_a_warning(tmp_path):
    book = tmp_path / "book"
    shutil.copytree(paths.book_dir(), book, ignore=shutil.ignore_patterns("_build", "*.ipynb"))
    (book / "intro.md").write_text((book / "intro.md").read_text() + "\n\nSee {ref}`no-such-label`.\n")
    with pytest.raises(run_book.BookBuildError, match="no-such-label"):
        run_book.build_book(book, strict=True, quiet=True)


def test_front_page_checklist_shows_every_chapters_computed_verdicts(built_book):
    """Every chapter ran in the test build, so no claim reads 'not run'; each row shows a verdict."""
    from prh_lib.pages import claims

    page = (built_book / "intro.html").read_text()
    assert "arXiv 2611.12869" in page and "arXiv 2609.24209" in page
    assert "not run in this build" not in page
    names = "|".join(re.escape(v) for v in sorted(claims.VERDICTS, key=len, reverse=True))  # longest first
    verdicts = re.findall(rf"<td[^>]*>\s*<p>\s*(?:<strong>)?\s*({names})", page)  # the verdict, in bold
    assert len(verdicts) == len(claims.CLAIMS), len(verdicts)
    for chapter in {c.chapter for c in claims.CLAIMS.values()}:
        assert f'href="{chapter}.html"' in page
    # the front page is for readers: findings first, the figure with its data, labels once, a word budget
    article = re.sub(r"<(script|style)\b.*?</\1>", " ", page.split("<article", 1)[1].split("</article>", 1)[0],
                     flags=re.S)
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", article))
    assert text.index("Findings") < text.index("The claims, one line each") < text.index("The verdicts")
    findings = text[text.index("Findings"):text.index("Every claim of the paper, by chapter")]
    assert "How large." in findings and 40 < len(findings.split()) <= 260
    after = text[text.index("Every claim of the paper, by chapter"):text.index("The claims, one line each")]
    assert "Robustness" in after and "the robustness page" in after  # its own paragraph, under the figure
    assert len(text.split()) <= 2000, len(text.split())
    assert "claims.png" in page and re.search(r'href="[^"]*claims\.csv"', page)
    for label in claims.LABELS:
        assert page.count(f"<strong>{label}</strong>:") == 1, label  # each label defined once


def _header_rows(page: str):
    """Each table's header rows on a page, as lists of the cells' texts."""
    for thead in re.findall(r"<thead>(.*?)</thead>", page, flags=re.S):
        yield [[_text(c).strip() for c in re.findall(r"<th[^>]*>(.*?)</th>", row, flags=re.S)]
               for row in re.findall(r"<tr[^>]*>(.*?)</tr>", thead, flags=re.S)]


def test_tables_have_one_named_header_row_and_no_nan(built_book):
    """No index-name row, no empty header cell, no NaN / raw None on any page (issue 28, item 2)."""
    for name in ["intro"] + run_book.available_notebooks():
        page = (built_book / f"{name}.html").read_text()
        for rows in _header_rows(page):
            assert len(rows) == 1, f"{name}.html: a table has {len(rows)} header rows: {rows}"
            assert all(rows[0]), f"{name}.html: a table has an empty header cell: {rows[0]}"
        cells = [_text(c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", page, flags=re.S)]
        bad = sorted({c for c in cells if c in ("NaN", "nan", "None", "<NA>", "NaT")})
        assert not bad, f"{name}.html shows missing values as {bad}; say why in words"


def test_page_table_puts_the_index_in_named_columns_with_one_header_row():
    import pandas as pd

    from prh_lib.pages import report

    df = pd.DataFrame({"dataset": ["a", "a", "b"], "pair": ["x", "y", "x"], "score": [0.1, 0.2, 0.3]})
    out = report.page_table(df.set_index(["dataset", "pair"]))
    assert list(out.columns) == ["dataset", "pair", "score"]
    assert list(out["dataset"]) == ["a", "", "b"]  # sparsified like a MultiIndex
    assert list(out["pair"]) == ["x", "y", "x"]  # the innermost level is never blanked
    assert list(out["score"]) == [0.1, 0.2, 0.3]
    html = out.to_html(index=False)
    assert html.count("<tr") == 4  # one header row + three rows
    wide = pd.DataFrame([[1, 2]], columns=pd.MultiIndex.from_tuples([("peak", "mean"), ("peak", "std")]))
    assert list(report.page_table(wide).columns) == ["peak · mean", "peak · std"]


def test_page_table_says_a_p_value_at_the_permutation_floor_once():
    import pandas as pd

    from prh_lib.pages import report

    floor = formatting.format_p(0.001, 200)
    df = pd.DataFrame({"pair": ["a", "b"], "score": [0.2, 0.3], "p (largest over draws)": [floor, floor]})
    out = report.page_table(df)
    assert "p (largest over draws)" not in out.columns
    (note,) = out.attrs["notes"]
    assert "p ≤ 0.005 on every row" in note and "out of 200" in note and "(1/201)" in note
    html = report.page_table_html(df)
    assert html.count("p ≤ 0.005") == 1
    mixed = report.page_table(df.assign(**{"p (largest over draws)": [floor, formatting.format_p(0.2, 200)]}))
    assert list(mixed["p (largest over draws)"]) == ["≤ 0.005", "p = 0.200"]  # p-values that differ stay
    assert "≤ 0.005 means no permutation" in mixed.attrs["notes"][0]


def test_table_headers_are_words_not_code_names(built_book):
    """No snake_case column name (``n_eval``, ``score_mean``) and no bare number (a sweep's ``8``) in any table
    header: columns are named in words."""
    for name in ["intro"] + run_book.available_notebooks():
        page = (built_book / f"{name}.html").read_text()
        heads = {h for rows in _header_rows(page) for row in rows for h in row}
        raw = sorted(h for h in heads if re.fullmatch(r"[a-z0-9]+(_[a-z0-9]+)+", h))
        assert not raw, f"{name}.html: raw column names {raw}"
        # a bare number says nothing of what it is (a sweep's columns read "r = 8", not "8")
        bare = sorted(h for h in heads if re.fullmatch(r"[-+]?\d+(\.\d+)?", h))
        assert not bare, f"{name}.html: bare numbers as column headers {bare}; name the parameter"
