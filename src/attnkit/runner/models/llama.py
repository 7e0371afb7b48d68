"""llama, mistral, qwen2, qwen3: pre-norm blocks, RMSNorm ``w * x̂``, SwiGLU MLP. q/k/v biases
(Qwen2) and per-head q/k norms (Qwen3) are read from which tensors exist."""
from __future__ import annotations

from attnkit.runner.models.blocks import Block, mha_block

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
KIND = "mha"
DEFAULTS: dict = {}


def recipe(r, model_type: str, *, hidden: int) -> dict:
    return {}


def block(model, w, spec) -> Block:
    return mha_block(model, w, spec)
