"""A workshop laptop's install, measured: the README's first command in a fresh venv, then the first launch's
one-time conversion of SmolLM2.

    python -m tools.laptop_install [--out docs/results/laptop_install.json] [--system-site-packages]

Each ``pip install`` of the README's first command runs in a new venv with pip's cache off (an attendee's first
install downloads everything), timed; then the venv's disk, and the conversion of the wheel's GGUF into the
user cache (what the app's first launch does, ≈ once per laptop), timed, with its folder's disk. This machine's
link is not a room's wifi: the download part of a step's seconds is this network's, so the disk (the bytes to
fetch) is the figure to plan a room with. ``--system-site-packages`` lets the venv see what this Python has:
each step is then pip finding it already there (the smallest run, for the tests).
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from specdemo.measure.machine import machine

ROOT = Path(__file__).resolve().parent.parent


def readme_install() -> list[list[str]]:
    """The pip commands of the README's first command (run the app), in order, as argument lists."""
    line = next(s.strip() for s in (ROOT / "README.md").read_text().splitlines() if s.strip().endswith("python app.py"))
    return [shlex.split(part)[2:] for part in line.split(" && ") if part.startswith("pip install")]


def disk_mb(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink()) / 1e6


def measure(system_site_packages: bool, convert: bool = True) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        venv, cache = Path(scratch) / "venv", Path(scratch) / "cache"
        subprocess.run([sys.executable, "-m", "venv", str(venv)]
                       + (["--system-site-packages"] if system_site_packages else []), check=True)  # fmt: skip
        python, steps = venv / "bin" / "python", []
        for args in readme_install():
            start = time.perf_counter()
            pip = [str(python), "-m", "pip", "install", "-q", "--no-cache-dir", "--disable-pip-version-check", *args]
            subprocess.run(pip, check=True, cwd=ROOT)
            steps.append(
                {"command": "pip install " + shlex.join(args), "seconds": round(time.perf_counter() - start, 1)}
            )
            print(f"{steps[-1]['command']}: {steps[-1]['seconds']} s", flush=True)
        venv_mb = disk_mb(venv)
        start = time.perf_counter()  # the first launch's conversion, in the new venv, offline (the wheel's GGUF)
        script = "from specdemo.models import smollm2; print(smollm2.resolve_target())"
        env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "SPECDEMO_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
        if convert:
            subprocess.run([str(python), "-c", script], check=True, cwd=ROOT, env=env)
        convert_s = time.perf_counter() - start
        return {
            "machine": machine(),
            "python": platform.python_version(),
            "pip_cache": "off",
            "system_site_packages": system_site_packages,
            "steps": steps,
            "install_s": round(sum(s["seconds"] for s in steps), 1),
            "venv_mb": round(venv_mb),
            "convert_s": round(convert_s, 1) if convert else None,
            "converted_mb": round(disk_mb(cache)) if convert else None,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="write the results JSON here")
    parser.add_argument("--system-site-packages", action="store_true", help="the venv sees this Python's packages")
    parser.add_argument(
        "--no-convert",
        action="store_true",
        help="the install only (the tests' smoke run: the conversion in a fresh venv is tests/test_space.py's)",
    )
    args = parser.parse_args()
    result = measure(args.system_site_packages, convert=not args.no_convert)
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
