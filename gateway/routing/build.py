"""Builds the routing layer once per app (called from gateway.state.build_state)."""

from __future__ import annotations

import httpx

from gateway.observability.metrics import Metrics
from gateway.routing.affinity import OUTCOMES, AffinityPicker
from gateway.routing.discovery import ReplicaSource, StaticReplicas
from gateway.routing.fleet import FleetPicker
from gateway.routing.health import HealthProber
from gateway.routing.lineage import KINDS
from gateway.routing.replica import Replica
from gateway.routing.shared_tables import SharedRoutingTables
from gateway.settings import Settings
from gateway.shared_state import SharedStore


def build_routing(
    settings: Settings,
    metrics: Metrics,
    control: httpx.AsyncClient,
    source: ReplicaSource | None = None,
    shared: SharedStore | None = None,
) -> tuple[AffinityPicker, HealthProber]:
    source = source or StaticReplicas(settings.engines)
    replicas = source.initial()
    metrics.register_replicas(replica.name for replica in replicas)
    for outcome in OUTCOMES:
        for kind in KINDS:
            metrics.affinity.labels(outcome=outcome, lineage=kind)

    def count(outcome: str, kind: str) -> None:
        metrics.child(metrics.affinity, outcome, kind).inc()

    def output_checkpoint(outcome: str) -> None:
        metrics.child(metrics.output_checkpoints, outcome).inc()

    picker: AffinityPicker
    if shared is None:
        picker = AffinityPicker(
            replicas, settings.routing, count, output_checkpoint=output_checkpoint
        )
    else:
        # Several gateways share the routing tables (docs/fleet.md).
        picker = FleetPicker(
            replicas,
            settings.routing,
            count,
            SharedRoutingTables(shared, settings.routing),
            claimed=lambda result: metrics.child(metrics.state_claims, result).inc(),
            max_pending_writes=settings.state.max_pending_writes,
            write_skipped=metrics.state_writes_skipped.inc,
            report_delay_s=settings.state.report_delay_s,
            pinned_turns_wait=settings.state.pinned_turns_wait,
            output_checkpoint=output_checkpoint,
        )

    def replica_changed(replica: Replica) -> None:
        metrics.replica_up.labels(replica=replica.name).set(1 if replica.healthy else 0)

    prober = HealthProber(
        picker.replicas,
        control,
        settings.health,
        replica_changed,
        server_info_path=settings.routing.server_info_path,
        model_info_path=settings.routing.model_info_path,
        busy_grace_s=settings.routing.busy_probe_grace_s,
    )
    return picker, prober
