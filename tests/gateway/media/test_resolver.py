"""MediaResolver end to end on data URLs: order, limits, tokens, metrics, threads, and no
input that makes it fail with anything but a 400."""

from __future__ import annotations

import asyncio
import base64
import random
import threading
import time
from typing import Any, get_args

import pytest

from gateway.media import CheckedImage, ImageRef, MediaError, MediaResolver, Reason
from gateway.media import resolver as resolver_module
from gateway.media.check import ImagePolicy, check_image
from gateway.observability.metrics import MEDIA_REJECT_REASONS, Metrics
from gateway.settings import MediaSettings
from tests.gateway.media import images


def _resolver(metrics: Metrics | None = None, **settings: Any) -> MediaResolver:
    return MediaResolver(MediaSettings(**settings), metrics or Metrics(process_metrics=False))


def _refs(*urls: str) -> list[ImageRef]:
    return [ImageRef(url, f"messages.{index}.content.0") for index, url in enumerate(urls)]


async def _refused(reason: str, resolver: MediaResolver, refs: list[ImageRef]) -> MediaError:
    with pytest.raises(MediaError) as caught:
        await resolver.resolve(refs)
    error = caught.value
    assert (error.reason, error.code, error.status_code) == (reason, reason, 400), error.message
    assert error.param is not None
    assert error.message.startswith(f"{error.param}: ")
    return error


def _count(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_every_format_in_request_order() -> None:
    made = [
        (images.png(224, 224), "image/png"),
        (images.jpeg(1920, 1080), "image/jpeg"),
        (images.webp(640, 480), "image/webp"),
        (images.gif(1280, 720, frames=2), "image/gif"),
    ]
    metrics = Metrics(process_metrics=False)
    resolver = _resolver(metrics, engine_max_pixels=6_272_000)
    checked = await resolver.resolve(_refs(*(images.data_url(d, t) for d, t in made)))
    assert [(c.width, c.height, c.format) for c in checked] == [
        (224, 224, "png"), (1920, 1080, "jpeg"), (640, 480, "webp"), (1280, 720, "png")
    ]  # fmt: skip
    # MEDIA.md 2.3 at the engine's default max_pixels, plus the two markers.
    assert [c.tokens for c in checked] == [64 + 2, 2691 + 2, 391 + 2, 1196 + 2]
    assert _count(metrics, "flashbox_media_images_total", source="data") == 4
    assert _count(metrics, "flashbox_media_bytes_sum", source="data") == sum(
        len(d) for d, _ in made
    )
    assert _count(metrics, "flashbox_media_image_tokens_sum") == 64 + 2691 + 391 + 1196 + 8
    assert _count(metrics, "flashbox_media_check_seconds_count") == 4
    await resolver.aclose()


async def test_tokens_follow_the_engines_max_pixels() -> None:
    url = images.data_url(images.png(1920, 1080))
    [kt] = await _resolver(engine_max_pixels=1_254_400).resolve(_refs(url))
    [stock] = await _resolver().resolve(_refs(url))  # default: the engine's 6,272,000
    assert (kt.tokens, stock.tokens) == (777 + 2, 2691 + 2)


async def test_duplicates_keep_their_places() -> None:
    a, b = images.data_url(images.png(30, 30)), images.data_url(images.png(40, 40))
    checked = await _resolver().resolve(_refs(a, b, a))
    assert [c.width for c in checked] == [30, 40, 30]
    assert checked[0].digest == checked[2].digest != checked[1].digest


async def test_no_images_is_no_work() -> None:
    assert await _resolver().resolve([]) == []


async def test_too_many_images_is_refused_before_any_work() -> None:
    metrics = Metrics(process_metrics=False)
    url = images.data_url(images.png(8, 8))
    error = await _refused("too_many_images", _resolver(metrics), _refs(*[url] * 9))
    assert error.param == "messages.8.content.0"
    assert "at most 8" in error.message
    assert _count(metrics, "flashbox_media_check_seconds_count") == 0
    assert _count(metrics, "flashbox_media_rejected_total", reason="too_many_images") == 1
    assert _count(metrics, "flashbox_media_images_total", source="data") == 0
    assert len(await _resolver().resolve(_refs(*[url] * 8))) == 8
    await _refused("too_many_images", _resolver(max_images=2), _refs(url, url, url))


async def test_a_text_only_engine_takes_no_image() -> None:
    """Every engine reports a model without vision: the first image is a 400 naming it."""
    metrics = Metrics(process_metrics=False)
    url = images.data_url(images.png(8, 8))
    resolver = _resolver(metrics)
    resolver.engine_bounds(None, None, accepts_images=False)
    error = await _refused("images_not_supported", resolver, _refs(url, url))
    assert error.param == "messages.0.content.0"
    assert "text only" in error.message
    assert _count(metrics, "flashbox_media_rejected_total", reason="images_not_supported") == 1
    resolver.engine_bounds(None, None, accepts_images=True)
    assert len(await resolver.resolve(_refs(url))) == 1


async def test_byte_caps_count_decoded_bytes_before_decoding() -> None:
    # 2,000,027 decoded bytes of a payload that is not even valid base64 at its end: the size
    # is known from the length, so the cap answers first.
    url = "data:image/png;base64," + "A" * 2_666_700 + "!AA="
    error = await _refused("image_too_large", _resolver(max_image_bytes=2_000_000), _refs(url))
    assert "2,000,000" in error.message
    fits = images.data_url(images.png(64, 64))
    size = len(base64.b64decode(fits.split(",")[1]))
    assert len(await _resolver(max_image_bytes=size).resolve(_refs(fits))) == 1
    await _refused("image_too_large", _resolver(max_image_bytes=size - 1), _refs(fits))


async def test_the_request_cap_counts_all_images() -> None:
    url = images.data_url(images.png(64, 64))
    size = len(base64.b64decode(url.split(",")[1]))
    resolver = _resolver(max_request_bytes=2 * size)
    assert len(await resolver.resolve(_refs(url, url))) == 2
    error = await _refused("media_request_too_large", resolver, _refs(url, url, url))
    assert error.param == "messages.2.content.0"


async def test_the_request_token_cap() -> None:
    url = images.data_url(images.png(1920, 1080))  # 779 tokens at KT's max_pixels
    resolver = _resolver(engine_max_pixels=1_254_400, max_request_image_tokens=1500)
    assert len(await resolver.resolve(_refs(url))) == 1
    error = await _refused("image_tokens_exceeded", resolver, _refs(url, url))
    assert error.param == "messages.1.content.0"
    assert "1,558" in error.message
    # The default admits 8 of the largest images at the default max_pixels.
    assert len(await _resolver().resolve(_refs(*[url] * 8))) == 8


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("file:///etc/passwd", "unsupported_image_source"),
        ("FILE:///etc/hosts", "unsupported_image_source"),
        ("/var/lib/images/cat.png", "unsupported_image_source"),
        ("./cat.png", "unsupported_image_source"),
        ("cat.png", "unsupported_image_source"),
        (
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
            "unsupported_image_source",
        ),
        ("ftp://img.example.com/a.png", "unsupported_image_source"),
        ("javascript:alert(1)", "unsupported_image_source"),
        ("", "unsupported_image_source"),
        ("https://img.example.com/a.png", "remote_images_disabled"),
        ("HTTP://img.example.com/a.png", "remote_images_disabled"),
        ("data:text/html;base64,PGgxPg==", "unsupported_image_type"),
        ("data:image/png;base64,not base64!", "invalid_base64"),
        ("data:image/png;base64,aGk", "invalid_base64"),
        ("data:image/png,%89PNG", "malformed_data_url"),
    ],
)
async def test_sources_and_data_urls(url: str, reason: str) -> None:
    error = await _refused(reason, _resolver(), _refs(url))
    assert error.param == "messages.0.content.0"


async def test_image_checks_through_the_resolver() -> None:
    resolver = _resolver()
    bomb = images.data_url(images.png_header_only(100_000, 100_000))
    await _refused("image_too_many_pixels", resolver, _refs(bomb))
    await _refused("image_aspect_ratio", resolver, _refs(images.data_url(images.png(3000, 10))))
    truncated = images.png(300, 300)[:-40]
    await _refused("bad_image", resolver, _refs(images.data_url(truncated)))
    bmp = images.encode(images.picture(8, 8), "BMP")
    await _refused("unsupported_image_format", resolver, _refs(images.data_url(bmp, "image/bmp")))
    only_png = _resolver(formats=["PNG"])
    jpeg = images.data_url(images.jpeg(), "image/jpeg")
    await _refused("unsupported_image_format", only_png, _refs(jpeg))


async def test_the_first_bad_image_in_request_order_is_reported() -> None:
    good = images.data_url(images.png(20, 20))
    bad = images.data_url(images.png(200, 200)[:-30])
    resolver = _resolver(offload_min_bytes=0)
    for _ in range(5):
        error = await _refused("bad_image", resolver, _refs(good, bad, good, bad))
        assert error.param == "messages.1.content.0"
    # Configuration refusals come before any decoding, whatever their place.
    error = await _refused("remote_images_disabled", resolver, _refs(bad, "https://x.org/a.png"))
    assert error.param == "messages.1.content.0"


async def test_large_images_are_checked_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []
    real = check_image

    def spy(data: bytes, policy: ImagePolicy, where: str, **options: Any) -> CheckedImage:
        threads.append(threading.get_ident())
        return real(data, policy, where, **options)

    monkeypatch.setattr(resolver_module, "check_image", spy)
    small = images.data_url(images.png(8, 8))
    large = images.data_url(images.encode(images.picture(800, 600), "PNG", compress_level=0))
    loop_thread = threading.get_ident()
    await _resolver().resolve(_refs(small, large))
    assert threads[0] == loop_thread  # under offload_min_bytes: inline
    assert threads[1] != loop_thread


async def test_few_bytes_with_many_pixels_are_checked_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[int] = []
    real = check_image

    def spy(data: bytes, policy: ImagePolicy, where: str, **options: Any) -> CheckedImage:
        threads.append(threading.get_ident())
        return real(data, policy, where, **options)

    monkeypatch.setattr(resolver_module, "check_image", spy)
    blank = images.png_blank(6000, 6000)  # 36 Mpx in a few KB
    assert len(blank) < MediaSettings().offload_min_bytes
    [checked] = await _resolver().resolve(_refs(images.data_url(blank)))
    assert (checked.width, checked.height) == (6000, 6000)
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()  # not the event loop's thread


async def test_a_cancelled_request_keeps_its_decode_slot_until_the_thread_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spans: list[tuple[float, float]] = []
    real = check_image

    def slow(data: bytes, policy: ImagePolicy, where: str, **options: Any) -> CheckedImage:
        started = time.monotonic()
        time.sleep(0.3)
        spans.append((started, time.monotonic()))
        return real(data, policy, where, **options)

    monkeypatch.setattr(resolver_module, "check_image", slow)
    resolver = _resolver(offload_min_bytes=0, max_concurrent_checks=1)
    url = images.data_url(images.png(8, 8))
    first = asyncio.create_task(resolver.resolve(_refs(url)))
    await asyncio.sleep(0.05)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await resolver.resolve(_refs(url))
    assert len(spans) == 2
    assert spans[1][0] >= spans[0][1]


def test_reasons_and_metric_labels_are_one_set() -> None:
    assert set(get_args(Reason)) == set(MEDIA_REJECT_REASONS)
    assert len(MEDIA_REJECT_REASONS) == len(set(MEDIA_REJECT_REASONS))


async def test_hostile_bytes_only_ever_give_400s() -> None:
    """Bit flips, truncations and splices of valid files in every format: each is accepted or
    refused with a MediaError, never another exception (a 500)."""
    rng = random.Random(21)
    seeds = [images.png(40, 30), images.jpeg(40, 30), images.webp(40, 30), images.gif(40, 30),
             images.jpeg(40, 30, progressive=True), images.png_header_only(64, 64)]  # fmt: skip
    resolver = _resolver()
    outcomes: dict[str, int] = {}
    for _ in range(600):
        data = bytearray(rng.choice(seeds))
        action = rng.randrange(4)
        if action == 0:
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif action == 1:
            del data[rng.randrange(1, len(data)) :]
        elif action == 2:
            start = rng.randrange(len(data))
            data[start:start] = rng.randbytes(rng.randint(1, 64))
        else:
            data = bytearray(rng.choice(seeds)[:16]) + rng.randbytes(rng.randint(0, 200))
        try:
            await resolver.resolve(_refs(images.data_url(bytes(data))))
            outcomes["ok"] = outcomes.get("ok", 0) + 1
        except MediaError as error:
            outcomes[error.reason] = outcomes.get(error.reason, 0) + 1
    assert outcomes.get("bad_image", 0) > 100
    assert outcomes.get("ok", 0) > 10
