"""What a model needs from attention, as plain torch-free data.

``LayerAttention`` describes one attention layer; ``ModelAttention`` the whole model.
The planner reads these; the runtime carries a ``LayerAttention`` in every ``RuntimeLayer``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

ROLES = ("decoder", "encoder", "cross")   # decoder self-attn, encoder self-attn, decoder->encoder
KINDS = ("mha", "mla")
# What a model layer runs instead of (or, for Falcon-H1, beside) attention. These hold no KV
# cache and are not planned: Mamba-2 mixers, linear attention (Qwen3-Next's Gated DeltaNet),
# NemotronH's stand-alone MLP / mixture-of-experts blocks, and short convolutions (LFM2).
OTHER_KINDS = ("mamba", "linear_attention", "mlp", "moe", "conv")


@dataclass(frozen=True)
class MLAConfig:
    """Multi-head latent attention sizes (DeepSeek-V2/V3, Kimi-K2)."""
    kv_lora_rank: int          # latent width L (512 for DeepSeek-V3)
    qk_rope_head_dim: int      # shared rotary part R (64)
    qk_nope_head_dim: int      # per-head non-rotary q/k part (128)
    v_head_dim: int            # per-head value width (128)
    q_lora_rank: int | None = None

    @property
    def latent_dim(self) -> int:
        """Width of one cached latent row: L + R (576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class DualChunkConfig:
    """``dual_chunk_attention_config`` (Qwen2.5-1M); see shared/DUAL_CHUNK.md."""
    chunk_size: int
    local_size: int
    original_max_position_embeddings: int = 0

    @property
    def chunk_len(self) -> int:
        """cl = chunk_size - local_size: the real chunk length."""
        return self.chunk_size - self.local_size


@dataclass(frozen=True)
class SparseTopK:
    """DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5): a lightning indexer of
    ``index_n_heads`` heads of width ``index_head_dim`` scores every earlier key, and each query
    attends to its ``topk`` best-scoring keys only (all of them while there are fewer)."""
    topk: int
    index_n_heads: int
    index_head_dim: int


@dataclass(frozen=True)
class LayerAttention:
    """One attention layer's needs.

    ``head_dim`` is the q/k width per head (MLA: nope + rope), ``v_head_dim`` the value width.
    ``sliding_window`` counts the query itself: key k is visible to query p iff p - k < window.
    ``attention_chunk`` (chunked local attention, Llama-4's RoPE layers): key k is visible to
    query p iff k <= p and k // attention_chunk == p // attention_chunk (positions from 0).
    ``sparse_topk`` (DSA): each query attends to the keys its indexer picks, not to all of them.
    ``layer_id`` is the layer's index in the whole model (hybrids skip non-attention layers).
    ``scale`` None means 1/sqrt(head_dim).
    """
    layer_id: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int | None = None
    kind: str = "mha"
    role: str = "decoder"
    scale: float | None = None
    sliding_window: int | None = None
    logit_softcap: float | None = None
    sinks: bool = False
    mla: MLAConfig | None = None
    dual_chunk: DualChunkConfig | None = None
    attention_chunk: int | None = None
    sparse_topk: SparseTopK | None = None

    @property
    def causal(self) -> bool:
        return self.role == "decoder"

    @property
    def cross_attention(self) -> bool:
        return self.role == "cross"

    @property
    def value_dim(self) -> int:
        return self.head_dim if self.v_head_dim is None else self.v_head_dim

    @property
    def softmax_scale(self) -> float:
        return self.scale if self.scale is not None else 1.0 / math.sqrt(self.head_dim)

    @property
    def group_size(self) -> int:
        """Query heads per KV head."""
        return self.num_heads // self.num_kv_heads

    def features(self) -> frozenset[str]:
        """The capability-vocabulary features this layer needs (see registry/capabilities.py)."""
        out = set()
        if self.sliding_window is not None:
            out.add("sliding_window")
        if self.logit_softcap is not None:
            out.add("logit_softcap")
        if self.sinks:
            out.add("sinks")
        if self.role == "cross":
            out.add("cross_attention")
        if self.role == "encoder":
            out.add("non_causal")
        if self.dual_chunk is not None:
            out.add("dual_chunk")
        if self.attention_chunk is not None:
            out.add("chunked_local")
        if self.sparse_topk is not None:
            out.add("sparse_topk")
        return frozenset(out)


# The layer features the varlen call computes (backends/varlen.py): plain non-causal attention,
# self (role encoder) or cross (role cross); a layer needing anything else runs on the paged path.
VARLEN_FEATURES = frozenset({"non_causal", "cross_attention"})


@dataclass(frozen=True)
class ModelAttention:
    """Every attention layer of a model, plus what the planner needs to name it.

    ``dtype`` is the dtype the model config names, in attnkit's spelling where it has one
    (``bf16``, ``fp16``, ``fp32``, ``fp64``), else as the config wrote it; None when the config
    names none. ``other_layers`` lists the model's layers (by id) that run something other
    than attention (``OTHER_KINDS``); an id that is also an attention layer runs both side by
    side (Falcon-H1). ``notes`` say what the parser assumed or what happens outside the
    attention kernel (q/k norms, query temperature, output gates).
    """
    name: str
    architecture: str
    layers: tuple[LayerAttention, ...]
    dtype: str | None = "bf16"
    max_position_embeddings: int | None = None
    source: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    other_layers: tuple[tuple[int, str], ...] = ()
    # True for a component run once over its whole input and never decoded (a pipeline's text
    # encoder, even a causal one such as CLIP's text model or an LLM used for its hidden states)
    encode_only: bool = False

    @property
    def kind(self) -> str:
        return "mla" if any(l.kind == "mla" for l in self.layers) else "mha"

    @property
    def phases(self) -> tuple[str, ...]:
        """("prefill",) for encoder-only models and encode-only components (nothing is decoded),
        else both phases."""
        if self.encode_only or (self.layers and all(l.role == "encoder" for l in self.layers)):
            return ("prefill",)
        return ("prefill", "decode")

    @property
    def varlen_only(self) -> bool:
        """True for a component run once over its input with nothing cached (``encode_only``)
        whose every layer the varlen call computes (``varlen_gaps`` empty): it is planned on
        that call (the ``varlen`` feature), not on the paged path."""
        return self.encode_only and bool(self.layers) and not self.varlen_gaps()

    def varlen_gaps(self) -> list[str]:
        """Why the varlen call (backends/varlen.py) cannot compute every layer: a causal or MLA
        layer, or a layer feature outside ``VARLEN_FEATURES``; empty when it can."""
        out = []
        for layer in self.layers:
            extra = sorted(layer.features() - VARLEN_FEATURES)
            what = ("causal" if layer.causal else f"kind {layer.kind}" if layer.kind != "mha"
                    else ", ".join(extra) if extra else None)
            if what and what not in out:
                out.append(what)
        return out

    @property
    def attention_layer_ids(self) -> tuple[int, ...]:
        return tuple(l.layer_id for l in self.layers)

    def features(self) -> frozenset[str]:
        out: set[str] = set()
        for layer in self.layers:
            out |= layer.features()
        return frozenset(out)
