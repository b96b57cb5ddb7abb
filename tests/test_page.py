"""The inspection page of `ragpg serve`, driven in headless Chromium (Debian's chromium and
chromium-driver, through selenium with the system chromedriver: nothing is downloaded).

Each test starts from a fresh browser session; a failing step leaves a screenshot of its view
in tests/artifacts/. One test takes the README's picture of the page (tests/artifacts/inspection.png;
with RAGPG_UPDATE_SCREENSHOT=1 it replaces docs/inspection.png, so a plain run leaves the tree clean).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from rag_pg.testing.embedserver import FakeEmbeddingServer
from rag_pg.testing.rerankserver import FakeRerankServer

from .conftest import ROOT, drop_database, new_database, run_cli
from .test_server import Served, clean_env

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="no headless browser: install Debian's chromium and chromium-driver"
           " (apt-get install chromium chromium-driver)",
)

TOKEN = "page-token-7b1e4c9d2a6f8e03"
QUERY = "restaurer une sauvegarde pg_dump"
ARTIFACTS = ROOT / "tests" / "artifacts"
WAIT = 60  # seconds a readiness wait may take before the test fails (a bound, not a threshold)


@pytest.fixture(scope="module")
def embed() -> Iterator[FakeEmbeddingServer]:
    with FakeEmbeddingServer(dim=64) as server:
        yield server


@pytest.fixture(scope="module")
def rerank() -> Iterator[FakeRerankServer]:
    with FakeRerankServer() as server:
        yield server


@pytest.fixture(scope="module")
def served(pg_server_url: str, pg_template: str, embed: FakeEmbeddingServer, rerank: FakeRerankServer,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    url = new_database(pg_server_url, pg_template)
    try:
        corpus = tmp_path_factory.mktemp("corpus") / "corpus"
        shutil.copytree(ROOT / "examples" / "corpus", corpus)
        out = run_cli(["ingest", str(corpus)],
                      env={"RAGPG_DATABASE_URL": url, "RAGPG_EMBEDDING_URL": embed.url}, cwd=corpus.parent)
        assert out.returncode == 0, out.stderr
        embed.poison = "Tatin"  # one document the embedder refuses: a run with an error
        try:
            out = run_cli(["ingest", str(corpus), "--collection", "broken"],
                          env={"RAGPG_DATABASE_URL": url, "RAGPG_EMBEDDING_URL": embed.url},
                          cwd=corpus.parent)
        finally:
            embed.poison = None
        assert "failed" in out.stdout + out.stderr, out.stdout + out.stderr
        server = Served(clean_env(RAGPG_DATABASE_URL=url, RAGPG_EMBEDDING_URL=embed.url,
                                  RAGPG_RERANK_URL=rerank.url, RAGPG_SERVER_TOKEN=TOKEN),
                        tmp_path_factory.mktemp("serve"))
        try:
            yield server
        finally:
            server.stop()
    finally:
        drop_database(pg_server_url, url)


class Browser:
    """One headless Chromium session; ``step`` saves a screenshot of the view when it fails."""

    def __init__(self, name: str, width: int = 1280, height: int = 1000):
        from selenium import webdriver

        os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never download
        options = webdriver.ChromeOptions()
        assert CHROMIUM is not None and CHROMEDRIVER is not None
        options.binary_location = CHROMIUM
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                    f"--window-size={width},{height}", "--lang=en", "--hide-scrollbars"):
            options.add_argument(arg)
        self.driver = webdriver.Chrome(options=options,
                                       service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
        self.name = name

    def console(self) -> list[str]:
        """What the page logged to the console (errors, refused resources) since the last call."""
        return [str(entry.get("message")) for entry in self.driver.get_log("browser")]

    def close(self) -> None:
        self.driver.quit()  # ends the browser and its chromedriver

    @contextlib.contextmanager
    def step(self, view: str) -> Iterator[None]:
        try:
            yield
        except BaseException:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            self.driver.save_screenshot(str(ARTIFACTS / f"{self.name}-{view}.png"))
            raise

    def wait(self, condition: Any, what: str) -> Any:
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.driver, WAIT).until(lambda d: condition(d), message=what)

    def ready(self) -> None:
        """Wait until the page shows what its URL asks for."""
        self.wait(lambda d: d.execute_script("return document.body.dataset.ready") == "yes",
                  "the page never finished rendering")

    def css(self, selector: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, selector))

    def one(self, selector: str) -> Any:
        found = self.css(selector)
        assert found, f"nothing matches {selector}"
        return found[0]

    def visible(self, selector: str) -> Any:
        return self.wait(lambda d: next((e for e in self.css(selector) if e.is_displayed()), False),
                         f"{selector} never became visible")

    def with_token(self, base: str) -> None:
        """Put the token where the page keeps it (this tab's session storage)."""
        self.driver.get(f"{base}/page/page.css")  # same origin, no script that could race
        self.driver.execute_script("sessionStorage.setItem('ragpg.token', arguments[0])", TOKEN)


@pytest.fixture
def browser(request: pytest.FixtureRequest) -> Iterator[Browser]:
    session = Browser(request.node.name)
    try:
        yield session
    finally:
        session.close()


def api_hits(served: Served, **body: Any) -> list[dict[str, Any]]:
    with httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {TOKEN}"},
                      timeout=WAIT) as client:  # httpx's 5 s default is short on a loaded machine
        response = client.post("/search", json={"query": QUERY, **body})
    assert response.status_code == 200, response.text
    hits: list[dict[str, Any]] = response.json()["hits"]
    return hits


def test_without_the_token_the_page_asks_for_it_once(served: Served, browser: Browser) -> None:
    with browser.step("token"):
        browser.driver.get(f"{served.url}/?q={QUERY}")
        browser.visible("#token-box")
        status = browser.driver.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch('/search', {method: 'POST', headers: {'Content-Type': 'application/json'},"
            " body: JSON.stringify({query: 'x'})}).then(r => done(r.status));")
        assert status == 401
        assert browser.css("li.hit") == []
        browser.one("#token").send_keys("wrong-token-of-the-right-length")
        browser.one("#token-form button").click()
        browser.wait(lambda d: "refused" in browser.one("#token-why").text, "a wrong token was not refused")
        browser.one("#token").send_keys(TOKEN)
        browser.one("#token-form button").click()
        browser.ready()
        assert browser.css("li.hit"), browser.one("#status").text
        assert not browser.one("#token-box").is_displayed()
        stored = browser.driver.execute_script("return sessionStorage.getItem('ragpg.token')")
        assert stored == TOKEN
        browser.driver.refresh()  # the same tab: not asked again
        browser.ready()
        assert not browser.one("#token-box").is_displayed() and browser.css("li.hit")


def test_a_query_shows_each_legs_rank_and_opens_the_document(served: Served, browser: Browser) -> None:
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    expected = api_hits(served, k=3, mode="hybrid")
    browser.with_token(served.url)
    with browser.step("search"):
        browser.driver.get(f"{served.url}/")
        browser.ready()
        Select(browser.one("#mode")).select_by_value("hybrid")
        browser.one("#k").send_keys("3")
        query = browser.one("#q")
        query.send_keys(QUERY, Keys.ENTER)  # the keyboard alone runs a search
        browser.ready()
        hits = browser.css("li.hit")
        assert [h.get_attribute("data-path") for h in hits] == [h["path"] for h in expected]
        first = hits[0]
        ranks = {leg: first.find_element("css selector", f'tr[data-leg="{leg}"] td.rank').text
                 for leg in ("vector", "keyword")}
        assert ranks == {leg: f"#{expected[0]['ranks'][leg]}" for leg in ("vector", "keyword")}
        shares = [td.text for td in first.find_elements("css selector", "tr[data-leg] td:last-child")]
        assert all(s.endswith("%") for s in shares) and sum(int(s[:-1]) for s in shares) in (99, 100, 101)
        marks = [m.text.lower() for m in first.find_elements("css selector", "mark")]
        assert "pg_dump" in marks, marks
        assert expected[0]["title"] in first.find_element("css selector", "h3").text
        state = parse_qs(urlparse(browser.driver.current_url).query)
        assert state["q"] == [QUERY] and state["mode"] == ["hybrid"] and state["k"] == ["3"]
    with browser.step("document"):
        first.find_element("css selector", "a.doc-link").click()
        browser.ready()
        browser.visible("#document-view")
        assert browser.one("#doc-title").text == expected[0]["title"]
        meta = browser.one("#doc-meta").text
        assert "Content hash" in meta and "Indexed at" in meta and expected[0]["path"] in meta
        marked = browser.css("#doc-chunks li.marked")
        assert len(marked) == 1 and marked[0].get_attribute("id") == f"chunk-{expected[0]['position']}"
        browser.one("#doc-back").click()
        browser.ready()
        assert len(browser.css("li.hit")) == len(expected)
        refused = [line for line in browser.console() if "Content Security Policy" in line]
        assert refused == []  # the page runs under its own policy


def test_why_not_and_a_shared_url_reload(served: Served, browser: Browser, tmp_path: Path) -> None:
    deeper = api_hits(served, k=5, mode="hybrid")
    target = next(h["path"] for h in deeper[1:] if h["path"] != deeper[0]["path"])
    browser.with_token(served.url)
    with browser.step("whynot"):
        browser.driver.get(f"{served.url}/?q={QUERY}&mode=hybrid&k=1")
        browser.ready()
        assert len(browser.css("li.hit")) == 1
        browser.one("#target").send_keys(target)
        browser.one("#whynot-form button").click()
        browser.ready()
        verdict = browser.one("#whynot-answer .verdict").text
        assert "below k=1" in verdict, verdict
        legs = {li.get_attribute("data-leg"): li.text for li in browser.css("#whynot-answer li")}
        assert {"keyword", "vector", "fused"} <= set(legs), legs
        shared = browser.driver.current_url
        assert "why=" in shared
    second = Browser(f"{browser.name}-shared")
    try:
        second.with_token(served.url)
        with second.step("shared"):
            second.driver.get(shared)
            second.ready()
            assert second.one("#q").get_attribute("value") == QUERY
            assert second.one("#mode").get_attribute("value") == "hybrid"
            assert len(second.css("li.hit")) == 1
            assert second.one("#whynot-answer .verdict").text == verdict
    finally:
        second.close()


def test_neighbours_and_the_rerank_confidence(served: Served, browser: Browser) -> None:
    expected = api_hits(served, k=2, neighbours=1, rerank=True)
    assert all(h.get("confidence") and h.get("window") for h in expected)
    browser.with_token(served.url)
    with browser.step("rerank"):
        browser.driver.get(f"{served.url}/?q={QUERY}&k=2&nb=1&rerank=1")
        browser.ready()
        hits = browser.css("li.hit")
        assert len(hits) == 2
        for hit, want in zip(hits, expected, strict=True):
            badge = hit.find_element("css selector", ".confidence")
            assert badge.text == f"confidence: {want['confidence']}"
            window = hit.find_element("css selector", "details summary")
            assert window.text == (f"Neighbour window: chunks {want['window']['start_position']}"
                                   f"–{want['window']['end_position']}")
            fused = hit.find_element("css selector", ".score + .score").text
            assert fused.startswith("fused ")
        assert browser.one("#rerank").get_attribute("value") == "1"
        assert browser.one("#nb").get_attribute("value") == "1"


# WCAG's contrast ratio of each visible text element against the background it is drawn on.
LOW_CONTRAST = """
const lum = (colour) => {
  const [r, g, b] = colour.match(/[\\d.]+/g).slice(0, 3).map(Number).map((v) => {
    v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
};
const background = (e) => {
  for (; e; e = e.parentElement) {
    const parts = getComputedStyle(e).backgroundColor.match(/[\\d.]+/g);
    if (parts && (parts.length < 4 || Number(parts[3]) > 0)) return getComputedStyle(e).backgroundColor;
  }
  return "rgb(255, 255, 255)";
};
const low = [];
for (const e of document.querySelectorAll("h1, h2, h3, label, p, td, th, a, button, summary, mark, span, dt, dd, caption")) {
  if (!e.offsetParent || !e.textContent.trim()) continue;
  const a = lum(getComputedStyle(e).color), b = lum(background(e));
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  if (ratio < 4.5) low.push(`${e.tagName}.${e.className} ${ratio.toFixed(2)}`);
}
return low;
"""


def test_filters_from_the_form_reach_the_search(served: Served, browser: Browser) -> None:
    expected = api_hits(served, k=10, path_prefix="fr", filters={"lang": "fr"})
    browser.with_token(served.url)
    with browser.step("filters"):
        browser.driver.get(f"{served.url}/")
        browser.ready()
        browser.one("#q").send_keys(QUERY)
        browser.one("#prefix").send_keys("fr")
        browser.one("#fm").send_keys("lang=fr")
        browser.one("#k").send_keys("10")
        browser.one("#search-button").click()
        browser.ready()
        paths = [h.get_attribute("data-path") for h in browser.css("li.hit")]
        assert paths == [h["path"] for h in expected] and all(p.startswith("fr/") for p in paths)
        state = parse_qs(urlparse(browser.driver.current_url).query)
        assert state["prefix"] == ["fr"] and state["fm"] == ["lang=fr"]
        browser.one("#fm").clear()
        browser.one("#fm").send_keys("lang=xx")
        browser.one("#search-button").click()
        browser.ready()
        assert browser.css("li.hit") == [] and "No hit" in browser.one("#status").text
        # a collection that does not exist says so: it is not "no hit"
        browser.driver.get(f"{served.url}/?q={QUERY}&collection=defualt")
        browser.ready()
        status = browser.one("#status")
        assert "no collection 'defualt'" in status.text and "error" in status.get_attribute("class")


def test_the_runs_view_and_a_phone_width(served: Served, browser: Browser) -> None:
    browser.with_token(served.url)
    with browser.step("runs"):
        browser.driver.get(f"{served.url}/")
        browser.ready()
        browser.one("#nav-runs").click()
        browser.ready()
        rows = {row.find_element("css selector", "td:nth-child(2)").text: row
                for row in browser.css("#runs tbody tr")}
        assert set(rows) == {"default", "broken"}, browser.one("#status").text
        assert rows["default"].find_element("css selector", "td:nth-child(3)").text == "completed"
        broken = rows["broken"]
        assert broken.find_element("css selector", "td:nth-child(3)").text == "partial"
        errors = broken.find_element("css selector", "details")
        errors.find_element("css selector", "summary").click()
        assert "tarte-tatin.md" in errors.text, errors.text
        assert browser.one("#nav-runs").get_attribute("aria-current") == "page"
        assert browser.driver.execute_script(LOW_CONTRAST) == []
    with browser.step("phone"):
        browser.driver.set_window_size(390, 844)
        browser.driver.get(f"{served.url}/?q={QUERY}")
        browser.ready()
        assert browser.css("li.hit")
        overflow = browser.driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 0, f"the page is {overflow}px wider than a phone"
        unlabelled = browser.driver.execute_script(
            "return [...document.querySelectorAll('input, select')]"
            ".filter(e => e.type !== 'hidden' && e.labels.length === 0).map(e => e.id)")
        assert unlabelled == []
        assert browser.driver.execute_script(LOW_CONTRAST) == []


def test_screenshot_for_the_docs(served: Served, browser: Browser) -> None:
    browser.with_token(served.url)
    with browser.step("screenshot"):
        browser.driver.set_window_size(1200, 1100)
        browser.driver.get(f"{served.url}/?q={QUERY}&mode=hybrid&k=2&why=en/ops/connection-pooling.md")
        browser.ready()
        assert len(browser.css("li.hit")) == 2
        height = browser.driver.execute_script("return document.documentElement.scrollHeight")
        browser.driver.set_window_size(1200, min(int(height), 2400))  # the whole page, up to a bound
        browser.ready()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        target = ARTIFACTS / "inspection.png"
        assert browser.driver.save_screenshot(str(target))
        assert target.stat().st_size > 10_000
        if os.environ.get("RAGPG_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(target, ROOT / "docs" / "inspection.png")
