"""The device tensors of a ``BatchMetadata``, built from its host values when it is made.

Apart from metadata.py so that module stays torch-free on import (it calls this on first use).
"""
from __future__ import annotations

import torch

from attnkit.errors import fail, preview

_RANGE = {torch.int32: (-2**31, 2**31 - 1), torch.int64: (-2**63, 2**63 - 1)}


def device_tensors(meta) -> dict[str, torch.Tensor]:
    """The device copies of a BatchMetadata's host values (called once, when it is made): the only
    way its tensors come to be, so they always equal the host values the checks read."""
    starts = [0]
    for n in meta.query_lens_cpu:
        starts.append(starts[-1] + n)
    positions = [p for a, b in zip(meta.prefix_lens_cpu, meta.seq_lens_cpu) for p in range(a, b)]
    i32, i64 = torch.int32, torch.int64
    host = {"query_start_loc": (starts, i32), "seq_lens": (meta.seq_lens_cpu, i32),
            "prefix_lens": (meta.prefix_lens_cpu, i32), "block_tables": (meta.block_tables_cpu, i32),
            "slot_mapping": (meta.slot_mapping_cpu, i64), "positions": (positions, i64)}
    if meta.encoder_lens_cpu is not None:
        host["encoder_lens"] = (meta.encoder_lens_cpu, i32)
        host["encoder_block_tables"] = (meta.encoder_block_tables_cpu, i32)
    if meta.encoder_slot_mapping_cpu is not None:
        host["encoder_slot_mapping"] = (meta.encoder_slot_mapping_cpu, i64)
    for name, (values, dtype) in host.items():       # so that only the device can fail below
        flat = [v for row in values for v in row] if name.endswith("block_tables") else values
        lo, hi = _RANGE[dtype]
        bad = next((v for v in flat if not lo <= v <= hi), None)
        if bad is not None:
            fail("AK405", f"meta.{name} holds {preview(bad)}, outside the {dtype} range of its tensor",
                 field=f"meta.{name}", expected=f"{lo} <= value <= {hi}", actual=preview(bad))
    try:
        dev = torch.device(meta.device)
        with torch.inference_mode(False):      # tensors that count their in-place writes
            out = {name: torch.tensor(values, dtype=dtype, device=dev) for name, (values, dtype) in host.items()}
    except (AssertionError, RuntimeError, TypeError, ValueError) as exc:
        fail("AK412", f"cannot build the batch's tensors on device {meta.device!r}: {exc}",
             field="meta.device", expected="a torch device this process can use", actual=repr(meta.device))
    for name in ("block_tables", "encoder_block_tables"):
        if name in out:
            rows = host[name][0]
            out[name] = out[name].reshape(len(rows), len(rows[0]) if rows else 0)
    return out
