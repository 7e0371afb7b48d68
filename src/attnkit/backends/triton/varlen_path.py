"""The triton backend's varlen call (backends/varlen.py): which declared variant runs it and
how it is launched (without a plan: the first in declaration order that takes the call).

The plan's ``varlen`` kernel table (registry/kernels.py; declaration.py: varlen_tile,
varlen_gluon, varlen_gluon_persistent, varlen_gluon_split) lists the variants for the call's (sequences, mean
query length, mean key length) point, fastest first; the first that can take the call runs
(``runnable``): the Gluon forms take self-attention (not a cross layer: their declared
``excludes``) without a key mask where the Gluon kernel
runs (sm_90, Triton 3.6, 16-bit, d 64 / 128 / 256), one launch per sequence; the tile takes any
call. Launch configurations come from configs.py (the plan prints the same).

Per call the host does only what depends on the call's tensors: the spans and the table
point come from the batch (built once per step), the Gluon check runs once for the whole
call (its slices share dtype, strides and device), and the output is zeroed only past the
last sequence (every row of a sequence is written).
"""
from __future__ import annotations

import torch

from attnkit.backends._triton import LOG2E, interpreting
from attnkit.backends.triton.configs import varlen_config, varlen_gluon_config
from attnkit.backends.triton.declaration import VARIANTS

GLUON_FORMS = ("varlen_gluon", "varlen_gluon_persistent", "varlen_gluon_split")
EXCLUDES = {k.name: k.excludes for k in VARIANTS if k.name in GLUON_FORMS}   # layer features they refuse
# the backend's varlen_kernel option: a short name -> the declared variant it runs alone
OPTION_NAMES = {"tile": "varlen_tile", "gluon": "varlen_gluon", "persistent": "varlen_gluon_persistent",
                "split": "varlen_gluon_split"}


def runnable(variant: str, dense, out, layer, batch) -> bool:
    """Whether ``variant`` can take this call (beyond the plan's envelope check)."""
    if variant not in GLUON_FORMS:
        return True
    if layer.spec.features() & EXCLUDES[variant]:      # declared: self-attention only
        return False
    from attnkit.backends.triton.tma_path import gluon_prefill_ready
    return (batch.key_mask is None and batch.cu_k_cpu == batch.cu_q_cpu
            and gluon_prefill_ready(*dense, out, causal=False, window=None, softcap=None, sinks=None,
                                    qk_scale=layer.spec.softmax_scale))


def varlen(q, k, v, layer, batch, table) -> torch.Tensor:
    """q: [Tq, H_q, D]; k: [Tk, H_kv, D]; v: [Tk, H_kv, D_v] (checked by AttentionBackend.varlen)
    -> [Tq, H_q * D_v]: the first of ``table``'s variants for this call that can take it."""
    spec = layer.spec
    dense = [t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v)]
    out = q.new_empty(q.shape[0], spec.num_heads, spec.value_dim)
    out[batch.cu_q_cpu[-1]:].zero_()          # rows past the last sequence (none in a DiT step)
    variant = next((n for n in table.candidates(*batch.point) if runnable(n, dense, out, layer, batch)),
                   "varlen_tile")
    if variant in GLUON_FORMS:
        _gluon(dense, out, layer, batch, variant=variant)
    else:
        from attnkit.backends.triton.varlen import varlen_attention
        cfg = varlen_config(spec.head_dim, q.dtype == torch.float32, interpret=interpreting())
        varlen_attention(*dense, out, cu_q=batch.cu_q, cu_k=batch.cu_k, key_mask=batch.key_mask,
                         max_q=batch.max_q, scale=spec.softmax_scale, config=cfg)
    return out.reshape(q.shape[0], spec.num_heads * spec.value_dim)


def _gluon(dense, out, layer, batch, *, variant: str) -> None:
    spec = layer.spec
    persistent = variant != "varlen_gluon"
    cfg = varlen_gluon_config(spec.head_dim, persistent=persistent, split_tail=variant == "varlen_gluon_split")
    launch = dict(qk_scale=spec.softmax_scale * LOG2E, v_scale=1.0, causal=False,
                  tiles=(cfg["BLOCK_N"], cfg["K_SLOTS"], cfg["V_SLOTS"]), head_major=cfg["HEAD_MAJOR"])
    if persistent:
        from attnkit.backends.triton.prefill_gluon_persistent import prefill_gluon_persistent_attention as run
        launch["programs"] = torch.cuda.get_device_properties(out.device).multi_processor_count * cfg["PROGRAMS_PER_SM"]
        launch["split_tail"] = cfg["SPLIT_TAIL"]
    else:
        from attnkit.backends.triton.tma_path import prefill_gluon_attention as run
    for a, b in batch.spans:
        run(*(t[a:b] for t in (*dense, out)), **launch)

