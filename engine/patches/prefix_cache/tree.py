"""The radix tree for GLM-5-Next: SGLang's hybrid-state tree with a 256-token unit.

Imported only once sglang's `mamba_radix_cache` is loaded (from the import hook).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sglang.srt.mem_cache.mamba_radix_cache import (  # type: ignore[import-not-found]
    MambaRadixCache,
)

from engine.patches.prefix_cache.alignment import check_tree_key
from engine.patches.prefix_cache.config import TREE_UNIT


class GlmMambaRadixCache(MambaRadixCache):  # type: ignore[misc]
    """`MambaRadixCache` whose tree page is one KPool page (256 tokens), not one KV page (64).

    The tree's page size decides where keys may split and how far a finished or chunked
    request is cached, so a larger tree page is all it takes to keep every node (and every
    state it holds) on a 256-token boundary. KV pages stay 64 tokens: 256 is a multiple, so
    the paged allocator frees whole pages.
    """

    def __init__(self, params: Any, unit: int = TREE_UNIT) -> None:
        kv_page = params.page_size
        if unit % kv_page:
            raise ValueError(f"tree unit {unit} is not a multiple of the KV page size {kv_page}")
        if not params.enable_mamba_extra_buffer:
            raise ValueError("the GLM prefix cache needs the extra_buffer strategy")
        self.tree_unit = unit
        self.kv_page_size = kv_page
        super().__init__(dataclasses.replace(params, page_size=unit))

    def insert(self, params: Any) -> Any:
        if not self.disable:
            check_tree_key(len(params.key), self.tree_unit)
        return super().insert(params)
