"""DNS discovery of the engines with an injected resolver: joins, leaves, failover, reuse, the
max_replicas bound, failed lookups, and the settings that turn it on."""

from __future__ import annotations

import asyncio
import logging
import socket

import httpx
import pytest
from pydantic import ValidationError

from gateway.observability.metrics import Metrics
from gateway.routing import AffinityPicker, Outcome, Replica, RequestContext
from gateway.routing.discovery import DnsReplicas, replica_name, system_resolver
from gateway.routing.health import HealthProber
from gateway.settings import DiscoverySettings, HealthSettings, RoutingSettings, Settings
from tests.support.clock import Clock

NAME = "engines.flashbox.test"


class FakeDns:
    """A resolver whose answer the test sets: addresses, an exception, or a hang."""

    def __init__(self, *addresses: str) -> None:
        self.answer: list[str] | BaseException = list(addresses)
        self.hang = False
        self.asked: list[str] = []

    async def __call__(self, name: str) -> list[str]:
        self.asked.append(name)
        if self.hang:
            await asyncio.sleep(3600)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return list(self.answer)


def make(
    dns: FakeDns, clock: Clock | None = None, **settings: object
) -> tuple[DnsReplicas, AffinityPicker, Metrics]:
    metrics = Metrics(process_metrics=False)
    picker = AffinityPicker([], RoutingSettings(), lambda *counted: None)
    discovery = DnsReplicas(
        DiscoverySettings.model_validate({"dns_name": NAME, "port": 30000, **settings}),
        dns,
        metrics,
        picker.add,
        picker.remove,
        clock or Clock(),
    )
    return discovery, picker, metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def up(picker: AffinityPicker) -> None:
    """What the health prober does for the replicas that answer (tests/.../test_picker.py)."""
    for replica in picker.replicas:
        replica.healthy = not replica.gone


def route(picker: AffinityPicker, key: str) -> str:
    ctx = RequestContext(f"rid-{key}", key, "prompt")
    replica = picker.pick(ctx).replica
    picker.report(ctx, replica, Outcome.OK, prompt_tokens=10, cached_tokens=0)
    return replica.name


async def test_addresses_become_replicas_named_host_port() -> None:
    dns = FakeDns("10.0.0.2", "10.0.0.1", "10.0.0.1")
    discovery, picker, metrics = make(dns, scheme="https")
    await discovery.refresh()
    assert dns.asked == [NAME]
    assert [r.name for r in picker.replicas] == ["10.0.0.1:30000", "10.0.0.2:30000"]
    assert [r.base_url for r in picker.replicas] == [
        "https://10.0.0.1:30000",
        "https://10.0.0.2:30000",
    ]
    # Not healthy until the prober says so.
    assert not any(r.healthy for r in picker.replicas)
    assert sample(metrics, "flashbox_discovery_replicas") == 2
    assert sample(metrics, "flashbox_replica_up", replica="10.0.0.1:30000") == 0


def test_ipv6_names_are_bracketed() -> None:
    assert replica_name("fd00::0005", 30000) == "[fd00::5]:30000"
    assert replica_name("10.1.2.3", 8) == "10.1.2.3:8"


async def test_a_new_address_joins_without_moving_a_pin(caplog: pytest.LogCaptureFixture) -> None:
    dns = FakeDns("10.0.0.1")
    discovery, picker, _ = make(dns)
    await discovery.refresh()
    up(picker)
    keys = [f"s{i}" for i in range(40)]
    before = {key: route(picker, key) for key in keys}
    assert set(before.values()) == {"10.0.0.1:30000"}
    dns.answer = ["10.0.0.1", "10.0.0.2"]
    with caplog.at_level(logging.INFO, logger="gateway.routing.discovery"):
        await discovery.refresh()
    assert "replica 10.0.0.2:30000 joined" in caplog.text
    up(picker)
    # Existing sessions stay; new ones reach the newcomer.
    assert {key: route(picker, key) for key in keys} == before
    newcomers = {route(picker, f"n{i}") for i in range(40)}
    assert "10.0.0.2:30000" in newcomers


async def test_a_vanished_address_fails_its_sessions_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dns = FakeDns("10.0.0.1", "10.0.0.2", "10.0.0.3")
    discovery, picker, metrics = make(dns)
    await discovery.refresh()
    up(picker)
    keys = [f"s{i}" for i in range(60)]
    before = {key: route(picker, key) for key in keys}
    victim = "10.0.0.2:30000"
    assert victim in before.values()
    dns.answer = ["10.0.0.1", "10.0.0.3"]
    with caplog.at_level(logging.INFO, logger="gateway.routing.discovery"):
        await discovery.refresh()
    assert f"replica {victim} left" in caplog.text
    gone = picker.replica(victim)
    assert gone is not None
    assert gone.gone
    assert not gone.healthy
    after = {key: route(picker, key) for key in keys}
    for key, name in before.items():
        if name == victim:
            assert after[key] != victim
        else:
            assert after[key] == name
    assert [r.name for r in discovery.members] == ["10.0.0.1:30000", "10.0.0.3:30000"]
    assert sample(metrics, "flashbox_discovery_replicas") == 2
    # Its up/down series ends with it.
    assert sample(metrics, "flashbox_replica_up", replica=victim) is None


async def test_an_address_that_comes_back_is_the_same_replica() -> None:
    dns = FakeDns("10.0.0.1", "10.0.0.2")
    discovery, picker, _ = make(dns)
    await discovery.refresh()
    first = picker.replica("10.0.0.2:30000")
    assert first is not None
    first.info_loaded = True
    first.checkpoint_slots = 48
    dns.answer = ["10.0.0.1"]
    await discovery.refresh()
    dns.answer = ["10.0.0.1", "10.0.0.2"]
    await discovery.refresh()
    assert [r.name for r in picker.replicas] == ["10.0.0.1:30000", "10.0.0.2:30000"]
    assert picker.replica("10.0.0.2:30000") is first
    assert not first.gone
    # It may be another engine now: its /server_info is read again.
    assert not first.info_loaded


async def test_a_replica_gone_long_enough_is_forgotten() -> None:
    """Pods get a new address with every restart: the routing list must not keep one entry for
    every address it ever saw. Gone past discovery.forget_after_s with nothing open there, a
    replica leaves the picker (its sessions had already failed over) and its series end."""
    dns = FakeDns("10.0.0.1", "10.0.0.2")
    clock = Clock()
    discovery, picker, metrics = make(dns, clock, forget_after_s=600)
    await discovery.refresh()
    up(picker)
    victim = "10.0.0.2:30000"
    pinned = next(f"s{i}" for i in range(60) if route(picker, f"s{i}") == victim)
    gone = picker.replica(victim)
    assert gone is not None
    dns.answer = ["10.0.0.1", "10.0.0.3"]
    await discovery.refresh()
    # One request still open there: kept until it ends.
    gone.in_flight = 1
    clock.now += 601
    await discovery.refresh()
    assert picker.replica(victim) is gone
    gone.in_flight = 0
    await discovery.refresh()
    assert picker.replica(victim) is None
    assert [r.name for r in picker.replicas] == ["10.0.0.1:30000", "10.0.0.3:30000"]
    assert sample(metrics, "flashbox_replica_in_flight", replica=victim) is None
    # Its pinned session is served elsewhere; the address, back later, is a new replica.
    up(picker)
    assert route(picker, pinned) != victim
    dns.answer = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    await discovery.refresh()
    back = picker.replica(victim)
    assert back is not None
    assert back is not gone
    assert not back.gone


async def test_a_failed_or_empty_lookup_keeps_the_replicas(
    caplog: pytest.LogCaptureFixture,
) -> None:
    dns = FakeDns("10.0.0.1", "10.0.0.2")
    discovery, picker, metrics = make(dns, timeout_s=0.05)
    await discovery.refresh()
    with caplog.at_level(logging.WARNING, logger="gateway.routing.discovery"):
        dns.answer = socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        await discovery.refresh()
        await discovery.refresh()
        dns.answer = []
        await discovery.refresh()
        dns.hang = True
        await discovery.refresh()
    assert [r.name for r in discovery.members] == ["10.0.0.1:30000", "10.0.0.2:30000"]
    assert not any(r.gone for r in picker.replicas)
    assert sample(metrics, "flashbox_discovery_errors_total", reason="failed") == 2
    assert sample(metrics, "flashbox_discovery_errors_total", reason="empty") == 1
    assert sample(metrics, "flashbox_discovery_errors_total", reason="timeout") == 1
    assert sample(metrics, "flashbox_discovery_replicas") == 2
    # One warning per outage, not one per lookup.
    assert caplog.text.count("DNS lookup of") == 1


async def test_max_replicas_keeps_the_replicas_in_use_first() -> None:
    dns = FakeDns("10.0.0.5", "10.0.0.9")
    discovery, picker, _ = make(dns, max_replicas=2)
    await discovery.refresh()
    # A lower address appears: it does not push out a replica holding sessions.
    dns.answer = ["10.0.0.1", "10.0.0.5", "10.0.0.9"]
    await discovery.refresh()
    assert [r.name for r in discovery.members] == ["10.0.0.5:30000", "10.0.0.9:30000"]
    # One leaves: the newcomer takes its place.
    dns.answer = ["10.0.0.1", "10.0.0.5"]
    await discovery.refresh()
    assert [r.name for r in discovery.members] == ["10.0.0.1:30000", "10.0.0.5:30000"]
    # Newcomers in address order when there is room for only some.
    fresh, _, _ = make(FakeDns("10.0.0.3", "10.0.0.2", "10.0.0.1"), max_replicas=2)
    await fresh.refresh()
    assert [r.name for r in fresh.members] == ["10.0.0.1:30000", "10.0.0.2:30000"]
    assert len(picker.replicas) == 3


async def test_the_loop_looks_again_every_interval() -> None:
    dns = FakeDns("10.0.0.1")
    discovery, picker, _ = make(dns, interval_s=0.01)
    discovery.start()
    try:
        for _ in range(200):
            if len(dns.asked) >= 2:
                break
            await asyncio.sleep(0.01)
        dns.answer = ["10.0.0.1", "10.0.0.2"]
        for _ in range(200):
            if len(picker.replicas) == 2:
                break
            await asyncio.sleep(0.01)
    finally:
        await discovery.stop()
    assert len(picker.replicas) == 2


async def test_a_gone_replica_is_not_probed_and_stays_down() -> None:
    replicas = [Replica.from_url("http://a:1"), Replica.from_url("http://b:1")]
    probed: list[str] = []
    release = asyncio.Event()

    both_out = asyncio.Event()

    async def answer(request: httpx.Request) -> httpx.Response:
        probed.append(request.url.host)
        if len(probed) == 3:
            both_out.set()
        await release.wait()
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        prober = HealthProber(replicas, client, HealthSettings(), lambda r: None)
        replicas[1].gone = True
        release.set()
        await prober.probe_all()
        assert probed == ["a"]
        assert replicas[0].healthy
        assert not replicas[1].healthy
        # A probe that was out when the replica left does not bring it back up.
        release.clear()
        replicas[1].gone = False
        probe = asyncio.create_task(prober.probe_all())
        await both_out.wait()
        replicas[1].gone = True
        release.set()
        await probe
    assert not replicas[1].healthy


async def test_the_system_resolver_reads_the_hosts_file() -> None:
    assert "127.0.0.1" in await system_resolver("ipv4")("localhost")


async def test_the_system_resolver_tells_no_such_name_from_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    error = socket.EAI_NONAME

    async def getaddrinfo(*args: object, **kwargs: object) -> list[object]:
        raise socket.gaierror(error, "lookup")

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo)
    assert await system_resolver("ipv4")(NAME) == []
    error = socket.EAI_AGAIN
    with pytest.raises(socket.gaierror):
        await system_resolver("ipv4")(NAME)


def test_settings_turn_discovery_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHBOX_DISCOVERY__DNS_NAME", "engine.flashbox.svc.cluster.local")
    monkeypatch.setenv("FLASHBOX_ENGINES", "")
    settings = Settings()
    assert settings.engines == []
    assert settings.discovery.dns_name == "engine.flashbox.svc.cluster.local"
    assert settings.discovery.port == 30000
    assert settings.discovery.scheme == "http"
    assert settings.discovery.nameserver_address() is None
    monkeypatch.setenv("FLASHBOX_DISCOVERY__DNS_NAME", "")
    with pytest.raises(ValidationError, match="FLASHBOX_DISCOVERY__DNS_NAME"):
        Settings()


def test_nameserver_is_host_and_port() -> None:
    assert DiscoverySettings(nameserver="127.0.0.1:5353").nameserver_address() == (
        "127.0.0.1",
        5353,
    )
    assert DiscoverySettings(nameserver="[::1]:53").nameserver_address() == ("::1", 53)
    for bad in ("127.0.0.1", ":53", "host:0", "host:port"):
        with pytest.raises(ValidationError, match="host:port"):
            DiscoverySettings(nameserver=bad)
