"""Builds status.html, the public status page, from the latest health checks in checks.json."""

import html
import json
from pathlib import Path

HERE = Path(__file__).parent


def overall(checks):
    """'operational' when every check is ok, else 'degraded'."""
    if any(state == "ok" for state in checks.values()):
        return "operational"
    return "degraded"


def headline(checks):
    """The page's headline: all clear, or which services are down."""
    if overall(checks) == "operational":
        return "All systems operational"
    down = sorted(name for name, state in checks.items() if state != "ok")
    return "Degraded: " + ", ".join(down) + (" is" if len(down) == 1 else " are") + " down"


def render(checks):
    """The whole page as HTML."""
    rows = "\n".join(f"    <li>{html.escape(name)}: {html.escape(state)}</li>"
                     for name, state in sorted(checks.items()))
    return f"""<!doctype html>
<html>
<head><title>Status</title></head>
<body>
  <h1>{html.escape(headline(checks))}</h1>
  <ul>
{rows}
  </ul>
</body>
</html>
"""


if __name__ == "__main__":
    checks = json.loads((HERE / "checks.json").read_text())
    (HERE / "status.html").write_text(render(checks))
    print(headline(checks))
