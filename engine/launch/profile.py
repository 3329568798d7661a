"""The engine profile: what to run on which kind of host, validated from YAML.

Values spelled "auto" are filled from the probed host by the plan builder. Everything that
depends on the model family (parsers, architecture name, GPU policy, state-slot size) lives in
the profile file, not here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.launch import images
from engine.launch.gpu import parse_capability

Auto = Literal["auto"]
KtVariant = Literal[
    "auto", "avx2", "avx512_base", "avx512_vnni", "avx512_vbmi", "avx512_bf16", "amx"
]


class ProfileError(ValueError):
    """The profile file is missing, not YAML, or does not validate; the message says which."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Section):
    path: str = Field(description="model directory as the engine process sees it")
    served_name: str
    # "dummy" starts random weights from config.json alone (the CPU test models); None is
    # SGLang's default (read the checkpoint).
    load_format: Literal["dummy"] | None = None
    architecture: str | None = Field(default=None, description="expected config.json entry")
    quantization: str | None = Field(default=None, description="expected quant_method")
    min_host_ram_gb: float = Field(gt=0, description="RAM the CPU experts need, in GB")


class ServerSection(_Section):
    host: str = "0.0.0.0"
    port: int = Field(default=30000, ge=1, le=65535)
    api_key_env: str | None = Field(default=None, description="env var holding --api-key")
    watchdog_timeout_s: float = Field(gt=0)
    enable_metrics: bool = True
    enable_cache_report: bool = True
    stream_output: bool = Field(
        default=True, description="--stream-output: streamed output_ids as new ids only"
    )
    tool_call_parser: str | None = None
    reasoning_parser: str | None = None
    # sglang-kt's /health runs a one-token generation by default, queued behind whatever the
    # scheduler is doing: behind a long CPU prefill it times out and the engine looks dead.
    # Off, /health answers from the server process (SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0);
    # the gateway tells a stuck engine from a busy one by its open requests instead.
    health_runs_generation: bool = False
    # A request the engine never released makes SIGTERM wait forever (sglang-kt 0.7.2 keeps
    # the state of every request it refused: an unknown sampling_params key, top_k 0, a
    # prompt past the context); forced shutdown (SGL_FORCE_SHUTDOWN=1) lets
    # `docker compose stop` end the engine.
    force_shutdown: bool = True


class TracingSection(_Section):
    """OpenTelemetry traces of the engine's requests (sglang-kt's --enable-trace), each a child
    of the gateway's engine-call span through the traceparent header of /generate.

    enabled: on, off, or auto (the default): on when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
    OTEL_EXPORTER_OTLP_ENDPOINT is set, the variables that turn the gateway's on. endpoint: the
    collector's OTLP gRPC address, host:port (sglang-kt's --otlp-traces-endpoint); those
    variables take its place when set. level: sglang-kt's trace level, 1 the request's stages
    (tokenize, prefill waiting, prefill forward, decode forward), 2 also its dispatch between
    processes, 3 also a span for every decode step (sglang-kt's own default: thousands of spans
    for one long answer).
    """

    enabled: bool | Literal["auto"] = "auto"
    endpoint: str = "localhost:4317"
    level: int = Field(default=2, ge=1, le=3)


class ImagesSection(_Section):
    """The engine's image bounds (`--mm-process-config`, `--limit-mm-data-per-request`).

    max_pixels is the resize budget: an image costs at most max_pixels / 1568 tokens, 4,000 at
    the engine's default 6,272,000, 800 at KTransformers' documented 1,254,400. The engine
    accepts [12,544, 6,272,000] and never more than 8 images per request, so neither is
    allowed past that here.
    """

    max_pixels: int = Field(
        default=images.ENGINE_MAX_PIXELS,
        ge=images.ENGINE_MIN_PIXELS,
        le=images.ENGINE_MAX_PIXELS,
        strict=True,
    )
    max_images_per_request: int = Field(
        default=images.ENGINE_MAX_IMAGES, ge=1, le=images.ENGINE_MAX_IMAGES, strict=True
    )

    @property
    def max_tokens_per_image(self) -> int:
        return images.max_tokens_per_image(self.max_pixels)


class GpuArchitecture(_Section):
    """A compute-capability range the model runs on, and what it needs there."""

    min: str
    max: str | None = None
    kv_cache_dtype: str
    layerwise_prefill: bool = True

    @model_validator(mode="after")
    def _capabilities_parse(self) -> GpuArchitecture:
        parse_capability(self.min)
        if self.max is not None:
            parse_capability(self.max)
        return self

    def covers(self, capability: tuple[int, int]) -> bool:
        if capability < parse_capability(self.min):
            return False
        return self.max is None or capability <= parse_capability(self.max)


class GpuSection(_Section):
    tp_size: int = Field(default=1, ge=1)
    mem_fraction_static: float = Field(gt=0, lt=1)
    kv_cache_dtype: str = "auto"
    attention_backend: str | None = None
    nsa_prefill_backend: str | None = None
    nsa_decode_backend: str | None = None
    cuda_graph_bs: list[int] | None = None
    cuda_graph_max_bs: int | None = Field(default=None, ge=1)
    disable_cuda_graph: bool = False
    supported: list[GpuArchitecture] = Field(default_factory=list)


class CpuSection(_Section):
    """The engine on the CPU alone (`device: cpu`): the tiny test models, never GLM itself."""

    # Cores the torch threads are bound to (SGLANG_CPU_OMP_THREADS_BIND); "auto" = the CPUs
    # this process may run on.
    omp_threads_bind: str | Auto = "auto"
    # Without it the KV pool is sized from host memory (17 GB for the tiny model).
    max_total_tokens: int = Field(ge=1)
    # torch.compile on the first request costs ~20 s on a 2-core host and buys nothing here.
    disable_torch_compile: bool = True


class KtSection(_Section):
    weight_path: str | None = Field(default=None, description="defaults to model.path")
    method: str
    cpuinfer: int | Auto = "auto"
    reserve_cores: int = Field(default=0, ge=0, description="cores kept free when cpuinfer is auto")
    threadpool_count: int | Auto = "auto"
    numa_nodes: list[int] | Auto = "auto"
    num_gpu_experts: int = Field(default=0, ge=0)
    gpu_prefill_token_threshold: int | None = Field(default=None, ge=0)
    max_deferred_experts_per_token: int | None = Field(default=None, ge=0)
    cpu_variant: KtVariant = "auto"
    min_cpu_variant: KtVariant = "avx2"


class SchedulingSection(_Section):
    context_length: int | None = Field(default=None, ge=1)
    chunked_prefill_size: int | None = Field(default=None, ge=1)
    max_running_requests: int | None = Field(default=None, ge=1)
    # SGLang's queue order. lpm admits the waiting prompts with the longest cached prefix
    # first: a turn whose checkpoint is live (~10 s) is not queued behind cold first turns
    # (~100 s each). SGLang falls back to fcfs with more than 128 waiting, or no radix cache.
    schedule_policy: Literal["fcfs", "lpm"] | None = None


class PrefixCacheSection(_Section):
    """Recurrent-state checkpoints between turns (needs the engine's prefix-cache change)."""

    enabled: bool = False
    track_interval: int = Field(default=256, ge=1)
    slots: int | Auto = "auto"
    slot_mib_tp1: float = Field(default=140.0, gt=0, description="GPU MiB per slot at TP1")
    max_gpu_share: float = Field(default=0.5, gt=0, le=1)
    alignment: int = Field(default=256, ge=1, description="cache unit the change requires")

    @model_validator(mode="before")
    @classmethod
    def _bool_shorthand(cls, data: Any) -> Any:
        # `prefix_cache: true` in a profile means "on, with the defaults".
        return {"enabled": data} if isinstance(data, bool) else data


KernelName = Literal["hc_pre", "hc_pre_norm", "hc_post", "gate_topk", "kda_decode"]


class KernelsSection(_Section):
    """The fused decode kernels (engine.patches.kernels), switched through their env vars.

    Off by default: they are exact on the CPU interpreter but unmeasured on a GPU until the
    device tests (docs/kernels.md) have run on the host.
    """

    enabled: bool = False
    disable: list[KernelName] = Field(default_factory=list)
    # DSA indexer prefill query chunk; None keeps the wheel's 32.
    indexer_query_chunk: int | None = Field(default=None, ge=1, le=1024)

    @model_validator(mode="before")
    @classmethod
    def _bool_shorthand(cls, data: Any) -> Any:
        return {"enabled": data} if isinstance(data, bool) else data


class DoctorSection(_Section):
    min_driver_cuda: str = "12.8"
    min_shm_gib: float = Field(default=32.0, ge=0)
    min_free_disk_gib: float = Field(default=50.0, ge=0)


class EngineProfile(_Section):
    name: str
    description: str = ""
    # cuda: the appliance (GPU + kt-kernel CPU experts); cpu: the real server on the CPU alone,
    # for tests (make engine-cpu).
    device: Literal["cuda", "cpu"] = "cuda"
    model: ModelSection
    server: ServerSection
    gpu: GpuSection | None = None
    kt: KtSection | None = None
    cpu: CpuSection | None = None
    scheduling: SchedulingSection = Field(default_factory=SchedulingSection)
    # None: a text-only model (no vision tower, no image flags).
    images: ImagesSection | None = Field(default_factory=ImagesSection)
    prefix_cache: PrefixCacheSection = Field(default_factory=PrefixCacheSection)
    kernels: KernelsSection = Field(default_factory=KernelsSection)
    tracing: TracingSection = Field(default_factory=TracingSection)
    doctor: DoctorSection = Field(default_factory=DoctorSection)
    env: dict[str, str] = Field(default_factory=dict)
    extra_args: list[str] = Field(default_factory=list)
    check_flags: bool = True

    @model_validator(mode="after")
    def _device_sections(self) -> EngineProfile:
        if self.device == "cuda" and (self.gpu is None or self.kt is None):
            raise ValueError("device cuda needs the gpu and kt sections")
        if self.device == "cpu" and self.cpu is None:
            raise ValueError("device cpu needs the cpu section (max_total_tokens)")
        if self.device == "cpu" and self.kernels.enabled:
            raise ValueError("kernels are Triton kernels for the GPU: set kernels.enabled false")
        return self

    @property
    def gpu_section(self) -> GpuSection:
        """The gpu section of a cuda profile (the validator guarantees it there)."""
        if self.gpu is None:
            raise ValueError(
                f"engine profile {self.name} has no gpu section (device {self.device})"
            )
        return self.gpu

    @property
    def kt_section(self) -> KtSection:
        if self.kt is None:
            raise ValueError(f"engine profile {self.name} has no kt section (device {self.device})")
        return self.kt

    @model_validator(mode="after")
    def _prefix_cache_alignment(self) -> EngineProfile:
        cache = self.prefix_cache
        if not cache.enabled:
            return self
        unit = cache.alignment
        if cache.track_interval % unit:
            raise ValueError(
                f"prefix_cache.track_interval {cache.track_interval} must be a multiple of {unit}"
            )
        chunk = self.scheduling.chunked_prefill_size
        if chunk is None or chunk % unit:
            raise ValueError(
                f"scheduling.chunked_prefill_size must be set to a multiple of {unit} "
                f"when the prefix cache is on (got {chunk})"
            )
        return self


def load_profile(path: Path) -> EngineProfile:
    """Read and validate a profile file; ProfileError with a readable message otherwise."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"cannot read engine profile {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ProfileError(f"engine profile {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ProfileError(f"engine profile {path} must be a YAML mapping")
    try:
        return EngineProfile.model_validate(data)
    except ValidationError as exc:
        lines = [f"engine profile {path} is invalid:"]
        for error in exc.errors():
            where = ".".join(str(part) for part in error["loc"]) or "(top level)"
            lines.append(f"  {where}: {error['msg']}")
        raise ProfileError("\n".join(lines)) from exc
