"""Local stand-ins for the images `make test-docker` cannot pull, and a Docker daemon to use.

    python -m scripts.docker_stack [--print-env] [--engine]

Image registries are unreachable on the machines CI runs on, so the official images the
Dockerfile and compose.yaml name cannot be pulled. This builds stand-ins from Debian's packages
and prints the variables that point the build and compose at them (their defaults stay the
official images users get):

- the Python base (FLASHBOX_PYTHON_IMAGE, the Dockerfile's PYTHON_IMAGE): a bookworm root made by
  debootstrap with python3, pip and CA certificates, cached under .cache/docker/. It trusts what
  this host trusts (the CA files under /usr/local/share/ca-certificates: on these machines,
  the egress proxy PyPI is reached through) and lets pip install into the system Python, as
  the official python image does;
- Prometheus (FLASHBOX_PROMETHEUS_IMAGE) and Valkey (FLASHBOX_VALKEY_IMAGE): Debian's prometheus
  and redis-server on that base (Dockerfile.prometheus, Dockerfile.valkey here);
- Jaeger (FLASHBOX_JAEGER_IMAGE, the `tracing` profile): the tests' OTLP receiver on that base,
  which speaks OTLP and the one query of Jaeger's API the tests use (Dockerfile.jaeger);
- for the engine image: uv from its PyPI wheel; --engine also builds flashbox-engine:dev, with a
  wheelhouse of the engine's pins under .cache/engine-wheels when it has anything to install
  (engine_image.py).

Grafana has no Debian package: the test stack runs without it. A daemon is started (Debian's
dockerd, logging to .cache/docker/dockerd.log) when none answers, and `--stop-daemon` stops
that one after the tests (a daemon found running is left alone).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CACHE = REPO / ".cache" / "docker"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = "python3,python3-pip,python3-venv,ca-certificates,python-is-python3"
PYTHON_IMAGE = "flashbox-local/python:3.11-bookworm"
PROMETHEUS_IMAGE = "flashbox-local/prometheus:debian"
VALKEY_IMAGE = "flashbox-local/valkey:debian"
# Jaeger has no Debian package: the tests' own OTLP receiver stands in (Dockerfile.jaeger).
RECEIVER = REPO / "tests" / "support" / "otlp_receiver.py"
HOST_CAS = Path("/usr/local/share/ca-certificates")
DAEMON_WAIT_S = 60.0
PID_FILE = CACHE / "dockerd.pid"


def _run(*argv: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=True, text=True, **kwargs)  # type: ignore[call-overload, no-any-return]


def daemon_up() -> bool:
    return subprocess.run(["docker", "info"], capture_output=True).returncode == 0


def ensure_daemon() -> None:
    """A daemon that answers: the one running, else Debian's dockerd started here."""
    if daemon_up():
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        raise SystemExit(
            "no Docker daemon answers and dockerd is not installed (apt-get install docker.io)"
        )
    CACHE.mkdir(parents=True, exist_ok=True)
    log = (CACHE / "dockerd.log").open("ab")
    daemon = subprocess.Popen(
        [dockerd], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    # Ours to stop when the tests are done (--stop-daemon); a daemon found running is not.
    PID_FILE.write_text(str(daemon.pid))
    deadline = time.monotonic() + DAEMON_WAIT_S
    while time.monotonic() < deadline:
        if daemon_up():
            return
        time.sleep(0.5)
    raise SystemExit(
        f"dockerd did not answer within {DAEMON_WAIT_S:g} s; see {CACHE / 'dockerd.log'}"
    )


def stop_daemon() -> None:
    """Stop the daemon ensure_daemon started (nothing when it found one running)."""
    if not PID_FILE.exists():
        return
    pid = int(PID_FILE.read_text())
    PID_FILE.unlink()
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + DAEMON_WAIT_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)


def image_exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def _root_file_system() -> Path:
    root = CACHE / "rootfs-python"
    if (root / "usr" / "bin" / "python3").exists():
        return root
    if shutil.which("debootstrap") is None:
        raise SystemExit("debootstrap is not installed (apt-get install debootstrap)")
    shutil.rmtree(root, ignore_errors=True)
    root.parent.mkdir(parents=True, exist_ok=True)
    _run("debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(root), MIRROR)
    # As the official python image: pip may install into this Python.
    for marker in root.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    # Trust what this host trusts (its egress proxy's CA reaches PyPI through it).
    bundle = root / "etc" / "ssl" / "certs" / "ca-certificates.crt"
    for certificate in sorted(HOST_CAS.glob("*.crt")) if HOST_CAS.is_dir() else []:
        shutil.copy(certificate, root / "usr" / "local" / "share" / "ca-certificates")
        with bundle.open("a") as out:
            out.write("\n" + certificate.read_text())
    shutil.rmtree(root / "var" / "cache" / "apt" / "archives", ignore_errors=True)
    return root


def ensure_base() -> None:
    if image_exists(PYTHON_IMAGE):
        return
    root = _root_file_system()
    tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    _run(
        "docker", "import", "-c", "ENV LANG=C.UTF-8", "-c", 'CMD ["python3"]', "-",
        PYTHON_IMAGE, stdin=tar.stdout, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    if tar.wait() != 0:
        raise SystemExit("tar of the root file system failed")


def ensure_standins() -> None:
    for tag, dockerfile in (
        (PROMETHEUS_IMAGE, "Dockerfile.prometheus"),
        (VALKEY_IMAGE, "Dockerfile.valkey"),
    ):
        if not image_exists(tag):
            _run(
                "docker", "build", "-q", "-f", str(HERE / dockerfile), "--build-arg",
                f"BASE_IMAGE={PYTHON_IMAGE}", "-t", tag, str(HERE), stdout=subprocess.DEVNULL,
            )  # fmt: skip


def jaeger_image() -> str:
    """The Jaeger stand-in's tag: named by its receiver's content, so an edit rebuilds it."""
    digest = hashlib.sha256(RECEIVER.read_bytes() + (HERE / "Dockerfile.jaeger").read_bytes())
    return f"flashbox-local/jaeger:{digest.hexdigest()[:12]}"


def ensure_jaeger_standin() -> None:
    tag = jaeger_image()
    if image_exists(tag):
        return
    with tempfile.TemporaryDirectory(prefix="jaeger-standin-") as context:
        shutil.copy(HERE / "Dockerfile.jaeger", Path(context) / "Dockerfile")
        shutil.copy(RECEIVER, Path(context) / "otlp_receiver.py")
        _run(
            "docker", "build", "-q", "--build-arg", f"BASE_IMAGE={PYTHON_IMAGE}", "-t", tag,
            context, stdout=subprocess.DEVNULL,
        )  # fmt: skip


def compose_env() -> dict[str, str]:
    """What points the Dockerfile and compose.yaml at the stand-ins."""
    return {
        "FLASHBOX_PYTHON_IMAGE": PYTHON_IMAGE,
        "FLASHBOX_PROMETHEUS_IMAGE": PROMETHEUS_IMAGE,
        "FLASHBOX_VALKEY_IMAGE": VALKEY_IMAGE,
        "FLASHBOX_JAEGER_IMAGE": jaeger_image(),
    }


def prepare(*, engine: bool = False) -> dict[str, str]:
    """The daemon and the stand-ins; with engine=True those of the engine image too."""
    ensure_daemon()
    ensure_base()
    ensure_standins()
    ensure_jaeger_standin()
    if engine:
        # The wheelhouse is made by the engine build itself, and only when it has something to
        # install (engine_image.build_engine).
        from scripts.docker_stack.engine_image import ensure_uv_standin

        ensure_uv_standin()
    return compose_env()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--print-env", action="store_true", help="print the variables as KEY=VALUE")
    parser.add_argument(
        "--stop-daemon", action="store_true", help="stop the dockerd this started, and nothing else"
    )
    parser.add_argument(
        "--engine", action="store_true", help="also build flashbox-engine:dev from the stand-ins"
    )
    args = parser.parse_args(argv)
    if args.stop_daemon:
        stop_daemon()
        return 0
    env = prepare(engine=True)
    if args.engine:
        from scripts.docker_stack import engine_image

        built = engine_image.main()
        if built != 0:
            return built
    if args.print_env:
        for key, value in env.items():
            print(f"{key}={value}")
    else:
        print("stand-ins ready: " + ", ".join(env.values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
