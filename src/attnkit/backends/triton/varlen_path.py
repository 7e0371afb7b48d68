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

from dataclasses import dataclass

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
    from attnkit.backends.triton.tma_path import descriptor_ready, gluon_prefill_ready
    return (batch.key_mask is None and batch.cu_k_cpu == batch.cu_q_cpu
            and all(descriptor_ready(t) for t in dense)     # TMA reads heads as one dense row
            and gluon_prefill_ready(*dense, out, causal=False, window=None, softcap=None, sinks=None,
                                    qk_scale=layer.spec.softmax_scale))


@dataclass(frozen=True, slots=True)
class Launch:
    """What a call of one signature (``call_key``) runs, decided once: ``variant``, and for
    the Gluon forms the launcher and its keyword arguments."""
    variant: str
    run: object = None
    kwargs: dict | None = None


def call_key(batch, dense) -> tuple:
    """What the variant choice depends on besides the table and the layer spec: the batch's
    table point, key mask and key lengths (a new batch each step: by value), and each
    tensor's shape, strides, dtype, device and base alignment (TMA's 16 bytes)."""
    same_keys = batch.cu_k_cpu is batch.cu_q_cpu or batch.cu_k_cpu == batch.cu_q_cpu
    return (batch.point, batch.key_mask is None, same_keys,
            *((t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0) for t in dense))


class Memo:
    """A backend's launch decisions (``Launch``) by (table, layer spec, ``call_key``), the most
    recent ``SIZE`` (a DiT's 40-60 layer specs a step fit): an entry holds its table and spec,
    so their identities cannot be reused while it lives, and serves those very objects only."""
    SIZE = 512

    def __init__(self):
        self.entries: dict[tuple, tuple] = {}

    def get(self, table, spec, key) -> Launch | None:
        hit = self.entries.get((id(table), id(spec), key))
        return hit[2] if hit is not None and hit[0] is table and hit[1] is spec else None

    def put(self, table, spec, key, launch: Launch) -> Launch:
        if len(self.entries) >= self.SIZE:
            self.entries.pop(next(iter(self.entries)))
        self.entries[(id(table), id(spec), key)] = (table, spec, launch)
        return launch


def varlen(q, k, v, layer, batch, table, memo: Memo | None = None) -> torch.Tensor:
    """q: [Tq, H_q, D]; k: [Tk, H_kv, D]; v: [Tk, H_kv, D_v] (checked by AttentionBackend.varlen)
    -> [Tq, H_q * D_v]: the first of ``table``'s variants for this call that can take it
    (decided once per call signature where a ``memo`` is given)."""
    spec = layer.spec
    dense = [t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v)]
    out = q.new_empty(q.shape[0], spec.num_heads, spec.value_dim)
    if batch.cu_q_cpu[-1] < q.shape[0]:
        out[batch.cu_q_cpu[-1]:].zero_()      # rows past the last sequence (none in a DiT step)
    key = call_key(batch, dense) if memo is not None else None
    launch = memo.get(table, spec, key) if memo is not None else None
    if launch is None:
        launch = _decide(dense, out, layer, batch, table)
        if memo is not None:
            memo.put(table, spec, key, launch)
    if launch.run is not None:
        whole = len(batch.spans) == 1 and batch.spans[0] == (0, q.shape[0])
        for a, b in batch.spans:              # one sequence over all rows: the tensors as they are
            launch.run(*(dense + [out] if whole else [t[a:b] for t in (*dense, out)]), **launch.kwargs)
    else:
        from attnkit.backends.triton.varlen import varlen_attention
        cfg = varlen_config(spec.head_dim, q.dtype == torch.float32, interpret=interpreting())
        varlen_attention(*dense, out, cu_q=batch.cu_q, cu_k=batch.cu_k, key_mask=batch.key_mask,
                         max_q=batch.max_q, scale=spec.softmax_scale, config=cfg)
    return out.view(q.shape[0], spec.num_heads * spec.value_dim)


def _decide(dense, out, layer, batch, table) -> Launch:
    variant = next((n for n in table.candidates(*batch.point) if runnable(n, dense, out, layer, batch)),
                   "varlen_tile")
    if variant not in GLUON_FORMS:
        return Launch(variant)
    return Launch(variant, *_gluon(layer.spec, out.device, variant=variant))


def _gluon(spec, device, *, variant: str):
    """(launcher, its keyword arguments) of a Gluon form for this layer on ``device``."""
    persistent = variant != "varlen_gluon"
    cfg = varlen_gluon_config(spec.head_dim, persistent=persistent, split_tail=variant == "varlen_gluon_split")
    launch = dict(qk_scale=spec.softmax_scale * LOG2E, v_scale=1.0, causal=False,
                  tiles=(cfg["BLOCK_N"], cfg["K_SLOTS"], cfg["V_SLOTS"]), head_major=cfg["HEAD_MAJOR"])
    if not persistent:
        from attnkit.backends.triton.tma_path import prefill_gluon_attention
        return prefill_gluon_attention, launch
    from attnkit.backends.triton.gluon_host import device_facts
    from attnkit.backends.triton.prefill_gluon_persistent import prefill_gluon_persistent_attention
    launch["programs"] = device_facts(device)[1] * cfg["PROGRAMS_PER_SM"]
    launch["split_tail"] = cfg["SPLIT_TAIL"]
    return prefill_gluon_persistent_attention, launch
