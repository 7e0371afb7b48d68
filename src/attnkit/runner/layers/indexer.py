"""DeepSeek sparse attention's lightning indexer (DeepSeek-V3.2), the model's side of a DSA
layer (docs/dsa.md): per token, the inputs the backend scores every cached token with.

Sizes: H_i indexer heads of width D_i, R = qk_rope_head_dim rotating features. Per token x
[hidden] and its q-lora latent q_resid = q_a_layernorm(q_a_proj(x)) [q_lora_rank] (MLA's):

    q       = wq_b(q_resid)                      -> [H_i, D_i]
    k       = LayerNorm(wk(x))                   -> [D_i]   (weight and bias, eps 1e-6)
    q, k    : the first R features rotate, in neox halves (the MLA part uses interleaved
              pairs; DeepSeek's indexer and transformers' DeepseekV32Indexer do not)
    q, k    = q @ Hd, k @ Hd                     Hd: the D_i x D_i Hadamard matrix / sqrt(D_i)
    weights = weights_proj(x) * H_i**-0.5 * D_i**-0.5                 -> [H_i] float32

The Hadamard rotation is DeepSeek's (``rotate_activation`` in its inference code, before the
fp8 quantisation of the keys): orthogonal, so it leaves every q . k as it is (up to rounding)
and spreads a key's outliers over its features before an fp8 index cache stores it with one
scale. transformers leaves it out, keeping bf16 keys. The q-lora latent is needed (wq_b reads
it): DeepSeek-V3.2 has one, and a config without q_lora_rank is refused (AK480). Under tensor
parallelism the indexer is replicated: every rank scores every query with all H_i heads and
caches the same index keys.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from attnkit.backends.sparse import IndexerInputs
from attnkit.model.spec import LayerAttention
from attnkit.runner.layers.linear import Linear
from attnkit.runner.layers.rotary import RopeTable

KEY_NORM_EPS = 1e-6


def indexer_problem(*, q_lora_rank, index_head_dim: int, rope_dim: int) -> tuple[str, str] | None:
    """(field, why) when the indexer cannot be computed as defined: no q-lora latent for wq_b,
    or an index head dim that is not a power of two (the Hadamard rotation) at least the rope
    width. Checked when the config is read (models/deepseek.py), before any weight."""
    if not q_lora_rank:
        return "q_lora_rank", "the indexer's wq_b reads the q-lora latent, and this config has no q_lora_rank"
    if index_head_dim & (index_head_dim - 1) or index_head_dim < rope_dim:
        return "index_head_dim", (f"index_head_dim {index_head_dim} must be a power of two (the "
                                  f"Hadamard rotation) and at least qk_rope_head_dim {rope_dim}")
    return None


def hadamard(n: int, *, device=None) -> torch.Tensor:
    """The n x n Sylvester Hadamard matrix over sqrt(n) (orthogonal), float32; n a power of two."""
    h = torch.ones(1, 1, dtype=torch.float32, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / n ** 0.5


class Indexer:
    """``indexer(x, q_resid, table)`` -> IndexerInputs for the layer's backend; x: [T, hidden],
    q_resid: [T, q_lora_rank], table: the step's RopeTable in neox layout."""

    def __init__(self, w, prefix: str, spec: LayerAttention, *, hidden: int):
        """prefix: "model.layers.{i}.self_attn.indexer."."""
        sparse, mla = spec.sparse_topk, spec.mla
        heads, dim = sparse.index_n_heads, sparse.index_head_dim
        self.heads, self.dim = heads, dim
        self.wq_b = Linear.load(w, f"{prefix}wq_b", heads * dim, mla.q_lora_rank)
        self.wk = Linear.load(w, f"{prefix}wk", dim, hidden)
        self.k_norm = (w.get(f"{prefix}k_norm.weight", shape=(dim,)),
                       w.get(f"{prefix}k_norm.bias", shape=(dim,)))
        self.weights_proj = Linear.load(w, f"{prefix}weights_proj", heads, hidden)
        self.scale = heads ** -0.5 * dim ** -0.5
        self.rotation = hadamard(dim, device=self.wk.weight.device)

    def __call__(self, x: torch.Tensor, q_resid: torch.Tensor, table: RopeTable) -> IndexerInputs:
        n, dt = x.shape[0], x.dtype
        q = table.rotate(self.wq_b(q_resid).view(n, self.heads, self.dim))         # [T, H_i, D_i]
        k = F.layer_norm(self.wk(x).float(), (self.dim,), self.k_norm[0].float(),
                         self.k_norm[1].float(), KEY_NORM_EPS).to(dt)
        k = table.rotate(k[:, None])[:, 0]                                          # [T, D_i]
        q = (q.float() @ self.rotation).to(dt)
        k = (k.float() @ self.rotation).to(dt)
        weights = self.weights_proj(x).float() * self.scale                         # [T, H_i]
        return IndexerInputs(q=q, weights=weights, k=k)
