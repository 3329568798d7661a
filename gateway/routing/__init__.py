"""Replica choice (hop 3): replicas, health probing, the picker interface."""

from gateway.routing.picker import FirstHealthyPicker, Outcome, Pick, ReplicaPicker
from gateway.routing.replica import Replica, RequestContext

__all__ = ["FirstHealthyPicker", "Outcome", "Pick", "Replica", "ReplicaPicker", "RequestContext"]
