"""A request's prefill through the wheel's scheduler pieces, on CPU pools, without a model.

Each round does what the scheduler does for one request: match the prompt in the tree (as
`Req.init_next_round_input`), admit it with the real `PrefillAdder` (`add_one_req`, then
`add_chunked_req` for later chunks), allocate its slots and KV pages, let the real
`_mamba_radix_cache_v2_req_prepare_for_extend` choose the snapshot point, and cache the
result with the tree's own `cache_unfinished_req` / `cache_finished_req`. The patch's
wrappers are in place (the `glm_args` fixture), so this is the patched path end to end.

The model's side is a stand-in: after an extend over the first `end` tokens the working
slot holds a number that names exactly those tokens, and a snapshot at L holds the number
of the first L tokens. A restore that copies the wrong state shows up as the wrong number.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import torch

from tests.engine.prefix_cache.builders import KV_PAGE, Pools, cache_params, fill_slot, wheel

UNIT = 256
# Every state value is a small integer: exact in the pools' bf16 conv tensors.
MAX_STATES = 200


class FlowReq:
    """The `Req` fields the scheduler, the batch and the tree read for a text-only request."""

    def __init__(self, tokens: list[int], head_tokens: int | None, max_new_tokens: int) -> None:
        Req = wheel("sglang.srt.managers.schedule_batch").Req

        self._set_extend = Req.set_extend_input_len
        self._pop_committed = Req.pop_committed_kv_cache
        self.origin_input_ids = list(tokens)
        self.output_ids: list[int] = []
        self.fill_ids = list(tokens)
        self.prefix_indices = torch.empty((0,), dtype=torch.int64)
        self.extra_key = None
        custom = None if head_tokens is None else {"flashbox_head_tokens": head_tokens}
        self.sampling_params = SimpleNamespace(
            custom_params=custom, max_new_tokens=max_new_tokens, ignore_eos=False
        )
        self.mamba_pool_idx: Any = None
        self.mamba_ping_pong_track_buffer: Any = None
        self.mamba_next_track_idx: int | None = None
        self.mamba_last_track_seqlen: int | None = None
        self.mamba_branching_seqlen: int | None = None
        self.req_pool_idx: int | None = None
        self.cache_protected_len = 0
        self.last_node: Any = None
        self.last_host_node: Any = None
        self.host_hit_length = 0
        self.logprob_start_len = -1
        self.extend_input_len = 0
        self.is_chunked = 0
        self.kv_committed_len = 0
        self.kv_committed_freed = False
        self.dllm_config = None

    def set_extend_input_len(self, n: int) -> None:
        self._set_extend(self, n)

    def pop_committed_kv_cache(self) -> int:
        committed: int = self._pop_committed(self)
        return committed

    def is_dllm(self) -> bool:
        return False


@dataclasses.dataclass
class Prefill:
    """What one request's prefill did."""

    cached: int
    chunk_ends: list[int]
    snapshots: list[int]


@dataclasses.dataclass
class Flow:
    pools: Pools
    tree: Any
    chunk: int
    _states: dict[tuple[int, ...], float] = dataclasses.field(default_factory=dict)

    def state_of(self, tokens: list[int]) -> float:
        """The stand-in state after exactly these tokens."""
        key = tuple(tokens)
        if key not in self._states:
            if len(self._states) >= MAX_STATES:
                raise AssertionError("more distinct states than a bf16 value can name")
            self._states[key] = float(len(self._states) + 1)
        return self._states[key]

    def slot_value(self, slot: int) -> float:
        cache = self.pools.req_to_token.mamba_pool.mamba_cache
        values = {float(v) for v in cache.temporal[:, slot].unique()}
        for conv in cache.conv:
            values |= {float(v) for v in conv[:, slot].unique()}
        if len(values) != 1:
            raise AssertionError(f"slot {slot} holds mixed values {values}")
        return values.pop()

    def run(self, tokens: list[int], head_tokens: int | None = None) -> Prefill:
        """Prefill `tokens` as the scheduler would, then finish at once with no output."""
        MatchPrefixParams = wheel("sglang.srt.mem_cache.base_prefix_cache").MatchPrefixParams
        RadixKey = wheel("sglang.srt.mem_cache.radix_cache").RadixKey
        PrefillAdder = wheel("sglang.srt.managers.schedule_policy").PrefillAdder
        ScheduleBatch = wheel("sglang.srt.managers.schedule_batch").ScheduleBatch

        req = FlowReq(tokens, head_tokens, max_new_tokens=16)
        match = self.tree.match_prefix(
            MatchPrefixParams(key=RadixKey(tokens[:-1]), req=req, cow_mamba=True)
        )
        req.prefix_indices = match.device_indices
        req.last_node = match.last_device_node
        req.mamba_branching_seqlen = match.mamba_branching_seqlen
        cached = len(req.prefix_indices)
        req.cache_protected_len = cached
        if req.mamba_pool_idx is not None:
            restored = self.slot_value(int(req.mamba_pool_idx))
            assert restored == self.state_of(tokens[:cached]), "restored the wrong state"
        req.set_extend_input_len(len(tokens) - cached)

        batch_owner = SimpleNamespace(
            req_to_token_pool=self.pools.req_to_token, tree_cache=self.tree
        )
        chunk_ends: list[int] = []
        snapshots: list[int] = []
        while True:
            adder = PrefillAdder(
                KV_PAGE, self.tree, self.pools.allocator, None, 1.0, 1 << 20, self.chunk
            )
            if not chunk_ends:
                adder.add_one_req(req, has_chunked_req=False, truncation_align_size=UNIT)
                chunked = adder.new_chunked_req is req
            else:
                # Scheduler: chunked_req.init_next_round_input() (no tree), add_chunked_req.
                req.fill_ids = list(tokens)
                req.set_extend_input_len(len(tokens) - len(req.prefix_indices))
                chunked = adder.add_chunked_req(req) is req
            assert req in adder.can_run_list, "the request was not scheduled"
            self._extend(req, tokens, ScheduleBatch, batch_owner, snapshots)
            chunk_ends.append(len(req.prefix_indices) + req.extend_input_len)
            req.kv_committed_len = chunk_ends[-1]
            if not chunked:
                break
            # The next round's stash_chunked_request.
            self.tree.cache_unfinished_req(req, chunked=True)
        # process_batch_result_prefill for a request that goes on to decode, then its finish.
        self.tree.cache_unfinished_req(req)
        self.tree.cache_finished_req(req)
        self.pools.req_to_token.free(req)
        return Prefill(cached=cached, chunk_ends=chunk_ends, snapshots=snapshots)

    def _extend(
        self,
        req: FlowReq,
        tokens: list[int],
        ScheduleBatch: Any,
        batch_owner: Any,
        snapshots: list[int],
    ) -> None:
        """ScheduleBatch.prepare_for_extend's allocations, then the model's forward."""
        pool = self.pools.req_to_token
        if req.req_pool_idx is None:
            assert pool.alloc([req]) is not None, "no request slot"
        prefix = len(req.prefix_indices)
        end = prefix + req.extend_input_len
        # Whole 64-token pages: an extend starts on a 256 boundary, so none is shared.
        pages = self.pools.allocator.alloc(-(-(end - prefix) // KV_PAGE) * KV_PAGE)
        assert pages is not None, "out of KV pages"
        pool.write((req.req_pool_idx, slice(prefix, end)), pages[: end - prefix].to(torch.int32))
        mask: list[bool] = []
        slots: list[int] = []
        seqlens: list[int] = []
        ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend(
            batch_owner, req, mask, slots, seqlens
        )
        if mask[-1]:
            length = req.mamba_last_track_seqlen
            assert length is not None
            snapshots.append(length)
            fill_slot(self.pools, slots[-1], self.state_of(tokens[:length]))
        fill_slot(self.pools, int(req.mamba_pool_idx), self.state_of(tokens[:end]))


def make_flow(p: Pools, chunk: int, head_interval: int = UNIT) -> Flow:
    from engine.patches.prefix_cache.tree import GlmMambaRadixCache

    tree = GlmMambaRadixCache(
        cache_params(p, chunked_prefill_size=chunk), head_interval=head_interval
    )
    return Flow(pools=p, tree=tree, chunk=chunk)


def nodes_with_state(tree: Any) -> list[tuple[int, Any]]:
    """(end position, node) for every node that holds a state, shallowest first."""
    found: list[tuple[int, Any]] = []
    stack = [(0, tree.root_node)]
    while stack:
        depth, node = stack.pop()
        for child in node.children.values():
            end = depth + len(child.key)
            if child.mamba_value is not None:
                found.append((end, child))
            stack.append((end, child))
    return sorted(found, key=lambda item: item[0])
