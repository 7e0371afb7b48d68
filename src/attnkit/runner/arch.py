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
- deepseek_v2: Llama-like norms around multi-head latent attention (runner/mla.py) with
  interleaved rotary pairs; dense MLPs for the first ``first_k_dense_replace`` layers, routed
  plus shared experts after (runner/mlp.py).

RoPE of every family (default, linear, llama3, yarn) is read by runner/rope.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from attnkit.errors import fail
from attnkit.model import ModelAttention, parse_config
from attnkit.runner.layers import NormStyle
from attnkit.runner.mlp import DeepseekMoEConfig, GptOssMoEConfig
from attnkit.runner.rope import RopeConfig, rope_config

LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3")
GEMMA_LIKE = ("gemma2",)
MOE = ("gpt_oss",)
MLA = ("deepseek_v2",)
SUPPORTED = LLAMA_LIKE + GEMMA_LIKE + MOE + MLA
ACTIVATIONS = ("silu", "gelu_pytorch_tanh", "gelu_tanh", "gelu")
TOPK_METHODS = ("greedy", "group_limited_greedy")


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
    moe: GptOssMoEConfig | DeepseekMoEConfig | None = None   # experts (runner/mlp.py)
    max_position_embeddings: int | None = None   # positions trained for (None: not stated)

    @property
    def head_dim(self) -> int:
        return self.attention.layers[0].head_dim

    @property
    def norm(self) -> NormStyle:
        return NormStyle(eps=self.rms_norm_eps, offset=self.norm_offset,
                         weight_in_fp32=self.norm_weight_fp32)


def architecture_of(cfg: dict, *, name: str | None = None) -> Architecture:
    """The runner's view of a parsed ``config.json``; AK480 for what the runner cannot run."""
    model_type = str(cfg.get("model_type", "")).lower()
    if model_type not in SUPPORTED:
        fail("AK480", f"the runner has no block recipe for model_type {model_type or '(none)'!r}; "
                      f"it runs {', '.join(SUPPORTED)}",
             field="model_type", expected=list(SUPPORTED), actual=model_type or None)
    attention = parse_config(cfg, name=name)
    first = attention.layers[0]
    kind = "mla" if model_type in MLA else "mha"
    if any(l.kind != kind or l.role != "decoder" for l in attention.layers):
        fail("AK480", f"model_type {model_type!r}: the runner runs it as decoder-only "
                      f"{kind.upper()} layers, and this config has others",
             field="model_type", actual=model_type)
    hidden = _int(cfg, "hidden_size")
    # MLA rotates only the qk_rope_head_dim features of each head
    rope = rope_config(cfg, first.mla.qk_rope_head_dim if kind == "mla" else first.head_dim)
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
        rope=rope, rope_interleaved=kind == "mla",
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", gemma)),
        norm_offset=1.0 if gemma else 0.0,
        norm_weight_fp32=gemma or model_type in MOE,
        embed_scale=hidden ** 0.5 if gemma else None,
        sandwich_norms=gemma,
        final_logit_softcap=cfg.get("final_logit_softcapping") if gemma else None,
        moe=_moe(cfg, model_type),
        max_position_embeddings=_optional_int(cfg, "max_position_embeddings"),
    )


def _int(cfg: dict, key: str) -> int:
    value = cfg.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fail("AK480", f"config field {key!r} must be a positive integer for the runner, got "
                      f"{value!r}", field=key, expected="integer >= 1", actual=value)
    return value


def _optional_int(cfg: dict, key: str) -> int | None:
    """A positive int field used only for warnings: anything else counts as not stated."""
    value = cfg.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _moe(cfg: dict, model_type: str) -> GptOssMoEConfig | DeepseekMoEConfig | None:
    if model_type in MOE:
        return _gpt_oss_moe(cfg)
    return _deepseek_moe(cfg) if model_type in MLA else None


def _gpt_oss_moe(cfg: dict) -> GptOssMoEConfig:
    return GptOssMoEConfig(num_experts=_int(cfg, "num_local_experts"),
                           top_k=_int(cfg, "num_experts_per_tok"),
                           swiglu_alpha=float(cfg.get("swiglu_alpha", 1.702)),
                           swiglu_limit=float(cfg.get("swiglu_limit", 7.0)))


def _deepseek_moe(cfg: dict) -> DeepseekMoEConfig | None:
    """DeepSeek-V2's experts; AK480 for a routing the runner does not compute."""
    first_dense = cfg.get("first_k_dense_replace") or 0
    if isinstance(first_dense, bool) or not isinstance(first_dense, int) or first_dense < 0:
        fail("AK480", f"first_k_dense_replace must be an integer >= 0, got {first_dense!r}",
             field="first_k_dense_replace", expected="integer >= 0", actual=first_dense)
    if first_dense >= _int(cfg, "num_hidden_layers"):
        return None                             # every layer dense: expert fields may be unset
    experts, method = _int(cfg, "n_routed_experts"), cfg.get("topk_method") or "greedy"
    top_k = _int(cfg, "num_experts_per_tok")
    if method not in TOPK_METHODS or top_k > experts:
        fail("AK480", f"DeepSeek routing topk_method={method!r} with {top_k} of {experts} experts "
                      f"is not one the runner computes ({', '.join(TOPK_METHODS)}, top_k <= "
                      "n_routed_experts)", field="topk_method", expected=list(TOPK_METHODS),
             actual=method)
    groups = topk_groups = None
    if method == "group_limited_greedy":
        groups, topk_groups = _int(cfg, "n_group"), _int(cfg, "topk_group")
        if experts % groups or topk_groups > groups or top_k > topk_groups * (experts // groups):
            fail("AK480", f"group_limited_greedy needs n_group ({groups}) to divide "
                          f"n_routed_experts ({experts}), topk_group ({topk_groups}) <= n_group, "
                          f"and num_experts_per_tok ({top_k}) experts in the kept groups",
                 field="n_group", expected=f"a divisor of {experts}", actual=groups)
    return DeepseekMoEConfig(
        num_experts=experts, top_k=top_k, inter=_int(cfg, "moe_intermediate_size"),
        num_shared=int(cfg.get("n_shared_experts") or 0),
        scaling=float(cfg.get("routed_scaling_factor", 1.0)), first_dense=first_dense,
        topk_method=method, num_groups=groups, topk_groups=topk_groups)
