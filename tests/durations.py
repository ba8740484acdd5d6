"""The recorded seconds of each test file, which tests/conftest.py uses to hand the heaviest files to
the test workers first.

Under `--dist loadfile` a file is one unit of work for one worker; xdist hands the units out in the
order it is given, and by default it sorts them by their number of tests. A file of one or two heavy
tests (a wheel build, a mutant catalog) then came last, and the other worker idled while it ran. Given
the heaviest first (longest processing time first), the workers finish close together. A stale or
missing entry only makes the split less even: it never changes what runs or what is asserted.

Refresh after the suite changes much (the seconds of the tests of each file, summed):

    python -m pytest -q -n auto --dist loadfile --junitxml=/tmp/suite.xml
    python tests/durations.py /tmp/suite.xml
"""
from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

TABLE = Path(__file__).with_name("durations.json")


def file_seconds(table: Path = TABLE) -> dict[str, float]:
    """{test file relative to the checkout ("tests/test_x.py"): seconds}; {} when the table is missing
    or unreadable (the order is then xdist's own)."""
    try:
        seconds = json.loads(table.read_text())["seconds"]
        return {str(k): float(v) for k, v in seconds.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def from_junit(path: Path) -> dict[str, float]:
    """Per-file sums of a JUnit XML report's test times (the classname "tests.test_x" is the file)."""
    seconds = Counter()
    for case in ET.parse(path).iter("testcase"):
        seconds[case.get("classname", "").replace(".", "/") + ".py"] += float(case.get("time") or 0)
    return {name: round(s, 1) for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    TABLE.write_text(json.dumps({"source": "python tests/durations.py JUNIT.xml (tests/durations.py)",
                                 "seconds": from_junit(Path(argv[0]))}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
