"""The built book in a real browser: headless Chromium (Debian's package) driven by Selenium.

Every HTML page of the book built on the ``smoke`` profile (the session fixture ``built_book``, shared
with ``test_book.py``) is served from 127.0.0.1 and opened; the test checks what a reader would see:
every image decoded, every formula typeset by MathJax (no raw TeX left in the text), no console errors,
no stderr blocks, the parameters once in a folded box, every sidebar link resolving, and nothing loaded
from outside the book. A full-page screenshot of each page is saved to ``book/_build/screenshots/`` (or
``$PRH_SCREENSHOT_DIR``) for a person to look at.

``PRH_BOOK_HTML=book/_build/html`` checks an existing build instead (e.g. after a full ``prh-run``).

Needs ``apt-get install chromium chromium-driver`` (``.ci/run`` installs them). Without them the test
fails under CI (``CI=true``) and is skipped elsewhere, with the install command as the reason.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from prh_lib import paths
from prh_lib.run import book as run_book

CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL = "apt-get install -y chromium chromium-driver"
# Pages Sphinx writes besides the toc's; index.html only redirects to the root page.
EXTRA_PAGES = ["genindex", "search"]


def _toc_pages() -> list[str]:
    toc = yaml.safe_load((paths.repo_root() / "_toc.yml").read_text())
    return [toc["root"]] + [ch["file"] for part in toc.get("parts", []) for ch in part.get("chapters", [])]


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _require_browser():
    problems = []
    if _chromium() is None:
        problems.append("no chromium on PATH")
    if not CHROMEDRIVER.is_file():
        problems.append(f"no {CHROMEDRIVER}")
    try:
        import selenium  # noqa: F401
    except ImportError:
        problems.append("selenium is not installed (pip install -e '.[test]')")
    if problems:
        reason = f"browser test needs headless Chromium: {'; '.join(problems)} (install: {INSTALL})"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def book_html(request):
    _require_browser()
    given = os.environ.get("PRH_BOOK_HTML")
    if given:
        html = Path(given).resolve()
        if not (html / "index.html").is_file():
            pytest.fail(f"PRH_BOOK_HTML={given} has no index.html")
        return html
    return request.getfixturevalue("built_book")


@pytest.fixture(scope="module")
def server(book_html):
    """``book_html`` served on 127.0.0.1 (a free port) from a thread; yields the base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(book_html)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def screenshots():
    folder = Path(os.environ.get("PRH_SCREENSHOT_DIR") or paths.book_dir() / "_build" / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def driver(book_html, tmp_path_factory):
    """Headless Chromium through the system chromedriver (Selenium Manager is never asked to download)."""
    os.environ["SE_OFFLINE"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = _chromium()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1280,900",
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(options=opts, service=Service(executable_path=str(CHROMEDRIVER)))
    drv.set_page_load_timeout(60)
    drv.set_script_timeout(60)
    yield drv
    drv.quit()


# In-page checks, run after load: wait for MathJax's first typeset and every image's decode, then report.
_INSPECT = r"""
const done = arguments[arguments.length - 1];
const mathjax = window.MathJax && MathJax.startup && MathJax.startup.promise
  ? MathJax.startup.promise.then(() => null, e => String(e)) : Promise.resolve(null);
const imgs = Array.from(document.images);
imgs.forEach(i => { i.loading = "eager"; });
Promise.all([mathjax, ...imgs.map(i => i.decode().catch(() => null))]).then(([mjError]) => {
  const skip = el => el.closest("pre, code, script, style, mjx-container, .highlight, textarea");
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const texts = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement && !skip(n.parentElement)) texts.push(n.nodeValue);
  }
  const sidebar = Array.from(document.querySelectorAll(".bd-sidebar-primary nav a[href]"))
    .map(a => a.href);
  const params = Array.from(document.querySelectorAll("details.hide.above-input"))
    .map(d => ({open: d.open, text: d.textContent}));
  done({
    mathjaxVersion: window.MathJax && MathJax.version || null,
    mathjaxError: mjError,
    mathElements: document.querySelectorAll(".math").length,
    mathUnrendered: Array.from(document.querySelectorAll(".math"))
      .filter(m => !m.querySelector("mjx-container")).map(m => m.textContent.slice(0, 80)),
    mathContainers: document.querySelectorAll("mjx-container").length,
    mathErrors: Array.from(document.querySelectorAll("mjx-merror")).map(e => e.textContent.slice(0, 80)),
    text: texts.join(" "),
    brokenImages: imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute("src")),
    nImages: imgs.length,
    figures: Array.from(document.querySelectorAll(".cell_output img")).map(i => ({
      src: i.getAttribute("src"), naturalWidth: i.naturalWidth, clientWidth: i.getBoundingClientRect().width})),
    column: (document.querySelector(".cell_output") || document.querySelector("main") || document.body)
      .getBoundingClientRect().width,
    // tables wider than the page column must scroll inside their own box, never the page
    tablesOffPage: Array.from(document.querySelectorAll("article table")).filter(t => {
      let box = t.parentElement;
      while (box && box !== document.body && !["auto", "scroll"].includes(getComputedStyle(box).overflowX))
        box = box.parentElement;
      const article = document.querySelector("article") || document.body;
      return (!box || box === document.body) && t.getBoundingClientRect().right > article.getBoundingClientRect().right + 1;
    }).map(t => (t.rows[0] ? t.rows[0].innerText : "").replace(/\s+/g, " ").slice(0, 80)),
    pageScrollsSideways: document.documentElement.scrollWidth > document.documentElement.clientWidth + 1,
    stderrBlocks: document.querySelectorAll(".output.stderr, .stderr").length,
    outputText: Array.from(document.querySelectorAll(".cell_output")).map(o => o.innerText).join("\n"),
    sidebar: sidebar,
    params: params,
    resources: performance.getEntriesByType("resource").map(e => e.name),
    height: Math.ceil(Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)),
  });
});
"""

RAW_TEX = ("\\[", "\\]", "\\(", "\\)", "$$", "\\begin{", "\\frac", "\\mathrm", "\\mathcal")
WARNING_WORDS = ("Warning:", "Traceback", "[IPKernelApp]", "it/s]")


def _open(driver, server, page):
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(urllib.parse.urljoin(server, f"{page}.html"))
    info = driver.execute_async_script(_INSPECT)
    info["console"] = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    return info


def _screenshot(driver, info, path):
    """Full-page PNG through the DevTools protocol (capture beyond the viewport)."""
    import base64

    width = driver.execute_script("return document.documentElement.clientWidth")
    height = min(info["height"], 16000)
    # a viewport as tall as the page, so that sticky parts (the sidebar) are drawn whole
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    try:
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        })
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    path.write_bytes(base64.b64decode(shot["data"]))


@pytest.mark.slow
@pytest.mark.parametrize("page", _toc_pages() + EXTRA_PAGES)
def test_page_reads_cleanly_in_chromium(page, book_html, server, driver, screenshots):
    assert (book_html / f"{page}.html").is_file(), f"the build has no {page}.html"
    info = _open(driver, server, page)
    _screenshot(driver, info, screenshots / f"{page}.png")
    problems = []
    if info["brokenImages"]:
        problems.append(f"images that did not decode: {info['brokenImages']}")
    if info["console"]:
        problems.append(f"console errors: {[e['message'][:200] for e in info['console']]}")
    if info["mathElements"]:
        if not str(info["mathjaxVersion"] or "").startswith("3."):
            problems.append(f"{info['mathElements']} formulas but MathJax 3 did not load ({info['mathjaxVersion']})")
        if info["mathjaxError"] or info["mathErrors"]:
            problems.append(f"MathJax errors: {info['mathjaxError']} {info['mathErrors']}")
        if info["mathUnrendered"]:
            problems.append(f"formulas left as TeX: {info['mathUnrendered'][:5]}")
    raw = [t for t in RAW_TEX if t in info["text"]]
    if raw:
        at = info["text"].find(raw[0])
        problems.append(f"raw TeX {raw} in the visible text: ...{info['text'][max(at - 60, 0):at + 60]!r}...")
    if info["tablesOffPage"]:
        problems.append(f"tables wider than the page column, not in a scrolling box: {info['tablesOffPage']}")
    if info["pageScrollsSideways"]:
        problems.append("the page scrolls sideways (something is wider than the window)")
    if info["stderrBlocks"]:
        problems.append(f"{info['stderrBlocks']} stderr blocks on the page")
    noise = [w for w in WARNING_WORDS if w in info["outputText"]]
    if noise:
        problems.append(f"log noise in the cell outputs: {noise}")
    outside = [u for u in info["resources"] if not u.startswith(server) and not u.startswith("data:")]
    if outside:
        problems.append(f"resources loaded from outside the book: {outside[:5]}")
    if page in run_book.available_notebooks():
        if info["nImages"] == 0:
            problems.append("a chapter with no figure")
        problems += _small_text(page, info, book_html, screenshots)
        folded = [p for p in info["params"] if run_book.PARAMETERS_PROMPT in p["text"]]
        if len(folded) != 1 or folded[0]["open"]:
            problems.append(f"parameters should be shown once, folded; found {info['params']}")
    assert not problems, f"{page}.html (screenshot {screenshots / (page + '.png')}):\n  " + "\n  ".join(problems)


def _small_text(page, info, book_html, screenshots) -> list[str]:
    """Each figure's smallest text as the reader sees it, in points: its size in the figure (written into the
    PNG by ``report.show_figure``) times the magnification the browser applied (drawn width over the PNG's
    width at 96 CSS px per inch). Appends the measurements to ``figures.json`` beside the screenshots."""
    import json

    from PIL import Image

    from prh_lib.pages import plots, report

    problems, measured = [], []
    for fig in info["figures"]:
        path = book_html / urllib.parse.unquote(fig["src"])
        meta = Image.open(path).text.get(report.FIGURE_METADATA_KEY)
        if meta is None:
            problems.append(f"figure {fig['src']} was not put on the page by report.show_figure (no text sizes)")
            continue
        meta = json.loads(meta)
        scale = fig["clientWidth"] / (fig["naturalWidth"] / meta["dpi"] * 96)
        rendered = meta["min_pt"] * scale
        measured.append({"page": page, "src": fig["src"], "png_px": fig["naturalWidth"],
                         "drawn_px": round(fig["clientWidth"], 1), "column_px": round(info["column"], 1),
                         "min_pt_in_figure": meta["min_pt"], "min_pt_rendered": round(rendered, 2)})
        if rendered < plots.MIN_RENDERED_PT - 0.1:
            problems.append(f"figure {fig['src']}: smallest text {rendered:.1f} pt as rendered "
                            f"({meta['min_pt']} pt drawn {fig['clientWidth']:.0f} px wide from {fig['naturalWidth']} px)")
    if info["figures"] and info["column"] + 1 < plots.PAGE_WIDTH_PX:
        problems.append(f"the page column is {info['column']:.0f} px, narrower than plots.PAGE_WIDTH_PX = "
                        f"{plots.PAGE_WIDTH_PX} that figures are laid out for")
    log = screenshots / "figures.json"
    old = json.loads(log.read_text()) if log.is_file() else []
    log.write_text(json.dumps([m for m in old if m["page"] != page] + measured, indent=1))
    return problems


@pytest.mark.slow
def test_formulas_are_typeset_by_the_local_mathjax(book_html, server, driver):
    info = _open(driver, server, "methods")
    assert info["mathElements"] > 0, "the methods page should show the mutual k-NN formula"
    assert info["mathContainers"] >= info["mathElements"]
    assert driver.execute_script("return document.querySelectorAll('mjx-container[display=\"true\"]').length") >= 1
    mathjax = [u for u in info["resources"] if "mathjax" in u.lower()]
    assert mathjax and all(u.startswith(server + "_static/mathjax/") for u in mathjax), mathjax


@pytest.mark.slow
def test_every_sidebar_link_resolves(book_html, server, driver):
    links = set()
    for page in _toc_pages():
        links.update(_open(driver, server, page)["sidebar"])
    targets = {urllib.parse.urldefrag(u)[0] for u in links}
    assert targets, "no sidebar links found"
    assert {urllib.parse.urljoin(server, f"{p}.html") for p in _toc_pages()[1:]} <= targets, \
        f"the sidebar misses chapters: {sorted(targets)}"
    for url in sorted(targets):
        assert url.startswith(server), f"sidebar links outside the book: {url}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200, url


def test_every_page_of_the_build_is_checked(book_html):
    _require_browser()
    pages = {p.stem for p in book_html.glob("*.html")} - {"index"}
    assert pages == set(_toc_pages() + EXTRA_PAGES), "a page of the build is not opened by the browser test"


@pytest.mark.slow
def test_front_page_checklist_rows_are_one_screen_line_each(book_html, server, driver):
    """At about 1,300 px, every row of the front page's checklist is at most 150 px tall (one short line per
    claim; the tests and notes live on the chapter pages)."""
    _open(driver, server, "intro")
    heights = driver.execute_script(
        "return Array.from(document.querySelectorAll('article table tbody tr')).map(r => r.getBoundingClientRect().height)")
    assert len(heights) >= 30, heights
    assert max(heights) <= 150, sorted(heights)[-5:]
