"""Command-line parsing only: each command calls into the modules that do the work."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from controller import __version__


def _validate(args: argparse.Namespace) -> int:
    import controller.sources  # noqa: F401  (registers the queue kinds with the spec parser)
    from controller.rulefiles import load_files

    result = load_files(args.files)
    lines = list(result.error_lines())
    for line in lines:
        print(line)
    for note in result.notes:
        print(f"{note.file}: {note.message}", file=sys.stderr)
    valid = sum(1 for r in result.rules if r.rule is not None)
    total = len(result.rules)
    if result.ok:
        print(f"{valid} of {total} rules valid", file=sys.stderr)
        return 0
    print(f"{len(lines)} errors; {valid} of {total} rules valid", file=sys.stderr)
    return 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="queuescale",
        description="Scale queue workers from the length of their queues.",
    )
    parser.add_argument("--version", action="version", version=f"queuescale {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    validate = commands.add_parser(
        "validate", help="check QueueScaler YAML files", description="Check QueueScaler YAML files; "
        "print every error as FILE: NAME: field.path: message; exit 1 on any error.",
    )
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.set_defaults(handler=_validate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except KeyboardInterrupt:
        return 130
    return code
