"""Render the status page in headless Chromium and check every row and the banner against the
probes: a component the probes do not call operational must not look operational."""

import subprocess
import sys
import tempfile
from html.parser import HTMLParser

from probes.collect import ROOT, results

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run"]


class Page(HTMLParser):
    """The rendered banner text and each component row's text, from the dumped DOM."""

    def __init__(self) -> None:
        super().__init__()
        self.banner, self.rows, self._in = "", {}, None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        if a.get("id") == "banner":
            self._in = ("banner", None)
        elif tag == "li" and "data-component" in a:
            self._in = ("row", a["data-component"])

    def handle_endtag(self, tag: str) -> None:
        self._in = None

    def handle_data(self, data: str) -> None:
        if self._in and self._in[0] == "banner":
            self.banner += data
        elif self._in:
            self.rows[self._in[1]] = self.rows.get(self._in[1], "") + data


def render() -> Page:
    with tempfile.TemporaryDirectory(prefix="status-check-") as profile:
        dom = subprocess.run(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom",
             (ROOT / "site" / "index.html").as_uri()],
            capture_output=True, text=True, timeout=60, check=True).stdout
    page = Page()
    page.feed(dom)
    return page


def problems(page: Page, probes: list[dict]) -> list[str]:
    found = []
    bad = [p["component"] for p in probes if p["status"] != "operational"]
    for p in probes:
        row = page.rows.get(p["component"])
        if row is None:
            found.append(f"{p['component']} is missing from the page")
        elif p["status"] != "operational" and row.endswith(": Operational"):
            found.append(f"the page shows '{row}' but the probe says {p['status']}")
    if bad and "operational" in page.banner.lower():
        found.append(f"the banner says '{page.banner}' while {', '.join(bad)} is not operational")
    for name in bad:
        if name not in page.banner:
            found.append(f"the banner '{page.banner}' does not name {name}")
    return found


def main() -> int:
    page = render()
    found = problems(page, results())
    if found:
        print("PAGE LIES: " + "; ".join(found))
        return 1
    print(f"PAGE TRUTHFUL: banner '{page.banner}'; "
          + ", ".join(page.rows[k] for k in sorted(page.rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
