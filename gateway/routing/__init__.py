"""Replica choice (hop 3): replicas, health probing, session keys, pins, placement."""

from gateway.routing.affinity import AffinityPicker
from gateway.routing.picker import FirstHealthyPicker, Outcome, Pick, ReplicaPicker
from gateway.routing.replica import Replica, RequestContext

__all__ = [
    "AffinityPicker",
    "FirstHealthyPicker",
    "Outcome",
    "Pick",
    "Replica",
    "ReplicaPicker",
    "RequestContext",
]
