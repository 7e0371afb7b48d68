"""Launch configurations of triton_mla's kernel variants that a plan can name, torch-free.

The Gluon decode kernel (ws) has one fixed shape; decode_gluon.py reads it from here. The
Triton kernels (column_split, whole_rows, column_split_tma, mha_form) pick their tiles per step
from the tokens a program holds and the device's shared memory (decode.absorbed_config,
backend._mha_form), so a plan made without the device names none for them.
"""
from __future__ import annotations

WS = dict(BLOCK_H=64, BLOCK_N=64, NUM_STAGES=2, num_warps=12)   # a loader warp + two warpgroups


def launch_config(variant: str, *, head_dim: int, dtype: str) -> dict | None:
    return dict(WS) if variant == "ws" else None
