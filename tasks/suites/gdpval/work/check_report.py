"""The GDP-Val-like suite's success check: the deliverable exists and its numbers are right.

``python check_report.py DATA.csv`` recomputes every figure from the data and requires
``report.md`` to carry each table row exactly, a summary section, and ``report.html`` (the
rendered deliverable) to exist and hold the same table. Exit 0 when all hold, else 1 with the
first problem.
"""

from __future__ import annotations

import sys
from pathlib import Path

from figures import figures, table_lines


def main() -> int:
    data = sys.argv[1]
    report = Path("report.md")
    if not report.is_file():
        print("report.md is missing")
        return 1
    text = report.read_text(encoding="utf-8")
    for line in table_lines(figures(data)):
        if line not in text:
            print(f"report.md lacks the row: {line}")
            return 1
    if "## Summary" not in text:
        print("report.md has no '## Summary' section")
        return 1
    html = Path("report.html")
    if not html.is_file() or "<table>" not in html.read_text(encoding="utf-8"):
        print("report.html (the rendered deliverable) is missing or has no table")
        return 1
    print("report checked: every figure matches the data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
