"""Registered backends paired in a HybridBackend: a cache written by one half is read by the
other. Pairs come from the registry (prefill-capable x decode-capable, sharing a kind, a
platform, a KV dtype and a page size); each runs prefill, then two decode steps."""
from __future__ import annotations

import itertools

import pytest
import torch

from attnkit import reference
from attnkit.backends.batch import Request, build_batch
from attnkit.backends.hybrid import HybridBackend
from attnkit.registry import declarations, load_backend
from conformance_cases import (_devices, _interpreter_skip, _missing_requirement, page_sizes,
                               sparse_only, torch_device)
from factories import assert_close, make_case, make_layer


def _pairs():
    decls = [d for d in declarations().values()
             if "dual_chunk" not in d.capabilities.features and not _missing_requirement(d)
             and not sparse_only(d)]           # the pairs run plain layers
    for pre, dec in itertools.product(decls, repeat=2):
        if pre.name == dec.name or "prefill" not in pre.capabilities.phases \
                or "decode" not in dec.capabilities.phases:
            continue
        for kind in (k for k in pre.capabilities.kinds if k in dec.capabilities.kinds):
            for device in (d for d in _devices(pre) if d in _devices(dec)):
                size = next((s for s in page_sizes(pre.capabilities)
                             if dec.capabilities.accepts_page_size(s) and s > 1), None)
                dtype = next((d for d in ("fp32", "fp16") if d in pre.capabilities.dtypes
                              and d in dec.capabilities.dtypes and d in pre.capabilities.kv_cache_dtypes
                              and d in dec.capabilities.kv_cache_dtypes), None)
                if size and dtype:
                    marks = [pytest.mark.gpu] if device == "cuda" else []
                    if _interpreter_skip(device):
                        marks.append(pytest.mark.skip(reason=_interpreter_skip(device)))
                    yield pytest.param(pre.name, dec.name, kind, torch_device(device), size, dtype, marks=marks,
                                       id=f"{pre.name}+{dec.name}-{kind}-{device}-p{size}-{dtype}")


@pytest.mark.parametrize("prefill, decode, kind, device, page_size, dtype", list(_pairs()))
def test_prefill_then_decode_across_backends(prefill, decode, kind, device, page_size, dtype):
    layer = make_layer(kind=kind, num_heads=4, num_kv_heads=1, head_dim=64, dtype=dtype, device=device)
    hybrid = HybridBackend(load_backend(prefill), load_backend(decode))
    case = make_case(layer, prefix_lens=[0, 0], new_lens=[page_size + 3, 5], page_size=page_size,
                     dtype=dtype, device=device, seed=11)
    out = hybrid.forward(*case.args(), hybrid.prepare(case.meta, case.cache))
    assert_close(out, case.reference(), dtype=dtype, what="prefill")
    cache, spec, lens = case.cache, layer.spec, [page_size + 3, 5]
    gen = torch.Generator().manual_seed(12)
    for step_no in range(2):
        rows = [case.allocator.grow(i, 1) for i in range(2)]
        meta = build_batch([Request(n, 1, row) for n, row in zip(lens, rows)],
                           page_size=page_size, device=device)
        q = torch.randn(2, spec.num_heads, spec.head_dim, generator=gen).to(device, case.dtype)
        if kind == "mla":
            k, v = torch.randn(2, spec.mla.latent_dim, generator=gen).to(device, case.dtype), None
        else:
            k = torch.randn(2, 1, spec.head_dim, generator=gen).to(device, case.dtype)
            v = torch.randn(2, 1, spec.value_dim, generator=gen).to(device, case.dtype)
        ref = reference.attention(q, k, v, layer, cache, meta)
        out = hybrid.forward(q, k, v, layer, cache, hybrid.prepare(meta, cache))
        assert_close(out, ref, dtype=dtype, what=f"decode {step_no}")
        lens = [n + 1 for n in lens]
