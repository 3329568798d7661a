"""Fetching an image URL without letting a client reach what the gateway can reach.

The URL's scheme and exact host are checked against the configuration; the gateway resolves
the name itself and refuses any non-global address (gateway/media/addresses.py); the
connection goes to that very address (the name travels only as the Host header and the TLS
SNI, which the certificate is verified against), so a second DNS answer cannot redirect it
(DNS rebinding). Redirects are off unless configured, and then every hop is checked the same
way. Connect and total timeouts, `image/*` only, no content encoding (a compressed body could
expand past the cap in one chunk), and the byte cap enforced while the body streams.
"""

from __future__ import annotations

import asyncio
import logging
import re

import httpx

from gateway.media.addresses import HostResolver, denied_because, parse_address
from gateway.media.budget import RequestBudget
from gateway.media.errors import MediaError
from gateway.settings import MediaRemoteSettings

log = logging.getLogger("gateway.media.fetch")

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]{0,15}):")


class RemoteFetcher:
    def __init__(
        self,
        settings: MediaRemoteSettings,
        *,
        max_image_bytes: int,
        resolve_host: HostResolver,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._settings = settings
        self._max_image_bytes = max_image_bytes
        self._allowed_hosts = frozenset(_ascii_host(host) for host in settings.allowed_hosts)
        self._resolve_host = resolve_host
        self._max_hops = settings.max_redirects if settings.allow_redirects else 0
        self._slots = asyncio.Semaphore(settings.max_concurrent_fetches)
        if transport is None:
            # No keep-alive: the pool is keyed by address, and a connection made for one
            # host's name (SNI, certificate) must not serve another host on the same address.
            # trust_env off: a proxy from the environment would undo the address pinning.
            transport = httpx.AsyncHTTPTransport(
                retries=0,
                trust_env=False,
                limits=httpx.Limits(
                    max_connections=settings.max_concurrent_fetches, max_keepalive_connections=0
                ),
            )
        total = settings.total_timeout_s
        self._client = httpx.AsyncClient(
            transport=transport,
            timeout=httpx.Timeout(total, connect=settings.connect_timeout_s),
            follow_redirects=False,
            trust_env=False,
        )

    def check_url(self, text: str, where: str, *, after_redirect: bool = False) -> httpx.URL:
        """The URL when configuration allows fetching it (before any network work)."""
        hop = "the image URL redirected to a URL that" if after_redirect else "the image URL"
        if not self._settings.enabled:
            raise MediaError(
                "remote_images_disabled",
                where,
                "this gateway does not fetch image URLs (media.remote.enabled is off); send the "
                "image inline as a data:image/<type>;base64,... URL.",
            )
        try:
            url = httpx.URL(text)
        except (httpx.InvalidURL, ValueError, TypeError):
            raise MediaError("malformed_image_url", where, f"{hop} does not parse.") from None
        if url.scheme not in ("http", "https"):
            raise MediaError(
                "unsupported_image_source",
                where,
                f"{hop} has the scheme {url.scheme[:16]!r}; only https (and data: URLs) are "
                "accepted.",
            )
        if not url.host:
            raise MediaError("malformed_image_url", where, f"{hop} has no host.")
        if url.userinfo:
            raise MediaError(
                "malformed_image_url",
                where,
                f"{hop} carries credentials (user:password@); remove them.",
            )
        if _host(url) not in self._allowed_hosts:
            raise MediaError(
                "image_host_not_allowed",
                where,
                f"{hop} is on host {_host(url)[:253]!r}, which is not in this gateway's list "
                "of image hosts (media.remote.allowed_hosts); send the image as a data: URL.",
            )
        if url.scheme == "http" and not self._settings.allow_http:
            raise MediaError(
                "insecure_image_url",
                where,
                f"{hop} uses plain http; use https (media.remote.allow_http is off).",
            )
        return url

    async def fetch(self, url: httpx.URL, where: str, budget: RequestBudget) -> bytes:
        """The body of a URL that passed check_url, following allowed redirects."""
        total = self._settings.total_timeout_s
        try:
            async with asyncio.timeout(total), self._slots:
                return await self._follow(url, where, budget)
        except (TimeoutError, httpx.TimeoutException):
            raise MediaError(
                "image_fetch_timeout",
                where,
                f"fetching the image from {_host(url)!r} did not finish in time (connect "
                f"{self._settings.connect_timeout_s:g} s, total {total:g} s); send the image as "
                "a data: URL.",
            ) from None
        except httpx.HTTPError as exc:
            # Connection refused or reset, TLS failure, a broken body: said by type only
            # (httpx's messages can quote the URL, query string included).
            raise MediaError(
                "image_fetch_failed",
                where,
                f"the image could not be fetched from {_host(url)!r} ({type(exc).__name__}).",
            ) from None

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _follow(self, url: httpx.URL, where: str, budget: RequestBudget) -> bytes:
        for hop in range(self._max_hops + 1):
            address = await self._address(url, where)
            response = await self._send(url, address)
            try:
                if response.status_code not in _REDIRECTS:
                    return await self._body(response, url, where, budget)
                location = response.headers.get("location")
                if not location:
                    raise MediaError(
                        "image_fetch_failed",
                        where,
                        f"{_host(url)!r} answered HTTP {response.status_code} without a Location.",
                    )
                if not self._settings.allow_redirects or hop == self._max_hops:
                    limit = (
                        f"more than {self._max_hops} redirects are not followed"
                        if self._settings.allow_redirects
                        else "redirects are not followed (media.remote.allow_redirects is off)"
                    )
                    raise MediaError(
                        "image_redirect_denied",
                        where,
                        f"{_host(url)!r} answered HTTP {response.status_code} (a redirect); "
                        f"{limit}. Give the image's final URL.",
                    )
                try:
                    target = url.join(location)
                except (httpx.InvalidURL, ValueError, TypeError):
                    raise MediaError(
                        "image_fetch_failed",
                        where,
                        f"{_host(url)!r} redirected to a URL that does not parse.",
                    ) from None
                url = self.check_url(str(target), where, after_redirect=True)
            finally:
                await response.aclose()
        raise AssertionError("unreachable: the last hop returns or raises")

    async def _address(self, url: httpx.URL, where: str) -> str:
        """The one address this hop connects to, after every answer has been checked."""
        host = _host(url)
        if parse_address(host) is not None:
            answers = [host]
        else:
            try:
                answers = await self._resolve_host(host, url.port or _default_port(url))
            except (OSError, UnicodeError) as exc:
                raise MediaError(
                    "image_fetch_failed",
                    where,
                    f"the image host {host!r} could not be resolved ({type(exc).__name__}).",
                ) from None
        if not answers:
            raise MediaError(
                "image_fetch_failed", where, f"the image host {host!r} has no address."
            )
        for answer in answers:
            address = parse_address(answer)
            why = "not an IP address" if address is None else denied_because(address)
            if why is not None:
                # Every answer, not just the one used: a mixed answer is a rebinding attempt.
                raise MediaError(
                    "image_address_denied",
                    where,
                    f"the image host {host!r} resolves to an address this gateway does not "
                    f"fetch from ({why}).",
                )
        return answers[0]

    async def _send(self, url: httpx.URL, address: str) -> httpx.Response:
        headers = {
            "Host": url.netloc.decode("ascii"),
            "Accept": "image/*",
            "Accept-Encoding": "identity",
            "User-Agent": self._settings.user_agent,
        }
        extensions = {"sni_hostname": _host(url)} if url.scheme == "https" else {}
        request = self._client.build_request(
            "GET", url.copy_with(host=address), headers=headers, extensions=extensions
        )
        return await self._client.send(request, stream=True)

    async def _body(
        self, response: httpx.Response, url: httpx.URL, where: str, budget: RequestBudget
    ) -> bytes:
        host = _host(url)
        if response.status_code != 200:
            raise MediaError(
                "image_fetch_failed",
                where,
                f"{host!r} answered HTTP {response.status_code} for the image.",
            )
        content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if not content_type.startswith("image/"):
            shown = content_type[:64] or "none"
            raise MediaError(
                "unsupported_image_type",
                where,
                f"{host!r} sent content type {shown!r}, not an image/* type.",
            )
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity"):
            raise MediaError(
                "image_fetch_failed",
                where,
                f"{host!r} sent the image with content encoding {encoding[:32]!r}; only "
                "unencoded bodies are accepted.",
            )
        cap = self._max_image_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise _too_large(where, cap, f"declares {int(declared):,} bytes")
        chunks: list[bytes] = []
        received = 0
        # aiter_bytes, not aiter_raw: the same bytes (identity encoding was required above),
        # and it also serves a response whose body was already read (a mock transport's).
        async for chunk in response.aiter_bytes():
            received += len(chunk)
            if received > cap:
                raise _too_large(where, cap, f"sent more than {cap:,} bytes")
            budget.take(len(chunk), where)
            chunks.append(chunk)
        log.debug("image fetched from %s: %d bytes", host, received)
        return b"".join(chunks)


def _too_large(where: str, cap: int, what: str) -> MediaError:
    return MediaError(
        "image_too_large",
        where,
        f"the image URL {what}; the limit is {cap:,} bytes per image. Send a smaller image.",
    )


def _host(url: httpx.URL) -> str:
    """The URL's host as sent on the wire: lower case, IDNA (punycode) for names, an IPv6
    address without brackets; what DNS, SNI, and the allow-list all compare."""
    return url.raw_host.decode("ascii").lower()


def _ascii_host(entry: str) -> str:
    """An allow-list entry in _host's form ("Bücher.example" -> "xn--bcher-kva.example")."""
    entry = entry.strip()
    try:
        return _host(httpx.URL(f"https://{entry}/"))
    except (httpx.InvalidURL, UnicodeError, ValueError):
        return entry.lower()  # an IPv6 address written without brackets, or garbage


def _default_port(url: httpx.URL) -> int:
    return 443 if url.scheme == "https" else 80


def url_scheme(text: str) -> str | None:
    """The scheme of a URL-like string (lower case), or None for a bare path or base64."""
    found = _SCHEME.match(text)
    return found.group(1).lower() if found else None
