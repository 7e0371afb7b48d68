"""What the runner needs from a Hugging Face ``config.json`` beyond attention: the block recipe.

Attention itself (heads, head dim, scale, sliding windows, softcap, dual chunk) comes from
``attnkit.model.parse_config``; this module reads the rest of a decoder-only block that every
family shares (widths, norm eps, activation, RoPE, tied embeddings) and asks the family's
module (llama.py, gemma2.py, gpt_oss.py, deepseek.py; see __init__.py) for its own fields.

RoPE of every family (default, linear, llama3, yarn) is read by layers/rope.py. Every config
value is read through the planner's typed reader (attnkit.model._fields.ConfigReader): a
missing, mistyped or out-of-range field is AK503 / AK504 / AK505 naming it; AK480 is for
values the runner has no recipe for.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnkit.errors import fail
from attnkit.model import ModelAttention, parse_config
from attnkit.model._fields import ConfigReader
from attnkit.runner.layers.norm import NormStyle
from attnkit.runner.layers.rope import RopeConfig, rope_config
from attnkit.runner.models.families import FAMILIES, SUPPORTED

ACTIVATIONS = ("silu", "gelu_pytorch_tanh", "gelu_tanh", "gelu")
# transformers' config-class defaults for the block fields a config.json may leave out
BLOCK_DEFAULTS = {"rms_norm_eps": 1e-6, "swiglu_alpha": 1.702, "swiglu_limit": 7.0}


@dataclass(frozen=True, slots=True)
class Architecture:
    """The block recipe of one decoder-only model (whole-model sizes, no parallelism)."""
    model_type: str
    attention: ModelAttention
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    rms_norm_eps: float
    activation: str                  # one of ACTIVATIONS
    rope: RopeConfig
    tie_word_embeddings: bool
    rope_interleaved: bool = False   # rotary pairs (2j, 2j + 1) (DeepSeek) instead of neox halves
    norm_offset: float = 0.0         # RMSNorm multiplies by (norm_offset + w)
    norm_weight_fp32: bool = False   # RMSNorm applies w before casting back (Gemma, gpt-oss)
    embed_scale: float | None = None  # multiply embeddings by this (Gemma: sqrt(hidden))
    sandwich_norms: bool = False     # post-attention and post-MLP norms (Gemma-2)
    final_logit_softcap: float | None = None
    moe: Any = None                  # experts config (layers/moe.py), None for dense MLPs
    max_position_embeddings: int | None = None   # positions trained for (None: not stated)

    @property
    def head_dim(self) -> int:
        return self.attention.layers[0].head_dim

    @property
    def norm(self) -> NormStyle:
        return NormStyle(eps=self.rms_norm_eps, offset=self.norm_offset,
                         weight_in_fp32=self.norm_weight_fp32)


def architecture_of(cfg: dict, *, name: str | None = None) -> Architecture:
    """The runner's view of a parsed ``config.json``; AK480 for what the runner cannot run,
    AK5xx for a malformed field."""
    top = ConfigReader(cfg, source=name or "config.json") if isinstance(cfg, dict) else None
    model_type = top.str("model_type", default="").lower() if top else ""
    if model_type not in SUPPORTED:
        fail("AK480", f"the runner has no block recipe for model_type {model_type or '(none)'!r}; "
                      f"it runs {', '.join(SUPPORTED)}",
             field="model_type", expected=list(SUPPORTED), actual=model_type or None)
    quant = cfg.get("quantization_config")
    if quant:
        method = quant.get("quant_method") if isinstance(quant, dict) else quant
        fail("AK480", f"the checkpoint is quantized (quantization_config quant_method "
                      f"{method!r}); the runner reads plain fp32 / fp16 / bf16 weights and does "
                      "not dequantize (block scales, packed experts), so dequantize it first",
             field="quantization_config", expected=None, actual=method)
    family = FAMILIES[model_type]
    attention = parse_config(cfg, name=name)
    r = ConfigReader(cfg, source=top.source, defaults={**BLOCK_DEFAULTS, **family.DEFAULTS})
    first = attention.layers[0]
    if any(l.kind != family.KIND or l.role != "decoder" for l in attention.layers):
        fail("AK480", f"model_type {model_type!r}: the runner runs it as decoder-only "
                      f"{family.KIND.upper()} layers, and this config has others",
             field="model_type", actual=model_type)
    hidden = r.int("hidden_size")
    # MLA rotates only the qk_rope_head_dim features of each head
    rope = rope_config(r, first.mla.qk_rope_head_dim if family.KIND == "mla" else first.head_dim)
    act = r.str("hidden_activation", default=None) or r.str("hidden_act", default="silu")
    if act not in ACTIVATIONS:
        fail("AK480", f"activation {act!r} is not one the runner computes",
             field="hidden_act", expected=list(ACTIVATIONS), actual=act)
    own = family.recipe(r, model_type, hidden=hidden)
    return Architecture(
        model_type=model_type, attention=attention,
        vocab_size=r.int("vocab_size"), hidden_size=hidden,
        intermediate_size=r.int("intermediate_size"), num_layers=len(attention.layers),
        rms_norm_eps=r.float("rms_norm_eps"), activation=act, rope=rope,
        tie_word_embeddings=r.bool("tie_word_embeddings", default=own.pop("tie_default", False)),
        max_position_embeddings=_optional_int(cfg, "max_position_embeddings"), **own)


def _optional_int(cfg: dict, key: str) -> int | None:
    """A positive int field used only for warnings: anything else counts as not stated."""
    value = cfg.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
