"""Write the CRD's schema (manifests/crd.yaml, which the chart links) and the field tables of docs/reference.md
from the fields' declarations in controller/model; `--check` only says whether they are current.

    python tools/generate_schema.py           # rewrite the generated parts
    python tools/generate_schema.py --check   # exit 1, naming the stale files, when one is not current

A developer's tool, not a `queuescale` command: the operator's users never regenerate the CRD, and the image
need not carry it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from controller.model.generate import crd_text, reference_text  # noqa: E402

GENERATED: dict[Path, Callable[[str], str]] = {
    ROOT / "manifests" / "crd.yaml": crd_text,
    ROOT / "docs" / "reference.md": reference_text,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a file is not current")
    args = parser.parse_args(argv)
    stale = []
    for path, render in GENERATED.items():
        current = path.read_text()
        wanted = render(current)
        if wanted == current:
            continue
        stale.append(path.relative_to(ROOT))
        if not args.check:
            path.write_text(wanted)
    for path in stale:
        print(f"{path}: {'not current' if args.check else 'regenerated'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
