"""Doctor checks of the machine: GPU, driver, CPU, NUMA, memory, shared memory, disk."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.doctor.report import Check, fail, ok, skip, warn
from engine.launch.cpu import variant_level
from engine.launch.gpu import parse_capability
from engine.launch.host import HostFacts
from engine.launch.profile import EngineProfile

NO_GPU_FIX = (
    "Install the NVIDIA driver until `nvidia-smi` lists the GPU (in a container: the NVIDIA "
    "Container Toolkit and `docker compose --profile gpu`). No GPU at hand? Run the simulator: "
    "`docker compose --profile sim up`."
)


@dataclass(frozen=True)
class Space:
    free_bytes: int
    total_bytes: int

    @property
    def free_gib(self) -> float:
        return self.free_bytes / 2**30


def gpu(profile: EngineProfile, host: HostFacts) -> Check:
    if not host.gpus:
        return fail("GPU", "no NVIDIA GPU found (nvidia-smi missing or lists none)", NO_GPU_FIX)
    names = sorted({f"{g.name} ({g.memory_mib} MiB)" for g in host.gpus})
    found = f"{len(host.gpus)}x " + ", ".join(names)
    tp = profile.gpu_section.tp_size
    if len(host.gpus) < tp:
        return fail("GPU", found, f"The profile asks for gpu.tp_size {tp}: lower it or add GPUs.")
    return ok("GPU", found)


def compute_capability(profile: EngineProfile, host: HostFacts) -> Check:
    name = "compute capability"
    if not host.gpus:
        return skip(name, "no GPU")
    first = host.gpus[0]
    found = f"{first.capability_text} ({first.sm})"
    supported = profile.gpu_section.supported
    if not supported:
        return ok(name, found)
    match = next((a for a in supported if a.covers(first.compute_capability)), None)
    if match is None:
        ranges = ", ".join(a.min + (f"-{a.max}" if a.max else " or newer") for a in supported)
        return fail(
            name,
            f"{found}: the model refuses this GPU",
            f"Use a GPU with compute capability {ranges} (the reference is Blackwell sm_120).",
        )
    return ok(name, f"{found}: supported, KV cache {match.kv_cache_dtype}")


def driver(profile: EngineProfile, host: HostFacts) -> Check:
    name = "driver / CUDA"
    if not host.gpus:
        return skip(name, "no GPU")
    need = parse_capability(profile.doctor.min_driver_cuda)
    version = host.gpus[0].driver
    if host.cuda_version is None:
        return warn(
            name,
            f"driver {version}, CUDA version not reported",
            f"Check that the driver supports CUDA {profile.doctor.min_driver_cuda} or newer.",
        )
    cuda = "{}.{}".format(*host.cuda_version)
    found = f"driver {version}, supports CUDA {cuda}"
    if host.cuda_version < need:
        return fail(
            name,
            found,
            f"The engine image is built on CUDA {profile.doctor.min_driver_cuda}: install a newer "
            "NVIDIA driver (570 or newer for CUDA 12.8).",
        )
    return ok(name, found)


def cpu_isa(profile: EngineProfile, host: HostFacts) -> Check:
    name = "CPU ISA"
    cpu = host.cpu
    if cpu is None:
        return fail(name, "cannot read /proc/cpuinfo", "Run the doctor on the engine host itself.")
    yes = {True: "yes", False: "no"}
    found = (
        f"{cpu.model_name}: AVX512-BF16 {yes[cpu.avx512_bf16]}, AMX {yes[cpu.amx]} "
        f"-> kt-kernel {cpu.kt_variant}"
    )
    floor = profile.kt_section.min_cpu_variant
    if floor != "auto" and variant_level(cpu.kt_variant) < variant_level(floor):
        return fail(
            name,
            found,
            f"kt-method {profile.kt_section.method} needs the {floor} kernels "
            "(AVX512-VBMI: AMD Zen 4, "
            "Intel Ice Lake or newer); this CPU cannot run the routed experts.",
        )
    return ok(name, found)


def cores(profile: EngineProfile, host: HostFacts) -> Check:
    name = "physical cores"
    cpu = host.cpu
    if cpu is None:
        return skip(name, "no CPU information")
    found = f"{cpu.physical_cores} ({cpu.logical_cpus} logical CPUs, {cpu.sockets} socket(s))"
    wanted = profile.kt_section.cpuinfer
    if wanted == "auto":
        used = max(1, cpu.physical_cores - profile.kt_section.reserve_cores)
        return ok(name, f"{found} -> --kt-cpuinfer {used}")
    if wanted > cpu.physical_cores:
        return warn(
            name,
            f"{found}; profile kt.cpuinfer {wanted}",
            "Set kt.cpuinfer to at most the physical core count (or auto): SMT threads share "
            "the AVX512 units.",
        )
    return ok(name, f"{found}; profile kt.cpuinfer {wanted}")


def numa(profile: EngineProfile, host: HostFacts) -> Check:
    name = "NUMA"
    if not host.numa:
        sockets = host.cpu.sockets if host.cpu else 1
        return warn(
            name,
            f"no NUMA information (/sys/devices/system/node): {sockets} threadpool(s), one per "
            "socket",
            "Run where /sys is visible, or set kt.numa_nodes and kt.threadpool_count in the "
            "profile.",
        )
    ids = ", ".join(str(n.id) for n in host.numa)
    return ok(name, f"{len(host.numa)} node(s) ({ids}) -> {len(host.numa)} threadpool(s)")


def ram(profile: EngineProfile, host: HostFacts, weights_gb: float | None) -> Check:
    name = "RAM"
    if host.memory is None:
        return fail(name, "cannot read /proc/meminfo", "Run the doctor on the engine host itself.")
    need = max(profile.model.min_host_ram_gb, weights_gb or 0.0)
    mem = host.memory
    found = f"{mem.total_gb:.0f} GB total"
    if mem.available_kib is not None:
        found += f", {mem.available_kib * 1024 / 1e9:.0f} GB available"
    heavier = weights_gb is not None and weights_gb > profile.model.min_host_ram_gb
    basis = "the weights" if heavier else "profile minimum"
    found += f"; needs {need:.0f} GB ({basis})"
    if mem.total_gb < need:
        return fail(
            name,
            found,
            "The routed experts are loaded into host RAM: this host cannot hold the model.",
        )
    if mem.available_kib is not None and mem.available_kib * 1024 / 1e9 < need:
        return warn(name, found, "Stop other memory users before starting the engine.")
    return ok(name, found)


def shm(profile: EngineProfile, space: Space | None) -> Check:
    name = "/dev/shm"
    if space is None:
        return warn(name, "not mounted", "SGLang's processes share tensors through /dev/shm.")
    need = profile.doctor.min_shm_gib
    found = f"{space.free_gib:.0f} GiB free (needs {need:.0f} GiB)"
    if space.free_gib < need:
        return fail(
            name,
            found,
            f"Enlarge it (e.g. `sudo mount -o remount,size={int(need)}G /dev/shm`); compose runs "
            "the engine with ipc: host, so the host's /dev/shm is the one that counts.",
        )
    return ok(name, found)


def disk(profile: EngineProfile, path: Path, space: Space | None) -> Check:
    name = "disk"
    if space is None:
        return skip(name, f"{path}: not readable")
    need = profile.doctor.min_free_disk_gib
    found = f"{space.free_gib:.0f} GiB free at {path} (needs {need:.0f} GiB)"
    if space.free_gib < need:
        return fail(
            name,
            found,
            "Free space for the engine image (CUDA, torch, sglang-kt) and its kernel caches.",
        )
    return ok(name, found)
