"""Profile + host facts -> the SGLang command line and environment.

Pure: no I/O. Anything that would make the engine fail or misbehave on this host becomes a
`problem` (the launcher refuses to start); decisions the operator should know become `notes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.launch import images, prefix_cache
from engine.launch.cpu import variant_level
from engine.launch.host import HostFacts
from engine.launch.profile import EngineProfile, GpuArchitecture
from engine.launch.traced_server import LEVEL_ENV as TRACE_LEVEL_ENV

SGLANG_MODULE = "sglang.launch_server"
# SGLang's server with its trace level set first (engine/launch/traced_server.py): sglang-kt
# 0.7.2 has no flag for it, only /set_trace_level once it runs.
TRACED_MODULE = "engine.launch.traced_server"
_OTLP_PROTOCOLS = ("grpc", "http/protobuf")


@dataclass(frozen=True)
class LaunchPlan:
    argv: tuple[str, ...]
    env: Mapping[str, str]
    notes: tuple[str, ...]
    problems: tuple[str, ...]
    secrets: frozenset[str] = field(default=frozenset())


@dataclass
class _Builder:
    profile: EngineProfile
    host: HostFacts
    environ: Mapping[str, str]
    prefix_cache_available: bool
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    secrets: set[str] = field(default_factory=set)
    module: str = SGLANG_MODULE

    def flag(self, name: str, *values: object) -> None:
        self.args.append(name)
        self.args.extend(_text(v) for v in values)

    def optional(self, name: str, value: object | None) -> None:
        if value is not None:
            self.flag(name, value)


def _text(value: object) -> str:
    # 1800.0 -> "1800": the command line reads as the profile was written.
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def build_plan(
    profile: EngineProfile,
    host: HostFacts,
    *,
    python: str,
    environ: Mapping[str, str],
    prefix_cache_available: bool,
) -> LaunchPlan:
    b = _Builder(profile, host, environ, prefix_cache_available)
    b.env.update(profile.env)
    b.notes.extend(host.notes)
    _serving(b)
    _images(b)
    if profile.device == "cpu":
        _cpu(b)
    else:
        _gpu(b)
        _kt(b)
    _prefix_cache(b)
    _kernels(b)
    _observability(b)
    b.args.extend(profile.extra_args)
    return LaunchPlan(
        argv=(python, "-m", b.module, *b.args),
        env=dict(sorted(b.env.items())),
        notes=tuple(b.notes),
        problems=tuple(b.problems),
        secrets=frozenset(b.secrets),
    )


def _serving(b: _Builder) -> None:
    p = b.profile
    b.flag("--model-path", p.model.path)
    b.flag("--served-model-name", p.model.served_name)
    b.optional("--load-format", p.model.load_format)
    b.flag("--host", p.server.host)
    b.flag("--port", p.server.port)
    if p.gpu is not None:
        b.flag("--tp-size", p.gpu.tp_size)
        b.flag("--mem-fraction-static", p.gpu.mem_fraction_static)
    b.optional("--context-length", p.scheduling.context_length)
    b.optional("--chunked-prefill-size", p.scheduling.chunked_prefill_size)
    b.optional("--max-running-requests", p.scheduling.max_running_requests)
    b.optional("--schedule-policy", p.scheduling.schedule_policy)
    b.flag("--watchdog-timeout", p.server.watchdog_timeout_s)
    b.optional("--tool-call-parser", p.server.tool_call_parser)
    b.optional("--reasoning-parser", p.server.reasoning_parser)
    if p.server.stream_output:
        # Without it every streamed /generate event repeats all token ids so far, which
        # nobody reads (the gateway cuts them out): O(n^2) bytes over an answer, built by the
        # tokenizer manager's one Python process. Text stays cumulative either way.
        b.flag("--stream-output")
    # What the real server showed (docs/engine-cpu.md): both are ServerSection fields.
    if not p.server.health_runs_generation:
        b.env["SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION"] = "0"
    if p.server.force_shutdown:
        # The old spelling on purpose: sglang-kt 0.7.2's tokenizer manager reads only
        # SGL_FORCE_SHUTDOWN (its environ module warns it is deprecated and copies it to
        # SGLANG_FORCE_SHUTDOWN, which nothing reads). Seen on the real server: with the new
        # spelling alone, SIGTERM waited forever on refused requests it never released.
        b.env["SGL_FORCE_SHUTDOWN"] = "1"
    if p.server.api_key_env:
        key = b.environ.get(p.server.api_key_env, "")
        if key:
            b.flag("--api-key", key)
            b.secrets.add(key)
        else:
            b.notes.append(f"{p.server.api_key_env} is not set: the engine API has no key")


def _images(b: _Builder) -> None:
    # The vision tower loads whatever these say (sglang-kt has no switch to leave it out for
    # this model); they bound what one request may send it.
    bounds = b.profile.images
    if bounds is None:
        return
    b.flag("--mm-process-config", images.process_config(bounds.max_pixels))
    b.flag("--limit-mm-data-per-request", images.limit_per_request(bounds.max_images_per_request))


def _cpu(b: _Builder) -> None:
    """The real server on the CPU alone: torch-native kernels, no kt-kernel, no GPU checks."""
    cpu = b.profile.cpu
    assert cpu is not None  # the profile validator's rule for device cpu
    b.flag("--device", "cpu")
    b.flag("--max-total-tokens", cpu.max_total_tokens)
    b.env["SGLANG_USE_CPU_ENGINE"] = "1"
    bind = cpu.omp_threads_bind
    if bind == "auto":
        allowed = b.host.allowed_cpus
        bind = _cpu_list(allowed) if allowed else "all"
        b.notes.append(f"torch threads bound to CPUs {bind}")
    b.env["SGLANG_CPU_OMP_THREADS_BIND"] = bind
    if cpu.disable_torch_compile:
        b.env["TORCHDYNAMO_DISABLE"] = "1"
    # Nothing is fetched from a hub: the model directory is all there is.
    b.env["HF_HUB_OFFLINE"] = "1"


def _cpu_list(cpus: frozenset[int]) -> str:
    """{0, 1, 2, 5} -> "0-2,5" (the kernel's cpulist format SGLang parses)."""
    ordered = sorted(cpus)
    runs: list[str] = []
    start = prev = ordered[0]
    for cpu in [*ordered[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(runs)


def _architecture(b: _Builder) -> GpuArchitecture | None:
    """The profile's policy entry for the GPUs in use; records problems on mismatch."""
    gpu = b.profile.gpu_section
    used = b.host.gpus[: gpu.tp_size]
    if not used:
        b.problems.append("no NVIDIA GPU found (nvidia-smi missing or lists none)")
        return None
    if len(used) < gpu.tp_size:
        b.problems.append(f"gpu.tp_size is {gpu.tp_size} but only {len(used)} GPU(s) are visible")
    if len({g.compute_capability for g in used}) > 1:
        b.problems.append("the GPUs used for tensor parallelism differ in compute capability")
    first = used[0]
    if not gpu.supported:
        return None
    match = next((a for a in gpu.supported if a.covers(first.compute_capability)), None)
    if match is None:
        ranges = ", ".join(a.min + (f"-{a.max}" if a.max else "+") for a in gpu.supported)
        b.problems.append(
            f"{first.name} has compute capability {first.capability_text} ({first.sm}); "
            f"this profile's model runs on {ranges}"
        )
    return match


def _gpu(b: _Builder) -> None:
    gpu = b.profile.gpu_section
    arch = _architecture(b)
    kv = gpu.kv_cache_dtype
    if arch is not None:
        if kv == "auto":
            kv = arch.kv_cache_dtype
        elif kv != arch.kv_cache_dtype:
            b.problems.append(
                f"gpu.kv_cache_dtype {kv} is rejected on this GPU; use {arch.kv_cache_dtype} "
                "(or auto)"
            )
        threshold = b.profile.kt_section.gpu_prefill_token_threshold
        if not arch.layerwise_prefill and threshold:
            b.problems.append(
                "this GPU has no layer-wise GPU prefill route: set "
                "kt.gpu_prefill_token_threshold to 0"
            )
    if kv == "auto":
        b.notes.append("KV cache dtype left to SGLang (no GPU policy or GPU facts to choose it)")
    else:
        b.flag("--kv-cache-dtype", kv)
    b.optional("--attention-backend", gpu.attention_backend)
    b.optional("--nsa-prefill-backend", gpu.nsa_prefill_backend)
    b.optional("--nsa-decode-backend", gpu.nsa_decode_backend)
    if gpu.disable_cuda_graph:
        b.flag("--disable-cuda-graph")
    else:
        if gpu.cuda_graph_bs:
            b.flag("--cuda-graph-bs", *gpu.cuda_graph_bs)
        b.optional("--cuda-graph-max-bs", gpu.cuda_graph_max_bs)


def _kt(b: _Builder) -> None:
    kt = b.profile.kt_section
    cpu = b.host.cpu
    b.flag("--kt-weight-path", kt.weight_path or b.profile.model.path)
    b.flag("--kt-method", kt.method)

    if kt.cpuinfer == "auto":
        if cpu is None:
            b.problems.append("cannot read /proc/cpuinfo: set kt.cpuinfer in the profile")
        else:
            cores = max(1, cpu.physical_cores - kt.reserve_cores)
            b.flag("--kt-cpuinfer", cores)
    else:
        if cpu is not None and kt.cpuinfer > cpu.physical_cores:
            b.notes.append(
                f"kt.cpuinfer {kt.cpuinfer} exceeds the {cpu.physical_cores} physical cores: "
                "SMT threads compete for the same AVX512 units"
            )
        b.flag("--kt-cpuinfer", kt.cpuinfer)

    numa = b.host.numa
    node_ids = [n.id for n in numa] if numa else None
    if kt.numa_nodes != "auto":
        if node_ids is not None and not set(kt.numa_nodes) <= set(node_ids):
            b.problems.append(f"kt.numa_nodes {kt.numa_nodes} not among host nodes {node_ids}")
        node_ids = list(kt.numa_nodes)
    if kt.threadpool_count != "auto":
        pools: int | None = kt.threadpool_count
    elif node_ids is not None:
        pools = len(node_ids)
    elif cpu is not None:
        pools = cpu.sockets
        b.notes.append(
            f"no NUMA information (/sys/devices/system/node): one threadpool per socket "
            f"({pools}), NUMA placement left to kt-kernel"
        )
    else:
        pools = None
    b.optional("--kt-threadpool-count", pools)
    if node_ids is not None:
        b.flag("--kt-numa-nodes", *node_ids)
    b.flag("--kt-num-gpu-experts", kt.num_gpu_experts)
    b.optional("--kt-gpu-prefill-token-threshold", kt.gpu_prefill_token_threshold)
    b.optional("--kt-max-deferred-experts-per-token", kt.max_deferred_experts_per_token)
    _kt_variant(b)


def _kt_variant(b: _Builder) -> None:
    kt = b.profile.kt_section
    cpu = b.host.cpu
    detected = cpu.kt_variant if cpu is not None else None
    variant = detected if kt.cpu_variant == "auto" else kt.cpu_variant
    if variant is None:
        b.notes.append("kt-kernel CPU variant left to kt-kernel's own detection")
        return
    if detected is not None and variant_level(variant) > variant_level(detected):
        b.problems.append(f"kt.cpu_variant {variant} needs an ISA this CPU lacks ({detected})")
    if kt.min_cpu_variant != "auto" and variant_level(variant) < variant_level(kt.min_cpu_variant):
        b.problems.append(
            f"kt-method {kt.method} needs at least the {kt.min_cpu_variant} kt-kernel variant; "
            f"this CPU offers {variant}"
        )
    if kt.method.upper().startswith("AMX") and variant != "amx":
        b.problems.append(f"kt-method {kt.method} needs AMX, which this CPU lacks: use FP8")
    b.env["KT_KERNEL_CPU_VARIANT"] = variant


def _prefix_cache(b: _Builder) -> None:
    cache = b.profile.prefix_cache
    b.env[prefix_cache.SWITCH_ENV] = "0"
    if not cache.enabled:
        return
    if not b.prefix_cache_available:
        b.notes.append(
            f"prefix cache requested but this image lacks {prefix_cache.PATCH_MODULE}: "
            "every turn is prefilled from scratch (cached_tokens stays 0)"
        )
        return
    gpu = b.profile.gpu
    tp = gpu.tp_size if gpu is not None else 1
    budget_mib = (
        prefix_cache.static_budget_mib(b.host.gpus[0].memory_mib, gpu.mem_fraction_static)
        if b.host.gpus and gpu is not None
        else None
    )
    slots = cache.slots
    if slots == "auto":
        if budget_mib is None:
            b.problems.append("prefix_cache.slots is auto but no GPU memory is known: set slots")
            return
        slots = prefix_cache.auto_slots(budget_mib, cache.max_gpu_share, cache.slot_mib_tp1, tp)
    pool = prefix_cache.pool_mib(slots, cache.slot_mib_tp1, tp)
    if budget_mib is not None and pool > budget_mib:
        b.problems.append(
            f"{slots} state slots need {pool / 1024:.1f} GiB, more than the "
            f"{budget_mib / 1024:.1f} GiB static GPU budget: lower prefix_cache.slots"
        )
    elif budget_mib is not None and pool > budget_mib * cache.max_gpu_share:
        b.notes.append(
            f"the state pool takes {pool / budget_mib:.0%} of the static GPU budget: "
            "little room is left for the KV cache"
        )
    if "--disable-radix-cache" in b.profile.extra_args:
        b.problems.append("the prefix cache needs the radix cache: drop --disable-radix-cache")
    b.flag("--mamba-scheduler-strategy", "extra_buffer")
    b.flag("--mamba-track-interval", cache.track_interval)
    b.flag("--max-mamba-cache-size", slots)
    b.env[prefix_cache.SWITCH_ENV] = "1"
    cap = prefix_cache.running_cap(slots)
    b.notes.append(
        f"prefix cache on: {slots} state slots (~{pool / 1024:.1f} GiB GPU), "
        f"at most {cap} running requests"
    )
    wanted = b.profile.scheduling.max_running_requests
    if wanted is not None and wanted > cap:
        b.notes.append(f"scheduling.max_running_requests {wanted} is capped by SGLang at {cap}")


def _kernels(b: _Builder) -> None:
    # Names match engine.patches.kernels.settings; the launcher must not import the patch
    # package (it runs where torch may be absent).
    kernels = b.profile.kernels
    b.env["FLASHBOX_KERNELS"] = "1" if kernels.enabled else "0"
    for name in kernels.disable:
        b.env[f"FLASHBOX_KERNEL_{name.upper()}"] = "0"
    if kernels.indexer_query_chunk is not None:
        b.env["FLASHBOX_INDEXER_QUERY_CHUNK"] = str(kernels.indexer_query_chunk)


def _observability(b: _Builder) -> None:
    if b.profile.server.enable_metrics:
        b.flag("--enable-metrics")
    if b.profile.server.enable_cache_report:
        b.flag("--enable-cache-report")
    _tracing(b)


def _tracing(b: _Builder) -> None:
    """sglang-kt's OTLP traces: --enable-trace, the collector, a trace level (a launcher
    variable read by engine/launch/traced_server.py). Its spans continue the gateway's trace
    through the traceparent header of each /generate."""
    tracing, env = b.profile.tracing, b.environ
    traces_url = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    base_url = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    enabled = tracing.enabled
    if enabled == "auto":
        disabled = env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
        enabled = bool(traces_url or base_url) and not disabled
    if not enabled:
        return
    # sglang-kt reads only the traces variable for its protocol, and takes gRPC by default.
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
    ) or "grpc"
    if protocol not in _OTLP_PROTOCOLS:
        b.problems.append(f"OTLP protocol {protocol!r}: sglang-kt sends grpc or http/protobuf")
        return
    if protocol == "http/protobuf":
        # Passed on its own, the endpoint is used as given: the full /v1/traces URL.
        endpoint = traces_url or (base_url.rstrip("/") + "/v1/traces" if base_url else "")
        endpoint = endpoint or f"http://{tracing.endpoint}/v1/traces"
        b.env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = protocol
    else:
        endpoint = traces_url or base_url or tracing.endpoint
    b.flag("--enable-trace")
    b.flag("--otlp-traces-endpoint", endpoint)
    b.env[TRACE_LEVEL_ENV] = str(tracing.level)
    b.module = TRACED_MODULE
    b.notes.append(
        f"tracing on: OTLP {protocol} to {endpoint}, trace level {tracing.level}"
        + (" (a span per decode step)" if tracing.level >= 3 else "")
    )
