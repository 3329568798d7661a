"""Where the replica list comes from: the static `engines` list, or the addresses of a DNS name
(a Kubernetes headless Service) looked up again every `discovery.interval_s`.

Routing never moves a pin when the set changes: a replica that appears is given to the picker's
`add` and new sessions start to reach it; one that vanishes is marked `gone` (unhealthy, no
longer probed), so each session pinned there moves to its next rendezvous choice on its next
turn, as when a replica fails. A vanished address that comes back is the same Replica again,
unless it stayed away `discovery.forget_after_s`: then the picker's `remove` dropped it (once no
request was open there), and it comes back as a new one.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Protocol

from gateway.observability.metrics import Metrics
from gateway.routing import dns_query
from gateway.routing.replica import Replica
from gateway.settings import DiscoverySettings

log = logging.getLogger("gateway.routing.discovery")

# A name to its addresses (IP address text). Raises OSError when the lookup fails.
Resolve = Callable[[str], Awaitable[list[str]]]

# getaddrinfo's "no such name" and "no address of that family": an answer with no address.
_NO_ADDRESS = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
_FAMILIES = {"ipv4": socket.AF_INET, "ipv6": socket.AF_INET6, "any": socket.AF_UNSPEC}
_RECORDS: dict[str, tuple[dns_query.RecordType, ...]] = {
    "ipv4": ("A",),
    "ipv6": ("AAAA",),
    "any": ("A", "AAAA"),
}


class ReplicaSource(Protocol):
    def initial(self) -> list[Replica]: ...


class StaticReplicas:
    def __init__(self, urls: Sequence[str]) -> None:
        self._urls = list(urls)

    def initial(self) -> list[Replica]:
        return [Replica.from_url(url) for url in self._urls]


def system_resolver(family: str) -> Resolve:
    """The system resolver (/etc/resolv.conf, search domains, /etc/hosts), as a Kubernetes pod
    is set up to use. The loop runs getaddrinfo in a worker thread, never on the loop."""

    async def resolve(name: str) -> list[str]:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(
                name, None, family=_FAMILIES[family], type=socket.SOCK_STREAM
            )
        except socket.gaierror as exc:
            if exc.errno in _NO_ADDRESS:
                return []
            raise
        return [str(info[4][0]) for info in infos]

    return resolve


def nameserver_resolver(server: tuple[str, int], family: str) -> Resolve:
    """Asks one DNS server directly (`discovery.nameserver`)."""

    async def resolve(name: str) -> list[str]:
        answers = await asyncio.gather(
            *(dns_query.query(server, name, record) for record in _RECORDS[family])
        )
        return [address for answer in answers for address in answer]

    return resolve


def resolver_for(settings: DiscoverySettings) -> Resolve:
    server = settings.nameserver_address()
    if server is None:
        return system_resolver(settings.address_family)
    return nameserver_resolver(server, settings.address_family)


def replica_name(address: str, port: int) -> str:
    ip = ipaddress.ip_address(address)
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


class DnsReplicas:
    """The replicas are the addresses `settings.dns_name` resolves to, each at `settings.port`.

    A lookup that fails, times out or answers no address keeps the replicas as they were and is
    counted (flashbox_discovery_errors_total{reason}): a DNS outage or a rollout's empty moment
    must not empty the pool, and a replica that really went away fails its health probes anyway.
    """

    def __init__(
        self,
        settings: DiscoverySettings,
        resolve: Resolve,
        metrics: Metrics,
        add: Callable[[Replica], None],
        remove: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if settings.dns_name is None:
            raise ValueError("DnsReplicas needs discovery.dns_name")
        self._name = settings.dns_name
        self._settings = settings
        self._resolve = resolve
        self._metrics = metrics
        self._add = add
        self._remove = remove
        self._clock = clock
        # Every replica made here, by name, gone ones too until they are forgotten: an address
        # that comes back soon is the same Replica (the picker holds each name once).
        self._known: dict[str, Replica] = {}
        self._members: set[str] = set()
        self._left_out: frozenset[str] = frozenset()
        self._failing = False
        self._task: asyncio.Task[None] | None = None

    @property
    def members(self) -> list[Replica]:
        """The replicas of the last successful lookup, by name."""
        return [self._known[name] for name in sorted(self._members)]

    async def refresh(self) -> None:
        """One lookup, and the joins and leaves it shows."""
        try:
            async with asyncio.timeout(self._settings.timeout_s):
                addresses = await self._resolve(self._name)
        except TimeoutError:
            self._failed("timeout", f"no answer within {self._settings.timeout_s} s")
            return
        except (OSError, UnicodeError) as exc:
            self._failed("failed", str(exc) or type(exc).__name__)
            return
        names = {replica_name(address, self._settings.port) for address in addresses}
        if not names:
            self._failed("empty", "no address")
            return
        if self._failing:
            log.info("DNS %s resolves again: %d addresses", self._name, len(names))
            self._failing = False
        self.apply(names)

    def apply(self, names: Iterable[str]) -> None:
        """Makes the replicas the given names (host:port), within `max_replicas`."""
        chosen = self._bounded(set(names))
        for name in sorted(chosen - self._members):
            self._join(name)
        for name in sorted(self._members - chosen):
            self._leave(name)
        self._members = chosen
        self._metrics.discovery_replicas.set(len(chosen))
        self._forget_gone()

    def _forget_gone(self) -> None:
        now = self._clock()
        for name, replica in list(self._known.items()):
            since = replica.gone_since
            if (
                since is None
                or now - since < self._settings.forget_after_s
                or replica.in_flight > 0
            ):
                continue
            del self._known[name]
            self._remove(name)
            self._metrics.drop_replica(name)
            log.info(
                "replica %s forgotten: gone from DNS %s for %.0f s", name, self._name, now - since
            )

    def _bounded(self, names: set[str]) -> set[str]:
        """Replicas already in use first: taking a newcomer in their place would move every
        session pinned there. Newcomers then in name order, so gateways that start together
        take the same ones."""
        limit = self._settings.max_replicas
        kept = sorted(names & self._members)[:limit]
        chosen = set(kept) | set(sorted(names - self._members)[: limit - len(kept)])
        left_out = frozenset(names - chosen)
        if left_out != self._left_out and left_out:
            log.warning(
                "DNS %s has %d addresses; discovery.max_replicas takes %d, leaving out %s",
                self._name,
                len(names),
                limit,
                ", ".join(sorted(left_out)),
            )
        self._left_out = left_out
        return chosen

    def _join(self, name: str) -> None:
        replica = self._known.get(name)
        if replica is None:
            replica = Replica(name=name, base_url=f"{self._settings.scheme}://{name}")
            self._known[name] = replica
            self._metrics.register_replicas([name])
            self._add(replica)
        else:
            # The engine at this address may be another one now (a new pod): probe it from
            # scratch and read its /server_info again.
            replica.gone = False
            replica.gone_since = None
            replica.failures = replica.successes = 0
            replica.busy_since = None
            replica.info_loaded = False
        log.info("replica %s joined (DNS %s)", name, self._name)

    def _leave(self, name: str) -> None:
        replica = self._known[name]
        replica.gone = True
        replica.gone_since = self._clock()
        replica.healthy = False
        replica.successes = 0
        replica.busy_since = None
        self._metrics.forget_replica(name)
        log.info(
            "replica %s left (DNS %s): its sessions move on their next turn; %d requests open "
            "there run on",
            name,
            self._name,
            replica.in_flight,
        )

    def _failed(self, reason: str, detail: str) -> None:
        self._metrics.child(self._metrics.discovery_errors, reason).inc()
        if not self._failing:
            # Once per outage, not once per interval; the counter has every one.
            log.warning(
                "DNS lookup of %s failed (%s); keeping the %d replicas found before",
                self._name,
                detail,
                len(self._members),
            )
        self._failing = True

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="dns-discovery")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._settings.interval_s)
            await self.refresh()
