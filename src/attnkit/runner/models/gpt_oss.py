"""gpt_oss: Llama-like blocks with attention sinks (one learned logit per head), biases on
every projection, RMSNorm weight applied in float32, and a mixture of experts instead of the
dense MLP (layers/moe.py)."""
from __future__ import annotations

from attnkit.runner.layers.moe import GptOssMoEConfig
from attnkit.runner.models.blocks import Block, mha_block

MODEL_TYPES = ("gpt_oss",)
KIND = "mha"
DEFAULTS = {"rms_norm_eps": 1e-5}


def recipe(r, model_type: str, *, hidden: int) -> dict:
    return dict(norm_weight_fp32=True,
                moe=GptOssMoEConfig(num_experts=r.int("num_local_experts"),
                                    top_k=r.int("num_experts_per_tok"),
                                    swiglu_alpha=r.float("swiglu_alpha"),
                                    swiglu_limit=r.float("swiglu_limit")))


def block(model, w, spec) -> Block:
    return mha_block(model, w, spec)
