"""The door of open mode (``hivemind serve`` without ``--tokens``).

Without tokens the server trusts whoever reaches it, so it must be sure that whoever reaches
it is the user on this machine and not a web page the user happens to have open. A browser
sends "simple" cross-origin requests (a form post, a ``no-cors`` fetch with a ``text/plain``
body) without asking first, and DNS rebinding makes a foreign page's requests arrive with a
foreign ``Host``. So, in open mode, every HTTP request must:

- name the bound loopback address in ``Host`` (``127.0.0.1:PORT`` as bound, ``[::1]:PORT``,
  or ``localhost:PORT``): else 421 ``misdirected_host``, as ``/mcp`` already answered;
- carry no ``Origin`` but one of those same addresses (``http://127.0.0.1:PORT``): else 403
  ``forbidden_origin`` (the explorer at ``/ui`` is same-origin and passes);
- send a body that changes something (POST, PUT, PATCH) as ``Content-Type:
  application/json``: else 415 ``unsupported_media_type``. No browser sends that type
  across origins without a preflight, which this server never grants.

With tokens nothing here runs: a bearer token is what a foreign page cannot send.
The address compared is the socket's own (``scope["server"]``): the one the request reached.
"""

from __future__ import annotations

import ipaddress

import msgspec
from starlette.types import ASGIApp, Receive, Scope, Send

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH"})
"""Methods whose body must be ``application/json`` in open mode."""
JSON_TYPE = "application/json"

_encode = msgspec.json.Encoder().encode


def host_names(server: tuple[str, int] | None) -> frozenset[str]:
    """The ``Host`` values naming the loopback address ``server`` (host, port) is bound to:
    that address and ``localhost``, with the port (and without it when it is 80)."""
    if server is None:
        return frozenset()
    host, port = str(server[0]), int(server[1])
    names = {"localhost"}
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:  # a name: only "localhost" is served in open mode
        names.add(host.lower())
    else:
        names.add(f"[{ip.compressed}]" if ip.version == 6 else ip.compressed)
    out = {f"{n}:{port}" for n in names}
    if port == 80:
        out |= names
    return frozenset(out)


def refusal(scope: Scope) -> tuple[int, str, str] | None:
    """``(status, code, message)`` refusing an open-mode request, or None to let it in."""
    headers: dict[bytes, bytes] = {}
    for k, v in scope.get("headers", []):
        headers.setdefault(k.lower(), v)
    allowed = host_names(scope.get("server"))
    host = headers.get(b"host", b"").decode("latin-1").strip().lower()
    if host not in allowed:
        return (421, "misdirected_host",
                f"Host {host[:100]!r} is not this server's loopback address (open mode, no "
                f"tokens, answers only {', '.join(sorted(allowed)) or 'its own address'})")
    origin = headers.get(b"origin")
    if origin is not None:
        o = origin.decode("latin-1").strip().lower()
        if o not in {f"http://{h}" for h in allowed}:
            return (403, "forbidden_origin",
                    f"Origin {o[:100]!r} is another site: open mode (no tokens) answers only "
                    "pages it serves itself and programs that send no Origin")
    if scope.get("method") in WRITE_METHODS:
        ctype = headers.get(b"content-type", b"").decode("latin-1")
        media = ctype.partition(";")[0].strip().lower()
        if media != JSON_TYPE:
            return (415, "unsupported_media_type",
                    f"Content-Type {ctype[:100]!r}: a write takes {JSON_TYPE} (open mode, no "
                    "tokens)")
    return None


class OpenModeGuard:
    """ASGI middleware answering ``refusal`` before any endpoint runs (open mode only)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            why = refusal(scope)
            if why is not None:
                status, code, message = why
                body = _encode({"error": {"code": code, "message": message}})
                await send({"type": "http.response.start", "status": status,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
