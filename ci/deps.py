"""What pyproject.toml declares, read for the CI scripts (one declaration: the ranges
and the extras are written there only).

    python ci/deps.py extras          the extras a user runs fastq with, comma-separated:
                                      what the runs on the oldest and newest releases install
    python ci/deps.py packages        the names of the runtime dependencies, one a line:
                                      fastq's own and those extras' (ci/pythons.sh takes them
                                      at their newest)
    python ci/deps.py requires EXTRA  the requirements of one extra, one a line
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11 (ci/pythons.sh's oldest): the parser pip carries
    from pip._vendor import tomli as tomllib

# the extras that are not run time: the tools of the tests, the docs and the benchmarks,
# and uvloop (an event loop no test selects)
NOT_RUNTIME = {"test", "test-core", "docs", "bench", "uvloop"}


def main(argv: list[str]) -> None:
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    runtime = [name for name in extras if name not in NOT_RUNTIME]
    if argv == ["extras"]:
        print(",".join(runtime))
    elif argv == ["packages"]:
        requirements = project["dependencies"] + [req for name in runtime for req in extras[name]]
        # a requirement's name: what comes before its extras, version or marker
        print("\n".join(sorted({re.split(r"[\[<>=!~;\s]", req)[0] for req in requirements})))
    elif len(argv) == 2 and argv[0] == "requires" and argv[1] in extras:
        print("\n".join(extras[argv[1]]))
    else:
        sys.exit(f"ci/deps.py: usage: extras | packages | requires EXTRA (got {argv})")


if __name__ == "__main__":
    main(sys.argv[1:])
