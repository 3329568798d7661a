"""The simulator's settings: the calibration profile plus what the command line overrides."""

from __future__ import annotations

from dataclasses import dataclass, replace

from engine.sim.faults import Fault
from engine.sim.profile import Profile
from engine.sim.script import Script


@dataclass(frozen=True)
class SimSettings:
    profile: Profile
    host: str = "127.0.0.1"
    port: int = 30000
    time_scale: float = 1.0
    name: str = "sim"
    # Process-wide fault: applied to each request with probability fault_rate.
    fault: Fault | None = None
    fault_rate: float = 1.0
    # Without a sampling_seed, outputs use seed 0 unless random_without_seed is set.
    random_without_seed: bool = False
    # Seconds /health and /health_generate wait before answering (a slow engine).
    health_delay_s: float = 0.0
    # Largest request body accepted, in bytes.
    max_body_bytes: int = 64 * 1024 * 1024
    log_level: str = "warning"
    # The stdlib loop's timers are exact; uvloop's run on a 1 ms grid, which at small time
    # scales puts the simulator measurably behind its model.
    loop: str = "asyncio"
    # A stream this many tokens behind the engine gets them merged into one event.
    max_event_lag: int = 64
    # SGLang's --stream-output: a streamed /generate event carries only the output_ids made
    # since the one before (text stays cumulative), instead of every id so far.
    stream_output: bool = False
    # --script: scripted answers (engine/sim/script.py) instead of random ones.
    script: Script | None = None

    @property
    def served_model_name(self) -> str:
        return self.profile.served_model_name

    def with_profile(self, **changes: object) -> SimSettings:
        return replace(self, profile=replace(self.profile, **changes))  # type: ignore[arg-type]
