"""Gradient codecs: the contract (base), the registry, packing helpers and one module per family."""

from aiotsim.compress.base import Codec, CodecState, FeedbackParams, LayerInfo, NoParams, Payload
from aiotsim.compress.memory import Sent
from aiotsim.compress.registry import (
    build_codec,
    codec_names,
    codec_plugin,
    get_codec_class,
    register,
    use_codec_class,
)

__all__ = [
    "Codec",
    "CodecState",
    "FeedbackParams",
    "LayerInfo",
    "NoParams",
    "Payload",
    "Sent",
    "build_codec",
    "codec_names",
    "codec_plugin",
    "get_codec_class",
    "register",
    "use_codec_class",
]
