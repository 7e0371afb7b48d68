"""Synthetic device profiles for planner tests: entries given by their rates, written as files."""
from __future__ import annotations

import copy
import json

import pytest

from attnkit.planning import profile_search
from attnkit.planning.profile_search import installed_version   # no warning about other software
from attnkit.planning.profile import SCHEMA, VERSION

H200 = {"kind": "cuda", "name": "NVIDIA H200", "capability": [9, 0]}


def entry(backend: str, phase: str, rate: float | None = None, *, batch: int = 1, new: int | None = None,
          context: int = 4096, status: str = "ok", graph: bool = True, heads: int = 32, kv_heads: int = 8,
          head_dim: int = 128, dtype: str = "bf16", kv_dtype: str | None = None, kind: str = "mha",
          mla: tuple[int, int] | None = None, rel_err: float | None = None, note: str = "",
          page_size: int = 16) -> dict:
    """One profile entry whose rate (GB/s decode, TFLOP/s prefill) is ``rate``: work 1e12, time derived."""
    new = new if new is not None else (1 if phase == "decode" else context)
    bucket = {"kind": kind, "phase": phase, "batch": batch, "new": new, "context": context, "heads": heads,
              "kv_heads": kv_heads, "head_dim": head_dim, "v_head_dim": 128 if kind == "mla" else head_dim,
              "dtype": dtype, "kv_dtype": kv_dtype or dtype, "page_size": page_size}
    if mla:
        bucket.update(kv_lora_rank=mla[0], rope_dim=mla[1])
    work = 1e12
    ms = None if rate is None else work / rate / (1e6 if phase == "decode" else 1e9)
    return {"backend": backend, "phase": phase, "bucket": bucket, "status": status, "work": work,
            "graph_ms": ms if graph and status == "ok" else None,
            "eager_ms": ms * 1.5 if ms is not None and status == "ok" else None, "rel_err": rel_err, "note": note}


def profile(entries: list[dict], *, device: dict = H200, date: str = "2026-12-02", smoke: bool = False) -> dict:
    return {"schema": SCHEMA, "version": VERSION, "device": dict(device), "software": {"torch": installed_version("torch")},
            "date": date, "smoke": smoke, "method": {"timer": "cuda-graph replay"}, "entries": copy.deepcopy(entries)}


def write(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


# An H200 as the issue measured it: sdpa prefills faster without a prefix, triton decodes faster.
MHA_H200 = [
    entry("triton", "prefill", 470, new=16384, context=16384), entry("sdpa", "prefill", 623, new=16384, context=16384),
    entry("torch_native", "prefill", 18, new=16384, context=16384),
    entry("triton", "decode", 4084, batch=64), entry("sdpa", "decode", 952, batch=64),
    entry("torch_native", "decode", 30, batch=64),
]


@pytest.fixture
def only_given_profiles(tmp_path, monkeypatch):
    """Plans see only the profiles a test names (not the package's, not the user's cache)."""
    monkeypatch.setattr(profile_search, "SHIPPED_DIR", tmp_path / "no-shipped")
    monkeypatch.setenv("ATTNKIT_PROFILE_DIR", str(tmp_path / "no-cache"))
    monkeypatch.delenv("ATTNKIT_PROFILE", raising=False)
