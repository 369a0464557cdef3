"""Command line: ``python -m specdemo generate|sample|bench|precision|profile|serve-vllm ...``, one module per
command group.

Errors exit with code 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import sys

from specdemo import env
from specdemo.cli import bench, generate, tools
from specdemo.cli.common import OneLineErrorParser
from specdemo.errors import SpecDemoError


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="python -m specdemo",
        description="Speculative decoding, measured.",
        epilog=f"environment:\n{env.table()}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineErrorParser)
    for group in (generate, bench, tools):
        group.add_parsers(sub)
    return parser


def quiet_libraries() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
    logging.disable_progress_bar()


COMMANDS = {
    "generate": generate.cmd_generate,
    "sample": generate.cmd_sample,
    "bench": bench.cmd_bench,
    "precision": tools.cmd_precision,
    "profile": tools.cmd_profile,
    "report": tools.cmd_report,
    "serve-vllm": tools.cmd_serve_vllm,
}


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "json", False):
        quiet_libraries()
    try:
        COMMANDS[args.command](args)
    except SpecDemoError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0
