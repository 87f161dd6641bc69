"""The GDP-Val-like suite's document step: report.md -> report.html, at a converter's latency.

GDP-Val deliverables are documents (slides, spreadsheets, reports); producing one goes through a
converter (LibreOffice, pandoc, a PDF renderer) that takes seconds. This stand-in renders the
Markdown's headings, paragraphs and pipe tables to HTML for real and waits RENDER_LATENCY_S
first, standing for converting a multi-page deliverable with charts, so a task's tool time has
the real runs' shape (the value is the suite's one free choice, explained in ../README.md).
"""

from __future__ import annotations

import html
import sys
import time
from pathlib import Path

RENDER_LATENCY_S = 16.0


def render(md: str) -> str:
    out, rows = ["<html><body>"], []
    for line in md.splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not set("".join(cells)) <= set("-: "):
                rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
                            + "</tr>")
            continue
        if rows:
            out.append("<table>" + "".join(rows) + "</table>")
            rows = []
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level}>{html.escape(line.lstrip('#').strip())}</h{level}>")
        elif line.strip():
            out.append(f"<p>{html.escape(line)}</p>")
    out.append("</body></html>")
    return "\n".join(out)


def main() -> int:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "report.md")
    time.sleep(RENDER_LATENCY_S)
    Path("report.html").write_text(render(src.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"rendered {src} -> report.html")
    return 0


if __name__ == "__main__":
    sys.exit(main())
