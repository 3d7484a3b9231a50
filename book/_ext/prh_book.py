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
