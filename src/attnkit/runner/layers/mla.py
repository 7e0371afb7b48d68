"""Multi-head latent attention (DeepSeek-V2, V3, Kimi-K2), the model's side of an attnkit MLA
backend.

Sizes: H heads, nope + R = q/k width per head (R = qk_rope_head_dim rotates), L =
kv_lora_rank, D_v = v_head_dim. Per token x: [hidden]:

    q      = q_proj(x)                 or  q_b_proj(norm(q_a_proj(x)))  (q_lora_rank set)
             -> [H, nope + R]; its last R features rotate
    c, k_pe = kv_a_proj_with_mqa(x)    -> [L], [R]: one latent and one rotary key for all heads
    latent = [kv_a_layernorm(c), rotary(k_pe)]      -> [L + R], what the cache keeps

The backend attends with per-head keys [c @ w_kc[h]^T, k_pe] and values c @ w_vc[h], where
kv_b_proj.weight [H * (nope + D_v), L] splits per head into w_kc [H, nope, L] (rows 0..nope)
and w_vc (the other D_v rows, transposed to [H, L, D_v]); whether it decompresses or absorbs
them is the backend's choice. It returns [T, H * D_v] for o_proj. Rotation uses DeepSeek's
interleaved pairs, or neox halves for a V3 config with rope_interleave false (rotary.py);
the softmax scale, with YaRN's mscale, is the layer spec's (attnkit.model.config). The inner
norms use eps 1e-6 whatever rms_norm_eps says, as transformers' DeepseekV2Attention and
DeepseekV3Attention do. V2 and V3 attention differ in nothing else the runner computes.
Under tensor parallelism (parallel.py) a rank holds its heads' rows of q_proj / q_b_proj and
kv_b_proj and o_proj's matching input columns; q_a_proj, kv_a_proj_with_mqa and their norms
are replicated, so every rank caches the same whole latent; o_proj's partials are summed
over ranks (one all-reduce). A DSA layer (spec.sparse_topk, DeepSeek-V3.2) adds its
indexer (indexer.py), whose inputs go to the backend with q and the latent.
"""
from __future__ import annotations

import torch

from attnkit.backends.base import RuntimeLayer
from attnkit.model.spec import LayerAttention
from attnkit.runner.layers.context import StepContext
from attnkit.runner.layers.indexer import Indexer
from attnkit.runner.layers.linear import Linear
from attnkit.runner.layers.norm import NormStyle, rms_norm
from attnkit.runner.layers.parallel import SINGLE, TensorParallel
from attnkit.runner.layers.rotary import Rotary

INNER_NORM_EPS = 1e-6


class MLAAttention:
    """One MLA layer: ``attn(x, ctx)`` with x: [T, hidden] -> [T, hidden]."""

    def __init__(self, w, prefix: str, spec: LayerAttention, *, hidden: int,
                 norm: NormStyle, rotary: Rotary, tp: TensorParallel = SINGLE):
        """w: the model's Weights; prefix: "model.layers.{i}.self_attn."; ``norm`` gives the
        family's weight style; spec: the whole layer (this rank's heads: ``tp.local``)."""
        mla, heads = spec.mla, spec.num_heads
        nope, rank, dv = mla.qk_nope_head_dim, mla.kv_lora_rank, mla.v_head_dim
        h0, h1 = tp.heads(heads)
        self.spec, self.rotary = tp.local(spec), rotary
        self.norm = NormStyle(eps=INNER_NORM_EPS, offset=norm.offset,
                              weight_in_fp32=norm.weight_in_fp32)
        q_out, q_rows = heads * spec.head_dim, (h0 * spec.head_dim, h1 * spec.head_dim)
        if mla.q_lora_rank:
            self.q_a = Linear.load(w, f"{prefix}q_a_proj", mla.q_lora_rank, hidden)
            self.q_a_norm = w.get(f"{prefix}q_a_layernorm.weight", shape=(mla.q_lora_rank,))
            self.q = Linear.load(w, f"{prefix}q_b_proj", q_out, mla.q_lora_rank, rows=q_rows)
        else:
            self.q_a = self.q_a_norm = None
            self.q = Linear.load(w, f"{prefix}q_proj", q_out, hidden, rows=q_rows)
        self.kv_a = Linear.load(w, f"{prefix}kv_a_proj_with_mqa", mla.latent_dim, hidden)
        self.kv_a_norm = w.get(f"{prefix}kv_a_layernorm.weight", shape=(rank,))
        kv_b = w.get(f"{prefix}kv_b_proj.weight", shape=(heads * (nope + dv), rank),
                     span=(h0 * (nope + dv), h1 * (nope + dv)))
        kv_b = kv_b.view(h1 - h0, nope + dv, rank)
        self.layer = RuntimeLayer(spec=self.spec, w_kc=kv_b[:, :nope].contiguous(),
                                  w_vc=kv_b[:, nope:].transpose(1, 2).contiguous())
        self.o = Linear.load_row_parallel(w, f"{prefix}o_proj", hidden, heads * dv, tp=tp,
                                          cols=(h0 * dv, h1 * dv))
        # DeepSeek sparse attention (DeepSeek-V3.2): the indexer, replicated on every rank
        self.indexer = (Indexer(w, f"{prefix}indexer.", spec, hidden=hidden)
                        if spec.sparse_topk is not None else None)

    def __call__(self, x: torch.Tensor, ctx: StepContext) -> torch.Tensor:
        spec, mla, n = self.spec, self.spec.mla, x.shape[0]
        nope, rank = mla.qk_nope_head_dim, mla.kv_lora_rank
        xq = x if self.q_a is None else rms_norm(self.q_a(x), self.q_a_norm, self.norm)
        q = self.q(xq).view(n, spec.num_heads, spec.head_dim)              # [T, H, nope + R]
        q = torch.cat([q[..., :nope], self.rotary(q[..., nope:], ctx.rope)], dim=-1)
        kv = self.kv_a(x)                                                  # [T, L + R]
        c = rms_norm(kv[:, :rank], self.kv_a_norm, self.norm)
        k_pe = self.rotary(kv[:, None, rank:], ctx.rope)[:, 0]             # [T, R]
        latent = torch.cat([c, k_pe], dim=-1)
        indexer = None if self.indexer is None else self.indexer(x, xq, ctx.rope_halves())
        return self.o(ctx.attend(q, latent, None, self.layer, indexer=indexer))   # [T, H * D_v] in
