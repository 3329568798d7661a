"""The sglang-kt 0.7.2 source files this patch was written against (sha256 of each file).

The patch wraps functions in the first group and relies on the exact behaviour of the rest
(the tree it subclasses, the pools it writes, the kernels whose layout it reads, the places
that look its replacements up at call time); any change to one of them turns it off.
"""

from __future__ import annotations

EXPECTED_SOURCES: dict[str, str] = {
    # patched
    "sglang.srt.server_args": ("3af07053548269a6ee3db8fbf3087de3ff31e2599cb81632a51f648b8b11cc4c"),
    "sglang.srt.managers.scheduler": (
        "ea02553d45bb6ddaa113c0b8daa5ba53a2078cc9d59045cb625815515287f23f"
    ),
    "sglang.srt.managers.schedule_policy": (
        "b5219bd16773cd2f8404fe18d297b656dd51781e45062d8e56f8eb4bcb65c1e3"
    ),
    "sglang.srt.managers.schedule_batch": (
        "a9cf03f133f9a8ebd91ffccd1c16dead4c0fe5128a7a403e6c126d19c8cdfa7e"
    ),
    "sglang.srt.layers.attention.linear.glm5_next_kda_backend": (
        "af09639b7f367a766a43ceb6a9489cb39c1b727b9988a3c44cac77dae65d2c79"
    ),
    "sglang.srt.layers.attention.fla.kda": (
        "96691f1b8fcc925c09296182b915fc5b51fe8ef16d13f93381fdaafc32a39ace"
    ),
    # relied on
    "sglang.srt.mem_cache.mamba_radix_cache": (
        "4f395d827c08a111134bd8ae7d54e3db3311c97c2065c64451d19abe7559a6cd"
    ),
    "sglang.srt.mem_cache.memory_pool": (
        "c1efc23f0f10673d19295a5903aa8a1ca76214f5d1b0b84b6b9e167c713a862e"
    ),
    "sglang.srt.layers.attention.hybrid_linear_attn_backend": (
        "ca5c6b2186c2692f414e1b92d7a82fd793ca4c379d57c74ef8f19a49ea7c1c54"
    ),
    "sglang.srt.layers.attention.linear.kernels.glm5_next_kda": (
        "65bbb53c264acbd8fa759b00cc8cc769fef77b5120e7eba5c7d259141735bf5e"
    ),
    "sglang.srt.layers.attention.fla.chunk_delta_h": (
        "4b97cd31b6389fd0dccdc5001096d7e1d909cc99f130b405e9c0726c57dd9721"
    ),
    "sglang.srt.layers.attention.attention_registry": (
        "bee326e563112538cbb5d841e62dbb6d3405467f583138b25da3beda6d5667c5"
    ),
    "sglang.srt.model_executor.cuda_graph_runner": (
        "04187d5037d0b005f1fc787e006c4d2444cac52f79d14cc2677f9c40c08fc65d"
    ),
}
