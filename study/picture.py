"""The README's picture of a report page, rendered from the quick-start run committed under docs/runs/.

    python -m study.docs --picture     # rewrites docs/report.html and docs/report.png, then the README

sweeper.analysis.html.build_page rebuilds the run's report.html from the files `python -m study.docs add`
commits beside it (sweep.json, table.json, table.csv, trials.parquet, the PNGs). It is built from a copy
of the run folder at the relative path docs/runs/<run>, its clock fixed to the run's date
(machine.json) in UTC, so the same committed files give the same page, byte for byte, and no path
of the machine that builds it. docs/report.html is that page; docs/report.png is its first screen in
headless Chromium (Debian's /usr/bin/chromium, driven by playwright, every request that is not file:
or data: aborted), with the page's SHA-256 in a PNG text chunk (`page-sha256`). Pixels depend on the
fonts and the Chromium at hand, so the tests compare the page and that chunk, not pixels.
"""
from __future__ import annotations

import calendar
import contextlib
import hashlib
import os
import shutil
import struct
import tempfile
import time
import zlib
from pathlib import Path

from study.run_prices import ROOT, RUNS

PAGE = Path("docs/report.html")  # the quick start's report page, rebuilt from its committed run
PICTURE = Path("docs/report.png")  # its first screen, with the page's SHA-256 in a tEXt chunk under HASH_KEY
HASH_KEY = b"page-sha256"
QUICKSTART = ("ablation_radius", "quick")  # (sweep, preset) of the README's quick start, whose page is drawn
PAGE_INPUTS = ("table.csv", "table.json", "trials.parquet")  # what the page needs beyond a committed run's summary files
PAGE_FILES = ("sweep.json", *PAGE_INPUTS, "machine.json")  # what build_page reads, and the run's date
CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT = {"width": 1280, "height": 1400}  # the first screen: title, provenance, the table and its plot
MACHINE_PATHS = ("/work/", "/root/", "/home/", "/tmp/", "/Users/", "/private/", "C:\\")


class PictureError(ValueError):
    """A run or a machine the picture cannot be made from; the message names the fix."""


def check_run(run: Path) -> None:
    missing = [n for n in PAGE_FILES if not (run / n).is_file()]
    if missing:
        raise PictureError(f"{run.name}: no {', '.join(missing)} to rebuild its report page from; add the run again "
                        f"from its results folder: `python -m study.docs add results/<sweep>-<stamp>`")


@contextlib.contextmanager
def _utc_in(folder: Path):
    """The block runs in `folder`, with local time UTC (the page prints times in local time)."""
    cwd, tz = Path.cwd(), os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(cwd)
        if tz is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = tz
        time.tzset()


def page_html(run: Path) -> str:
    """The run's report.html as build_page makes it from the committed files, with the run's date as the
    clock (machine.json) and docs/runs/<run> as its folder."""
    import json

    from sweeper.analysis.html import build_page

    check_run(run)
    date = json.loads((run / "machine.json").read_text()).get("date") or "1970-01-01"
    stamp = float(calendar.timegm(time.strptime(date, "%Y-%m-%d")))
    with tempfile.TemporaryDirectory() as tmp:
        rel = RUNS / run.name
        shutil.copytree(run, Path(tmp) / rel)
        os.utime(Path(tmp) / rel / "sweep.json", (stamp, stamp))  # the page's "started"
        with _utc_in(Path(tmp)):
            page = build_page(rel, now=stamp)
    found = [p for p in MACHINE_PATHS if p in page]
    if found:
        raise PictureError(f"{run.name}: its report page would show machine paths ({', '.join(found)}); add the run "
                        f"again with `python -m study.docs add`, which keeps them out")
    return page


def with_text_chunk(png: bytes, key: bytes, value: bytes) -> bytes:
    """`png` with a tEXt chunk key=value before its IEND chunk."""
    data = key + b"\0" + value
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data + struct.pack(">I", zlib.crc32(b"tEXt" + data))
    end = png.rindex(b"IEND") - 4  # the IEND chunk starts with its 4-byte length
    return png[:end] + chunk + png[end:]


def text_chunks(png: bytes) -> dict[bytes, bytes]:
    """Every tEXt chunk of a PNG: {key: value}."""
    out, pos = {}, 8  # after the signature
    while pos + 8 <= len(png):
        (length,), kind = struct.unpack(">I", png[pos:pos + 4]), png[pos + 4:pos + 8]
        if kind == b"tEXt":
            key, _, value = png[pos + 8:pos + 8 + length].partition(b"\0")
            out[key] = value
        pos += 12 + length
    return out


def page_hash(page: str) -> bytes:
    return hashlib.sha256(page.encode()).hexdigest().encode()


def picture_is_current(root: Path = ROOT) -> bool:
    """docs/report.png was made from the committed docs/report.html (its page-sha256 chunk)."""
    if not (root / PICTURE).is_file() or not (root / PAGE).is_file():
        return False
    return text_chunks((root / PICTURE).read_bytes()).get(HASH_KEY) == page_hash((root / PAGE).read_text())


def screenshot(page: Path) -> bytes:
    """The first screen of `page` in headless Chromium, no request outside file: and data:."""
    if not CHROMIUM.is_file():
        raise PictureError(f"no {CHROMIUM}: install Debian's chromium (apt-get install -y chromium), as .ci/run does")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise PictureError("playwright is not installed: pip install -e '.[test]'") from None

    def route(r):
        (r.continue_ if r.request.url.startswith(("file:", "data:")) else r.abort)()

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            tab = browser.new_page(viewport=VIEWPORT)
            tab.route("**/*", route)
            tab.goto(page.resolve().as_uri(), wait_until="load")
            return tab.screenshot(full_page=False)
        finally:
            browser.close()


def public_trials(src: Path, dest: Path) -> None:
    """A results folder's trials.parquet for docs/runs/: string cells that are absolute paths of the machine
    that ran it (data_dir, resolved by sweeper.run) keep only their last component."""
    import pandas as pd

    df = pd.read_parquet(src)
    for col in df.columns:
        if pd.api.types.is_string_dtype(df[col]):
            df[col] = df[col].map(lambda v: Path(v).name if isinstance(v, str) and v.startswith(("/", "~")) else v)
    df.to_parquet(dest, index=False)


def write_picture(run: Path, root: Path = ROOT) -> list[Path]:
    """docs/report.html from `run`, and docs/report.png from it; the paths written."""
    page = page_html(run)
    (root / PAGE).write_text(page)
    png = with_text_chunk(screenshot(root / PAGE), HASH_KEY, page_hash(page))
    (root / PICTURE).write_bytes(png)
    return [PAGE, PICTURE]
