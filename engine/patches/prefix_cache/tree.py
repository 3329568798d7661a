"""The radix tree for GLM-5-Next: SGLang's hybrid-state tree with a 256-token unit, and
prompt-head checkpoints that age like leaves.

Imported only once sglang's `mamba_radix_cache` is loaded (from the import hook).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sglang.srt.mem_cache.mamba_radix_cache import (  # type: ignore[import-not-found]
    MambaRadixCache,
    get_last_access_time,
)
from sglang.srt.mem_cache.radix_cache import RadixKey  # type: ignore[import-not-found]

from engine.patches.prefix_cache.alignment import check_tree_key
from engine.patches.prefix_cache.config import TREE_UNIT
from engine.patches.prefix_cache.heads import HEAD_MARK, is_head, request_head_point


class GlmMambaRadixCache(MambaRadixCache):  # type: ignore[misc]
    """`MambaRadixCache` whose tree page is one KPool page (256 tokens), not one KV page (64).

    The tree's page size decides where keys may split and how far a finished or chunked
    request is cached, so a larger tree page is all it takes to keep every node (and every
    state it holds) on a 256-token boundary. KV pages stay 64 tokens: 256 is a multiple, so
    the paged allocator frees whole pages.

    Prompt heads: stock LRU order puts a node's ancestors just behind it whenever a request
    matches or inserts through it, so `evict_mamba` frees the states nearest the root first.
    A head checkpoint sits near the root of every session that shares it and would go before
    any of those sessions' own checkpoints. Each time a request restores from a head or
    passes through it, the head is moved to the most recently used end instead, as a leaf
    that was just used; it is then evicted only after everything used less recently.
    """

    def __init__(
        self, params: Any, unit: int = TREE_UNIT, head_interval: int | None = None
    ) -> None:
        kv_page = params.page_size
        if unit % kv_page:
            raise ValueError(f"tree unit {unit} is not a multiple of the KV page size {kv_page}")
        if not params.enable_mamba_extra_buffer:
            raise ValueError("the GLM prefix cache needs the extra_buffer strategy")
        interval = unit if head_interval is None else head_interval
        if interval <= 0 or interval % unit:
            raise ValueError(f"head interval {interval} is not a multiple of the {unit} unit")
        self.tree_unit = unit
        self.kv_page_size = kv_page
        # Heads are aligned down to the track interval (the gateway's contract).
        self.head_interval = interval
        super().__init__(dataclasses.replace(params, page_size=unit))

    def head_point(self, req: Any) -> int | None:
        return request_head_point(req, self.head_interval)

    def insert(self, params: Any) -> Any:
        if self.disable:
            return super().insert(params)
        check_tree_key(len(params.key), self.tree_unit)
        result = super().insert(params)
        self._touch_heads(self._path(params.key))
        return result

    def match_prefix(self, params: Any) -> Any:
        result = super().match_prefix(params)
        node = result.last_device_node
        if self.disable or node is self.root_node:
            return result
        # A head saved as some request's ordinary checkpoint (its prompt or its output ended
        # on the head's boundary) becomes a head once a request declaring it restores it.
        restored = len(result.device_indices)
        if node.mamba_value is not None and restored == self.head_point(params.req):
            setattr(node, HEAD_MARK, True)
        path = []
        while node is not self.root_node:
            path.append(node)
            node = node.parent
        self._touch_heads(reversed(path))
        return result

    def cache_unfinished_req(self, req: Any, chunked: bool = False) -> None:
        tracked = req.mamba_last_track_seqlen
        super().cache_unfinished_req(req, chunked=chunked)
        head = self.head_point(req)
        node = req.last_node
        # The extend that just ran ended at the head (heads.py cut it there): its state is
        # now the tree's node at the head.
        if (
            head is not None
            and tracked == head
            and req.cache_protected_len == head
            and node is not None
            and node.mamba_value is not None
        ):
            setattr(node, HEAD_MARK, True)
            self._touch_heads([node])

    def _path(self, key: Any) -> list[Any]:
        """The nodes a just-inserted key runs through, root first (no token comparison: an
        insert leaves the key's path split exactly at its node boundaries)."""
        nodes = []
        node = self.root_node
        offset = 0
        tokens = key.token_ids
        while offset < len(tokens):
            child_key = self.get_child_key_fn(
                RadixKey(tokens[offset : offset + self.page_size], key.extra_key)
            )
            child = node.children.get(child_key)
            if child is None:
                break
            nodes.append(child)
            offset += len(child.key)
            node = child
        return nodes

    def _touch_heads(self, nodes: Any) -> None:
        """Move the head checkpoints among `nodes` to the most recently used end.

        Both LRU lists move with the node's access time, which the tree's own sanity check
        compares them against.
        """
        for node in nodes:
            if is_head(node) and node.mamba_value is not None:
                node.last_access_time = get_last_access_time()
                self.full_lru_list.reset_node_mru(node)
                self.mamba_lru_list.reset_node_mru(node)
