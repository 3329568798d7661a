"""Images in a request: where the template puts them, so `image_data` follows the prompt.

The model's template may reorder tool results (into call order) and decides where each image
part lands, so the engine's image order must be read off the rendered prompt, not the request.
A face replaces each image part with a text part holding a sentinel that is unique to the
request (a random nonce the client cannot know) and notes the image; after rendering, the
sentinels' order in the prompt is the images' order, and each sentinel becomes the model's
image marker. The template renders a text part and an image part in the same place (its
`visible_text`), so the prompt is the one the model's template makes from the original request.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field

from gateway.errors import InvalidRequestError


@dataclass(frozen=True, slots=True)
class ImageSlot:
    url: str  # a data: URL or an http(s) URL, as the client sent it
    where: str  # the part's location, for error messages


@dataclass
class ImageSlots:
    nonce: str = field(default_factory=lambda: secrets.token_hex(8))
    slots: list[ImageSlot] = field(default_factory=list)

    def add(self, url: str, where: str) -> dict[str, str]:
        """Note an image; the text part to render in its place."""
        index = len(self.slots)
        self.slots.append(ImageSlot(url, where))
        return {"type": "text", "text": f"\ue000{self.nonce}:{index}\ue001"}

    def __bool__(self) -> bool:
        return bool(self.slots)

    def place(self, prompt: str, marker: str) -> tuple[str, list[int]]:
        """(the prompt with each sentinel turned into `marker`, slot indices in prompt order).

        An image the template did not render (a position it drops) is a 400: nothing is
        silently dropped.
        """
        pattern = re.compile("\ue000" + re.escape(self.nonce) + r":(\d+)\ue001")
        order = [int(found.group(1)) for found in pattern.finditer(prompt)]
        if len(order) != len(self.slots) or len(set(order)) != len(order):
            shown = set(order)
            lost = [slot.where for i, slot in enumerate(self.slots) if i not in shown]
            where = lost[0] if lost else "messages"
            raise InvalidRequestError(
                f"{where}: the model's chat template does not show an image in this position; "
                "move it to a user, system or tool message.",
                param=where,
                code="image_not_rendered",
            )
        return pattern.sub(marker, prompt), order


def check_markers(prompt: str, markers: tuple[str, ...], images: int) -> None:
    """Every image marker in the prompt is one the gateway placed: marker text typed into a
    message would make the engine pair images with the wrong places (or fail)."""
    for marker in markers:
        if prompt.count(marker) != images:
            raise InvalidRequestError(
                f"The conversation contains the model's image marker {marker!r} as text; "
                "remove it (images are sent as image parts).",
                param="messages",
                code="image_marker_in_text",
            )


def stable_parts(
    messages: list[dict[str, object]], slots: ImageSlots, digests: Sequence[str] | None = None
) -> list[dict[str, object]]:
    """The messages with each image's sentinel (random per request) replaced by a digest of
    the image itself, for hashing a session's root: the same image is the same root.
    `digests`: the checked images' own (CheckedImage.digest, by slot), computed off the event
    loop by the media stage; without them the slot's URL is hashed here."""
    pattern = re.compile("\ue000" + re.escape(slots.nonce) + r":(\d+)\ue001")

    def digest(found: re.Match[str]) -> str:
        index = int(found.group(1))
        if digests is not None:
            return "image:" + digests[index]
        return "image:" + hashlib.sha256(slots.slots[index].url.encode()).hexdigest()

    out: list[dict[str, object]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            parts = [
                {**part, "text": pattern.sub(digest, str(part.get("text", "")))}
                if isinstance(part, dict) and part.get("type") == "text"
                else part
                for part in content
            ]
            message = {**message, "content": parts}
        out.append(message)
    return out
