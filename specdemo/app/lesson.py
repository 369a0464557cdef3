"""The Lesson tab: each scene is one click that sets the pair, prompt, method, γ and length, opens its tab and
races; a card above the tabs says what to look at and asks one question. The scenes, and the stored figures
they claim, are ``measure/lesson.py``'s."""

from __future__ import annotations

from specdemo.app.inspector import inspect_last, stepper_show
from specdemo.app.settings import KEEP, PRESET_OUTPUTS, preset_fields, update
from specdemo.decoding import methods
from specdemo.measure import lesson
from specdemo.view import report

# What a scene sets, in ``start``'s order (the app wires its components by these names)
SCENE_OUTPUTS = ("preset", *PRESET_OUTPUTS, "temperature", "schedule", "scene_card", "tabs")


def card(scene: lesson.Scene, stored: dict, where: str = "") -> str:
    """What to look at, one question, and the stored figure (of ``stored``, the methods × tasks table) it stands on."""
    n = lesson.SCENES.index(scene) + 1
    text = (
        f"**Scene {n} of {len(lesson.SCENES)} · {scene.title}** · {where}{lesson.claim(scene, stored)}\n\n"
        f"**Look:** {scene.look}\n\n**Question:** {scene.question}"
    )
    if scene.shows == "theory":
        text += "\n\n" + report.table(lesson.GPU_HEADER, lesson.gpu_rows())
    return text


def start(key: str, choices: list[str]) -> tuple:
    """The scene's settings as the stored table measured them, on its pair where this server has it (else the
    pair already picked, and the card says whose figures it quotes), greedy; its card; its tab."""
    scene = lesson.scene(key)
    here = lesson.PRESET in choices
    fields = dict(zip(PRESET_OUTPUTS, preset_fields(lesson.PRESET) if here else [KEEP] * len(PRESET_OUTPUTS)))
    stored = lesson.stored()
    race = lesson.race_settings(scene, stored)
    if race:
        label = methods.get(race["method"]).label
        fields |= dict(method_label=label, gamma=race["gamma"], max_new_tokens=race["max_new_tokens"])
        fields["prompt"] = race["prompt"]
    where = "" if here else f"figures of {lesson.PRESET} on a CPU; "
    sampling = (0, "constant") if race else (KEEP, KEEP)  # greedy: the stored tables are
    shown = update(value=card(scene, stored, where), visible=True)
    return (lesson.PRESET if here else KEEP, *fields.values(), *sampling, shown, update(selected=scene.tab))


def first_refusal(trace: dict | None) -> tuple:
    """The step inspector on the last race, at its first refused draft (its first step if none was refused)."""
    session, html, figure, slider = inspect_last(trace)
    if not session:
        return session, html, figure, slider
    session["shown"] = next((i for i, s in enumerate(session["steps"]) if s.correction is not None), 0)
    return stepper_show(session)
