"""The TLS edge: HTTPS on a free loopback port with pki/server.pem; SIGHUP reloads the certificate.

At start it writes run/edge.pid, then run/edge.port (atomically, last: its presence means the
server listens). Each connection's handshake runs in its own thread and a failed one is logged.
It exits on SIGTERM, and on its own once its working folder is deleted, so a copy of the service
never outlives the folder it was started from.
"""

import json
import os
import signal
import socket
import ssl
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / "run"
PKI = ROOT / "pki"


def log(msg: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} {msg}\n")
    sys.stderr.flush()


def load(ctx: ssl.SSLContext) -> None:
    ctx.load_cert_chain(PKI / "server.pem", PKI / "server.key")
    log("loaded pki/server.pem")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        status, body = (200, {"status": "ok", "service": "api.internal"}) \
            if self.path == "/health" else (404, {"error": "not found"})
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt: str, *args: object) -> None:
        log(fmt % args)


class TLSServer(ThreadingHTTPServer):
    """Accepts plain TCP and does the TLS handshake in the connection's thread."""

    def __init__(self, ctx: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.ctx = ctx

    def finish_request(self, request: socket.socket, client_address: tuple) -> None:
        try:
            conn = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log(f"TLS handshake failed from {client_address[0]}: {exc}")
            return
        super().finish_request(conn, client_address)


def _exit_with_folder() -> None:
    while ROOT.is_dir():
        time.sleep(0.5)
    os._exit(0)


def _write(name: str, text: str) -> None:
    tmp = RUN / f".{name}.tmp"
    tmp.write_text(text)
    tmp.replace(RUN / name)


def main() -> None:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    load(ctx)
    server = TLSServer(ctx)

    def reload(signum: int, frame: object) -> None:
        try:
            load(ctx)
        except (ssl.SSLError, OSError) as exc:
            log(f"reload failed, still serving the previous certificate: {exc}")

    signal.signal(signal.SIGHUP, reload)
    RUN.mkdir(exist_ok=True)
    _write("edge.pid", str(os.getpid()))
    _write("edge.port", str(server.server_address[1]))
    log(f"api.internal edge listening on https://127.0.0.1:{server.server_address[1]}")
    threading.Thread(target=_exit_with_folder, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
