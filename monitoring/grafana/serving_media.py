"""The "Images" row of the serving dashboard: the gateway's media stage (gateway/media)."""

from __future__ import annotations

from monitoring.grafana.panels import (
    BYTES,
    COUNT,
    OPS,
    RATE,
    SECONDS,
    PanelBuilder,
    Query,
    graph,
    quantiles,
)

TITLE = "Images"
HEIGHT = 6
QUARTER_WIDTH = 6


def _rate(metric: str, by: str) -> str:
    return f"sum by ({by}) (rate({metric}[{RATE}]))"


def panels() -> list[PanelBuilder]:
    """Accepted and refused images, and what checking, fetching and prompting them costs."""
    return [
        graph(
            "Images/s by source",
            "Images accepted per second, by where they came from: data (a data: URL in the "
            "request) or url (fetched by the gateway).",
            OPS,
            [Query(_rate("flashbox_media_images_total", "source"), "{{source}}")],
            width=QUARTER_WIDTH,
            height=HEIGHT,
            stacked=True,
        ),
        graph(
            "Image rejections/s by reason",
            "Requests the media stage refused, by reason (the error code the client sees).",
            OPS,
            [Query(_rate("flashbox_media_rejected_total", "reason"), "{{reason}}")],
            width=QUARTER_WIDTH,
            height=HEIGHT,
            stacked=True,
        ),
        graph(
            "Image check and fetch p95",
            "Time to decode, check and re-encode one image, and to fetch one image URL "
            "(failed fetches too; only with remote images enabled).",
            SECONDS,
            [
                *quantiles("flashbox_media_check_seconds", (0.95,), legend_suffix=" check"),
                *quantiles("flashbox_media_fetch_seconds", (0.95,), legend_suffix=" fetch"),
            ],
            width=QUARTER_WIDTH,
            height=HEIGHT,
        ),
        graph(
            "Image tokens",
            "Estimated prompt tokens per accepted image (the engine's resize rule, markers "
            "included).",
            COUNT,
            quantiles("flashbox_media_image_tokens", (0.5, 0.95)),
            width=QUARTER_WIDTH,
            height=HEIGHT,
        ),
    ]


def store_panels() -> list[PanelBuilder]:
    """The Responses store (previous_response_id, GET /v1/responses/{id}): entries and size.

    Two panels, not one with a bytes axis on the right: Grafana 11.6's schema refuses the
    field override that would take.
    """
    what = "Responses the gateway keeps for previous_response_id and GET /v1/responses/{id}"
    return [
        graph(
            "Responses store entries",
            f"{what}: how many.",
            COUNT,
            [Query("sum(flashbox_response_store_entries)", "entries")],
            width=QUARTER_WIDTH,
        ),
        graph(
            "Responses store size",
            f"{what}: their size.",
            BYTES,
            [Query("sum(flashbox_response_store_bytes)", "bytes")],
            width=QUARTER_WIDTH,
        ),
    ]
