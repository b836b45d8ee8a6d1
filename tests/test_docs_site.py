"""The documentation site builds strictly, has no broken links, and renders in a real browser.

The browser checks use Debian's chromium in headless mode (`--dump-dom`, `--screenshot`) against
the built site served on a loopback port: no DevTools protocol, no extra Python package.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import html
import html.parser
import http.server
import importlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import types
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.quiet import run_wide

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CONTENT = DOCS / "content"

# Where Debian puts chromium; `.ci/run` installs it (apt-get install chromium) when absent.
CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser")
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars",
)


def _public_modules() -> list[str]:
    """The modules with an API reference page: docs/hooks.py's rule (the site follows it)."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install '.[docs]')")
    names: list[str] = _docs_module("hooks").public_modules()
    return names


# -- building ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built with `mkdocs build --strict` into a temporary directory once a run: in
    a parallel one, by the first worker to need it, while the others wait and then read it."""
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install '.[docs]')")
    with run_wide(tmp_path_factory.getbasetemp(), "site") as out:
        if not (out / "index.html").exists():
            env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
            proc = subprocess.run(
                [sys.executable, "-m", "mkdocs", "build", "--strict", "-f",
                 str(DOCS / "mkdocs.yml"), "-d", str(out)],
                cwd=ROOT, capture_output=True, text=True, timeout=300, check=False, env=env,
            )
            assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-5000:]}"
    return out


@pytest.mark.timeout(360)
def test_every_page_is_built(site: Path) -> None:
    """Every Markdown page and one API reference page per public module end up in the site."""
    for page in CONTENT.rglob("*.md"):
        rel = page.relative_to(CONTENT).with_suffix("")
        built = site / ("index.html" if rel.name == "index" and rel.parent == Path()
                        else rel.parent / "index.html" if rel.name == "index"
                        else rel / "index.html")
        assert built.is_file(), f"{page.relative_to(ROOT)} was not built"
    for module in _public_modules():
        page = site / "reference" / module / "index.html"
        assert page.is_file(), f"no API reference page for {module}"
        assert f'id="{module}"' in page.read_text(), f"{module}'s reference page is empty"


class _Page(html.parser.HTMLParser):
    """The links and anchors of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if values.get(key):
                self.ids.add(str(values[key]))
        attr = {"a": "href", "link": "href", "img": "src", "script": "src",
                "iframe": "src", "source": "src"}.get(tag)
        if attr and values.get(attr):
            self.links.append(str(values[attr]))


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(errors="replace"))
    return page


def _target(site: Path, url_path: str) -> Path:
    path = site / urllib.parse.unquote(url_path).lstrip("/")
    if url_path.endswith("/") or path.is_dir():
        path = path / "index.html"
    return path


@pytest.mark.timeout(360)
def test_no_broken_internal_links(site: Path) -> None:
    """Every internal href/src of every page resolves to a file, and every #fragment to an id."""
    pages = {p: _parse(p) for p in site.rglob("*.html")}
    broken = []
    checked = 0
    for path, page in pages.items():
        base = "http://site/" + path.relative_to(site).as_posix()
        for link in page.links:
            url = urllib.parse.urlsplit(urllib.parse.urljoin(base, link))
            if url.scheme not in ("http", "https") or url.netloc != "site":
                continue  # external: not fetched (the tests run offline)
            target = _target(site, url.path)
            checked += 1
            if not target.is_file():
                broken.append(f"{path.relative_to(site)}: {link} -> missing {url.path}")
                continue
            if url.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if urllib.parse.unquote(url.fragment) not in ids:
                    broken.append(f"{path.relative_to(site)}: {link} -> no #{url.fragment}")
    assert checked > 100, f"only {checked} internal links found: is the site empty?"
    assert not broken, "broken links:\n" + "\n".join(sorted(set(broken))[:50])


# -- the browser ------------------------------------------------------------------------------


def _chromium() -> str:
    for candidate in CHROMIUM_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    message = ("chromium is not installed (Debian: apt-get install chromium; .ci/run installs "
               "it before the tests)")
    if os.environ.get("EXECUTORS_REQUIRE_BROWSER"):
        pytest.fail(message + ", and EXECUTORS_REQUIRE_BROWSER is set")
    pytest.skip(message)


class _Server:
    """The built site on a loopback port; remembers every request and its status."""

    def __init__(self, root: Path) -> None:
        self.requests: list[tuple[str, int]] = []
        served = self.requests

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                served.append((urllib.parse.urlsplit(self.path).path, int(code)))

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the test reports what matters

        handler = functools.partial(Handler, directory=str(root))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="docs-server",
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(10)


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[_Server]:
    server = _Server(site)
    try:
        yield server
    finally:
        server.close()


def _browse(chromium: str, tmp_path: Path, url: str, *extra: str) -> str:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    proc = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000",
         *extra, url],
        capture_output=True, text=True, timeout=90, check=False,
    )
    assert proc.returncode == 0, f"chromium failed on {url}:\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.timeout(360)
def test_index_renders_in_browser(served: _Server, tmp_path: Path) -> None:
    """The home page renders with the theme, its navigation and its content."""
    dom = _browse(_chromium(), tmp_path, served.url + "/", "--dump-dom")
    assert "md-header" in dom and "md-nav" in dom, "the Material theme did not render"
    assert "Background machinery for threaded Python programs" in dom
    for section in ("Tutorial", "Design", "Comparison", "Benchmarks", "API reference"):
        assert section in dom, f"the nav has no {section!r}"
    failed = [(path, code) for path, code in served.requests if code >= 400]
    assert not failed, f"the browser got errors: {failed}"


@pytest.mark.timeout(360)
def test_topic_page_renders_in_browser(served: _Server, tmp_path: Path) -> None:
    """A topic page renders its headings and highlighted code, with every asset served."""
    served.requests.clear()
    dom = _browse(_chromium(), tmp_path, served.url + "/periodic/", "--dump-dom")
    assert "The monitor pattern" in dom
    assert 'class="highlight' in dom, "code blocks were not highlighted"
    assert any(path.endswith(".js") for path, _ in served.requests), "no script was loaded"
    failed = [(path, code) for path, code in served.requests if code >= 400]
    assert not failed, f"the browser got errors: {failed}"


def test_home_page_rows_link_to_their_pages() -> None:
    """Each row of the home page's "What is in it" table links to a page that exists, and the
    background service row to its topic page, not the API reference (issue 24)."""
    text = _text("index.md")
    rows = {cells[0]: cells[-1] for line in text.splitlines() if line.startswith("| ")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    links = {area: re.search(r"\]\(([^)#]+)", cell) for area, cell in rows.items()}
    assert links.get("background service") and links["background service"].group(1) == (
        "service.md"), rows.get("background service")
    generated = {f"reference/{module}.md" for module in _public_modules()}
    missing = [target.group(1) for target in links.values() if target
               and not (CONTENT / target.group(1)).is_file() and target.group(1) not in generated]
    assert not missing, f"the home page links to pages that do not exist: {missing}"


# Every code block and every table of a page, in a 1280-pixel window: a code block whose text
# is wider than its box is clipped (Material scrolls it sideways); a table must lie, with the
# box it scrolls in, inside the content column.
CHECK_WIDTHS = """<!doctype html><meta charset="utf-8"><title>widths</title>
<body><script>
const pages = %s;
const faults = [];
let pending = pages.length;
function scrollBox(table, column) {
  for (let el = table.parentElement; el && el !== column; el = el.parentElement) {
    const overflow = el.ownerDocument.defaultView.getComputedStyle(el).overflowX;
    if (overflow === "auto" || overflow === "scroll") return el;
  }
  return table;
}
function check(page, doc) {
  const column = doc.querySelector(".md-content");
  const right = column.getBoundingClientRect().right;
  for (const code of doc.querySelectorAll(".md-content pre > code")) {
    if (code.scrollWidth > code.clientWidth + 1) {
      const widest = code.textContent.split("\\n").sort((a, b) => b.length - a.length)[0];
      faults.push(`${page}: code clipped by ${code.scrollWidth - code.clientWidth}px: ${widest}`);
    }
  }
  for (const table of doc.querySelectorAll(".md-content table")) {
    const edge = scrollBox(table, column).getBoundingClientRect().right;
    if (edge > right + 1) {
      const head = table.rows[0].textContent.trim().split(/\\s+/).slice(0, 4).join(" ");
      faults.push(`${page}: table runs ${Math.round(edge - right)}px past the column: ${head}`);
    }
  }
}
for (const page of pages) {
  const frame = document.createElement("iframe");
  frame.width = 1280; frame.height = 900;
  frame.onload = () => setTimeout(() => {
    check(page, frame.contentDocument);
    if (--pending === 0) {
      const out = document.createElement("pre");
      out.id = "result";
      out.textContent = JSON.stringify(faults);
      document.body.append(out);
    }
  }, 300);
  frame.src = page;
  document.body.append(frame);
}
</script></body>
"""


# The second tier: a browser run per 8 pages over the whole site (the longest docs check; the
# home and a topic page render in the first tier).
@pytest.mark.slow
@pytest.mark.timeout(360)
def test_no_code_block_or_table_overflows_at_1280_pixels(site: Path, served: _Server,
                                                         tmp_path: Path) -> None:
    """At a 1280-pixel window, on every page of the site, no code block is clipped and every
    table, with the box it scrolls in, stays inside the content column (issue 24: the home and
    bridge pages clipped their comments, the bridge benchmark table ran off the page)."""
    pages = sorted("/" + str(p.parent.relative_to(site)).removeprefix(".").strip("/") + "/"
                   for p in site.rglob("index.html"))
    pages = [page.replace("//", "/") for page in pages]
    chromium, faults = _chromium(), []
    for first in range(0, len(pages), 8):  # a few pages a browser run: a busy machine copes
        check = f"_check_widths_{first}.html"
        (site / check).write_text(CHECK_WIDTHS % json.dumps(pages[first:first + 8]))
        dom = _browse(chromium, tmp_path, f"{served.url}/{check}", "--dump-dom",
                      "--window-size=1400,1000")
        start, end = dom.find('<pre id="result">'), dom.find("</pre>")
        assert start >= 0, f"the check page produced no result:\n{dom[-2000:]}"
        faults += json.loads(html.unescape(dom[start + len('<pre id="result">'):end]))
    assert not faults, "\n".join(faults)


CHECK_IMAGES = """<!doctype html><meta charset="utf-8"><title>charts</title>
<body><script>
const pages = %s;
const results = [];
let pending = pages.length;
for (const page of pages) {
  const frame = document.createElement("iframe");
  frame.width = 1200; frame.height = 800;
  frame.onload = () => {
    for (const img of frame.contentDocument.images) {
      results.push({page, src: img.getAttribute("src"), complete: img.complete,
                    width: img.naturalWidth, height: img.naturalHeight});
    }
    if (--pending === 0) {
      const out = document.createElement("pre");
      out.id = "result";
      out.textContent = JSON.stringify(results);
      document.body.append(out);
    }
  };
  frame.src = page;
  document.body.append(frame);
}
</script></body>
"""


@pytest.mark.timeout(360)
def test_benchmark_charts_load_in_browser(site: Path, served: _Server, tmp_path: Path) -> None:
    """Every benchmark page's charts are fetched and decoded by the browser (non-zero size)."""
    charts = sorted((CONTENT / "benchmarks").glob("*.png"))
    if not charts:
        pytest.skip("no benchmark charts rendered yet (executors bench --render)")
    pages = [f"/benchmarks/{png.stem}/" for png in charts]
    (site / "_check_images.html").write_text(CHECK_IMAGES % json.dumps(pages))
    served.requests.clear()
    dom = _browse(_chromium(), tmp_path, served.url + "/_check_images.html", "--dump-dom")
    start, end = dom.find('<pre id="result">'), dom.find("</pre>")
    assert start >= 0, f"the check page produced no result:\n{dom[-2000:]}"
    images = json.loads(html.unescape(dom[start + len('<pre id="result">'):end]))
    loaded = {(i["page"], i["src"]) for i in images if i["complete"] and i["width"] > 100}
    for png in charts:
        page = f"/benchmarks/{png.stem}/"
        assert (page, f"../{png.name}") in loaded or any(
            p == page and s.endswith(png.name) for p, s in loaded), f"{png.name} did not load"
    fetched = {path for path, code in served.requests if code == 200}
    assert {f"/benchmarks/{png.name}" for png in charts} <= fetched


@pytest.mark.timeout(360)
def test_benchmark_page_screenshot(served: _Server, tmp_path: Path) -> None:
    """A screenshot of a benchmark page shows a rendered page, not a blank one."""
    charts = sorted((CONTENT / "benchmarks").glob("*.png"))
    if not charts:
        pytest.skip("no benchmark charts rendered yet (executors bench --render)")
    shot = tmp_path / "benchmark.png"
    _browse(_chromium(), tmp_path, served.url + f"/benchmarks/{charts[0].stem}/",
            f"--screenshot={shot}", "--window-size=1280,1600")
    assert shot.is_file() and shot.stat().st_size > 20_000, "the screenshot is missing or blank"
    image = pytest.importorskip("matplotlib.image")
    pixels = image.imread(str(shot))
    assert pixels.std() > 0.05, "the screenshot is a flat colour"


# -- what the pages say -------------------------------------------------------------------------


def _text(name: str) -> str:
    return (CONTENT / name).read_text()


def test_tutorial_goes_from_install_to_a_monitor_a_reaper_and_a_bridged_semaphore() -> None:
    """The tutorial's steps, in order: install, a monitor, a reaper, a bridged semaphore."""
    text = _text("tutorial.md")
    steps = ["## 1. Install", "pip install", "## 4. A monitor that stops with its owner",
             "Reaper(", "## 7. One fair semaphore for threads and tasks", "portal.semaphore("]
    positions = [text.find(step) for step in steps]
    assert -1 not in positions, [s for s, p in zip(steps, positions, strict=True) if p < 0]
    assert positions == sorted(positions), "the tutorial's steps are out of order"


@pytest.mark.parametrize(("page", "must_say"), [
    ("semaphore.md", ["## The restaurant", "tables"]),
    ("periodic.md", ["## The monitor pattern", "strong references", "weak references"]),
    ("channels.md", ["## Why the select completes exactly one case"]),
    ("structured-concurrency.md", ["## The three properties", "Tree-Structured Concurrency"]),
    ("supervise.md", ["Stop order", "SIGKILL"]),
    ("design.md", ["## Layers", "## The threaded core", "## The asyncio primitives"]),
])
def test_topic_pages_carry_their_arguments(page: str, must_say: list[str]) -> None:
    """Each topic page has the model, diagram or argument the issue names for it."""
    text = _text(page)
    missing = [phrase for phrase in must_say if phrase not in text]
    assert not missing, f"{page} does not say {missing}"


def test_comparison_page_names_every_peer() -> None:
    """The comparison covers PyMongo's executor, asyncio, anyio, trio, aiotools, aiologic,
    janus and the process supervisors, each under its own heading or table row."""
    text = _text("comparison.md")
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    for peer in ("PyMongo's `PeriodicExecutor`", "asyncio", "anyio", "trio", "aiotools",
                 "aiologic", "janus", "Process supervisors"):
        assert any(peer in h for h in headings), f"no section for {peer}"
    for supervisor in ("tini", "dumb-init", "supervisord", "honcho", "circus"):
        assert f"| {supervisor}" in text, f"no row for {supervisor}"


def _table_after(text: str, heading: str) -> list[list[str]]:
    """The cells of the first Markdown table after `heading`."""
    section = text[text.index(heading):]
    rows = []
    for line in section.splitlines()[1:]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            break
    return rows


def test_traversal_page_has_the_guarantees_per_mode_and_the_foundationdb_mapping() -> None:
    """The traversal page tabulates the guarantees per mode, the consequences of concurrent
    changes, and how a FoundationDB adapter maps onto every operation of the protocol."""
    text = _text("traversal.md")
    guarantees = _table_after(text, "## Guarantees per mode")
    assert guarantees[0] == ["guarantee", "`strict`", "`relaxed`", "`any`"]
    assert any("path consistency" in row[0] for row in guarantees)
    assert any(row[0].startswith("order") for row in guarantees)
    changes = _table_after(text, "## Under concurrent changes")
    assert any("moves later in traversal order" in row[0] and "at least once" in row[1]
               for row in changes)
    fdb = _table_after(text, "**FoundationDB**")
    operations = {row[0] for row in fdb}
    for op in ("`begin(budget=...)`", "`lookup(parent, name)`",
               "`list(parent, kind, after, limit)`", "`commit()`"):
        assert op in operations, f"the FoundationDB mapping has no row for {op}"


def test_readme_has_the_quick_start_and_working_links() -> None:
    """The README's quick start has the two commands (demo, tests); every relative link in it
    names a file of the checkout."""
    text = (ROOT / "README.md").read_text()
    start = text.index("## Quick start")
    block = text[start:text.index("```\n", text.index("```sh", start) + 5)]
    commands = [line for line in block.splitlines() if line.startswith("python3 -m venv")]
    assert len(commands) == 2
    assert commands[0].endswith("executors demo") and commands[1].endswith("-m pytest")
    links = [m for m in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
             if "://" not in m]
    assert links, "the README links to no docs page"
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README links to missing files: {missing}"


@pytest.mark.timeout(360)
def test_changelog_page_shows_the_changelog(site: Path) -> None:
    """The built changelog page includes CHANGELOG.md (the snippet was resolved, not shown)."""
    page = (site / "changelog" / "index.html").read_text()
    assert "--8&lt;--" not in page and "--8<--" not in page
    first_entry = next(line for line in (ROOT / "CHANGELOG.md").read_text().splitlines()
                       if line.startswith("## "))
    assert first_entry[3:] in page


# -- the API reference shows every field with its meaning ----------------------------------------


def _docs_module(name: str) -> types.ModuleType:
    """A module of docs/ (hooks.py, griffe_fields.py), imported from its file."""
    spec = importlib.util.spec_from_file_location(f"_docs_{name}", DOCS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _field_meanings(cls: type) -> dict[str, str | None]:
    """Each dataclass field of `cls` and the meaning its source gives it: the ``#:`` comment
    above it, else its entry in the class docstring's ``Attributes:`` section (or None)."""
    griffe = pytest.importorskip("griffe")
    comment_above = _docs_module("griffe_fields").comment_above
    source_file = inspect.getsourcefile(cls)
    assert source_file is not None
    lines = Path(source_file).read_text().splitlines()
    tree = ast.parse("\n".join(lines))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    comments = {st.target.id: comment_above(lines, st.lineno) for st in node.body
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)}
    table: dict[str, str] = {}
    for section in griffe.parse_google(griffe.Docstring(inspect.getdoc(cls) or ""), warnings=False):
        if isinstance(section, griffe.DocstringSectionAttributes):
            table.update({entry.name: entry.description for entry in section.value})
    return {f.name: comments.get(f.name) or table.get(f.name)
            for f in dataclasses.fields(cls) if not f.name.startswith("_")}


def _public_dataclasses() -> list[type]:
    """Every dataclass exported by a public module, once."""
    found: dict[str, type] = {}
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if isinstance(obj, type) and dataclasses.is_dataclass(obj):
                found.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
    return [found[key] for key in sorted(found)]


def _plain(text: str) -> str:
    """`text` with no Markdown code marks and no whitespace (rendering moves spaces around)."""
    return "".join(text.replace("`", "").split())


def _reference_entries(site: Path, cls: type) -> dict[str, str]:
    """The built reference's entry of each member of `cls`: its id's suffix -> its plain text
    up to the next member's heading."""
    for page in sorted((site / "reference").glob("*/index.html")):
        text = page.read_text()
        match = re.search(rf'id="([\w.]+\.{cls.__name__})"', text)
        if match is None:
            continue
        prefix = match.group(1) + "."
        heads = [(m.start(), m.group(1)) for m in re.finditer(r'id="([\w.]+)"', text)]
        entries = {}
        for (start, ident), (end, _) in zip(heads, [*heads[1:], (len(text), "")], strict=True):
            if ident.startswith(prefix) and "." not in ident[len(prefix):]:
                chunk = html.unescape(re.sub(r"<[^>]+>", " ", text[start:end]))
                entries[ident[len(prefix):]] = _plain(chunk)
        return entries
    raise AssertionError(f"no reference page documents {cls.__qualname__}")


REFERENCE_CLASSES = ("executors.ServiceStatus", "executors.aio.SemaphoreStatistics",
                     "executors.ShutdownReport", "executors.JobStatistics",
                     "executors.ServiceStatistics", "executors.aio.ChannelStatistics",
                     "executors.PeriodicExecutorStatistics", "integrations.bridge.PortalStatistics")


@pytest.mark.timeout(360)
@pytest.mark.parametrize("dotted", REFERENCE_CLASSES)
def test_reference_shows_every_field_with_its_meaning(site: Path, dotted: str) -> None:
    """The API reference lists each public field of a statistics or status dataclass under its
    own anchor, with the meaning its source gives it (a ``#:`` comment above the field, read by
    docs/griffe_fields.py, or the class docstring's ``Attributes:`` entry)."""
    module_name, _, name = dotted.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    entries = _reference_entries(site, cls)
    meanings = _field_meanings(cls)
    assert meanings, f"{dotted} has no public field"
    missing = [field for field in meanings if field not in entries]
    assert not missing, f"the reference shows no entry for {dotted} fields {missing}"
    unexplained = [field for field, meaning in meanings.items()
                   if meaning and _plain(meaning)[:50] not in entries[field]]
    assert not unexplained, (f"the reference shows {dotted} fields {unexplained} without "
                             "the meaning their source gives them")


def test_every_public_dataclass_field_has_a_meaning() -> None:
    """Every field of every public dataclass says what it means in the source (a ``#:`` comment
    above it or an ``Attributes:`` entry), so the reference can show it."""
    undocumented = [f"{cls.__module__}.{cls.__qualname__}.{field}"
                    for cls in _public_dataclasses()
                    for field, meaning in _field_meanings(cls).items() if not meaning]
    assert not undocumented, "fields without a meaning:\n" + "\n".join(undocumented)


# -- the API reference shows the public API, current names first ------------------------------

OURS = ("executors.", "integrations.")


def _reference_page(site: Path, module: str) -> str:
    return (site / "reference" / module / "index.html").read_text()


def _documented_classes() -> set[type]:
    """Every class a reference page documents (exported by a public module)."""
    return {obj for module in _public_modules()
            for obj in vars(importlib.import_module(module)).values() if isinstance(obj, type)
            and obj.__name__ in getattr(importlib.import_module(module), "__all__", ())}


def _top_level(code: str) -> list[str]:
    """The comma-separated parts of `code` outside brackets (``A[T, U], B`` -> A[T, U] and B)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(code):
        depth += (char in "[(") - (char in "])")
        if char == "," and depth == 0:
            parts.append(code[start:i])
            start = i + 1
    return [*parts, code[start:]]


@pytest.mark.timeout(360)
def test_reference_shows_no_private_base(site: Path) -> None:
    """No class on a reference page lists a base of ours that has no page ("Bases:
    PortalCore", issue 24): each base of ours it names is a link to the base's entry."""
    shown_private = []
    for module in _public_modules():
        text = _reference_page(site, module)
        for bases in re.findall(r"Bases: <code>(.*?)</code></p>", text, re.DOTALL):
            for base in _top_level(bases):
                head = base.partition("[")[0]
                title = re.search(r'title="([^"]+)"', head)
                name = html.unescape(re.sub(r"<[^>]+>", "", head)).strip()
                ours = title is not None and title.group(1).split(" ")[-1].strip("()").startswith(
                    OURS)
                linked = "autorefs-internal" in head
                if name.startswith("_") or (ours and not linked):
                    shown_private.append(f"{module}: Bases: {name}")
    assert not shown_private, "private bases shown:\n" + "\n".join(shown_private)


@pytest.mark.timeout(360)
def test_reference_documents_what_classes_inherit_from_private_bases(site: Path) -> None:
    """A public method or property a class gets from a private base of ours (its methods
    would have no page) is documented on the class itself: ``SharedSemaphore.acquire``,
    ``BlockingSemaphore.release`` and the queue proxies' ``qsize`` were missing."""
    documented = _documented_classes()
    missing = []
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        text = _reference_page(site, module_name)
        for name in getattr(module, "__all__", ()):
            cls = getattr(module, name)
            if not isinstance(cls, type) or cls.__module__.partition(".")[0] + "." not in OURS:
                continue
            # What a documented base provides is on that base's page (the class links to it).
            covered = {c for base in cls.__mro__[1:] if base in documented for c in base.__mro__}
            for member in {m for c in cls.__mro__ for m in vars(c) if not m.startswith("_")}:
                owner = next(c for c in cls.__mro__ if member in vars(c))
                if (owner is not cls and owner not in covered and owner.__module__.startswith(OURS)
                        and f'id="{module_name}.{name}.{member}"' not in text):
                    missing.append(f"{module_name}.{name}.{member} (from {owner.__name__})")
    assert not missing, "members the reference does not show:\n" + "\n".join(sorted(missing))


@pytest.mark.timeout(360)
def test_reference_lists_former_names_last(site: Path) -> None:
    """Where a module exports one object under two names (an old name kept working), its page
    lists the current names as usual and the old one last, under a "Former names" heading
    (issue 24: the bridge's ``default_limiter`` came second, above ``Portal``)."""
    pairs_seen = 0
    for module_name in _public_modules():
        module = importlib.import_module(module_name)
        names = list(getattr(module, "__all__", ()))
        pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]
                 if getattr(module, a) is getattr(module, b)]
        text = _reference_page(site, module_name)
        heading = text.find('id="former-names"')
        if not pairs:
            assert heading < 0, f"{module_name}'s page has former names but no old name"
            continue
        assert heading >= 0, f"{module_name}'s page has no 'Former names' heading"
        assert ">Former names" in text[heading:heading + 200]
        positions = {name: text.find(f'id="{module_name}.{name}"') for name in names}
        assert all(at >= 0 for at in positions.values()), positions
        former = {name for name, at in positions.items() if at > heading}
        for a, b in pairs:
            pairs_seen += 1
            assert len({a, b} & former) == 1, f"{module_name}: one of {a}, {b} is the former name"
        assert len(former) == len(pairs), f"{module_name}: only old names go last: {former}"
    assert pairs_seen, "no module keeps a former name: the test checks nothing"


# -- measured figures come from benchmarks/results/*.json -----------------------------------------

# A figure in README.md followed by the call that renders it (docs/hooks.py explains the syntax):
# `305 ms<!-- bench("periodic", "wake() -> target", "pymongo 4.20.0") -->`.
UNITS = r"(?:ms|µs|us|s|%|x|\u00d7)"  # times, a percentage, a ratio ("2.5x" or "2.5\u00d7")
README_FIGURE = re.compile(rf"(\d[\d,.]*)(\s?{UNITS})?<!--\s*(bench\w*\(.*?\))\s*-->", re.DOTALL)
# A number with a unit in prose.
UNIT_FIGURE = re.compile(rf"(?<![\w.])\d[\d,.]*\s?{UNITS}(?!\w)")
FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _prose(text: str) -> str:
    """`text` without fenced code blocks and inline code spans (their figures are inputs)."""
    return re.sub(r"`[^`\n]*`", "", FENCED.sub("", text))


def test_readme_figures_match_the_results_files() -> None:
    """Each measured figure in README.md equals what the call beside it renders from
    benchmarks/results/*.json (an unknown area, metric or contender fails), so the README
    cannot drift from the measurements."""
    render_figures = _docs_module("hooks").render_figures
    text = (ROOT / "README.md").read_text()
    found = README_FIGURE.findall(text)
    assert len(found) >= 5, "the README's measured figures carry no bench(...) marker"
    wrong = []
    for figure, _unit, call in found:
        expected = render_figures("{{ " + call + " }}", "README.md")
        if figure != expected:
            wrong.append(f"{figure} where {call} gives {expected}")
    assert not wrong, "README figures disagree with benchmarks/results:\n" + "\n".join(wrong)


def test_readme_has_no_figure_typed_by_hand() -> None:
    """Every number with a unit (ms, s, %, x) in README.md's prose carries its bench(...)
    marker: a figure typed by hand would drift from the measurements."""
    prose = _prose(README_FIGURE.sub("", (ROOT / "README.md").read_text()))
    loose = UNIT_FIGURE.findall(prose)
    assert not loose, f"README figures without a bench(...) marker: {loose}"


@pytest.mark.timeout(360)
def test_docs_figures_are_rendered_from_the_results_files(site: Path) -> None:
    """The built pages show the values of benchmarks/results/*.json where their sources hold
    bench(...) markers, and no marker is left unrendered."""
    render_figures = _docs_module("hooks").render_figures
    leftover = [str(p.relative_to(site)) for p in site.rglob("*.html")
                if "{{ bench" in p.read_text()]
    assert not leftover, f"unrendered bench markers in {leftover}"
    comparison = (CONTENT / "comparison.md").read_text()
    call = 'bench("periodic", "wake() -> target", "pymongo 4.20.0")'
    assert "{{ " + call + " }}" in comparison, "the comparison page types PyMongo's wake by hand"
    built = _plain(html.unescape(re.sub(r"<[^>]+>", " ",
                                        (site / "comparison" / "index.html").read_text())))
    assert _plain(render_figures("{{ " + call + " }} ms")) in built


def test_an_unknown_benchmark_key_is_an_error() -> None:
    """A marker naming an area, metric or contender the results files do not have is an error
    naming what they offer, so a renamed metric fails the docs build instead of vanishing."""
    render_figures = _docs_module("hooks").render_figures
    for call, says in [('bench("nope", "x", "y")', "no results file"),
                       ('bench("periodic", "no such metric", "executors")', "wake() -> target"),
                       ('bench("periodic", "wake() -> target", "nobody")', "pymongo")]:
        with pytest.raises(ValueError, match=re.escape(says)):
            render_figures("{{ " + call + " }}", "page.md")


def test_an_unknown_benchmark_key_fails_the_build() -> None:
    """The docs hook turns a bad marker into mkdocs' PluginError, which aborts the build
    (strict or not) naming the page."""
    exceptions = pytest.importorskip("mkdocs.exceptions")
    hooks = _docs_module("hooks")
    page = types.SimpleNamespace(file=types.SimpleNamespace(src_uri="topic.md"))
    with pytest.raises(exceptions.PluginError, match=r"topic\.md.*no metric 'nope'"):
        hooks.on_page_markdown('{{ bench("periodic", "nope", "executors") }}', page)
    assert hooks.on_page_markdown("no markers here", page) == "no markers here"


# -- the API reference as a reader meets it (issue 34) ------------------------------------------


def _reference_text(site: Path, module: str) -> str:
    page = (site / "reference" / module / "index.html").read_text()
    return page[page.find("<article"):page.find("</article>")]


def test_reference_pages_follow_the_modules_all(site: Path) -> None:
    """Each reference page lists its module's ``__all__`` in that order, and nothing else at
    the top level: the main class first (issue 34: the service's page opened with `logger`,
    `T`, `Ts` and the event dataclasses, `BackgroundService` heading 155 of 170)."""
    hooks = _docs_module("hooks")
    wrong = []
    for module in _public_modules():
        ids = re.findall(r'<h2 id="([^"]+)"', _reference_text(site, module))
        top = [i[len(module) + 1:] for i in ids
               if i.startswith(module + ".") and "." not in i[len(module) + 1:]]
        former = hooks.former_names(module)
        wanted = [name for name in hooks.all_in_order(module) if name not in former]
        if top[:len(wanted)] != wanted or set(top) - set(wanted) - set(former):
            wrong.append(f"{module}: {top[:6]}... instead of {wanted[:6]}...")
    assert not wrong, "\n".join(wrong)
    service = re.findall(r'<h2 id="([^"]+)"', _reference_text(site, "executors.service"))
    assert service[0] == "executors.service.BackgroundService"


PRIVATE = re.compile(r"\b(?:executors|integrations)(?:\.\w+)*\._\w+|(?<![\w.])_[a-z]\w*\.py\b")


def test_reference_pages_name_no_private_module(site: Path) -> None:
    """No reference page shows or names a private module (``executors._service``,
    ``_engine.py``): a reader cannot import it, and it moves without notice (issue 34: the
    service's intro and the `store` parameter named ``executors._service``)."""
    found = []
    for module in _public_modules():
        text = html.unescape(re.sub(r"<[^>]+>", " ", _reference_text(site, module)))
        found += [f"{module}: {m.group(0)}" for m in PRIVATE.finditer(" ".join(text.split()))]
    assert not found, "\n".join(sorted(set(found)))


def test_long_signatures_are_formatted_over_several_lines(site: Path) -> None:
    """`schedule` and `cron` show one signature each (the implementation's, not every
    overload's), one parameter a line: a signature on one line runs off behind a scroll bar
    (issue 34)."""
    text = _reference_text(site, "executors.service")
    for method in ("schedule", "cron"):
        start = text.index(f'id="executors.service.BackgroundService.{method}"')
        block = text[start:text.index("doc-contents", start)]
        signature = html.unescape(re.sub(r"<[^>]+>", "", block))
        assert signature.count(f"{method}(") == 1, f"{method}: {signature[:400]}"
        lines = [line for line in signature.splitlines() if line.strip()]
        assert max(map(len, lines)) <= 88, f"{method}: {max(lines, key=len)}"


# A page opened at an anchor, in a 1280 x 900 frame: the anchor's heading is in the viewport,
# below the sticky header, and the content is there (not a blank page).
CHECK_ANCHORS = """<!doctype html><meta charset="utf-8"><title>anchors</title>
<body><script>
const targets = %s;
const results = [];
let pending = targets.length;
for (const target of targets) {
  const frame = document.createElement("iframe");
  frame.width = 1280; frame.height = 900;
  frame.onload = () => setTimeout(() => {
    const doc = frame.contentDocument;
    const id = decodeURIComponent(target.split("#")[1]);
    const el = doc.getElementById(id);
    const header = doc.querySelector(".md-header");
    const result = {target, found: !!el, scrolled: frame.contentWindow.scrollY};
    if (el) {
      const top = el.getBoundingClientRect().top;
      result.top = top;
      result.below_header = header ? top >= header.getBoundingClientRect().bottom - 1 : true;
      const hit = doc.elementFromPoint(300, Math.min(top + 8, 880));
      result.in_content = !!(hit && hit.closest(".md-content"));
    }
    results.push(result);
    if (--pending === 0) {
      const out = document.createElement("pre");
      out.id = "result";
      out.textContent = JSON.stringify(results);
      document.body.append(out);
    }
  }, 500);
  frame.src = target;
  document.body.append(frame);
}
</script></body>
"""


@pytest.mark.timeout(120)
def test_a_page_opened_at_an_anchor_shows_that_section(site: Path, served: _Server,
                                                       tmp_path: Path) -> None:
    """A link to a section (``schedules/#store``, a reference entry) opens the page scrolled to
    that heading, visible below the header, with the page's content around it (issue 34
    reported such pages blank: that was headless Chromium's ``--screenshot``, which draws any
    page scrolled to an anchor blank, a plain HTML page too; the page itself is fine, as this
    check through the DOM shows)."""
    targets = ["/schedules/#store", "/schedules/#dst",
               "/service/#testing-a-service-without-sleeping",
               "/reference/executors.service/#executors.service.BackgroundService.cron",
               "/tutorial/#9-a-schedule-shared-by-two-processes"]
    (site / "_check_anchors.html").write_text(CHECK_ANCHORS % json.dumps(targets))
    dom = _browse(_chromium(), tmp_path, f"{served.url}/_check_anchors.html", "--dump-dom",
                  "--window-size=1400,1000")
    start, end = dom.find('<pre id="result">'), dom.find("</pre>")
    assert start >= 0, f"the check page produced no result:\n{dom[-2000:]}"
    results = json.loads(html.unescape(dom[start + len('<pre id="result">'):end]))
    bad = [r for r in results if not (r["found"] and r["scrolled"] > 0 and 0 <= r["top"] < 900
                                      and r["below_header"] and r["in_content"])]
    assert not bad, json.dumps(bad, indent=1)


def test_the_schedule_stores_have_their_reference_page(site: Path) -> None:
    """The schedule stores have a reference page, `executors.stores`, that opens with the
    contract and documents the SQLite and memory stores and `open_store` (issue 34: the SQLite
    schedule store had no page, and a search for it found `integrations.sqlite_store`, the
    traversal's store); the traversal stores' former modules have no page of their own."""
    text = _reference_text(site, "executors.stores")
    ids = re.findall(r'<h2 id="executors\.stores\.([^"]+)"', text)
    assert ids[:2] == ["ScheduleDefinition", "ScheduleRecord"] or "ScheduleStore" in ids[:6], ids
    for name in ("ScheduleStore", "SQLiteScheduleStore", "MemoryStore", "open_store"):
        assert name in ids, f"executors.stores's page lacks {name}"
    assert "sqlite://" in html.unescape(text)
    for former in ("integrations.sqlite_store", "integrations.postgres_store"):
        assert not (site / "reference" / former).exists(), f"{former} still has a page"
    assert (site / "reference" / "integrations.traversal_stores.sqlite" / "index.html").exists()
