"""`python -m gateway`: serve the gateway with uvicorn (settings: gateway.settings)."""

from __future__ import annotations

import logging

import uvicorn

from gateway.app import create_app
from gateway.settings import load_settings


def main() -> None:
    settings = load_settings()
    level = settings.observability.log_level.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # httpx logs every engine request at INFO: far too much on the hot path.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLevelName(level)))
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=settings.observability.access_log,
        log_level=settings.observability.log_level,
        # Keep client connections open between requests (agents send many in a row).
        timeout_keep_alive=75,
    )


if __name__ == "__main__":
    main()
