"""The simulated engine: the scheduler, the checkpoint pool and the metrics, built once per app."""

from __future__ import annotations

import asyncio
import hashlib
import random
from dataclasses import replace

from engine.sim.checkpoints import CheckpointPool
from engine.sim.faults import Fault
from engine.sim.images import ExpandedPrompt, ImageSize, expand_ids, expand_text, pad_values
from engine.sim.media import check_media, load_images
from engine.sim.metrics import SimMetrics
from engine.sim.output import CONTENT_WORDS, OutputControls, plan_output, words
from engine.sim.perf import PerfModel
from engine.sim.requests import GenerateParams, SimRefusal
from engine.sim.scheduler import Scheduler
from engine.sim.settings import SimSettings
from engine.sim.state import SimRequest
from engine.sim.tokens import TokenSeq, from_ids, from_text, split_pieces

FILLER_TOKENS = 16


class SimEngine:
    def __init__(self, settings: SimSettings) -> None:
        profile = settings.profile
        self.settings = settings
        self.perf = PerfModel(profile)
        self.pool = CheckpointPool(profile.checkpoint_slots, profile.track_interval)
        self.metrics = SimMetrics(settings.served_model_name)
        self.healthy = True
        self.process_fault: Fault | None = settings.fault
        self.fault_rate = settings.fault_rate
        self._fault_rng = random.Random(0)
        # The engine's tokenizer manager loads a request's images on its own event loop, one
        # request at a time; the simulator does it in a worker thread, also one at a time.
        self._image_loading = asyncio.Lock()
        self.scheduler = Scheduler(
            perf=self.perf,
            pool=self.pool,
            metrics=self.metrics,
            time_scale=settings.time_scale,
            max_running=profile.max_running_requests,
            max_queued=profile.max_queued_requests,
            prefill_batch_tokens=profile.prefill_batch_tokens,
            schedule_policy=profile.schedule_policy,
            eos_token_id=profile.eos_token_ids[0] if profile.eos_token_ids else 0,
            max_total_tokens=profile.max_total_tokens,
            filler=self._filler,
        )

    def _filler(self, req: SimRequest) -> list[str]:
        bpt = self.settings.profile.bytes_per_token
        return split_pieces(" " + words(CONTENT_WORDS, FILLER_TOKENS, bpt, req.rng), bpt)

    def _rng(self, params: GenerateParams, prompt: TokenSeq) -> random.Random:
        if (
            params.sampling_seed is None
            and params.temperature > 0
            and self.settings.random_without_seed
        ):
            return random.Random()
        seed = params.sampling_seed or 0
        digest = hashlib.blake2b(prompt.data, digest_size=16, key=str(seed).encode()[:64])
        return random.Random(digest.digest())

    def _fault(self, params: GenerateParams) -> Fault | None:
        if params.sim.fault is not None:
            return params.sim.fault
        if self.process_fault is not None and self._fault_rng.random() < self.fault_rate:
            return self.process_fault
        return None

    def tokenize(self, text: str) -> TokenSeq:
        """A text prompt as /generate counts it; /tokenize answers with the same count."""
        return from_text(text, self.settings.profile.bytes_per_token)

    async def load_images(self, params: GenerateParams) -> list[ImageSize]:
        """The request's images, checked and decoded as the engine does (engine/sim/media.py);
        none for a text-only request, or when the model takes no images (the engine then
        ignores image_data)."""
        images = self.settings.profile.images
        if images is None:
            return []
        request = check_media(params, images)
        if request is None:
            return []
        async with self._image_loading:
            return await asyncio.to_thread(load_images, request, images.max_pixels)

    def _prompt(self, params: GenerateParams, images: list[ImageSize]) -> ExpandedPrompt:
        profile = self.settings.profile
        if not images or profile.images is None:
            if params.input_ids is not None:
                return ExpandedPrompt(from_ids(params.input_ids), ())
            return ExpandedPrompt(self.tokenize(params.text or ""), ())
        counts = [image.tokens for image in images]
        pads = pad_values(images, profile.images.max_pixels, profile.images.mm_splitting)
        if params.input_ids is not None:
            return expand_ids(params.input_ids, profile.images.image_token_id, counts, pads)
        return expand_text(
            params.text or "", profile.images.image_token, counts, pads, profile.bytes_per_token
        )

    def create_request(
        self, params: GenerateParams, images: list[ImageSize] | None = None
    ) -> SimRequest:
        """A request to submit; `images` come from load_images and expand the prompt."""
        profile = self.settings.profile
        expanded = self._prompt(params, images or [])
        prompt = expanded.seq
        context = profile.context_length
        if prompt.count >= context:
            # SGLang's wording (tokenizer_manager._validate_one_request in sglang-kt 0.7.2).
            raise SimRefusal(
                f"The input ({prompt.count} tokens) is longer than the model's context length "
                f"({context} tokens).",
                "text",
            )
        if prompt.count + params.max_new_tokens >= context:
            total = prompt.count + params.max_new_tokens
            raise SimRefusal(
                "Requested token count exceeds the model's maximum context length of "
                f"{context} tokens. You requested a total of {total} tokens: {prompt.count} "
                f"tokens from the input messages and {params.max_new_tokens} tokens for the "
                "completion. Please reduce the number of tokens in the input messages or the "
                "completion to fit within the limit.",
                "sampling_params.max_new_tokens",
            )
        rng = self._rng(params, prompt)
        o = params.sim
        controls = OutputControls(
            reasoning_tokens=profile.reasoning_tokens
            if o.reasoning_tokens is None
            else o.reasoning_tokens,
            content_tokens=profile.content_tokens if o.content_tokens is None else o.content_tokens,
            tool_calls=profile.tool_calls if o.tool_calls is None else o.tool_calls,
            max_auto_tool_calls=profile.max_auto_tool_calls,
            tool_call_list=o.tool_call_list,
            verbatim=o.output,
            grammar_tools=params.grammar_tools,
        )
        script = self.settings.script
        # A request a test steers itself, or one under a grammar, keeps its own output.
        steered = o.output is not None or o.tool_call_list is not None
        if script is not None and not steered and params.grammar_tools is None:
            answer = script.answer(params.text or "")
            if answer.calls:
                controls = replace(controls, tool_call_list=answer.calls, content_tokens=0)
            else:
                controls = replace(controls, content_text=answer.final, tool_call_list=())
        plan = plan_output(params.text, controls, rng, profile.bytes_per_token)
        return SimRequest(
            params=params,
            prompt=prompt,
            plan=plan,
            rng=rng,
            fault=self._fault(params),
            images=tuple(images or ()),
            images_end=expanded.images_end,
        )
