"""The Lesson's scenes: each is read from the stored measurements (a win a stored win, a loss a stored loss),
each sets its race up as the table measured it, and ``report --run`` re-measures every file they read."""

from __future__ import annotations

import copy

from specdemo.app import lesson as lesson_tab
from specdemo.app.settings import KEEP, PRESET_OUTPUTS
from specdemo.decoding import methods
from specdemo.measure import lesson
from specdemo.measure.tasks import load_tasks
from specdemo.view.report import SOURCES


def test_the_seed_prompt_s_scene_comes_first_and_there_are_six_to_eight():
    assert 6 <= len(lesson.SCENES) <= 8
    first = lesson.SCENES[0]
    assert first.prompt == lesson.SEED_PROMPT and first.method == methods.DRAFT.name


def test_every_scene_s_words_are_borne_out_by_the_stored_figures():
    table = lesson.stored()
    assert lesson.contradictions(table) == []
    shown = {s.shows for s in lesson.SCENES}
    assert {"win", "loss", "difference", "theory"} <= shown  # the lesson has a loss to teach, not only wins


def test_a_doctored_table_is_caught():
    """The control: the same check on a table where the rewrite's best lost, the story's worst won, and a GPU
    table where the 3B pair is predicted above the 14B."""
    table = copy.deepcopy(lesson.stored())
    for row in table["rows"]:
        if row["task"] == "rewrite":
            row["speedup"] = 0.9
        if row["task"] == "story":
            row["speedup"] = 1.1
    gpu = [g | {"high": 9.0} if g["preset"] == lesson.GPU_PAIRS[0] else g for g in lesson.gpu_predictions()]
    slow_auto = copy.deepcopy(lesson.auto_stored())
    for row in slow_auto["rows"]:
        if row["method"] == methods.AUTO.name:
            row["speedup"] = 0.95
    found = " ".join(lesson.contradictions(table, gpu, slow_auto))
    assert "rewrite: shown as a win" in found and "turn-off: shown as a loss" in found and "gpu:" in found
    assert "choose: shown as the lesson's end, auto stored 0.95×" in found


def test_the_lesson_ends_letting_auto_choose_on_the_seed_prompt_with_auto_s_held_out_figure():
    last = lesson.SCENES[-1]
    out = dict(zip(lesson_tab.SCENE_OUTPUTS, lesson_tab.start(last.key, [lesson.PRESET])))
    assert last.key == "choose" and out["method_label"] == methods.AUTO.label and out["prompt"] == lesson.SEED_PROMPT
    mean = lesson.auto_targets(lesson.auto_stored())["means"][methods.AUTO.name]
    assert f"auto {mean:.2f}× the baseline on average" in out["scene_card"]["value"]
    assert "held-out prompts" in out["scene_card"]["value"]


def test_a_win_is_the_stored_best_and_the_loss_the_worst_model_free_method():
    table = lesson.stored()
    for s in lesson.SCENES:
        if s.shows == "win" and s.method is None:
            assert lesson.chosen_method(s, table) == table["best"][s.task]
        if s.shows == "loss":
            rows = [r for r in table["rows"] if r["task"] == s.task and r["method"] in methods.REGISTRY]
            free = [r for r in rows if not methods.get(r["method"]).draft_model]
            assert lesson.chosen_method(s, table) == min(free, key=lambda r: r["speedup"])["method"]


def test_a_scene_sets_its_race_as_the_table_measured_it():
    table = lesson.stored()
    rewrite = lesson.scene("rewrite")
    out = dict(zip(lesson_tab.SCENE_OUTPUTS, lesson_tab.start("rewrite", [lesson.PRESET])))
    method = table["best"]["rewrite"]
    assert out["preset"] == lesson.PRESET and out["method_label"] == methods.get(method).label
    assert out["gamma"] == table["gammas"][method] and out["max_new_tokens"] == table["max_new_tokens"]
    assert out["prompt"] == load_tasks(names=["rewrite"])["rewrite"][0]  # a prompt the table was measured on
    assert out["temperature"] == 0 and out["tabs"]["selected"] == rewrite.tab
    assert rewrite.title in out["scene_card"]["value"]
    stored = lesson.stored_row(table, "rewrite", method)["speedup"]
    assert f"{stored:.2f}×" in out["scene_card"]["value"]


def test_without_the_lesson_s_pair_a_scene_keeps_the_pair_and_says_whose_figures_it_quotes():
    out = dict(zip(lesson_tab.SCENE_OUTPUTS, lesson_tab.start("colours", ["qwen2.5-3b+0.5b"])))
    assert out["preset"] is KEEP and all(out[name] is KEEP for name in PRESET_OUTPUTS[:6])
    assert out["prompt"] == lesson.SEED_PROMPT
    assert f"figures of {lesson.PRESET} on a CPU" in out["scene_card"]["value"]


def test_the_gpu_scene_says_which_numbers_are_predicted():
    card = lesson_tab.card(lesson.scene("gpu"), lesson.stored())
    assert "**measured**" in card and card.count("**predicted**") == 2 and "no GPU was lent" in card


def test_every_stored_figure_a_card_shows_names_its_machine_and_date():
    """A stored figure is read on other machines: it names where and when it was measured, never "this CPU"."""
    import json

    stored, cpu = lesson.stored(), json.loads((lesson.ROOT / "docs/results/steps_cpu.json").read_text())
    for scene in lesson.SCENES:
        card = lesson_tab.card(scene, stored)
        assert "this CPU" not in card, scene.key
        if scene.shows in ("win", "loss", "refusal"):
            assert lesson.measured_on(stored) in card, scene.key
    when = lesson.auto_stored()["machine"].split(", measured ")[-1]
    assert f"(measured {when} on " in lesson_tab.card(lesson.scene("choose"), stored)
    gpu = lesson_tab.card(lesson.scene("gpu"), stored)
    assert f"{cpu['machine'].split(',')[0]}, **measured** {cpu['measured']}" in gpu
    assert lesson.measured_on(stored).startswith("measured 2026-12-02 on a 2 vCPU AMD EPYC")  # read, not typed


def test_report_run_measures_again_every_file_the_scenes_read():
    assert set(lesson.SOURCES) <= set(SOURCES)
