"""`python -m gateway`: serve the gateway with uvicorn (settings: gateway.settings).

SIGTERM/SIGINT: uvicorn stops accepting connections; the admission controller refuses what
waits, gives in-flight requests `shutdown.grace_s`, then aborts the rest on the engine; the
process exits 0 once every response has ended.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import socket
from types import FrameType

import uvicorn

from gateway.admission import AdmissionController
from gateway.app import create_app
from gateway.observability.logging import configure_logging, uvicorn_log_config
from gateway.settings import load_settings


class _DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, admission: AdmissionController) -> None:
        super().__init__(config)
        self._admission = admission

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # Everything built so far (modules, app, templates, state) lives as long as the
        # process: out of the collector's sight, a full collection scans only what requests
        # make, instead of pausing every stream for the whole heap now and then.
        gc.collect()
        gc.freeze()

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        loop.call_soon_threadsafe(self._admission.begin_drain)


def _ignore(sig: int, frame: FrameType | None) -> None:
    """uvicorn re-raises the signal it stopped on, under the handler it found at start; an
    orderly drain is a normal exit (0), not death by SIGTERM."""


def main() -> None:
    settings = load_settings()
    configure_logging(
        settings.observability.log_level,
        [*settings.api_keys, *settings.routing.admin_api_keys],
    )
    app = create_app(settings)
    security, shutdown = settings.security, settings.shutdown
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        lifespan="on",
        access_log=settings.observability.access_log,
        log_level=settings.observability.log_level,
        log_config=uvicorn_log_config(),
        # Keep client connections open between requests (agents send many in a row).
        timeout_keep_alive=75,
        # Only used with http="h11"; with httptools the header bound is the middleware's.
        h11_max_incomplete_event_size=security.max_header_bytes,
        # The drain aborts what is left after grace_s; this is the backstop after that.
        timeout_graceful_shutdown=int(shutdown.grace_s + shutdown.abort_grace_s) + 1,
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _ignore)
    _DrainingServer(config, app.state.admission).run()


if __name__ == "__main__":
    main()
