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
  plus shared experts after (runner/mlp.py), softmax router (runner/routing.py).
- deepseek_v3 (and kimi_k2, the same architecture under Moonshot's name): V2's blocks with
  the sigmoid ``noaux_tc`` router and renormalised weights; rotary pairs interleaved unless
  ``rope_interleave`` is false (then neox halves).

RoPE of every family (default, linear, llama3, yarn) is read by runner/rope.py. Every config
value is read through the planner's typed reader (attnkit.model._fields.ConfigReader): a
missing, mistyped or out-of-range field is AK503 / AK504 / AK505 naming it; AK480 is for
values the runner has no recipe for.
"""
from __future__ import annotations

from dataclasses import dataclass

from attnkit.errors import fail
from attnkit.model import ModelAttention, parse_config
from attnkit.model._fields import ConfigReader
from attnkit.runner.layers import NormStyle
from attnkit.runner.mlp import DeepseekMoEConfig, GptOssMoEConfig
from attnkit.runner.rope import RopeConfig, rope_config

LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3")
GEMMA_LIKE = ("gemma2",)
MOE = ("gpt_oss",)
DEEPSEEK_V3 = ("deepseek_v3", "kimi_k2")
MLA = ("deepseek_v2",) + DEEPSEEK_V3
SUPPORTED = LLAMA_LIKE + GEMMA_LIKE + MOE + MLA
ACTIVATIONS = ("silu", "gelu_pytorch_tanh", "gelu_tanh", "gelu")
# What transformers computes per DeepSeek generation: the router's scoring_func and
# topk_method it runs, and its config defaults for routing fields a config.json leaves out
# (V2 ignores norm_topk_prob, as transformers does).
DEEPSEEK_ROUTING = {
    "v2": {"scoring_func": ("softmax",), "topk_method": ("greedy", "group_limited_greedy")},
    "v3": {"scoring_func": ("sigmoid",), "topk_method": ("noaux_tc",)},
}
DEEPSEEK_DEFAULTS = {
    "v2": {"first_k_dense_replace": 0, "routed_scaling_factor": 1.0, "n_shared_experts": 2,
           "norm_topk_prob": False},
    "v3": {"first_k_dense_replace": 3, "routed_scaling_factor": 2.5, "n_shared_experts": 1,
           "norm_topk_prob": True, "n_group": 8, "topk_group": 4},
}
# transformers' config-class defaults for the block fields a config.json may leave out
BLOCK_DEFAULTS = {"rms_norm_eps": 1e-6, "swiglu_alpha": 1.702, "swiglu_limit": 7.0}
FAMILY_DEFAULTS = {"gpt_oss": {"rms_norm_eps": 1e-5}}


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
    attention = parse_config(cfg, name=name)
    r = ConfigReader(cfg, source=top.source,
                     defaults={**BLOCK_DEFAULTS, **FAMILY_DEFAULTS.get(model_type, {})})
    first = attention.layers[0]
    kind = "mla" if model_type in MLA else "mha"
    if any(l.kind != kind or l.role != "decoder" for l in attention.layers):
        fail("AK480", f"model_type {model_type!r}: the runner runs it as decoder-only "
                      f"{kind.upper()} layers, and this config has others",
             field="model_type", actual=model_type)
    hidden = r.int("hidden_size")
    # MLA rotates only the qk_rope_head_dim features of each head
    rope = rope_config(r, first.mla.qk_rope_head_dim if kind == "mla" else first.head_dim)
    gemma = model_type in GEMMA_LIKE
    act = r.str("hidden_activation", default=None) or r.str("hidden_act", default="silu")
    if act not in ACTIVATIONS:
        fail("AK480", f"activation {act!r} is not one the runner computes",
             field="hidden_act", expected=list(ACTIVATIONS), actual=act)
    return Architecture(
        model_type=model_type, attention=attention,
        vocab_size=r.int("vocab_size"), hidden_size=hidden,
        intermediate_size=r.int("intermediate_size"), num_layers=len(attention.layers),
        rms_norm_eps=r.float("rms_norm_eps"), activation=act,
        rope=rope, rope_interleaved=_rope_interleaved(r, model_type),
        tie_word_embeddings=r.bool("tie_word_embeddings", default=gemma),
        norm_offset=1.0 if gemma else 0.0,
        norm_weight_fp32=gemma or model_type in MOE,
        embed_scale=hidden ** 0.5 if gemma else None,
        sandwich_norms=gemma,
        final_logit_softcap=r.float("final_logit_softcapping", default=None) if gemma else None,
        moe=_moe(r, model_type),
        max_position_embeddings=_optional_int(cfg, "max_position_embeddings"),
    )


def _rope_interleaved(r: ConfigReader, model_type: str) -> bool:
    """DeepSeek rotates interleaved pairs (2j, 2j + 1); V3 configs may turn it off (null
    counts as false, as transformers tests it)."""
    if model_type in DEEPSEEK_V3:
        return r.flag("rope_interleave", default=True)
    return model_type in MLA


def _optional_int(cfg: dict, key: str) -> int | None:
    """A positive int field used only for warnings: anything else counts as not stated."""
    value = cfg.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _moe(r: ConfigReader, model_type: str) -> GptOssMoEConfig | DeepseekMoEConfig | None:
    if model_type in MOE:
        return GptOssMoEConfig(num_experts=r.int("num_local_experts"),
                               top_k=r.int("num_experts_per_tok"),
                               swiglu_alpha=r.float("swiglu_alpha"),
                               swiglu_limit=r.float("swiglu_limit"))
    if model_type in MLA:
        return _deepseek_moe(r, "v3" if model_type in DEEPSEEK_V3 else "v2")
    return None


def _deepseek_moe(top: ConfigReader, gen: str) -> DeepseekMoEConfig | None:
    """DeepSeek's experts (``gen``: "v2" or "v3"); AK480 for a routing the runner does not
    compute."""
    r = ConfigReader(top.cfg, source=top.source, defaults=DEEPSEEK_DEFAULTS[gen])
    first_dense = r.int("first_k_dense_replace", minimum=0)
    if first_dense >= r.int("num_hidden_layers"):
        return None                             # every layer dense: expert fields may be unset
    experts, top_k = r.int("n_routed_experts"), r.int("num_experts_per_tok")
    routing = DEEPSEEK_ROUTING[gen]
    scoring = r.str("scoring_func", default=None) or routing["scoring_func"][0]
    method = r.str("topk_method", default=None) or routing["topk_method"][0]
    if scoring not in routing["scoring_func"] or method not in routing["topk_method"] \
            or top_k > experts:
        fail("AK480", f"DeepSeek-{gen.upper()} routing scoring_func={scoring!r}, "
                      f"topk_method={method!r} with {top_k} of {experts} experts is not one the "
                      f"runner computes (scoring_func {' / '.join(routing['scoring_func'])}, "
                      f"topk_method {' / '.join(routing['topk_method'])}, top_k <= "
                      "n_routed_experts)", field="topk_method",
             expected=list(routing["topk_method"]), actual=method)
    groups = topk_groups = None
    if method != "greedy":
        groups, topk_groups = r.int("n_group"), r.int("topk_group")
        per_group = 2 if method == "noaux_tc" else 1     # noaux_tc sums each group's best two
        if experts % groups or experts // groups < per_group or topk_groups > groups \
                or top_k > topk_groups * (experts // groups):
            fail("AK480", f"{method} needs n_group ({groups}) to divide n_routed_experts "
                          f"({experts}) into groups of {per_group}+ experts, topk_group "
                          f"({topk_groups}) <= n_group, and num_experts_per_tok ({top_k}) "
                          "experts in the kept groups",
                 field="n_group", expected=f"a divisor of {experts}", actual=groups)
    return DeepseekMoEConfig(
        num_experts=experts, top_k=top_k, inter=r.int("moe_intermediate_size"),
        num_shared=r.int("n_shared_experts", minimum=0),
        scaling=r.float("routed_scaling_factor"), first_dense=first_dense,
        topk_method=method, num_groups=groups, topk_groups=topk_groups, scoring=scoring,
        norm_topk_prob=gen == "v3" and r.flag("norm_topk_prob", default=True))
