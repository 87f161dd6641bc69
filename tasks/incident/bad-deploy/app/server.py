"""orders-api's HTTP server: GET /health and GET /orders/<id>, on a free loopback port.

At start it writes run/app.pid, then run/app.port (atomically, last: its presence means the
server listens). It exits on SIGTERM, and on its own once its working folder is deleted, so a
copy of the service never outlives the folder it was started from.
"""

import json
import os
import subprocess
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from app.pricing import order_total

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "run"
ORDERS = {o["id"]: o for o in json.loads((ROOT / "app" / "orders.json").read_text())}
CODE_SHA = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=False).stdout.strip() or "unknown"


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        try:
            if self.path == "/health":
                self._send(200, {"status": "ok", "code_sha": CODE_SHA})
            elif self.path.startswith("/orders/") and self.path[8:].isdigit():
                order = ORDERS.get(int(self.path[8:]))
                if order is None:
                    self._send(404, {"error": "no such order"})
                else:
                    self._send(200, order_total(order))
            else:
                self._send(404, {"error": "not found"})
        except Exception:
            sys.stderr.write(f"ERROR {self.path}\n{traceback.format_exc()}")
            self._send(500, {"error": "internal server error"})

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt: str, *args: object) -> None:
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} {fmt % args}\n")
        sys.stderr.flush()


def _exit_with_folder() -> None:
    while ROOT.is_dir():
        time.sleep(0.5)
    os._exit(0)


def _write(name: str, text: str) -> None:
    tmp = RUN / f".{name}.tmp"
    tmp.write_text(text)
    tmp.replace(RUN / name)


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    RUN.mkdir(exist_ok=True)
    _write("app.pid", str(os.getpid()))
    _write("app.port", str(server.server_address[1]))
    sys.stderr.write(f"orders-api {CODE_SHA} listening on 127.0.0.1:{server.server_address[1]}\n")
    sys.stderr.flush()
    threading.Thread(target=_exit_with_folder, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
