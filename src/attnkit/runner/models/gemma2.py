"""gemma2: RMSNorm ``(1 + w) * x̂`` (weight applied in float32), embeddings times
sqrt(hidden), norms after attention and after the MLP too ("sandwich"), GeGLU (tanh gelu),
a final logit softcap, tied embeddings by default."""
from __future__ import annotations

from attnkit.runner.models.blocks import Block, mha_block

MODEL_TYPES = ("gemma2",)
KIND = "mha"
DEFAULTS: dict = {}


def recipe(r, model_type: str, *, hidden: int) -> dict:
    return dict(norm_offset=1.0, norm_weight_fp32=True, embed_scale=hidden ** 0.5,
                sandwich_norms=True, tie_default=True,
                final_logit_softcap=r.float("final_logit_softcapping", default=None))


def block(model, w, spec) -> Block:
    return mha_block(model, w, spec)
