"""What the service refuses before a handler runs: requests a web page or a rebinding host sends.

Without a token the service is only as safe as loopback, and a browser on this machine is on
loopback too: any page the user opens can send it requests, and a DNS name the page's owner
controls can be re-pointed at 127.0.0.1 (DNS rebinding), after which the page's own origin
reaches the service. So every request must name, in ``Host``, a name the server listens on
(421 otherwise); an ``Origin`` must be the server's own (403); a ``Sec-Fetch-Site`` other than
``same-origin`` (a browser sets it, no page can forge it) is refused (403), which
catches the navigations and redirects that carry no ``Origin`` -- ``none`` included: a page
the agent's browser opens can redirect that navigation to the service's port, past the
browser's own rule, which sees only a redirect chain's first URL. A request with a body must be
``application/json`` (415), which no page can send cross-site without a CORS preflight the
service never grants. Requests from clients that are not browsers (curl, httpx) pass on to the
token check and the routes.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
WILDCARDS = ("0.0.0.0", "::", "")
Refuse = Callable[[int, str], ASGIApp]  # (status, message) -> the error answer


def _norm(host: str) -> str:
    return host.strip().strip("[]").lower().rstrip(".")


def _hostname(value: str) -> str | None:
    """The host part of a ``Host`` header value (``name``, ``name:port``, ``[v6]:port``)."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        return _norm(value[1:end]) if end > 0 else None
    if value.count(":") > 1:  # a bare IPv6 address: not valid in Host, but unambiguous
        return _norm(value)
    return _norm(value.split(":", 1)[0])


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


class HostNames:
    """The names a request may give in ``Host``: loopback's, the listening address, and (on a
    wildcard address, which needs a token) any IP literal or this machine's own names."""

    def __init__(self, listen_host: str, *, extra: tuple[str, ...] = ()) -> None:
        self.wildcard = _norm(listen_host) in WILDCARDS
        names = {*LOOPBACK_NAMES, _norm(listen_host), *(_norm(n) for n in extra)}
        if self.wildcard:
            names |= {_norm(socket.gethostname()), _norm(socket.getfqdn())}
        self.names = frozenset(n for n in names if n)

    def allows(self, host: str) -> bool:
        host = _norm(host)
        return host in self.names or (self.wildcard and _is_ip(host))  # an IP is never rebound

    def shown(self) -> str:
        return ", ".join(sorted(self.names)) + (" or any IP address" if self.wildcard else "")


class BrowserGuard:
    """ASGI middleware refusing a foreign Host, a foreign Origin, a cross-site fetch, and a body
    that is not JSON."""

    def __init__(self, app: ASGIApp, *, hosts: HostNames, port: int, refuse: Refuse) -> None:
        self.app, self.hosts, self.port, self.refuse = app, hosts, port, refuse

    def refusal(self, method: str, headers: Headers) -> tuple[int, str] | None:
        """(status, message) when the request is refused, else None."""
        host = headers.get("host", "")
        name = _hostname(host)
        if not name or not self.hosts.allows(name):
            return 421, (
                f"Host {host[:80]!r} is not a name this server listens on ({self.hosts.shown()}): "
                "a request through another name (DNS rebinding) is refused"
            )
        origin = headers.get("origin")
        if origin is not None and not self._own_origin(origin):
            return 403, (
                f"Origin {origin[:80]!r} is not this server's: requests from web pages of "
                "other origins are refused"
            )
        site = headers.get("sec-fetch-site", "").lower()
        if site and site != "same-origin":
            return 403, (
                f"a request from a browser (Sec-Fetch-Site: {site[:20]}): the service answers "
                "programs (curl, httpx, agentloop's Python API), not web pages, links or redirects"
            )
        if method in ("POST", "PUT", "PATCH"):
            media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media != "application/json":
                return 415, (
                    f"the body must be JSON sent as 'Content-Type: application/json' (got "
                    f"{media[:60]!r})"
                )
        return None

    def _own_origin(self, origin: str) -> bool:
        try:
            parts = urlsplit(origin)
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        except ValueError:
            return False
        host = parts.hostname or ""
        return parts.scheme == "http" and port == self.port and self.hosts.allows(host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = self.refusal(scope["method"], Headers(scope=scope))
            if refused is not None:
                await self.refuse(*refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)
