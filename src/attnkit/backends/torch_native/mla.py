"""MLA for torch_native, over the latent cache (one row of L + R per token, one "KV head").

Two exact forms of the same attention:
  absorbed  q_lat[h] = q_nope[h] @ w_kc[h] ([L]); scores against the latent rows; the
            weighted latent sum is lifted per head with w_vc. Work grows with n * S * 2L.
  mha       decompress the S latent rows into per-head keys and values (w_kc, w_vc), then
            plain attention. Work grows with S * L * (nope + D_v) + n * S * (nope + R + D_v).
Decode (n = 1) is always cheaper absorbed: the latent is read once and nothing of size S*H
is materialised. A long prefill (n close to S, S above a few hundred) is cheaper
decompressed, since 2L (1024 for DeepSeek-V3) dwarfs nope + R + D_v (320). So with
``form="auto"`` each request takes whichever form costs fewer FLOPs; both give the same
numbers up to float32 rounding, and tests force each form.
"""
from __future__ import annotations

import torch

from attnkit.backends.base import RuntimeLayer
from attnkit.backends.paged_torch import absorbed_is_cheaper, decompress_latent
from attnkit.backends.torch_native.mha import F32, attend_mha, softmax_probs


def attend_mla(q: torch.Tensor, latent: torch.Tensor, _v, mask, layer: RuntimeLayer, *,
               form: str = "auto") -> torch.Tensor:
    """One request, float32. q: [n, H, nope + R] (rope part rotated); latent: [S, L + R];
    mask: [n, S] bool | None -> [n, H, D_v]. ``_v`` is unused (MLA has no separate V)."""
    mla = layer.spec.mla
    w_kc, w_vc = (w.to(device=q.device, dtype=F32) for w in (layer.w_kc, layer.w_vc))
    n, s = q.shape[0], latent.shape[0]
    if form == "mha" or (form == "auto" and not absorbed_is_cheaper(n, s, mla)):
        k, v = decompress_latent(latent, w_kc, w_vc, mla.kv_lora_rank)      # [S, H, *]
        return attend_mha(q, k, v, mask, layer)
    rank = mla.kv_lora_rank
    q_nope, q_pe = q[..., :mla.qk_nope_head_dim], q[..., mla.qk_nope_head_dim:]
    lat, k_pe = latent[:, :rank], latent[:, rank:]
    q_lat = torch.einsum("nhd,hdl->nhl", q_nope, w_kc)                     # [n, H, L]
    scores = torch.einsum("nhl,sl->hns", q_lat, lat) + torch.einsum("nhr,sr->hns", q_pe, k_pe)
    probs = softmax_probs(scores * layer.spec.softmax_scale, mask, layer)  # [H, n, S]
    ctx = torch.einsum("hns,sl->nhl", probs, lat)                          # [n, H, L]
    return torch.einsum("nhl,hlv->nhv", ctx, w_vc)
