"""Open a local HTML file in headless Chromium (Debian's /usr/bin/chromium, driven by playwright) with
every request that is not file: aborted and counted; what the page shows comes back as plain data.

data: URIs (the page's inline images) are no request to any network and are let through; file:
requests (the page itself, a link's target) too; anything else (http, https, ws, a CDN) is aborted
and listed in `blocked`.
"""
from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")

TABLE_JS = """() => { const t = document.querySelector('table.results'); if (!t) return [];
    return Array.from(t.querySelectorAll(':scope > tbody > tr')).map(tr => [
        tr.querySelector(':scope > th').innerText,
        Array.from(tr.querySelectorAll(':scope > td')).map(td => {
            const c = td.querySelector('.cell'); return c ? c.innerText : td.innerText; })]); }"""
HEAD_JS = """() => { const t = document.querySelector('table.results'); if (!t) return [];
    return Array.from(t.querySelectorAll(':scope > thead th')).map(th => th.innerText); }"""


def need_chromium():
    if not CHROMIUM.is_file() or not _has_playwright():
        pytest.skip("needs Debian's chromium (apt-get install -y chromium, as .ci/run does) and playwright")


def _has_playwright() -> bool:
    import importlib.util

    return importlib.util.find_spec("playwright") is not None


def open_page(path: Path, screenshot: Path) -> dict:
    """Load `path`, wait for it, and return blocked requests, console errors, each <img>'s
    (complete, naturalWidth), the first results table (header, [row header, cell texts]), the progress
    line, the links, the page's text; a full-page screenshot is written to `screenshot`."""
    from playwright.sync_api import sync_playwright

    blocked, errors = [], []

    def route(r):
        url = r.request.url
        if url.startswith(("file:", "data:")):
            r.continue_()
        else:
            blocked.append(url)
            r.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1300, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.route("**/*", route)
            page.goto(path.resolve().as_uri(), wait_until="load")
            out = {"blocked": blocked, "errors": errors,
                   "images": page.evaluate("() => Array.from(document.images).map(i => [i.complete, i.naturalWidth])"),
                   "header": page.evaluate(HEAD_JS), "table": page.evaluate(TABLE_JS),
                   "progress": page.inner_text("#progress") if page.query_selector("#progress") else None,
                   "links": page.evaluate("() => Array.from(document.links).map(a => a.href)"),
                   "text": page.inner_text("body")}
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return out
