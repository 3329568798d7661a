"""What a gateway still has to write to the shared store, written in the background.

- Each turn's report (its prompt tokens, for the next turn's verification wherever it lands,
  and its prompt head's checkpoint), after the turn: off the request's path. The next fetch
  of this gateway carries the reports waiting (no round trip of their own); those no fetch
  took within `state.report_delay_s` go in one round trip together. A report sent the moment
  its response ends would compete with the next request for the loop (at one stream, the
  client's next turn arrives milliseconds later), and every round trip is a chance to time
  out, after which the gateway skips the store for `state.retry_s`. At most
  `state.max_pending_writes` wait; past that one is skipped and counted (the lineage's next
  report carries its tokens again).
- Pins this gateway made or moved while the store did not answer ("unsent"). Each is written
  once the store answers again, without waiting for the lineage's next turn (which may reach
  another gateway first). The lineage's latest turn is where its latest checkpoint is, so the
  write wins only if no turn used the store's pin after this gateway's last turn of it (on
  the store's clock, from the offset the last fetch measured; without one, only if the pin is
  still where this gateway last saw it); otherwise the store's pin is adopted here. A turn of
  the lineage through this gateway writes it too (gateway.routing.fleet), whichever comes
  first. Bounded like the pin table.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections import OrderedDict
from collections.abc import Callable

from gateway.routing.pins import PinTable
from gateway.routing.shared_tables import Claim, Report, SharedRoutingTables

log = logging.getLogger("gateway.routing.write_back")


class WriteBack:
    def __init__(
        self,
        tables: SharedRoutingTables,
        pins: PinTable,
        clock: Callable[[], float],
        *,
        claimed: Callable[[str], None],
        max_pending_writes: int,
        write_skipped: Callable[[], None],
        report_delay_s: float,
    ) -> None:
        self._tables = tables
        self._pins = pins
        self._clock = clock
        self._claimed = claimed
        self._max_pending_writes = max_pending_writes
        self._write_skipped = write_skipped
        self._report_delay_s = report_delay_s
        # Lineage -> (the replica the store held for it when this gateway last knew, "": none;
        # this gateway's latest turn of it on the store's clock, ms, 0: unknown).
        self._unsent: OrderedDict[str, tuple[str, int]] = OrderedDict()
        self._reports: list[Report] = []
        self._writer: asyncio.Task[None] | None = None
        self._flusher: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._unsent)

    def unsent_turn(self, key: str) -> tuple[str, int] | None:
        """For an unsent pin: what the store held when this gateway last knew, and this
        gateway's latest turn of it; else None."""
        return self._unsent.get(key)

    def unsent(self, key: str, expected: str, turn_ms: int) -> None:
        self._claimed("unsent")
        # What the store held is what it held before the first change since it was heard.
        known = self._unsent.get(key)
        self._unsent[key] = (expected if known is None else known[0], turn_ms)
        while len(self._unsent) > self._pins.max_size:
            self._unsent.popitem(last=False)
        if self._flusher is None or self._flusher.done():
            # A context of its own: a task started from a request would carry its trace id
            # into every later log line of the writer.
            self._flusher = asyncio.get_running_loop().create_task(
                self._flush(), context=contextvars.Context()
            )

    def turned(self, key: str, turn_ms: int) -> None:
        """A later turn of an unsent pin, served while the store is still away."""
        known = self._unsent.get(key)
        if known is not None:
            self._unsent[key] = (known[0], turn_ms)

    def sent(self, key: str) -> None:
        self._unsent.pop(key, None)

    def report(self, turn: Report) -> None:
        if len(self._reports) >= self._max_pending_writes:
            self._write_skipped()
            return
        self._reports.append(turn)
        self._start_writer()

    def take_reports(self) -> list[Report]:
        """The reports waiting, for a fetch to carry."""
        taken, self._reports = self._reports, []
        return taken

    def put_back(self, turns: list[Report]) -> None:
        """Reports a fetch took but could not deliver (the store did not answer)."""
        waiting = turns + self._reports
        for _ in range(len(waiting) - self._max_pending_writes):
            self._write_skipped()
        self._reports = waiting[-self._max_pending_writes :]
        self._start_writer()

    def _start_writer(self) -> None:
        if self._reports and (self._writer is None or self._writer.done()):
            self._writer = asyncio.get_running_loop().create_task(
                self._write(), context=contextvars.Context()
            )

    async def _write(self) -> None:
        await asyncio.sleep(self._report_delay_s)
        while self._reports:
            await self._tables.report(self.take_reports())

    async def _flush(self) -> None:
        """Every retry_s (the store is skipped that long after a failure), the unsent pins."""
        while self._unsent:
            await asyncio.sleep(self._tables.retry_s)
            for key, unsent in list(self._unsent.items()):
                pin = self._pins.peek(key)
                if key not in self._unsent:
                    continue  # a turn through this gateway wrote it meanwhile
                if pin is None:
                    self._unsent.pop(key)  # idle past its TTL, or retired
                    continue
                expected, turn_ms = unsent
                claim = Claim(
                    key,
                    pin.replica,
                    pin.kind,
                    pin.last_prompt_tokens,
                    pin.images,
                    "newer" if turn_ms else "move",
                    expected=expected,
                    turn_ms=turn_ms,
                )
                claimed = await self._tables.claim(claim)
                if claimed is None:
                    break  # still away: the next round
                self._claimed(claimed.status)
                if self._unsent.get(key) != unsent:
                    continue  # changed while the claim was on its way; the next round has it
                self._unsent.pop(key)
                stored = claimed.pin
                if stored.replica != pin.replica:
                    self._pins.adopt(
                        key,
                        stored.replica,
                        self._clock(),
                        kind=stored.kind,
                        last_prompt_tokens=stored.last_prompt_tokens,
                        images=stored.images,
                    )
            if not self._unsent:
                log.info("shared store: the pins made while it was away are written")

    async def settle(self) -> None:
        """Until the reports waiting have landed (or failed)."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)

    async def aclose(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        await self.settle()
