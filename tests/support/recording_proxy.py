"""A loopback reverse proxy that records what a client sent to the gateway and what it got.

    with recording_proxy(gateway.url) as proxy:
        run the CLI against proxy.url
    proxy.exchanges   # one Exchange per request, in arrival order

The gateway's own counters say how many requests failed; this says which and why (the error
body), and keeps each request's body for fixtures. Responses stream through unbuffered, so a
CLI sees the gateway's pacing. Credential headers are recorded by name only.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from scripts.record_agent_requests import CREDENTIAL_HEADERS, REDACTED

_HOP_HEADERS = frozenset(
    {"host", "content-length", "connection", "transfer-encoding", "keep-alive", "accept-encoding"}
)
MAX_ERROR_BYTES = 64 * 1024
# A Responses answer names its response first: the JSON's `id`, or the `response.created` event.
RESPONSE_ID = re.compile(rb'"id"\s*:\s*"(resp_[A-Za-z0-9]+)"')
ID_BYTES = 8 * 1024


@dataclass
class Exchange:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    received_at: float
    status: int = 0
    error: str | None = None  # the body of a non-2xx answer
    # The id of the response a 2xx Responses answer made (`resp_...`): a later request's
    # `item_reference`s and `previous_response_id` name it, so a replay maps it to its own.
    response_id: str | None = None

    def record(self) -> dict[str, Any]:
        record = {
            "method": self.method,
            "path": self.path,
            "headers": self.headers,
            "body": self.body,
            "received_at": self.received_at,
        }
        if self.response_id is not None:
            record["response_id"] = self.response_id
        return record


@dataclass
class RecordingProxy:
    server: ThreadingHTTPServer
    upstream: str
    exchanges: list[Exchange] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def failed(self) -> list[Exchange]:
        with self.lock:
            return [e for e in self.exchanges if not 200 <= e.status < 300]


def _handler(proxy: RecordingProxy, client: httpx.Client) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            headers = {k.lower(): v for k, v in self.headers.items()}
            exchange = Exchange(
                self.command,
                self.path,
                {k: REDACTED if k in CREDENTIAL_HEADERS else v for k, v in headers.items()},
                body,
                time.time(),
            )
            with proxy.lock:
                proxy.exchanges.append(exchange)
            sent = {k: v for k, v in headers.items() if k not in _HOP_HEADERS}
            request = client.build_request(
                self.command, proxy.upstream + self.path, headers=sent, content=raw
            )
            try:
                response = client.send(request, stream=True)
            except httpx.HTTPError as exc:
                exchange.status, exchange.error = 599, f"proxy: {exc!r}"
                self.send_error(502)
                return
            try:
                exchange.status = response.status_code
                self.send_response(response.status_code)
                for name, value in response.headers.items():
                    if name.lower() not in _HOP_HEADERS and name.lower() != "content-encoding":
                        self.send_header(name, value)
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                kept = head = b""
                creates = self.command == "POST" and self.path.split("?")[0] == "/v1/responses"
                for chunk in response.iter_bytes():
                    if exchange.status >= 300 and len(kept) < MAX_ERROR_BYTES:
                        kept += chunk
                    elif creates and exchange.response_id is None and len(head) < ID_BYTES:
                        # Before the client sees it, so it is there when the client's next
                        # request (which may name it) arrives.
                        head += chunk
                        made = RESPONSE_ID.search(head)
                        if made is not None:
                            exchange.response_id = made.group(1).decode()
                    if self.command != "HEAD":
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        self.wfile.flush()
                if self.command != "HEAD":
                    self.wfile.write(b"0\r\n\r\n")
                if kept:
                    exchange.error = kept.decode("utf-8", "replace")
            finally:
                response.close()

        do_GET = do_POST = do_HEAD = do_DELETE = _forward

    return Handler


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that closes a kept-alive connection as it exits is no error of the proxy's;
        # anything else still prints its traceback.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def recording_proxy(upstream: str) -> Iterator[RecordingProxy]:
    with httpx.Client(timeout=httpx.Timeout(600.0, connect=5.0)) as client:
        server = _Server(("127.0.0.1", 0), BaseHTTPRequestHandler)
        proxy = RecordingProxy(server, upstream.rstrip("/"))
        server.RequestHandlerClass = _handler(proxy, client)
        server.daemon_threads = True
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield proxy
        finally:
            server.shutdown()
            server.server_close()
