"""A real browser (Debian chromium, driven by Playwright) runs the demo as a person would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parent.parent / "artifacts"
if not Path(CHROMIUM).exists():
    # CI installs chromium (.ci/run); there a missing browser is a failure, not a skip.
    if os.environ.get("CI"):
        raise RuntimeError("chromium is missing: .ci/run installs it with apt-get")
    pytest.skip("Debian chromium is not installed", allow_module_level=True)

playwright = pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="module")
def page(server):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-quic",
            ],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1800})
        page.dialogs = []
        page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
        page.goto(server)
        page.locator("#run-btn").wait_for(timeout=60_000)
        yield page
        browser.close()


def set_prompt(page, text: str):
    box = page.locator("#prompt textarea")
    box.fill(text)


def set_max_tokens(page, n: int):
    field = page.locator("input[aria-label='number input for Max new tokens']")
    field.fill(str(n))
    field.press("Enter")


def wait_status(page, text: str, timeout=180_000):
    page.locator("#status").get_by_text(text).wait_for(timeout=timeout)


def test_run_shows_coloured_tokens_and_plots(page):
    set_prompt(page, "<script>alert(1)</script> once upon a time, there was a little")
    set_max_tokens(page, 48)
    page.locator("#run-btn").click()
    wait_status(page, "done")
    spec = page.locator("#speculative-pane")
    assert spec.locator(".tok-accepted").count() > 0
    assert spec.locator(".tok-correction, .tok-bonus").count() > 0
    assert "<script>alert(1)</script>" in page.locator("#baseline-pane").inner_text()  # shown as text
    assert page.dialogs == []  # and never run
    assert page.locator(".js-plotly-plot").count() >= 4
    assert "identical to baseline" in page.locator("#summary").inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "app.png"), full_page=True)


def test_stop_ends_a_run_and_the_next_run_works(page):
    set_prompt(page, "one day, a little girl named lily went to the park. she saw")
    set_max_tokens(page, 400)
    page.locator("#run-btn").click()
    wait_status(page, "running")
    # dispatch the click: during a fast race the page re-renders continuously and pointer checks can stall
    page.locator("#stop-btn").dispatch_event("click")
    wait_status(page, "stopped", timeout=30_000)
    page.wait_for_timeout(1000)  # the race ends at its next step and shows where it stopped
    assert page.locator("#status").inner_text().strip().endswith("stopped")
    assert page.locator("#baseline-pane .tok").count() < 400
    set_max_tokens(page, 16)
    page.locator("#run-btn").click()
    wait_status(page, "done")
    assert page.locator("#speculative-pane .tok").count() > 0
