"""The page helpers that drive the app in chromium: one home for the browser tests and every tool that
drives the page (``tools/race_stability.py``), so a change to the page is mended once and tested.

Debian's chromium (Playwright cannot download its own browser here), at a workshop laptop's 1366×768.
"""

from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"]
VIEWPORT = {"width": 1366, "height": 768}
SEED_PROMPT = "What is the purpose of life?"
STATUS_TEXT = "document.querySelector('#status [data-testid=markdown]').innerText"
SHOTS = Path(__file__).resolve().parent.parent / "artifacts"  # a failure's screenshot lands here


@contextlib.contextmanager
def chromium(playwright=None):
    """Debian's chromium, headless (``playwright``: a running sync_playwright, else one of its own)."""
    from playwright.sync_api import sync_playwright

    with contextlib.ExitStack() as stack:
        p = playwright or stack.enter_context(sync_playwright())
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        stack.callback(browser.close)
        yield browser


@contextlib.contextmanager
def open_page(browser, url: str):
    """A 1366×768 tab on ``url``, its dialogs recorded and dismissed, once the app is up."""
    page = browser.new_page(viewport=VIEWPORT)
    page.dialogs = []
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.goto(url)
    page.locator("#run-btn").wait_for(timeout=120_000)
    try:
        yield page
    finally:
        page.close()


def open_settings(page) -> None:
    """A race folds the settings away (so the panes fit the screen): open them before touching one."""
    header = page.locator("#settings > button.label-wrap")
    if "open" not in (header.get_attribute("class") or "").split():
        header.click()


def fill_fresh(field, text: str, key: str = "Tab") -> None:
    """Type into a field and check it holds. Gradio mounts a closed accordion's children on first open,
    and a field still mounting can take its initial value after our typing (seen on a loaded CI
    machine: the URL typed, then ''): type again until the value holds, as a person would see it."""
    for _ in range(5):
        field.fill(text)
        field.press(key)  # gradio takes a field's value on Enter or when it loses focus
        time.sleep(0.5)
        if field.input_value() == text:
            return
    assert field.input_value() == text, f"typed {text!r}, the field holds {field.input_value()!r}"


def set_number(page, label: str, value) -> None:
    """A slider's number box (γ), or a number field (Max new tokens), by the label the page shows."""
    open_settings(page)
    field = page.locator(f"input[aria-label='number input for {label}']")
    if not field.count():
        field = page.get_by_label(label, exact=True)
    fill_fresh(field, str(value), "Enter")


def set_prompt(page, text: str) -> None:
    page.locator("#prompt textarea").fill(text)


def pick_method(page, label: str) -> None:
    """Choose a method in the dropdown by its label (``methods.Method.label``); an option may add what the
    method needs here ("… — needs its vLLM servers running")."""
    open_settings(page)
    page.get_by_label("Method", exact=True).click()
    page.get_by_role("option", name=re.compile(f"^{re.escape(label)}( — .*)?$")).click()


def status(page) -> str:
    return page.evaluate(STATUS_TEXT).strip()


def wait_status(page, text: str, timeout=300_000) -> None:
    """Wait for ``text`` in the status line; a refusal (⚠) on the way fails at once with its line."""
    try:
        condition = f"t => {STATUS_TEXT}.includes(t) || {STATUS_TEXT}.includes('⚠')"
        page.wait_for_function(condition, arg=text, timeout=timeout, polling="raf")
    except Exception:
        screenshot(page)
        raise AssertionError(f"waited for {text!r}; the status says {status(page)!r}") from None
    now = status(page)  # (a fast race may already have moved on: only a ⚠ is a failure here)
    if "⚠" in now and "⚠" not in text:  # refused or failed: no use waiting out the timeout
        screenshot(page)
        raise AssertionError(f"waited for {text!r}; the status says {now!r}")


def watch_status(page) -> None:
    """Watch the status line from now on: whether a run showed ● (a live race always does, however fast), and
    its text now (a recording shown at once changes it without a ●)."""
    # the whole page is observed: opening the Race tab (a Lesson scene does) mounts a new status line
    # one observer a page: a call resets its flag rather than adding another
    page.evaluate(
        f"() => {{ window.statusBefore = {STATUS_TEXT}; window.statusRunning = false; "
        "window.statusObserver ??= new MutationObserver(() => { "
        "if (/●/.test(document.querySelector('#status')?.innerText)) window.statusRunning = true; }); "
        "window.statusObserver.observe(document.body, {subtree: true, childList: true, characterData: true}); }"
    )


def wait_finished(page, timeout=300_000, live=False) -> str:
    """After ``watch_status``: wait for this run to have ended (✓ or ⚠) → the status line. A stale redraw of
    the last status is not taken for it: the run showed ● since, or the text is another. ``live``: only a run
    that showed ● (a click that opens the Race tab redraws its status line before the race is even queued)."""
    started = "window.statusRunning" if live else f"(window.statusRunning || {STATUS_TEXT} !== window.statusBefore)"
    page.wait_for_function(
        f"() => {started} && /✓|⚠/.test({STATUS_TEXT}) && !/●/.test({STATUS_TEXT})",
        timeout=timeout,
    )
    return status(page)


def run_race(page, max_new_tokens: int | None = None, timeout=300_000) -> tuple[float, float]:
    """Click Run, wait for ✓ done; → (wall seconds from the click, compute seconds it reports)."""
    if max_new_tokens is not None:
        set_number(page, "Max new tokens", max_new_tokens)
    watch_status(page)
    start = time.perf_counter()
    page.locator("#run-btn").click()
    now = wait_finished(page, timeout)
    assert "✓ done" in now, now
    wall = time.perf_counter() - start
    compute = float(re.search(r"compute ([\d.]+) s", now).group(1))
    return wall, compute


def screenshot(page, name: str = "browser-failure.png") -> None:
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / name))
