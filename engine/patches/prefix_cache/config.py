"""The prefix-cache opt-in inside GLM-5-Next's server-args validator.

Stock sglang-kt 0.7.2 forces `disable_radix_cache=True` for this model in
`_validate_glm5_next_session_ab_boundary`, and re-runs that validator after later rewrites, so
the opt-in has to live inside it: run the stock checks, then check our own requirements and
switch the radix cache back on. Anything we cannot run safely is refused at startup with a
message that says what to change (fail closed), never silently degraded.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Any

# GLM's DSA indexer KPool packs the compressed keys of 4 tokens per slot and 64 slots per
# page, so one physical page holds the index keys of 256 tokens. Every cache unit, snapshot
# point and chunk cut must be a multiple of it, or two branches share (and overwrite) a page.
KPOOL_TOKENS_PER_SLOT = 4
KPOOL_SLOTS_PER_PAGE = 64
TREE_UNIT = KPOOL_TOKENS_PER_SLOT * KPOOL_SLOTS_PER_PAGE

# Attributes we set on the engine's ServerArgs instance; they travel with it to the scheduler
# and model processes (it is pickled), and they are what every other patch checks.
UNIT_ATTR = "_flashbox_prefix_cache_unit"
_REQUESTED_ATTR = "_flashbox_radix_cache_requested"

log = logging.getLogger("flashbox.engine.patches")


class PrefixCacheConfigError(ValueError):
    """The engine was asked for the prefix cache with settings it cannot run safely."""


def _multiple_of(value: object, unit: int) -> bool:
    return isinstance(value, int) and value > 0 and value % unit == 0


def config_problems(args: Any, unit: int = TREE_UNIT) -> list[str]:
    """Every reason these server args cannot carry the GLM prefix cache (empty when fine)."""
    problems: list[str] = []
    if args.mamba_scheduler_strategy != "extra_buffer":
        problems.append(
            "needs --mamba-scheduler-strategy extra_buffer "
            f"(got {args.mamba_scheduler_strategy!r}; no_buffer needs page size 1, GLM uses 64)"
        )
    if not _multiple_of(args.mamba_track_interval, unit):
        problems.append(
            f"--mamba-track-interval must be a positive multiple of {unit} "
            f"(got {args.mamba_track_interval!r})"
        )
    if not _multiple_of(args.chunked_prefill_size, unit):
        problems.append(
            f"--chunked-prefill-size must be a positive multiple of {unit} "
            f"(got {args.chunked_prefill_size!r})"
        )
    if args.speculative_algorithm is not None:
        problems.append(
            f"speculative decoding is not supported (got {args.speculative_algorithm!r})"
        )
    if args.enable_hierarchical_cache:
        problems.append("HiCache (--enable-hierarchical-cache) is not supported")
    page = args.page_size
    if page is not None and (not isinstance(page, int) or page <= 0 or unit % page != 0):
        problems.append(f"page size {page!r} does not divide the {unit}-token cache unit")
    return problems


def check_config(args: Any, unit: int = TREE_UNIT) -> None:
    problems = config_problems(args, unit)
    if problems:
        raise PrefixCacheConfigError(
            "FLASHBOX_PREFIX_CACHE=1 (GLM-5-Next prefix cache): " + "; ".join(problems) + "."
        )


def opt_in_validator(stock: Callable[[Any], None]) -> Callable[[Any], None]:
    """Wrap `_validate_glm5_next_session_ab_boundary` so it ends with the cache switched on."""

    def validate(self: Any) -> None:
        # The stock validator overwrites the flag, so remember the operator's own choice once.
        if not hasattr(self, _REQUESTED_ATTR):
            setattr(self, _REQUESTED_ATTR, not self.disable_radix_cache)
        stock(self)
        if not getattr(self, _REQUESTED_ATTR):
            raise PrefixCacheConfigError(
                "FLASHBOX_PREFIX_CACHE=1 (GLM-5-Next prefix cache) conflicts with "
                "--disable-radix-cache: drop one of them."
            )
        check_config(self)
        self.disable_radix_cache = False
        if getattr(self, UNIT_ATTR, None) is None:
            # WARNING, not INFO: this runs before sglang configures logging, when only
            # Python's last-resort handler (WARNING and up, to stderr) prints anything; the
            # real server showed an INFO line here never reached the engine's log.
            log.warning(
                "GLM-5-Next prefix cache on: %d-token unit, track interval %d, "
                "chunked prefill %d, max mamba cache size %s",
                TREE_UNIT,
                self.mamba_track_interval,
                self.chunked_prefill_size,
                self.max_mamba_cache_size,
            )
        setattr(self, UNIT_ATTR, TREE_UNIT)

    validate.__wrapped__ = stock  # type: ignore[attr-defined]
    return validate


def chunk_size_property(stock: property) -> property:
    """`ServerArgs.mamba_cache_chunk_size` that is a multiple of the cache unit for GLM."""

    def getter(self: Any) -> int:
        value: int = stock.__get__(self, type(self))
        unit = getattr(self, UNIT_ATTR, None)
        if unit is None:
            return value
        # Snapshot points (prefill) and the branching point come from this value.
        return math.lcm(value, unit)

    return property(getter, doc=stock.__doc__)
