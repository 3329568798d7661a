"""`python -m gateway [--config FILE] [--host HOST] [--port PORT]`: serve the gateway with
uvicorn (settings: gateway.settings; `--help` lists the environment variables).

SIGTERM/SIGINT: uvicorn stops accepting connections; the admission controller refuses what
waits, gives in-flight requests `shutdown.grace_s`, then aborts the rest on the engine; the
process exits 0 once every response has ended.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import resource
import signal
import socket
import textwrap
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import uvicorn
from pydantic import BaseModel

from gateway.admission import AdmissionController
from gateway.app import create_app
from gateway.connection import ConnectionBounds, protocol_class
from gateway.faces.registry import error_body
from gateway.observability.logging import configure_logging, uvicorn_log_config
from gateway.settings import DEFAULT_CONFIG, Settings, load_settings

log = logging.getLogger("gateway")


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


def _raise_open_files_limit(settings: Settings) -> None:
    """Client connections up to security.max_connections and engine connections up to
    upstream.max_connections each take a file descriptor; a soft limit of 1024 (a common
    default) would fail accept() long before the connection cap answers anything."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Room for the engine pool's neighbours: control and count pools, logs, the listener.
    needed = settings.security.max_connections + settings.upstream.max_connections + 256
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    want = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        soft = want
    except (ValueError, OSError):
        pass
    if soft < needed:
        log.warning(
            "open files limit %d is below the %d that security.max_connections and "
            "upstream.max_connections may need; raise it (ulimit -n) or lower them",
            soft,
            needed,
        )


def _environment_help() -> str:
    sections = ", ".join(
        name
        for name, field in Settings.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    )
    return (
        "Settings come from, highest first: these flags, the environment, the config file\n"
        f"(default {DEFAULT_CONFIG.relative_to(DEFAULT_CONFIG.parents[1])}), the defaults.\n"
        "\n"
        "environment:\n"
        "  FLASHBOX_CONFIG       the config file (as --config)\n"
        "  FLASHBOX_ENGINES      engine base URLs, comma-separated\n"
        "  FLASHBOX_HOST         listen address (default 0.0.0.0)\n"
        "  FLASHBOX_PORT         listen port (default 8080)\n"
        "  FLASHBOX_API_KEYS     accepted keys, comma-separated (unset: no auth)\n"
        "  FLASHBOX_STATE_URL    redis:// URL of the state a fleet of gateways shares\n"
        "  FLASHBOX_<SECTION>__<FIELD>  any other setting, e.g. FLASHBOX_LIMITS__MAX_TOKENS\n"
        f"{textwrap.fill(sections, 88, initial_indent='  sections: ', subsequent_indent='    ')}\n"
        "\n"
        "Every field, with its bound and why: gateway/settings.py."
    )


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (1-65535)")
    return port


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gateway",
        description="Serve the flashbox gateway's OpenAI and Anthropic APIs over the engines.",
        epilog=_environment_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", type=Path, help="settings YAML (overrides FLASHBOX_CONFIG)")
    parser.add_argument("--host", help="listen address (overrides FLASHBOX_HOST)")
    parser.add_argument("--port", type=_port, help="listen port (overrides FLASHBOX_PORT)")
    return parser


def _settings(argv: Sequence[str] | None) -> Settings:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.config is not None:
        if not args.config.is_file():
            parser.error(f"--config {args.config} is not a file")
        # Settings find their file through this variable (gateway.settings).
        os.environ["FLASHBOX_CONFIG"] = str(args.config)
    flags = {name: value for name in ("host", "port") if (value := getattr(args, name)) is not None}
    try:
        return load_settings(**flags)
    except (ValueError, OSError) as exc:
        # pydantic's ValidationError is a ValueError and names each bad field and its source.
        parser.exit(2, f"{parser.prog}: invalid settings: {exc}\n")


def main(argv: Sequence[str] | None = None) -> None:
    settings = _settings(argv)
    configure_logging(
        settings.observability.log_level,
        [*settings.api_keys, *settings.routing.admin_api_keys],
    )
    app = create_app(settings)
    security, shutdown = settings.security, settings.shutdown
    _raise_open_files_limit(settings)
    bounds = ConnectionBounds(
        max_header_bytes=security.max_header_bytes,
        header_timeout_s=security.header_timeout_s,
        body_timeout_s=security.body_timeout_s,
        body_min_bytes_per_s=security.body_min_bytes_per_s,
        max_connections=security.max_connections,
        error_body=error_body,
    )
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        # httptools, with header bytes, header and body deadlines and a connection cap
        # enforced while the bytes arrive (gateway/connection.py).
        http=protocol_class(bounds),
        # No route speaks WebSocket: an upgrade request is plain HTTP to the gateway.
        ws="none",
        lifespan="on",
        access_log=settings.observability.access_log,
        log_level=settings.observability.log_level,
        log_config=uvicorn_log_config(),
        # Keep client connections open between requests (agents send many in a row).
        timeout_keep_alive=security.keep_alive_s,
        # The drain aborts what is left after grace_s; this is the backstop after that.
        timeout_graceful_shutdown=int(shutdown.grace_s + shutdown.abort_grace_s) + 1,
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _ignore)
    _DrainingServer(config, app.state.admission).run()


if __name__ == "__main__":
    main()
