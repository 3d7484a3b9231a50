"""Small Sphinx fixes for this book, loaded through ``_config.yml`` (``sphinx: local_extensions``).

- Each inline script once per page. With Sphinx 7.4, scripts that extensions add with a body (no file)
  end up twice in a page's ``<head>``: once from the registry (file name ``''``) and once added straight
  to the builder (file name ``None``); the builder's own de-duplication sees two different assets.
  sphinx-thebe's ``const THEBE_JS_URL = ...`` then fails the second time with "Identifier 'THEBE_JS_URL'
  has already been declared" in the browser console (found by ``tests/test_browser.py``).
"""


def _script_key(js):
    filename = getattr(js, "filename", js) or ""
    attributes = getattr(js, "attributes", {}) or {}
    return str(filename), tuple(sorted((k, str(v)) for k, v in attributes.items()))


def dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        key = _script_key(js)
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


def setup(app):
    app.connect("html-page-context", dedupe_scripts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


# ----------------------------------------------------------------------------------------------------------
# The front page's claims checklist, generated from the executed chapters when the book is built.
CHECKLIST = "_generated/checklist.md"


def _chapter_rows(ipynb, name=None):
    """The claims rows (or the record ``name``) a chapter recorded, or None when it has not run (missing or a
    placeholder page)."""
    from prh_lib.pages import report
    from prh_lib.pages.claims import RECORD_NAME

    if not ipynb.is_file():
        return None
    try:
        return report.read_record(ipynb, name or RECORD_NAME)
    except KeyError:
        return None  # a placeholder page, or a chapter that records no claims: "not run in this build"


def write_checklist(app):
    """Write the front page's generated parts into ``book/_generated/`` before Sphinx reads the sources: the
    checklist, the findings paragraph, the verdict labels, and the claims figure with its data
    (:mod:`prh_lib.pages.front`)."""
    from pathlib import Path

    from prh_lib.pages import claims

    from prh_lib.pages import front

    src = Path(app.srcdir)
    chapters = sorted({c.chapter for c in claims.CLAIMS.values()})
    rows = {ch: _chapter_rows(src / f"{ch}.ipynb") for ch in chapters}
    _write_if_changed(src / CHECKLIST, claims.checklist_markdown(rows))
    robust = _chapter_rows(src / "robustness.ipynb", "robustness")
    _write_if_changed(src / "_generated/findings.md", front.findings_markdown(rows))
    _write_if_changed(src / "_generated/robustness.md", front.robustness_markdown(robust) or "\n")
    _write_if_changed(src / "_generated/labels.md", front.labels_markdown())
    png, data = front.claims_figure(rows)
    _write_if_changed(src / "_generated/claims.csv", data)
    _write_if_changed(src / "_generated/claims.png", png)


AUDIT = "_generated/profile_audit.md"


def write_profile_audit(app):
    """Write ``book/_generated/profile_audit.md``: the paper profile against the paper (included by ``intro.md``)."""
    from pathlib import Path

    from prh_lib.run import profile_audit

    _write_if_changed(Path(app.srcdir) / AUDIT, profile_audit.audit_markdown())


def _write_if_changed(out, content):
    out.parent.mkdir(exist_ok=True)
    data = content.encode("utf-8") if isinstance(content, str) else content
    if not out.is_file() or out.read_bytes() != data:  # unchanged: keep Sphinx's cache valid
        out.write_bytes(data)


def check_pages(app):
    """Stop the build, naming ``prh-run``, when a chapter of the toc has no executed page.

    The pages are notebooks that ``prh-run`` executes into ``book/`` (``execute_notebooks: "off"``: Jupyter
    Book never runs them, since a cold main job takes tens of minutes and needs the model zoo). A page that is
    missing, or is a placeholder written by an earlier partial ``prh-run``, fails the build here instead of
    building a book without its chapters; ``prh-run``'s own builds (``PRH_PLACEHOLDERS_OK=1``) keep the
    placeholders of the chapters not run yet, and say so. The build ends with that one message and exit
    status 1 (``SystemExit``: Jupyter Book would wrap any exception in three tracebacks).
    """
    import os
    import sys
    from pathlib import Path

    from prh_lib.run.book import is_placeholder, toc_notebooks

    src = Path(app.srcdir)
    missing = [n for n in toc_notebooks(src) if not (src / f"{n}.ipynb").is_file()]
    held = [] if os.environ.get("PRH_PLACEHOLDERS_OK") == "1" else [
        n for n in toc_notebooks(src) if n not in missing and is_placeholder(src / f"{n}.ipynb")]
    if missing or held:
        what = "; ".join(s for s in (missing and f"not executed: {', '.join(missing)}",
                                     held and f"only a placeholder: {', '.join(held)}") if s)
        print(
            f"error: the book's chapter pages are produced by prh-run, not by jupyter-book ({what}). Run `prh-run` from "
            "the repository root (every notebook executed into book/, then the book built; `prh-run --params "
            "smoke` for small parameters), or `prh-run --build-only` to build with a placeholder page for each "
            "chapter not run yet", file=sys.stderr, flush=True)
        raise SystemExit(1)


# ----------------------------------------------------------------------------------------------------------
# The data behind the pages: each figure's CSV (kept in its notebook's output by report.show_figure) and the
# chapter's rows of the results table, written under _static/data/<chapter>/ (not committed), which Sphinx
# copies into the HTML; each page links its results.csv under its title.
DATA = "_static/data"


def _chapter_results(name, ipynb):
    """The rows of the results table behind an executed page: those of the run that executed it (its
    ``prh_inputs`` metadata, written by ``prh-run``), else the chapter's latest rows per parameters."""
    from prh_lib import results
    from prh_lib.run import freshness

    run_id = (freshness.recorded_inputs(ipynb) or {}).get("run_id")
    rows = results.load(chapter=name, run_id=run_id, include_superseded=True) if run_id else None
    return rows if rows is not None and len(rows) else results.load(chapter=name)


def write_data_files(app):
    """Write ``_static/data/<chapter>/figure-<n>.csv`` and ``results.csv`` for every executed chapter of the toc."""
    import shutil
    from pathlib import Path

    import nbformat

    from prh_lib.pages.report import FIGURE_DATA_KEY
    from prh_lib.paths import atomic_path
    from prh_lib.run.book import is_placeholder, toc_notebooks

    src = Path(app.srcdir)
    shutil.rmtree(src / DATA, ignore_errors=True)  # nothing left from chapters rerun or gone since
    for name in toc_notebooks(src):
        ipynb = src / f"{name}.ipynb"
        if not ipynb.is_file() or is_placeholder(ipynb):
            continue
        out = src / DATA / name
        out.mkdir(parents=True)
        files = {"results.csv": _chapter_results(name, ipynb).to_csv(index=False)}
        for cell in nbformat.read(str(ipynb), as_version=4).cells:
            for output in cell.get("outputs", []):
                data = output.get("metadata", {}).get(FIGURE_DATA_KEY)
                if data:
                    files[Path(data["file"]).name] = data["csv"]
        for file, text in files.items():
            with atomic_path(out / file) as tmp:
                Path(tmp).write_text(text, encoding="utf-8")


def link_results(app, pagename, templatename, context, doctree):
    """Under a chapter page's title, a link to its rows of the results table (:func:`write_data_files`)."""
    from pathlib import Path

    target = f"{DATA}/{pagename}/results.csv"
    body = context.get("body", "")
    if "</h1>" in body and (Path(app.srcdir) / target).is_file():
        link = (f'<p class="results-data">This chapter\'s rows of the results table: '
                f'<a href="{context["pathto"](target, 1)}">results.csv</a></p>')
        context["body"] = body.replace("</h1>", "</h1>\n" + link, 1)


_setup_scripts = setup


def setup(app):  # noqa: F811
    meta = _setup_scripts(app)
    app.connect("builder-inited", check_pages)
    app.connect("builder-inited", write_checklist)
    app.connect("builder-inited", write_profile_audit)
    app.connect("builder-inited", write_data_files)
    app.connect("html-page-context", link_results)
    return meta
