"""The package's folders are its layers, and imports point down only:

    cli, ui → app → view → measure → models → decoding → errors, env, files  (recipes: imported by no runtime layer)

A module may import its own layer and any layer below it; nothing outside recipes/ imports a recipe (tools/ may:
they are offline too), and no two modules import each other."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "specdemo"
RANK = {
    "errors": 0,
    "env": 0,
    "files": 0,
    "decoding": 1,
    "models": 2,
    "measure": 3,
    "view": 4,
    "app": 5,
    "recipes": 5,
    "cli": 6,
    "ui": 6,
    "__main__": 6,
}


def layer(module: str) -> str:
    """specdemo.decoding.engine → decoding; specdemo.cli → cli; specdemo → '' (the package root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imported_modules(module: str, source: str) -> set[str]:
    """Every specdemo module this source imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("specdemo")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = module.split(".")[: -node.level]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("specdemo"):
                found.add(name)
                found |= {f"{name}.{a.name}" for a in node.names if f"{name}.{a.name}".count(".") == 2}
    return found


def upward_imports(sources: dict[str, str]) -> list[str]:
    """'importer → imported' for every import that points up a layer or into a recipe."""
    bad = []
    for module, source in sources.items():
        here = layer(module)
        for name in imported_modules(module, source):
            there = layer(name)
            if name == "specdemo" or not there or there == here or there == "__init__":
                continue
            if there not in RANK:
                continue  # a package-level name (specdemo.__version__)
            into_recipe = there == "recipes" and here != "recipes"
            if into_recipe or RANK[there] > RANK.get(here, 0):
                bad.append(f"{module} → {name}")
    return bad


def package_sources() -> dict[str, str]:
    sources = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        sources[module] = path.read_text(encoding="utf-8")
    return sources


def test_every_module_sits_in_a_layer_folder():
    top = {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"
    }
    assert top - {"__init__"} <= set(RANK), f"modules outside the layers: {sorted(top - set(RANK) - {'__init__'})}"


def test_no_import_points_up_a_layer():
    assert upward_imports(package_sources()) == []


def test_the_check_catches_an_upward_import_and_a_recipe_imported_at_run_time():
    """The control: the same walk over sources that break each rule finds each break."""
    sources = package_sources()
    sources["specdemo.decoding.engine"] += "\nfrom specdemo.view.render import plain_text\n"
    sources["specdemo.models.cache"] += "\ndef f():\n    from ..app import settings\n"
    sources["specdemo.measure.bench"] += "\nimport specdemo.recipes.train\n"
    sources["specdemo.cli.bench"] += "\ndef f():\n    from specdemo.recipes.card import describe\n"
    assert sorted(upward_imports(sources)) == [
        "specdemo.cli.bench → specdemo.recipes.card",
        "specdemo.decoding.engine → specdemo.view.render",
        "specdemo.measure.bench → specdemo.recipes.train",
        "specdemo.models.cache → specdemo.app",
        "specdemo.models.cache → specdemo.app.settings",
    ]


def module_imports(sources: dict[str, str]) -> dict[str, set[str]]:
    """module → the package's modules it imports, at the top or inside a function. ``from pkg import sub``
    imports the module ``pkg.sub``, ``from pkg import name`` the package (its __init__)."""
    found = {}
    for module, source in sources.items():
        found[module] = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found[module] |= {a.name for a in node.names if a.name in sources}
            elif isinstance(node, ast.ImportFrom):
                base = module.split(".")[: -node.level] if node.level else []
                name = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{name}.{alias.name}"
                    found[module] |= {sub if sub in sources else name} & set(sources)
    return found


def mutual_imports(sources: dict[str, str]) -> list[str]:
    """'a ↔ b' for every two modules that import each other (a cycle: either may see the other half made)."""
    imports = module_imports(sources)
    return sorted({" ↔ ".join(sorted((a, b))) for a, bs in imports.items() for b in bs if a in imports.get(b, ())})


def test_no_two_modules_import_each_other():
    assert mutual_imports(package_sources()) == []


def test_the_cycle_check_catches_two_modules_importing_each_other():
    """The control: a function-level import back, as kv ↔ aot and loading ↔ presets once had."""
    sources = package_sources()
    sources["specdemo.decoding.shapes"] += "\ndef f():\n    from specdemo.decoding import aot\n"
    sources["specdemo.models.presets"] += "\ndef g():\n    from specdemo.models.loading import LoadOptions\n"
    sources["specdemo.models.loading"] += "\ndef h():\n    from specdemo.models.presets import PRESETS\n"
    assert mutual_imports(sources) == [
        "specdemo.decoding.aot ↔ specdemo.decoding.shapes",
        "specdemo.models.loading ↔ specdemo.models.presets",
    ]


def environment_reads(sources: dict[str, str]) -> list[str]:
    """'module: NAME' for every SPECDEMO_* variable read outside specdemo/env.py or missing from its table."""
    import re

    from specdemo.env import VARIABLES

    bad = []
    for module, source in sources.items():
        if module != "specdemo.env" and re.search(r"(os\.environ|getenv)[^\n]*SPECDEMO_", source):
            bad.append(f"{module}: reads the environment itself")
        bad += [f"{module}: {name}" for name in re.findall(r"SPECDEMO_[A-Z0-9_]+", source) if name not in VARIABLES]
    return bad


def test_every_environment_variable_is_read_in_one_place():
    assert environment_reads(package_sources()) == []


def test_the_environment_check_catches_a_stray_read_and_an_unlisted_name():
    sources = package_sources()
    sources["specdemo.models.cache"] += '\nX = os.environ.get("SPECDEMO_CACHE_GB")\nY = env.get("SPECDEMO_NEW")\n'
    assert environment_reads(sources) == [
        "specdemo.models.cache: reads the environment itself",
        "specdemo.models.cache: SPECDEMO_NEW",
    ]


def test_no_module_is_longer_than_a_room():
    """A module a newcomer can read: at most 500 lines (app.py and every module of the package)."""
    root = Path(__file__).resolve().parent.parent
    files = [root / "app.py", *(root / "specdemo").rglob("*.py")]
    long = {f.relative_to(root).as_posix(): n for f in files if (n := len(f.read_text().splitlines())) > 500}
    assert not long, long
    assert len(files) > 50  # the control: the walk found the package


def method_strings(sources: dict[str, str]) -> list[str]:
    """'module: text' for every runner kind compared as a string, or a method looked up by its own name to get
    that name, outside the registry (``Method`` says what a runner means: on_engine, hand_off, both_on_vllm)."""
    import re

    pattern = re.compile(r"\brunner\s*(==|!=|=)\s*[\"']|methods\.get\([\"'][^\"']+[\"']\)\.name")
    return [
        f"{module}: {m.group(0)}"
        for module, source in sources.items()
        if module != "specdemo.decoding.methods"
        for m in pattern.finditer(source)
    ]


def method_literals(sources: dict[str, str]) -> list[str]:
    """'module: text' for every registered method's name spelled as a string where a method is named, in the
    layers that read the registry (measure/, view/, app/): ``method="draft"``, ``gammas["draft"]``."""
    import re

    from specdemo.decoding import methods

    names = "|".join(re.escape(n) for n in sorted(methods.REGISTRY, key=len, reverse=True))
    keyword = rf"""\bmethod\s*(?:==|!=|=)\s*["']({names})["']"""
    key = rf"""gammas(?:["']\])?(?:\[|\.get\()\s*["']({names})["']"""
    pattern = re.compile(f"{keyword}|{key}")
    return [
        f"{module}: {m.group(0)}"
        for module, source in sources.items()
        if module.split(".")[1:2] in (["measure"], ["view"], ["app"])
        for m in pattern.finditer(source)
    ]


def test_no_method_is_named_by_a_string_in_measure_view_or_app():
    assert method_literals(package_sources()) == []


def test_the_method_literal_check_catches_the_lesson_s_old_spellings():
    """The control: measure/lesson.py's scenes once named their methods so."""
    sources = package_sources()
    sources["specdemo.measure.lesson"] += '\nS = Scene(method="draft")\nG = table["gammas"]["draft"]\n'
    sources["specdemo.app.tabs"] += "\nif method == 'prompt-lookup':\n    pass\n"
    assert method_literals(sources) == [
        "specdemo.app.tabs: method == 'prompt-lookup'",
        'specdemo.measure.lesson: method="draft"',
        'specdemo.measure.lesson: gammas"]["draft"',
    ]


def test_no_method_name_or_runner_is_compared_as_a_string_outside_the_registry():
    assert method_strings(package_sources()) == []


def test_the_method_string_check_catches_each_kind():
    sources = package_sources()
    sources["specdemo.app.live"] += '\nif method.runner == "naive":\n    pass\n'
    sources["specdemo.cli.bench"] += "\nX = methods.get('prompt-lookup').name\nY = methods.names(runner='vllm')\n"
    assert method_strings(sources) == [
        'specdemo.app.live: runner == "',
        "specdemo.cli.bench: methods.get('prompt-lookup').name",
        "specdemo.cli.bench: runner='",
    ]


GRADIO_LAYERS = ("app", "specdemo.ui")  # app.py and the ui/ layer build components; app/ is plain functions


def gradio_importers(sources: dict[str, str]) -> list[str]:
    """Every module outside app.py and specdemo/ui/ that imports gradio (at the top or inside a function)."""
    bad = []
    for module, source in sources.items():
        if module == GRADIO_LAYERS[0] or module.startswith(GRADIO_LAYERS[1]):
            continue
        for node in ast.walk(ast.parse(source)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n == "gradio" or n.startswith("gradio.") for n in names):
                bad.append(module)
    return sorted(set(bad))


def test_gradio_is_imported_by_app_py_and_the_ui_layer_only():
    sources = package_sources() | {"app": (PACKAGE.parent / "app.py").read_text(encoding="utf-8")}
    assert gradio_importers(sources) == []
    assert "import gradio" in sources["app"] and "import gradio" in sources["specdemo.ui.layout"]  # the walk saw them


def test_the_gradio_check_catches_an_import_in_another_layer():
    """The control: the import that specdemo/app/layout.py once had, and one inside a function."""
    sources = package_sources()
    sources["specdemo.app.race_tab"] += "\nimport gradio as gr\n"
    sources["specdemo.view.render"] += "\ndef f():\n    from gradio.themes import Soft\n"
    assert gradio_importers(sources) == ["specdemo.app.race_tab", "specdemo.view.render"]
