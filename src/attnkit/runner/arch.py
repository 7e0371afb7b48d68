"""What the runner needs from a Hugging Face ``config.json`` beyond attention: the block recipe.

Attention itself (heads, head dim, scale, sliding windows, softcap, dual chunk) comes from
``attnkit.model.parse_config``; this module adds the rest of a decoder-only block — widths,
norms, activation, rotary base — and the per-family differences:

- llama, mistral, qwen2, qwen3: pre-norm blocks, RMSNorm ``w * x̂``, SwiGLU MLP.
  (q/k/v biases and Qwen3's per-head q/k norms are read from which tensors exist.)
- gemma2: RMSNorm ``(1 + w) * x̂``, embeddings times sqrt(hidden), norms after attention and
  after the MLP too ("sandwich"), GeGLU (tanh gelu), final logit softcap.
- gpt_oss: Llama-like blocks with attention sinks (one learned logit per head), biases on
  every projection, and a mixture of experts instead of the dense MLP (runner/mlp.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from attnkit.errors import fail
from attnkit.model import ModelAttention, parse_config
from attnkit.runner.mlp import MoEConfig

LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3")
GEMMA_LIKE = ("gemma2",)
MOE = ("gpt_oss",)
SUPPORTED = LLAMA_LIKE + GEMMA_LIKE + MOE
ACTIVATIONS = ("silu", "gelu_pytorch_tanh", "gelu_tanh", "gelu")
ROPE_TYPES = ("default",)


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
    rope_theta: float
    rotary_dim: int                  # features per head that rotate (partial rotary)
    tie_word_embeddings: bool
    norm_offset: float = 0.0         # RMSNorm multiplies by (norm_offset + w)
    norm_weight_fp32: bool = False   # RMSNorm applies w before casting back (Gemma, gpt-oss)
    embed_scale: float | None = None  # multiply embeddings by this (Gemma: sqrt(hidden))
    sandwich_norms: bool = False     # post-attention and post-MLP norms (Gemma-2)
    final_logit_softcap: float | None = None
    moe: MoEConfig | None = None     # gpt-oss experts instead of the dense MLP

    @property
    def head_dim(self) -> int:
        return self.attention.layers[0].head_dim


def architecture_of(cfg: dict, *, name: str | None = None) -> Architecture:
    """The runner's view of a parsed ``config.json``; AK480 for what the runner cannot run."""
    model_type = str(cfg.get("model_type", "")).lower()
    if model_type not in SUPPORTED:
        fail("AK480", f"the runner has no block recipe for model_type {model_type or '(none)'!r}; "
                      f"it runs {', '.join(SUPPORTED)}",
             field="model_type", expected=list(SUPPORTED), actual=model_type or None)
    attention = parse_config(cfg, name=name)
    first = attention.layers[0]
    if any(l.kind != "mha" or l.role != "decoder" for l in attention.layers):
        fail("AK480", f"model_type {model_type!r}: the runner runs decoder-only MHA/GQA layers",
             field="model_type", actual=model_type)
    hidden = _int(cfg, "hidden_size")
    rope = _rope(cfg, first.head_dim)
    gemma = model_type in GEMMA_LIKE
    act = cfg.get("hidden_activation") or cfg.get("hidden_act") or "silu"
    if act not in ACTIVATIONS:
        fail("AK480", f"activation {act!r} is not one the runner computes",
             field="hidden_act", expected=list(ACTIVATIONS), actual=act)
    return Architecture(
        model_type=model_type, attention=attention,
        vocab_size=_int(cfg, "vocab_size"), hidden_size=hidden,
        intermediate_size=_int(cfg, "intermediate_size"), num_layers=len(attention.layers),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)), activation=act,
        rope_theta=rope[0], rotary_dim=rope[1],
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", gemma)),
        norm_offset=1.0 if gemma else 0.0,
        norm_weight_fp32=gemma or model_type in MOE,
        embed_scale=hidden ** 0.5 if gemma else None,
        sandwich_norms=gemma,
        final_logit_softcap=cfg.get("final_logit_softcapping") if gemma else None,
        moe=_moe(cfg) if model_type in MOE else None,
    )


def _int(cfg: dict, key: str) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fail("AK480", f"config field {key!r} must be a positive integer for the runner, got "
                      f"{value!r}", field=key, expected="integer >= 1", actual=value)
    return value


def _moe(cfg: dict) -> MoEConfig:
    return MoEConfig(num_experts=_int(cfg, "num_local_experts"), top_k=_int(cfg, "num_experts_per_tok"),
                     swiglu_alpha=float(cfg.get("swiglu_alpha", 1.702)),
                     swiglu_limit=float(cfg.get("swiglu_limit", 7.0)))


def _rope(cfg: dict, head_dim: int) -> tuple[float, int]:
    """(rope_theta, rotary_dim). transformers 5 keeps both in ``rope_parameters``; older
    configs use top-level ``rope_theta`` and ``rope_scaling``."""
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if "full_attention" in params and isinstance(params["full_attention"], dict):
        params = params["full_attention"]        # per-layer-type rope parameters
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type not in ROPE_TYPES:
        fail("AK480", f"rope type {rope_type!r} is not one the runner computes (it has "
                      f"{', '.join(ROPE_TYPES)} RoPE only)",
             field="rope_parameters.rope_type", expected=list(ROPE_TYPES), actual=rope_type)
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    factor = params.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 1.0))
    rotary_dim = int(head_dim * factor)
    return float(theta), rotary_dim
