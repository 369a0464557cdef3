"""Where and when a number was measured: every results file and model card names its machine."""

from __future__ import annotations

import platform
from datetime import date
from pathlib import Path

import torch


def machine() -> str:
    """The CPU as /proc/cpuinfo names it (else the architecture), with today's date: every card's
    numbers say where and when they were measured."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    names = [line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")]
    cpu = names[0] if names else f"{platform.machine()} CPU"
    return f"{cpu}, {torch.get_num_threads()} thread(s), measured {date.today().isoformat()}"
