"""Replica choice (hop 3): replicas, health probing, session keys, pins, placement."""

from gateway.routing.affinity import AffinityPicker
from gateway.routing.picker import Outcome, Outstanding, Pick, ReplicaPicker
from gateway.routing.replica import Replica, RequestContext, TurnOutput

__all__ = [
    "AffinityPicker",
    "Outcome",
    "Outstanding",
    "Pick",
    "Replica",
    "ReplicaPicker",
    "RequestContext",
    "TurnOutput",
]
