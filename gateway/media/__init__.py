"""The media stage (hop "media", before rendering): resolve and check every image a face found.

- refs.py       ImageRef (what a face found) and CheckedImage (what the core sends on)
- resolver.py   MediaResolver: the stage itself, built once in the app's state
- data_url.py   strict data: URL and base64 parsing
- fetch.py      http(s) fetching behind an allow-list, the address policy and byte caps
- addresses.py  which resolved addresses may be connected to; the default resolver
- check.py      Pillow checks (format, header size, aspect ratio, truncation), the data URL
- png.py        a PNG's compressed rows checked without decoding its pixels
- tokens.py     the engine's image token count (smart_resize)
- errors.py     MediaError and its reasons (one 400 code each)

Design and sources: ../shared/docs/MEDIA.md sections 2.3, 3.2, 6 and 7.
"""

from gateway.media.errors import MediaError, Reason
from gateway.media.refs import CheckedImage, ImageRef
from gateway.media.resolver import MediaResolver
from gateway.media.tokens import image_tokens, prompt_tokens

__all__ = [
    "CheckedImage",
    "ImageRef",
    "MediaError",
    "MediaResolver",
    "Reason",
    "image_tokens",
    "prompt_tokens",
]
