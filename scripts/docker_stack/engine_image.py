"""The engine image built from the Dockerfile where registries cannot be reached.

    python -m scripts.docker_stack --engine

The engine target pulls four things no machine here can reach; each has a stand-in, passed in
through the Dockerfile's build arguments (their defaults stay what users get):

- CUDA_IMAGE (nvidia/cuda:...-ubuntu24.04): the local Debian bookworm base of the gateway's
  stand-in (scripts/docker_stack), which has no CUDA toolkit;
- UV_IMAGE (ghcr.io/astral-sh/uv): the same uv release's binaries from its PyPI wheel
  (Dockerfile.uv);
- the Python `uv python install` downloads: ENGINE_PYTHON=3.11 finds that base's Debian
  Python 3.11 instead, so nothing is downloaded;
- TORCH_INDEX_URL (the CUDA 12.8 torch index) and PACKAGE_INDEX_URL (PyPI): a wheelhouse under
  .cache/engine-wheels, made once with pip from PyPI (whose torch 2.9.1 for Linux x86_64 is
  the cu128 build the CUDA index serves) and served as a simple index on loopback while the
  build runs (`--network host`; the build context stays the few megabytes of sources).

The install steps, the avx512_bf16 check, the .pth files, the entrypoint and the healthcheck
are the Dockerfile's own. docs/deploy.md lists what this does not prove.
"""

from __future__ import annotations

import functools
import html
import http.server
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DOCKERFILE = REPO / "Dockerfile"
WHEELS = REPO / ".cache" / "engine-wheels"
UV_CACHE = REPO / ".cache" / "docker" / "uv"
ENGINE_IMAGE = "flashbox-engine:dev"
# The gateway's stand-in base (scripts/docker_stack.PYTHON_IMAGE) stands in for the CUDA image
# too: a Debian root with apt, CA certificates and Python 3.11.
CUDA_STANDIN = "flashbox-local/python:3.11-bookworm"
STANDIN_PYTHON = "3.11"
# A fixed port: build arguments are part of each RUN layer's cache key, so a port that changed
# between runs would reinstall torch every time.
INDEX_HOST = "127.0.0.1"
INDEX_PORT = 38431
# The engine's pinned packages, by the Dockerfile ARG that pins each, in install order.
PINNED_ARGS = (
    ("torch", "TORCH_VERSION"),
    ("torchvision", "TORCHVISION_VERSION"),
    ("torchaudio", "TORCHAUDIO_VERSION"),
    ("sglang-kt", "SGLANG_KT_VERSION"),
    ("kt-kernel", "KT_KERNEL_VERSION"),
)
# The extras the image installs with its pins (the Dockerfile's line): `tracing` brings the
# OpenTelemetry SDK and exporters sglang-kt's --enable-trace needs, so the wheelhouse has them.
EXTRAS = {"sglang-kt": "[tracing]"}
BUILD_TIMEOUT_S = 3600.0
WHEELHOUSE_TIMEOUT_S = 3600.0


def dockerfile_arg(name: str, dockerfile: Path = DOCKERFILE) -> str:
    """The default of `ARG name=value` in the Dockerfile (read, not repeated here)."""
    match = re.search(rf"^ARG {name}=(\S+)$", dockerfile.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise SystemExit(f"Dockerfile has no `ARG {name}=...` line")
    return match.group(1).strip('"')


def pins(dockerfile: Path = DOCKERFILE) -> list[str]:
    return [
        f"{package}{EXTRAS.get(package, '')}=={dockerfile_arg(arg, dockerfile)}"
        for package, arg in PINNED_ARGS
    ]


def project_name(wheel: str) -> str:
    """The normalized project name of a wheel file (PEP 503), e.g. `nvidia-cublas-cu12`."""
    return re.sub(r"[-_.]+", "-", wheel.split("-", 1)[0]).lower()


def _write_core_metadata(wheel: Path) -> None:
    """WHEEL.metadata beside the wheel (PEP 658): the installer reads each wheel's requirements
    from it instead of fetching the wheel (torch alone is ~900 MB) to resolve."""
    with zipfile.ZipFile(wheel) as archive:
        # The wheel's own, at the top (a wheel may vendor others' below).
        names = [n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        if len(names) != 1:
            raise SystemExit(f"{wheel.name}: expected one .dist-info/METADATA, found {names}")
        wheel.with_name(wheel.name + ".metadata").write_bytes(archive.read(names[0]))


def write_simple_index(root: Path = WHEELS) -> int:
    """PEP 503 pages under root/simple for the wheels in root/files, with their core metadata
    (PEP 658); returns the project count."""
    files = root / "files"
    projects: dict[str, list[str]] = {}
    for wheel in sorted(files.glob("*.whl")):
        _write_core_metadata(wheel)
        projects.setdefault(project_name(wheel.name), []).append(wheel.name)
    simple = root / "simple"
    shutil.rmtree(simple, ignore_errors=True)
    simple.mkdir(parents=True)
    links = "".join(f'<a href="{name}/">{name}</a>\n' for name in sorted(projects))
    (simple / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    for name, wheels in projects.items():
        page = simple / name
        page.mkdir()
        anchors = "".join(
            f'<a href="../../files/{html.escape(w)}" data-core-metadata="true" '
            f'data-dist-info-metadata="true">{html.escape(w)}</a>\n'
            for w in wheels
        )
        (page / "index.html").write_text(
            f"<!DOCTYPE html>\n<html><body>\n{anchors}</body></html>\n"
        )
    return len(projects)


def ensure_wheelhouse(python: str = sys.executable, root: Path = WHEELS) -> Path:
    """root/files: wheels of the engine's pins and everything they need, made once by pip
    (sdists built into wheels, so the image's uv needs no build tools); reused while the
    Dockerfile's pins are the same. About 5 GB."""
    wanted = "\n".join(pins()) + "\n"
    stamp = root / ".pins"
    if stamp.is_file() and stamp.read_text() == wanted and (root / "simple").is_dir():
        return root / "files"
    engine_python = dockerfile_arg("ENGINE_PYTHON")
    version = subprocess.run(
        [python, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if not engine_python.startswith(version + "."):
        raise SystemExit(f"{python} is Python {version}; the engine's wheels need {engine_python}")
    stamp.unlink(missing_ok=True)
    (root / "files").mkdir(parents=True, exist_ok=True)
    print(f"engine wheelhouse: {' '.join(pins())} into {root} (first use: ~5 GB)", file=sys.stderr)
    subprocess.run(
        [python, "-m", "pip", "wheel", "-q", "--progress-bar", "off",
         "--disable-pip-version-check", "--wheel-dir", str(root / "files"), *pins()],
        check=True, timeout=WHEELHOUSE_TIMEOUT_S,
    )  # fmt: skip
    write_simple_index(root)
    stamp.write_text(wanted)
    return root / "files"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # An installer that has what it needs closes the connection mid-file; not an error.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


@contextmanager
def serve_wheelhouse(
    root: Path = WHEELS, host: str = INDEX_HOST, port: int = INDEX_PORT
) -> Iterator[str]:
    """The wheelhouse as a simple index on loopback while the block runs; yields its URL."""
    handler = functools.partial(_QuietHandler, directory=str(root))
    try:
        server = _Server((host, port), handler)
    except OSError as exc:
        raise SystemExit(f"cannot serve the engine wheelhouse on {host}:{port}: {exc}") from exc
    thread = threading.Thread(target=server.serve_forever, name="wheelhouse", daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{port}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def uv_standin_tag() -> str:
    return f"flashbox-local/uv:{dockerfile_arg('UV_IMAGE').rsplit(':', 1)[1]}"


def ensure_uv_standin(python: str = sys.executable) -> str:
    """flashbox-local/uv:VERSION: the Dockerfile's uv release, from PyPI (Dockerfile.uv)."""
    tag = uv_standin_tag()
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag
    version = tag.rsplit(":", 1)[1]
    UV_CACHE.mkdir(parents=True, exist_ok=True)
    wheels = sorted(UV_CACHE.glob(f"uv-{version}-*.whl"))
    if not wheels:
        subprocess.run(
            [python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
             "--only-binary", ":all:", "--platform", "manylinux_2_17_x86_64",
             "--dest", str(UV_CACHE), f"uv=={version}"],
            check=True, timeout=600,
        )  # fmt: skip
        wheels = sorted(UV_CACHE.glob(f"uv-{version}-*.whl"))
    with tempfile.TemporaryDirectory(prefix="uv-standin-") as tmp:
        context = Path(tmp)
        with zipfile.ZipFile(wheels[0]) as wheel:
            for binary in ("uv", "uvx"):
                target = context / binary
                target.write_bytes(wheel.read(f"uv-{version}.data/scripts/{binary}"))
                target.chmod(0o755)
        shutil.copy(HERE / "Dockerfile.uv", context / "Dockerfile")
        subprocess.run(
            ["docker", "build", "-q", "-t", tag, str(context)],
            check=True, stdout=subprocess.DEVNULL, timeout=600,
        )  # fmt: skip
    return tag


def build_args(index_url: str, python_image: str = CUDA_STANDIN) -> dict[str, str]:
    """What points the engine target at the stand-ins."""
    return {
        # The classic builder builds every stage before the target, the gateway's too.
        "PYTHON_IMAGE": python_image,
        "CUDA_IMAGE": CUDA_STANDIN,
        "UV_IMAGE": uv_standin_tag(),
        "ENGINE_PYTHON": STANDIN_PYTHON,
        "TORCH_INDEX_URL": index_url,
        "PACKAGE_INDEX_URL": index_url,
    }


def build_command(context: Path, tag: str, index_url: str) -> list[str]:
    # --force-rm: a failed step's container is removed too (the classic builder keeps it).
    argv = ["docker", "build", "--force-rm", "--network", "host", "--target", "engine", "-t", tag]
    for key, value in build_args(index_url).items():
        argv += ["--build-arg", f"{key}={value}"]
    return [*argv, str(context)]


def _build(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=BUILD_TIMEOUT_S
    )


def build_engine(
    context: Path = REPO, tag: str = ENGINE_IMAGE, *, serve: bool = True
) -> subprocess.CompletedProcess[str]:
    """`docker build --target engine` with the stand-ins. With serve=False no index answers:
    a build that would install anything fails, one that reuses every cached layer passes.
    With serve=True a build whose install layers are all cached is tried first, so the
    wheelhouse is made (~5 GB from PyPI) only when something is to be installed."""
    ensure_uv_standin()
    command = build_command(context, tag, f"http://{INDEX_HOST}:{INDEX_PORT}/simple")
    cached = _build(command)
    if cached.returncode == 0 or not serve:
        return cached
    ensure_wheelhouse()
    with serve_wheelhouse():
        return _build(command)


def main() -> int:
    started = time.monotonic()
    done = build_engine()
    if done.returncode != 0:
        print(done.stdout + done.stderr, file=sys.stderr)
        return done.returncode
    print(f"{ENGINE_IMAGE} built in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return 0
