"""The media stage: every image part of a request, resolved and checked, in request order.

Built once in the app's state and shared by all requests (its fetch client, its bounds on
concurrent fetches and decodes). Cheap checks run first and in request order, on the event
loop (the image count, each URL against the configuration, each data URL's size from its
length), so a request that breaks a limit is refused before any decoding or network work.
Decoding runs in a worker thread for images of media.offload_min_bytes or more, fetches
concurrently; the first image to fail cancels the rest and is the answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

import httpx

from gateway.media.addresses import HostResolver, resolve_with_getaddrinfo
from gateway.media.budget import RequestBudget
from gateway.media.check import ImagePolicy, check_image, header_pixels
from gateway.media.data_url import DataUrl, decode_base64, decoded_length, parse_data_url
from gateway.media.errors import MediaError
from gateway.media.fetch import RemoteFetcher, url_scheme
from gateway.media.refs import CheckedImage, ImageRef
from gateway.observability.metrics import Metrics
from gateway.settings import MediaSettings

log = logging.getLogger("gateway.media")

Source = Literal["data", "url"]


@dataclass(frozen=True, slots=True)
class _Inline:
    ref: ImageRef
    data_url: DataUrl  # checked for shape and size, not yet decoded
    size: int  # decoded bytes


@dataclass(frozen=True, slots=True)
class _Remote:
    ref: ImageRef
    url: httpx.URL


@dataclass(frozen=True, slots=True)
class _Resolved:
    image: CheckedImage
    source: Source
    received: int  # bytes as the client sent or the server served them


class MediaResolver:
    def __init__(
        self,
        settings: MediaSettings,
        metrics: Metrics,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        resolve_host: HostResolver | None = None,
    ) -> None:
        self._settings = settings
        self._metrics = metrics
        self._policy = ImagePolicy(
            formats=frozenset(settings.formats),
            max_pixels=settings.max_decoded_pixels,
            max_aspect_ratio=settings.max_aspect_ratio,
            engine_max_pixels=settings.engine_max_pixels,
            full_decode=settings.full_decode,
            exif_transpose=settings.exif_transpose,
        )
        # Decoded pixels are the memory cost: this bounds how many images hold them at once.
        self._check_slots = asyncio.Semaphore(settings.max_concurrent_checks)
        self._max_images = settings.max_images
        self._accepts_images = True
        self._fetcher = RemoteFetcher(
            settings.remote,
            max_image_bytes=settings.max_image_bytes,
            resolve_host=resolve_host or resolve_with_getaddrinfo,
            transport=transport,
        )

    async def resolve(self, refs: Sequence[ImageRef]) -> list[CheckedImage]:
        """The checked images, in the order of `refs`; MediaError (a 400) for an image that
        breaks a rule: the first in request order for the checks made before any work (count,
        source, configuration, size), else the first of those that fail, in request order."""
        if not refs:
            return []
        try:
            resolved = await self._resolve(refs)
        except MediaError as error:
            self._metrics.child(self._metrics.media_rejected, error.reason).inc()
            # Reason and location only: never the URL (query strings) or the payload.
            log.debug("image refused: %s at %s", error.reason, error.where)
            raise
        for item in resolved:
            self._metrics.child(self._metrics.media_images, item.source).inc()
            self._metrics.child(self._metrics.media_bytes, item.source).observe(item.received)
            self._metrics.media_image_tokens.observe(item.image.tokens)
        return [item.image for item in resolved]

    async def aclose(self) -> None:
        await self._fetcher.aclose()

    def engine_bounds(
        self, max_pixels: int | None, max_images: int | None, *, accepts_images: bool = True
    ) -> None:
        """What the engines report (their /server_info): the token estimate follows their
        max_pixels, and no more images are taken than every engine accepts. None: the
        configured value (media.engine_max_pixels, media.max_images). `accepts_images`
        false (every engine's /model_info says its model has no vision): no image at all."""
        self._accepts_images = accepts_images
        pixels = max_pixels or self._settings.engine_max_pixels
        if pixels != self._policy.engine_max_pixels:
            log.info("engine image max_pixels is %d: image token estimates follow it", pixels)
            self._policy = dataclasses.replace(self._policy, engine_max_pixels=pixels)
        self._max_images = min(max_images or self._settings.max_images, self._settings.max_images)

    async def _resolve(self, refs: Sequence[ImageRef]) -> list[_Resolved]:
        if not self._accepts_images:
            # A text-only engine takes `image_data` and ignores it: the answer would come
            # without the image ever being seen.
            raise MediaError(
                "images_not_supported",
                refs[0].where,
                "the served model takes no images (its engine reports no image "
                "understanding): send the request as text only.",
            )
        limit = self._max_images
        if len(refs) > limit:
            raise MediaError(
                "too_many_images",
                refs[limit].where,
                f"the request has {len(refs)} images; at most {limit} are accepted per request "
                "(the engine's limit). Send fewer images.",
            )
        budget = RequestBudget(self._settings.max_request_bytes)
        plans = [self._plan(ref, budget) for ref in refs]
        if len(plans) == 1:
            resolved = [await self._run(plans[0], budget)]
        else:
            resolved = await self._run_all(plans, budget)
        self._check_tokens(refs, resolved)
        return resolved

    def _plan(self, ref: ImageRef, budget: RequestBudget) -> _Inline | _Remote:
        scheme = url_scheme(ref.url)
        if scheme == "data":
            data_url = parse_data_url(ref.url, ref.where)
            size = decoded_length(data_url, ref.where)
            if size > self._settings.max_image_bytes:
                raise MediaError(
                    "image_too_large",
                    ref.where,
                    f"the image is {size:,} bytes; the limit is "
                    f"{self._settings.max_image_bytes:,} bytes per image. Send a smaller image.",
                )
            budget.take(size, ref.where)
            return _Inline(ref, data_url, size)
        if scheme in ("http", "https"):
            return _Remote(ref, self._fetcher.check_url(ref.url, ref.where))
        given = f"a {scheme}: URL" if scheme else "not a URL (a bare path or raw base64?)"
        raise MediaError(
            "unsupported_image_source",
            ref.where,
            f"the image is {given}; send it as a data:image/<type>;base64,... URL (or an "
            "https URL where this gateway fetches them). Local files are never read.",
        )

    async def _run_all(
        self, plans: list[_Inline | _Remote], budget: RequestBudget
    ) -> list[_Resolved]:
        tasks = [asyncio.create_task(self._run(plan, budget)) for plan in plans]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            failed = next(
                (i for i, t in enumerate(tasks) if t.done() and t.exception() is not None), None
            )
            earlier = [t for t in tasks[:failed] if not t.done()] if failed is not None else []
            if earlier:
                # An image before the failed one may fail too, a little later (checks run in
                # threads side by side): the client hears of the first in its own order.
                await asyncio.wait(earlier)
        finally:
            # On the first failure, or when this request is cancelled: no fetch or decode of
            # this request outlives it.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in tasks:
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error
        return [task.result() for task in tasks]

    async def _run(self, plan: _Inline | _Remote, budget: RequestBudget) -> _Resolved:
        where = plan.ref.where
        if isinstance(plan, _Inline):
            if plan.size >= self._settings.offload_min_bytes:
                started = time.perf_counter()
                image = await self._offload(
                    partial(_decode_and_check, plan.data_url, self._policy, where)
                )
                self._metrics.media_check_seconds.observe(time.perf_counter() - started)
                return _Resolved(image, "data", plan.size)
            # Small: its base64 decodes in microseconds, on the loop.
            data = decode_base64(plan.data_url, where)
            image = await self._check(data, where, sent_as=plan.data_url)
            return _Resolved(image, "data", plan.size)
        started = time.perf_counter()
        try:
            body = await self._fetcher.fetch(plan.url, where, budget)
        finally:
            self._metrics.media_fetch_seconds.observe(time.perf_counter() - started)
        return _Resolved(await self._check(body, where, sent_as=None), "url", len(body))

    async def _check(self, data: bytes, where: str, *, sent_as: DataUrl | None) -> CheckedImage:
        """check_image, on the loop when the image is small in bytes and in pixels."""
        work = partial(check_image, data, self._policy, where, sent_as=sent_as)
        started = time.perf_counter()
        small = len(data) < self._settings.offload_min_bytes and (
            (header_pixels(data, self._policy.formats) or 0) < self._settings.offload_min_pixels
        )
        if small:
            image = work()
        else:
            image = await self._offload(work)
        self._metrics.media_check_seconds.observe(time.perf_counter() - started)
        return image

    async def _offload(self, work: Callable[[], CheckedImage]) -> CheckedImage:
        async with self._check_slots:
            job = asyncio.ensure_future(asyncio.to_thread(work))
            try:
                return await asyncio.shield(job)
            except asyncio.CancelledError:
                # A thread cannot be stopped: keep the slot until it ends, so the bound on
                # decoded pixels in memory holds even for abandoned requests.
                await asyncio.wait([job])
                if not job.cancelled():
                    job.exception()  # the request is gone: its outcome is not needed
                raise

    def _check_tokens(self, refs: Sequence[ImageRef], resolved: list[_Resolved]) -> None:
        limit = self._settings.max_request_image_tokens
        running = 0
        for ref, item in zip(refs, resolved, strict=True):
            running += item.image.tokens
            if running > limit:
                total = sum(other.image.tokens for other in resolved)
                raise MediaError(
                    "image_tokens_exceeded",
                    ref.where,
                    f"the request's images would take {total:,} prompt tokens; the limit is "
                    f"{limit:,} (media.max_request_image_tokens). Send fewer or smaller images.",
                )


def _decode_and_check(data_url: DataUrl, policy: ImagePolicy, where: str) -> CheckedImage:
    return check_image(decode_base64(data_url, where), policy, where, sent_as=data_url)
