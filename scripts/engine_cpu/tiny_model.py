"""Make the tiny random-weight models the real engine serves on a CPU (test data, not a model).

    python -m scripts.engine_cpu.tiny_model --kind hybrid|dense --out DIR

Writes config.json, generation_config.json and a tokenizer; the engine starts them with
`--load-format dummy`, so there are no weight files. Everything is deterministic: the same
command gives the same bytes, so a cached model is reused only when its stamp matches.

The tokenizer is a byte-level BPE trained here on a seeded synthetic corpus. It knows the
prompt format's markers as whole tokens (GLM-5.3-Flash's role, reasoning, tool-call and image
markers), so a prompt the gateway renders tokenizes as markers, not as their bytes, and a
random model can emit them (the gateway's parsers then see real markup on the wire).

Runs with the engine virtualenv's interpreter (it needs `tokenizers`, which the test
virtualenv does not carry).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path
from typing import Any

# Bump when anything below changes what is written: a cached model with another stamp is
# made again.
FORMAT_VERSION = 1

# Markers the engine must see as single tokens. Role markers are special (as in GLM's own
# tokenizer); the reasoning and tool-call markup are added tokens that decode as text.
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
    "<|begin_of_audio|>",
    "<|end_of_audio|>",
    "<|image|>",
    "<|video|>",
)
MARKUP_TOKENS: tuple[str, ...] = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
)
# GLM-5.3-Flash ends a turn at any of these (FACTS.md section 1: three EOS ids).
EOS_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|user|>", "<|observation|>")

BPE_VOCAB = 1024
SEED = 5310

_WORD_TEXT = (
    "the a an of to in is it that for on with as be by this are or from at not you your we "
    "can will if then else return def class import self none true false list dict str int "
    "file path line read write test error value key name type user assistant system tool "
    "call result function args json code run make build check pass fail ok yes no data "
    "request response stream token prompt model cache session turn engine gateway replica "
    "hello world please help explain fix bug add remove update change diff patch commit"
)
_WORDS = tuple(_WORD_TEXT.split())


def _corpus(lines: int = 4000) -> list[str]:
    rng = random.Random(SEED)
    out = []
    for _ in range(lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 16))]
        punct = rng.choice([".", ",", ":", "?", "!", ";", " {", " (", ")", "\n", '"'])
        number = str(rng.randint(0, 9999)) if rng.random() < 0.3 else ""
        out.append(" ".join(words) + punct + number)
    return out


def build_tokenizer(out: Path) -> int:
    """Train and save the tokenizer; returns its size (ids are 0..size-1)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from tokenizers.processors import ByteLevel as ByteLevelProcessor

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = ByteLevelProcessor(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    # Added after the base vocabulary, as in GLM's tokenizer (its markers sit above id
    # 151k). Never at id 0: sglang-kt 0.7.2 trims a matched stop token only when its id is
    # truthy (detokenizer_manager.trim_matched_stop), so an EOS at id 0 leaks into the text.
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    # Markup that decodes as text, like GLM's own `<think>` (special: false).
    tokenizer.add_tokens(list(MARKUP_TOKENS))
    tokenizer.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 1 << 20,
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "clean_up_tokenization_spaces": False,
        # GLM prompts start with their own `[gMASK]<sop>`: nothing is added.
        "add_bos_token": False,
        "add_eos_token": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    size: int = tokenizer.get_vocab_size(with_added_tokens=True)
    return size


def _token_id(out: Path, token: str) -> int:
    data = json.loads((out / "tokenizer.json").read_text())
    for added in data["added_tokens"]:
        if added["content"] == token:
            return int(added["id"])
    raise KeyError(token)


def _padded(size: int, multiple: int = 64) -> int:
    return -(-size // multiple) * multiple


def dense_config(vocab: int, eos: list[int]) -> dict[str, Any]:
    """A 2-layer Llama: the simplest architecture the CPU engine serves."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "hidden_act": "silu",
        "max_position_embeddings": 65536,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": None,
        "eos_token_id": eos,
    }


def hybrid_config(vocab: int, eos: list[int]) -> dict[str, Any]:
    """A Qwen3-Next: 3 gated-delta (recurrent-state) layers and 1 full-attention layer, a
    small MoE. Its real scheduler keeps recurrent-state checkpoints in `MambaRadixCache`, the
    cache our prefix-cache patch extends for GLM."""
    return {
        "architectures": ["Qwen3NextForCausalLM"],
        "model_type": "qwen3_next",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 4,
        "full_attention_interval": 4,
        "layer_types": [
            "linear_attention",
            "linear_attention",
            "linear_attention",
            "full_attention",
        ],
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "partial_rotary_factor": 0.25,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 16,
        "linear_value_head_dim": 16,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
        "hidden_act": "silu",
        "max_position_embeddings": 65536,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "vocab_size": vocab,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": None,
        "eos_token_id": eos,
    }


CONFIGS = {"dense": dense_config, "hybrid": hybrid_config}


def stamp(kind: str) -> str:
    """What a finished model directory records; another stamp means make it again."""
    source = Path(__file__).read_bytes()
    return f"{kind}:{FORMAT_VERSION}:{hashlib.sha256(source).hexdigest()[:16]}"


def make(kind: str, out: Path) -> Path:
    stamp_file = out / ".flashbox-stamp"
    want = stamp(kind)
    if stamp_file.is_file() and stamp_file.read_text() == want:
        return out
    out.mkdir(parents=True, exist_ok=True)
    stamp_file.unlink(missing_ok=True)
    size = build_tokenizer(out)
    eos = [_token_id(out, token) for token in EOS_TOKENS]
    config = CONFIGS[kind](_padded(size), eos)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {"eos_token_id": eos, "do_sample": True, "temperature": 1.0}
    (out / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    stamp_file.write_text(want)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", choices=sorted(CONFIGS), default="hybrid")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    print(make(args.kind, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
