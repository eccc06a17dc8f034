"""The requirements of cachemark's extras, read from pyproject.toml, one per line: what `pip install
'.[EXTRAS]'` would install besides cachemark itself. The Makefile installs them while the engine builds
(`pip install -e . --no-deps` in parallel): the two together took 82 s one after the other, ~60 s side by side.

    python scripts/requirements.py all test
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

PROJECT = "cachemark"


def requirements(extras: list[str]) -> list[str]:
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    out = list(project.get("dependencies", []))
    pending, seen = list(extras), set()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        if extra not in optional:
            raise SystemExit(f"requirements.py: no extra {extra!r} in pyproject.toml")
        seen.add(extra)
        for requirement in optional[extra]:
            own = re.fullmatch(rf"{PROJECT}\[([\w,\s-]+)\]", requirement.replace(" ", ""))
            if own:  # an extra made of other extras: `all = ["cachemark[sql,s3,…]"]`
                pending += own.group(1).split(",")
            else:
                out.append(requirement)
    return list(dict.fromkeys(out))


if __name__ == "__main__":
    print("\n".join(requirements(sys.argv[1:])))
