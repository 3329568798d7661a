# syntax=docker/dockerfile:1
# flashbox images, one file, three targets:
#   gateway  the FastAPI gateway (Python slim, non-root, runtime dependencies only)
#   sim      the SGLang-compatible engine simulator (same base)
#   engine   SGLang + KTransformers (sglang-kt, kt-kernel) for Blackwell GPUs and AVX512 CPUs;
#            its entrypoint is the hardware-aware launcher (python -m engine.launch)
# Every version is pinned here. Dependencies are installed before sources are copied, so a code
# change rebuilds only the last layers.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04
ARG UV_IMAGE=ghcr.io/astral-sh/uv:0.9.9
ARG ENGINE_PYTHON=3.11.14
ARG TORCH_VERSION=2.9.1
ARG TORCHVISION_VERSION=0.24.1
ARG TORCHAUDIO_VERSION=2.9.1
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
# Everything else the engine installs (sglang-kt, kt-kernel and what they need).
ARG PACKAGE_INDEX_URL=https://pypi.org/simple
ARG SGLANG_KT_VERSION=0.7.2
ARG KT_KERNEL_VERSION=0.7.2
# Architectures for kernels compiled at run time: Ampere SM86, Ada SM89, Blackwell SM100/SM120.
ARG TORCH_CUDA_ARCH_LIST="8.6;8.9;10.0;12.0"

# ---------------------------------------------------------------- gateway and simulator base
FROM ${PYTHON_IMAGE} AS app-base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml ./
# The pinned runtime dependencies straight from pyproject.toml (no extras: no test or bench
# tools in the image); the sources are not installed, they run from /app.
RUN python -c "import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; open('requirements.txt', 'w').write('\n'.join(deps) + '\n')" \
 && pip install --no-cache-dir -r requirements.txt \
 && rm requirements.txt \
 && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin flashbox

# ---------------------------------------------------------------- gateway
FROM app-base AS gateway
COPY config/ config/
COPY templates/ templates/
COPY gateway/ gateway/
ENV FLASHBOX_HOST=0.0.0.0 \
    FLASHBOX_PORT=8080 \
    FLASHBOX_CONFIG=/app/config/gateway.yaml
USER 10001
EXPOSE 8080
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=4)"]
CMD ["python", "-m", "gateway"]

# ---------------------------------------------------------------- simulator
FROM app-base AS sim
COPY config/ config/
COPY engine/ engine/
USER 10001
EXPOSE 30000
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:30000/health', timeout=4)"]
ENTRYPOINT ["python", "-m", "engine.sim"]
CMD ["--host", "0.0.0.0", "--port", "30000", "--profile", "config/sim/rtx-pro-6000-epyc.yaml"]

# ---------------------------------------------------------------- engine
# After the gateway and sim stages: Docker's classic builder builds every stage before its
# target, and a gateway build must not need the uv image (make test-docker builds without
# registries).
FROM ${UV_IMAGE} AS uv

FROM ${CUDA_IMAGE} AS engine
ARG ENGINE_PYTHON
ARG TORCH_VERSION
ARG TORCHVISION_VERSION
ARG TORCHAUDIO_VERSION
ARG TORCH_INDEX_URL
ARG PACKAGE_INDEX_URL
ARG SGLANG_KT_VERSION
ARG KT_KERNEL_VERSION
ARG TORCH_CUDA_ARCH_LIST
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# DeepGEMM supports only sm_90/100/103: its JIT stays off, or it fails on sm_120.
# Bytecode is compiled at install: the image is read-only to the engine's user, which would
# otherwise compile torch and sglang again at every start.
# HOME holds the kernel compile caches (triton, torch extensions, flashinfer) under .cache/,
# which compose keeps in a volume so later starts skip the builds.
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_NO_CACHE=1 \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST} \
    SGLANG_ENABLE_JIT_DEEPGEMM=0 \
    PYTORCH_ALLOC_CONF=expandable_segments:True \
    HOME=/var/lib/flashbox \
    TRITON_CACHE_DIR=/var/lib/flashbox/.cache/triton

# libnuma: kt-kernel binds its CPU expert threads and memory per NUMA node.
# The engine runs as uid 10001, like the gateway: it owns only its HOME (the compile-cache
# volume's mount point, whose owner a new volume takes) and /model, where compose mounts the
# weights read-only (the CPU profile's tiny model is written there into a volume).
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libnuma1 numactl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/flashbox --no-create-home \
      --shell /usr/sbin/nologin flashbox \
 && mkdir -p /var/lib/flashbox/.cache /model \
 && chown -R 10001:10001 /var/lib/flashbox /model

# Python 3.11 (the CUDA image ships 3.12) as uv's standalone build, in a virtualenv. A base that
# already has that Python skips the download (make test-docker's stand-in: docs/deploy.md).
COPY --from=uv /uv /usr/local/bin/uv
RUN { uv python find "${ENGINE_PYTHON}" > /dev/null 2>&1 || uv python install "${ENGINE_PYTHON}"; } \
 && uv venv --python "${ENGINE_PYTHON}" /opt/venv

# torch from the CUDA 12.8 index first, so sglang-kt's `torch==2.9.1` is already satisfied
# by the cu128 build and not replaced.
RUN uv pip install --index-url "${TORCH_INDEX_URL}" \
      "torch==${TORCH_VERSION}" \
      "torchvision==${TORCHVISION_VERSION}" \
      "torchaudio==${TORCHAUDIO_VERSION}"

# sglang-kt's `tracing` extra: the OpenTelemetry SDK and exporters its --enable-trace needs
# (without them a traced engine fails at start; engine profiles' `tracing:` section).
# kt-kernel's wheel carries every CPU variant (amx, avx512_bf16, ..., avx2); the launcher picks
# avx512_bf16 on AVX512-BF16 hosts without AMX (EPYC) through KT_KERNEL_CPU_VARIANT. The check
# fails the build if the pinned wheel ever drops that variant.
RUN uv pip install --index-url "${PACKAGE_INDEX_URL}" \
      "sglang-kt[tracing]==${SGLANG_KT_VERSION}" \
      "kt-kernel==${KT_KERNEL_VERSION}" \
 && python -c "import importlib.util, pathlib, sys; pkg = pathlib.Path(importlib.util.find_spec('kt_kernel').origin).parent; sys.exit(0 if list(pkg.glob('_kt_kernel_ext_avx512_bf16*.so')) else 'kt-kernel lacks the avx512_bf16 variant')"

# The flashbox engine code: the launcher, the doctor and the engine patches (not the
# simulator). The first .pth puts it on every interpreter's path; the second loads the patches
# in every engine process (an ImportError there is reported, never fatal).
WORKDIR /opt/flashbox
COPY engine/launch/flashbox_engine_patches.pth /opt/venv/lib/python3.11/site-packages/
RUN echo /opt/flashbox > /opt/venv/lib/python3.11/site-packages/flashbox.pth
COPY config/engine/ config/engine/
COPY engine/__init__.py engine/
COPY engine/doctor/ engine/doctor/
COPY engine/patches/ engine/patches/
COPY engine/launch/ engine/launch/

USER 10001
EXPOSE 30000
# Only a live HTTP server: the launcher turns /health's test generation off, so a long prefill
# does not fail it. Loading ~300 GB of weights takes many minutes (compose sets the same).
# `-I -S`: the probe's Python skips the .pth start-up hooks and PYTHONPATH (the CPU shims import
# torch there): 2-4 s a probe with them, past the timeout on a busy host.
HEALTHCHECK --interval=30s --timeout=15s --start-period=60m --retries=5 \
  CMD ["python", "-I", "-S", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:30000/health', timeout=10)"]
ENTRYPOINT ["python", "-m", "engine.launch"]
CMD ["--profile", "/opt/flashbox/config/engine/rtx-pro-6000-epyc.yaml"]
