"""Prefix cache for GLM-5-Next's recurrent state (ENGINE.md section A), as an engine patch.

Off unless FLASHBOX_PREFIX_CACHE=1; when on, it patches sglang-kt only if the target source
files have the sha256 it was written against. See docs/prefix-cache.md.
"""

from engine.patches.prefix_cache.config import TREE_UNIT, PrefixCacheConfigError
from engine.patches.prefix_cache.install import ENV_VAR, install

__all__ = ["ENV_VAR", "TREE_UNIT", "PrefixCacheConfigError", "install"]
