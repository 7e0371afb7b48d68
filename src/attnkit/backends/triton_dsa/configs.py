"""Launch configurations of triton_dsa's sparse MLA kernels, torch-free: read by the launchers
(sparse_mla.py, sparse_gluon.py) and by the planner (the declaration's launch_config hook).
Functions of the layer's shape and the device's geometry only, never of measured figures.

Variants (declaration.py): ``sparse_ws``, the Gluon warp-specialised kernel (sparse_gluon.py)
in the form SPARSE_WS names; ``sparse_tile``, the Triton kernel (sparse_mla.py) with
triton_mla's absorbed tile for its program size. The split count of a token's index list is
left to run time (the SM count and the step's tokens: geometry).
"""
from __future__ import annotations

from attnkit.backends.triton_mla.configs import SPLITS_AT_RUN_TIME, absorbed_config

# The Gluon kernel's forms: (BN rows a tile, NS ring stages, loader warps, loader registers,
# three warpgroups). Shared memory at BN 64, NS 2: 2 x 72 KB ring + Q 72 KB + P 8 KB = 224 KB.
# Two warpgroups + a loader (THREE False): the scores warpgroup also computes half of P.V
# (triton_mla's ws). Three warpgroups: scores (issuing the gathers itself, NS - 1 tiles ahead)
# and two P.V halves; 12 warps at 168 registers, none moved (the loader fields are unused).
# Each form measured on the H200 (benchmarks/NOTES-dsa.md, version 2; sweep_dsa.py).
GLUON_FORMS = {
    "ws64x2": (64, 2, 4, 56, False),
    "ws32x4": (32, 4, 4, 56, False),
    "ws32x3": (32, 3, 4, 56, False),
    "ws3_32x4": (32, 4, 0, 0, True),
    "ws3_64x2": (64, 2, 0, 0, True),
}
# The form sparse_ws runs: the sweep's fastest at B 64 / 128 / 8 (ctx 32k) on the H200 of
# 2026-12-02 (NOTES-dsa.md, version 2: the figures live there, not here).
SPARSE_WS = "ws64x2"
WS_HEADS = 64                 # heads a program of the Gluon kernel (one wgmma M tile)


def ws_tile(*, form: str = SPARSE_WS) -> dict:
    """The Gluon form's tile as a plan prints it."""
    bn, ns, lw, _, three = GLUON_FORMS[form]
    return dict(FORM=form, BLOCK_H=WS_HEADS, BLOCK_N=bn, NUM_STAGES=ns,
                num_warps=12 if three else 8 + lw)


def sparse_tile_config(heads: int, latent_width: int, *, fp32: bool, smem_kb: int,
                       block_h: int = 64) -> dict:
    """The Triton kernel's tile for programs of ``block_h`` heads (at most the next power of
    two of ``heads``; 16 for fp32): triton_mla's absorbed tile, the same kernel body."""
    pow2 = 1 << max(0, heads - 1).bit_length()
    block_h = max(16, min(16 if fp32 else block_h, pow2))
    return dict(absorbed_config(block_h, latent_width, fp32=fp32, smem_kb=smem_kb), block_h=block_h)


def launch_config(variant: str, *, role: str, shape, dtype: str, platform) -> dict | None:
    """What ``variant`` launches with for a DSA layer of ``shape`` (planning.profile.Shape) in
    ``role`` on ``platform``; None where the platform does not say its shared memory."""
    smem_kb = getattr(platform, "shared_memory_kb", None)
    if smem_kb is None or shape.kv_lora_rank is None:
        return None
    if variant == "sparse_ws":
        tiles = ws_tile()
    elif variant == "sparse_tile":
        cfg = sparse_tile_config(shape.heads, shape.kv_lora_rank, fp32=dtype == "fp32",
                                 smem_kb=smem_kb)
        cfg.pop("programs_per_sm")
        tiles = {k if k.startswith("num_") else k.upper(): v for k, v in cfg.items()}
    else:
        return None
    return dict(tiles, num_splits=SPLITS_AT_RUN_TIME)
