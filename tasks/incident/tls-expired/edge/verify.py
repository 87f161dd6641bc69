"""Prove the edge's TLS: a verifying handshake as a client does it, and a certificate that lasts.

Connects to the running edge as api.internal with the internal CA as the only trust anchor
(hostname and dates checked), then checks that the served certificate is the one on disk
(pki/server.pem: a renewal that only lives in memory is lost on restart), that it is valid for at
least 30 more days, and that /health answers over the connection.
"""

import socket
import ssl
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIN_DAYS = 30


def main() -> int:
    try:
        port = int((ROOT / "run" / "edge.port").read_text())
    except (OSError, ValueError):
        print("HANDSHAKE FAILED: the edge is not running (no run/edge.port)")
        return 1
    ctx = ssl.create_default_context(cafile=str(ROOT / "pki" / "ca.pem"))
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
                ctx.wrap_socket(raw, server_hostname="api.internal") as tls:
            cert, der = tls.getpeercert(), tls.getpeercert(binary_form=True)
            tls.sendall(b"GET /health HTTP/1.1\r\nHost: api.internal\r\nConnection: close\r\n\r\n")
            reply = b""
            while chunk := tls.recv(4096):
                reply += chunk
    except (ssl.SSLError, OSError) as exc:
        print(f"HANDSHAKE FAILED: {exc}")
        return 1
    problems = []
    days = (ssl.cert_time_to_seconds(cert["notAfter"]) - time.time()) / 86400
    if days < MIN_DAYS:
        problems.append(f"the certificate expires in {days:.0f} days (need {MIN_DAYS}+)")
    on_disk = ssl.PEM_cert_to_DER_cert((ROOT / "pki" / "server.pem").read_text())
    if der != on_disk:
        problems.append("the served certificate is not pki/server.pem")
    if not reply.startswith(b"HTTP/1.0 200") and not reply.startswith(b"HTTP/1.1 200"):
        status_line = reply.split(b"\r\n", 1)[0]
        problems.append(f"/health answered {status_line!r}")
    if problems:
        print("HANDSHAKE OK BUT: " + "; ".join(problems))
        return 1
    print(f"HANDSHAKE OK: api.internal verified by the internal CA, valid until "
          f"{cert['notAfter']} ({days:.0f} days), /health 200")
    return 0


if __name__ == "__main__":
    sys.exit(main())
