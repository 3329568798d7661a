"""Remote images: configuration, the address policy, redirects, and bounded bodies.

No network: names resolve through FakeDns and requests go to an httpx.MockTransport.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.media import ImageRef, MediaError, MediaResolver
from gateway.observability.metrics import Metrics
from gateway.settings import MediaSettings
from tests.gateway.media import images
from tests.gateway.media.support import (
    HOST,
    PUBLIC,
    FakeDns,
    Recorder,
    endless_image,
    image_response,
    remote_settings,
    resolver,
    serve,
)

WHERE = "messages.3.content.0"
URL = f"https://{HOST}/shots/a.png?sig=SECRET123"
PNG = images.png(120, 90)


async def _refused(reason: str, resolve: MediaResolver, url: str = URL) -> MediaError:
    with pytest.raises(MediaError) as caught:
        await resolve.resolve([ImageRef(url, WHERE)])
    error = caught.value
    assert (error.reason, error.code, error.param, error.status_code) == (
        reason,
        reason,
        WHERE,
        400,
    )
    assert error.message.startswith(f"{WHERE}: ")
    assert "SECRET123" not in error.message  # never the query string
    return error


async def test_remote_images_are_off_by_default() -> None:
    async with resolver(MediaSettings(), serve(PNG)) as (resolve, sent, dns):
        error = await _refused("remote_images_disabled", resolve)
        assert "data:image/" in error.message
        assert not sent.requests
        assert not dns.lookups


async def test_a_fetch_connects_to_the_resolved_address_with_the_name_as_host_and_sni() -> None:
    async with resolver(remote_settings(), serve(PNG)) as (resolve, sent, dns):
        [image] = await resolve.resolve([ImageRef(URL, WHERE)])
    assert (image.width, image.height, image.format) == (120, 90, "png")
    assert image.data_url == images.data_url(PNG)  # rebuilt by us, not the client's string
    [request] = sent.requests
    assert request.url.host == PUBLIC
    assert request.url.scheme == "https"
    assert request.url.path == "/shots/a.png"
    assert request.url.query == b"sig=SECRET123"
    assert request.headers["host"] == HOST
    assert request.extensions["sni_hostname"] == HOST
    assert request.headers["accept-encoding"] == "identity"
    assert dns.lookups == [(HOST, 443)]


async def test_ipv6_answers_and_explicit_ports() -> None:
    dns = FakeDns({HOST: [["2606:4700:4700::1111"]]})
    async with resolver(remote_settings(), serve(PNG), dns) as (resolve, sent, _):
        await resolve.resolve([ImageRef(f"https://{HOST}:8443/a.png", WHERE)])
    [request] = sent.requests
    assert request.url.host == "2606:4700:4700::1111"
    assert request.url.port == 8443
    assert request.headers["host"] == f"{HOST}:8443"
    assert dns.lookups == [(HOST, 8443)]


async def test_host_not_in_the_allow_list() -> None:
    async with resolver(remote_settings(), serve(PNG)) as (resolve, sent, dns):
        for url in (
            "https://evil.example.net/a.png",
            "https://sub.img.example.com/a.png",
            "https://img.example.com.evil.net/a.png",
            "https://127.0.0.1/a.png",
        ):
            await _refused("image_host_not_allowed", resolve, url)
        assert not sent.requests
        assert not dns.lookups


async def test_the_allow_list_is_case_insensitive_and_exact() -> None:
    settings = remote_settings(allowed_hosts=["IMG.Example.COM"])
    async with resolver(settings, serve(PNG)) as (resolve, _, _):
        assert len(await resolve.resolve([ImageRef("https://img.EXAMPLE.com/a.png", WHERE)])) == 1


async def test_plain_http_needs_allow_http() -> None:
    url = f"http://{HOST}/a.png"
    async with resolver(remote_settings(), serve(PNG)) as (resolve, sent, _):
        error = await _refused("insecure_image_url", resolve, url)
        assert "https" in error.message
        assert not sent.requests
    async with resolver(remote_settings(allow_http=True), serve(PNG)) as (resolve, sent, _):
        await resolve.resolve([ImageRef(url, WHERE)])
        assert sent.requests[0].url.scheme == "http"
        assert "sni_hostname" not in sent.requests[0].extensions


async def test_credentials_in_the_url_are_refused() -> None:
    async with resolver(remote_settings(), serve(PNG)) as (resolve, _, _):
        await _refused("malformed_image_url", resolve, f"https://user:pw@{HOST}/a.png")


@pytest.mark.parametrize(
    "answers",
    [["127.0.0.1"], ["::ffff:127.0.0.1"], ["169.254.169.254"], ["10.0.0.7"], ["::1"],
     ["fd00:ec2::254"], [PUBLIC, "127.0.0.1"], ["0.0.0.0"], ["not-an-address"]],
)  # fmt: skip
async def test_non_global_answers_are_refused(answers: list[str]) -> None:
    dns = FakeDns({HOST: [answers]})
    async with resolver(remote_settings(), serve(PNG), dns) as (resolve, sent, _):
        await _refused("image_address_denied", resolve)
        assert not sent.requests


async def test_ipv4_mapped_loopback_literal_is_refused_without_dns() -> None:
    host = "::ffff:127.0.0.1"
    settings = remote_settings(allowed_hosts=[host])
    async with resolver(settings, serve(PNG)) as (resolve, sent, dns):
        error = await _refused("image_address_denied", resolve, f"https://[{host}]/a.png")
        assert "127.0.0.1 is a loopback address" in error.message
        assert not sent.requests
        assert not dns.lookups


async def test_dns_rebinding_cannot_switch_the_target() -> None:
    """The name is looked up once per hop and the connection made to that answer: a second
    lookup (which an HTTP client resolving the name itself would make) never happens."""
    dns = FakeDns({HOST: [[PUBLIC], ["127.0.0.1"]]})
    async with resolver(remote_settings(), serve(PNG), dns) as (resolve, sent, _):
        await resolve.resolve([ImageRef(URL, WHERE)])
        assert dns.lookups == [(HOST, 443)]
        assert [request.url.host for request in sent.requests] == [PUBLIC]
        # The next fetch gets the rebound answer, and is refused before connecting.
        await _refused("image_address_denied", resolve)
        assert [request.url.host for request in sent.requests] == [PUBLIC]


def _redirect(location: str, status: int = 302) -> httpx.Response:
    return httpx.Response(status, headers={"location": location})


async def test_redirects_are_refused_by_default() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        return _redirect(f"https://{HOST}/b.png")

    async with resolver(remote_settings(), handler) as (resolve, sent, _):
        error = await _refused("image_redirect_denied", resolve)
        assert "allow_redirects" in error.message
        assert len(sent.requests) == 1


async def test_redirect_to_the_metadata_address_is_refused() -> None:
    metadata = "169.254.169.254"
    settings = remote_settings(
        allowed_hosts=[HOST, metadata, "meta.example.com"], allow_redirects=True, allow_http=True
    )
    dns = FakeDns({HOST: [[PUBLIC]], "meta.example.com": [[metadata]]})

    for target in (f"http://{metadata}/latest/meta-data/", "http://meta.example.com/x"):

        async def handler(request: httpx.Request, target: str = target) -> httpx.Response:
            return _redirect(target)

        async with resolver(settings, handler, dns) as (resolve, sent, _):
            error = await _refused("image_address_denied", resolve)
            assert "169.254.169.254 is link-local" in error.message
            assert [request.url.host for request in sent.requests] == [PUBLIC]


async def test_every_hop_is_checked_again() -> None:
    settings = remote_settings(allow_redirects=True)
    cases = {
        "https://other.example.org/a.png": "image_host_not_allowed",
        f"http://{HOST}/a.png": "insecure_image_url",
        "file:///etc/passwd": "unsupported_image_source",
    }
    for target, reason in cases.items():

        async def handler(request: httpx.Request, target: str = target) -> httpx.Response:
            return _redirect(target, 307)

        async with resolver(settings, handler) as (resolve, sent, _):
            await _refused(reason, resolve)
            assert len(sent.requests) == 1


async def test_allowed_redirects_are_followed_up_to_the_bound() -> None:
    cdn = "cdn.example.com"
    settings = remote_settings(allowed_hosts=[HOST, cdn], allow_redirects=True, max_redirects=2)
    dns = FakeDns({HOST: [[PUBLIC]], cdn: [["151.101.1.1"]]})

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/a.png":
            return _redirect(f"https://{cdn}/b.png?token=SECRET123", 301)
        if request.url.path == "/b.png":
            return _redirect("/c.png", 308)  # relative: same host
        return image_response(PNG)

    async with resolver(settings, handler, dns) as (resolve, sent, _):
        [image] = await resolve.resolve([ImageRef(f"https://{HOST}/a.png", WHERE)])
        assert image.width == 120
        assert [(r.url.host, r.headers["host"]) for r in sent.requests] == [
            (PUBLIC, HOST), ("151.101.1.1", cdn), ("151.101.1.1", cdn)
        ]  # fmt: skip
        assert dns.lookups == [(HOST, 443), (cdn, 443), (cdn, 443)]

    async def loop(request: httpx.Request) -> httpx.Response:
        return _redirect(f"https://{HOST}/again.png")

    async with resolver(settings, loop, dns) as (resolve, sent, _):
        error = await _refused("image_redirect_denied", resolve)
        assert "more than 2 redirects" in error.message
        assert len(sent.requests) == 3


async def test_a_body_over_the_cap_is_cut_while_streaming() -> None:
    produced: list[int] = []
    handler = endless_image(produced)

    settings = remote_settings(media={"max_image_bytes": 1_000_000})
    async with resolver(settings, handler) as (resolve, _, _):
        error = await _refused("image_too_large", resolve)
        assert "1,000,000" in error.message
    assert len(produced) <= 17  # stopped at the cap, not after 655 MB


async def test_a_declared_length_over_the_cap_is_refused_before_the_body() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        response = image_response(PNG)
        response.headers["content-length"] = str(50 * 1024 * 1024)
        return response

    async with resolver(remote_settings(), handler) as (resolve, _, _):
        error = await _refused("image_too_large", resolve)
        assert "declares 52,428,800 bytes" in error.message


async def test_a_slow_body_hits_the_total_timeout() -> None:
    async def trickle() -> AsyncIterator[bytes]:
        yield PNG[:10]
        await asyncio.sleep(30)
        yield PNG[10:]

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "image/png"}, content=trickle())

    settings = remote_settings(total_timeout_s=0.3)
    async with resolver(settings, handler) as (resolve, _, _):
        started = time.monotonic()
        error = await _refused("image_fetch_timeout", resolve)
        assert time.monotonic() - started < 5
        assert "total 0.3 s" in error.message


async def test_a_slow_server_and_slow_dns_hit_the_total_timeout() -> None:
    async def stall(request: httpx.Request) -> httpx.Response:
        await asyncio.sleep(30)
        return image_response(PNG)

    settings = remote_settings(total_timeout_s=0.2)
    async with resolver(settings, stall) as (resolve, _, _):
        await _refused("image_fetch_timeout", resolve)

    class SlowDns(FakeDns):
        async def __call__(self, host: str, port: int) -> list[str]:
            await asyncio.sleep(30)
            return [PUBLIC]

    async with resolver(settings, serve(PNG), SlowDns()) as (resolve, _, _):
        await _refused("image_fetch_timeout", resolve)


async def test_connect_timeout_from_the_transport() -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("timed out", request=request)

    async with resolver(remote_settings(), handler) as (resolve, _, _):
        await _refused("image_fetch_timeout", resolve)


@pytest.mark.parametrize("content_type", ["text/html", "application/octet-stream", "", "video/mp4"])
async def test_non_image_content_types_are_refused(content_type: str) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": content_type} if content_type else {}
        return httpx.Response(200, headers=headers, content=PNG)

    async with resolver(remote_settings(), handler) as (resolve, _, _):
        await _refused("unsupported_image_type", resolve)


async def test_an_image_type_with_bytes_that_are_not_an_image() -> None:
    async with resolver(remote_settings(), serve(b"<html>nope</html>", "image/png")) as (
        resolve, _, _,
    ):  # fmt: skip
        await _refused("unsupported_image_format", resolve)


async def test_failures_on_the_way_are_400s() -> None:
    async def not_found(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, headers={"content-type": "text/html"}, content=b"no")

    async def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    async def broken(request: httpx.Request) -> httpx.Response:
        async def body() -> AsyncIterator[bytes]:
            yield PNG[:20]
            raise httpx.ReadError("connection reset", request=request)

        return httpx.Response(200, headers={"content-type": "image/png"}, content=body())

    async def gzipped(request: httpx.Request) -> httpx.Response:
        return image_response(PNG, **{"content-encoding": "gzip"})

    async def no_location(request: httpx.Request) -> httpx.Response:
        return httpx.Response(302)

    for handler in (not_found, refused, broken, gzipped, no_location):
        async with resolver(remote_settings(), handler) as (resolve, _, _):
            await _refused("image_fetch_failed", resolve)
    async with resolver(remote_settings(), serve(PNG), FakeDns({})) as (resolve, sent, _):
        error = await _refused("image_fetch_failed", resolve)
        assert "could not be resolved" in error.message
        assert not sent.requests


async def test_fetch_metrics_and_logs_without_query_strings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics(process_metrics=False)
    # httpx's own INFO line quotes the whole URL; gateway.observability.logging keeps the
    # httpx logger at WARNING or above at every level. The media stage's own lines:
    caplog.set_level(logging.DEBUG, logger="gateway.media")
    async with resolver(remote_settings(), serve(PNG), metrics=metrics) as (resolve, _, _):
        await resolve.resolve([ImageRef(URL, WHERE)])
        with pytest.raises(MediaError):
            await resolve.resolve([ImageRef(URL.replace(HOST, "evil.example.net"), WHERE)])
    registry = metrics.registry
    assert registry.get_sample_value("flashbox_media_images_total", {"source": "url"}) == 1
    assert registry.get_sample_value("flashbox_media_fetch_seconds_count") == 1
    assert registry.get_sample_value("flashbox_media_bytes_sum", {"source": "url"}) == len(PNG)
    assert (
        registry.get_sample_value(
            "flashbox_media_rejected_total", {"reason": "image_host_not_allowed"}
        )
        == 1
    )
    assert "SECRET123" not in caplog.text
    assert PNG.hex()[:32] not in caplog.text


async def test_shares_nothing_between_resolvers() -> None:
    # Two resolvers with different settings in one process: no module-level state.
    async with (
        resolver(MediaSettings(), serve(PNG)) as (off, _, _),
        resolver(remote_settings(), serve(PNG)) as (on, recorder, _),
    ):
        await _refused("remote_images_disabled", off)
        assert len(await on.resolve([ImageRef(URL, WHERE)])) == 1
        assert isinstance(recorder, Recorder)


async def test_international_names_are_compared_and_sent_as_punycode() -> None:
    punycode = "xn--bcher-kva.example"
    settings = remote_settings(allowed_hosts=["Bücher.Example"])
    dns = FakeDns({punycode: [[PUBLIC]]})
    async with resolver(settings, serve(PNG), dns) as (resolve, sent, _):
        await resolve.resolve([ImageRef("https://bücher.example/a.png", WHERE)])
        assert dns.lookups == [(punycode, 443)]
        assert sent.requests[0].headers["host"] == punycode
        assert sent.requests[0].extensions["sni_hostname"] == punycode
