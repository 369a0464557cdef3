"""A room's repeats: a finished greedy race is shown again at once to another session with exactly the same
settings, labelled as recorded, and is exactly what a live race of those settings writes; that session's
next Run races live; what a live race could write otherwise is never recorded."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specdemo.app import race_tab, recordings
from specdemo.app.race_tab import RACE_OUTPUTS
from specdemo.app.settings import Settings
from specdemo.decoding import methods
from specdemo.models import BUNDLED_DRAFT, BUNDLED_TARGET

BASE = Settings(
    prompt="once upon a time, there was a little",
    target_id=BUNDLED_TARGET,
    draft_id=BUNDLED_DRAFT,
    gamma=4,
    max_new_tokens=24,
    chat_template=False,
)


def last(outputs) -> dict:
    return dict(zip(RACE_OUTPUTS, list(outputs)[-1]))


def tokens(out: dict) -> tuple[list[int], list[int]]:
    trace = out["trace"]
    return tuple([t for step in trace[side] for t in step["emitted"]] for side in ("baseline", "speculative"))


class Races:
    """The live race, counted: a recording shown must run no model."""

    def __init__(self, s: Settings):
        self.s, self.count = s, 0

    def __call__(self):
        self.count += 1
        return race_tab.stream(self.s)


@pytest.fixture(autouse=True)
def empty():
    recordings.forget()
    yield
    recordings.forget()


def test_another_session_sees_the_race_at_once_and_its_next_run_is_live_and_the_same():
    live = Races(BASE)
    first = last(recordings.race_or_replay(BASE, "alice", live))
    assert first["status"].startswith("✓ done") and live.count == 1
    shown = list(recordings.race_or_replay(BASE, "bob", live))
    assert len(shown) == 1 and live.count == 1  # one picture, no model ran
    recorded = dict(zip(RACE_OUTPUTS, shown[0]))
    assert recorded["status"].startswith("✓ recorded at") and "Run again to race it live" in recorded["status"]
    assert tokens(recorded) == tokens(first)
    assert recorded["speculative_pane"] == first["speculative_pane"]  # the same colours, token for token
    again = last(recordings.race_or_replay(BASE, "bob", live))  # bob's second Run: live
    assert live.count == 2 and again["status"].startswith("✓ done") and tokens(again) == tokens(first)
    assert last(recordings.race_or_replay(BASE, "alice", live))["status"].startswith("✓ done")
    assert live.count == 3  # who raced it live has seen it: her next Run is live too


def test_the_naive_hand_off_is_recorded_and_its_recording_is_what_a_live_one_writes():
    """Greedy, the draft's half and the target's continuation are the same tokens each time: a room's thirty
    clicks on the Lesson's naive scene need not queue thirty live races."""
    s = replace(BASE, method_label=methods.get("naive").label)
    live = Races(s)
    first = last(recordings.race_or_replay(s, "alice", live))
    shown = last(recordings.race_or_replay(s, "bob", live))
    assert live.count == 1 and shown["status"].startswith("✓ recorded at")
    again = last(recordings.race_or_replay(s, "bob", live))
    assert live.count == 2 and tokens(shown) == tokens(first) == tokens(again)
    assert 'class="tok tok-unverified"' in shown["speculative_pane"]  # its unchecked half, as it was shown


def test_sampling_is_never_recorded():
    s = replace(BASE, temperature=0.8)  # another draw, other tokens
    live = Races(s)
    assert last(recordings.race_or_replay(s, "alice", live))["status"].startswith("✓ done")
    last(recordings.race_or_replay(s, "bob", live))
    assert live.count == 2


def test_suffix_decoding_keeps_the_first_asking_and_the_second_and_shows_them_in_that_order():
    """Its store learnt the first answer: the second race drafts it whole (other colours), the tokens the same.
    A session's first Run is shown the first asking, its second the second, its third races live."""
    s = replace(BASE, method_label=methods.get("suffix").label, gamma=4)
    live = Races(s)
    first = last(recordings.race_or_replay(s, "alice", live))  # live: the first asking
    shown = last(recordings.race_or_replay(s, "bob", live))
    assert live.count == 1 and "the first race of these settings here" in shown["status"]
    assert "Run again: asked again" in shown["status"]
    again = last(recordings.race_or_replay(s, "bob", live))  # live: the second asking, kept
    assert live.count == 2 and again["status"].startswith("✓ done")
    seen = [last(recordings.race_or_replay(s, "carol", live)) for _ in range(2)]
    assert live.count == 2 and "the second, drafted from the answers before it" in seen[1]["status"]
    assert "Run again to race it live" in seen[1]["status"]
    assert seen[1]["speculative_pane"] == again["speculative_pane"]  # the second asking's drafts, as raced
    assert tokens(seen[0]) == tokens(seen[1]) == tokens(first) == tokens(again)
    last(recordings.race_or_replay(s, "carol", live))
    assert live.count == 3  # her third Run: live


def test_a_stopped_race_or_other_settings_are_not_shown_as_this_one():
    live = Races(BASE)
    recordings.keep(BASE, race_tab.status_only("■ stopped: 3 + 4 tokens"), 0)
    last(recordings.race_or_replay(BASE, "bob", live))
    assert live.count == 1  # nothing was kept from the stopped race
    other = replace(BASE, max_new_tokens=23)
    last(recordings.race_or_replay(other, "carol", Races(other)))
    assert live.count == 1 and len(list(recordings.race_or_replay(BASE, "carol", live))) == 1  # bob's, at once
