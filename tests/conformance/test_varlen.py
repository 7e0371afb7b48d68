"""The varlen call (packed non-causal sequences, no KV cache) against the float64 reference, on
every backend that declares ``varlen``: CPU, the Triton interpreter (fp16/fp32, small shapes),
CUDA (marked gpu). Every case puts NaN in the rows outside each sequence and in the masked keys:
an output that read them would not be finite. Cases come from the registry, not a hand list.
"""
from __future__ import annotations

import dataclasses
import zlib

import pytest
import torch

from attnkit import reference
from attnkit.backends.base import RuntimeLayer
from attnkit.backends.varlen import varlen_batch
from attnkit.errors import AttnkitError
from attnkit.model.spec import LayerAttention
from attnkit.registry import declarations, load_backend
from attnkit.registry.kernels import KernelTable
from conformance_cases import INTERPRETER, _devices, _interpreter_skip, _missing_requirement, torch_device
from factories import assert_close, torch_dtype

# name: (heads, kv heads, head dim, query lengths, key lengths or None (self), masked keys per sequence)
CASES = {
    "one-long": ((4, 4, 64), [70], None, None),
    "gqa-ragged": ((8, 2, 64), [5, 17, 1, 33], None, None),
    "mqa-empty-sequence": ((4, 1, 128), [9, 0, 12], None, None),
    "windows-of-16": ((4, 4, 64), [16] * 6, None, None),                 # Qwen2.5-VL's window layers
    "cross-to-text": ((4, 2, 64), [20, 7], [11, 5], None),               # Wan's cross-attention
    "text-padding-mask": ((4, 2, 64), [13, 21], None, [[3, 4, 12], [0, 20]]),
    "all-keys-masked": ((4, 4, 64), [6, 8], None, [[0, 1, 2, 3, 4, 5], [2]]),
}
GARBAGE_ROWS = 5        # rows past the last sequence, in q, k and v


def _params():
    out = []
    for decl in declarations().values():
        caps = decl.capabilities
        if "varlen" not in caps.features:
            continue
        # each declared varlen variant on its own (a variant with an envelope of its own, e.g. a
        # compute capability, on the GPU only); a backend without variants: None
        variants = [k for k in decl.variants_for("varlen")] or [None]
        for variant in variants:
            for device in _devices(decl):
                if variant is not None and variant.compute_capability is not None and device != "cuda":
                    continue
                skip = _missing_requirement(decl) or _interpreter_skip(device)
                dtypes = [d for d in caps.dtypes if not (device == INTERPRETER and d == "bf16")
                          and (variant is None or not variant.dtypes or d in variant.dtypes)]
                for dtype in dtypes:
                    for name in CASES:
                        if caps.head_dims != "any" and CASES[name][0][2] not in caps.head_dims:
                            continue
                        marks = ([pytest.mark.gpu] if device == "cuda" else []) + (
                            [pytest.mark.skip(reason=skip)] if skip else [])
                        label = decl.name + (f"/{variant.name}" if variant else "")
                        out.append(pytest.param(decl.name, variant and variant.name, device, dtype, name,
                                                marks=marks, id=f"{label}-{device}-{dtype}-{name}"))
    return out


def build(name: str, dtype: str, device: str):
    (heads, kv, dim), q_lens, k_lens, masked = CASES[name]
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    k_lens = q_lens if k_lens is None else k_lens
    role = "encoder" if k_lens is q_lens else "cross"
    layer = RuntimeLayer(LayerAttention(layer_id=0, num_heads=heads, num_kv_heads=kv, head_dim=dim, role=role))
    tq, tk = sum(q_lens) + GARBAGE_ROWS, sum(k_lens) + GARBAGE_ROWS
    q, k, v = (torch.randn(t, h, dim, generator=gen) for t, h in ((tq, heads), (tk, kv), (tk, kv)))
    mask = None
    starts = [0]
    for n in k_lens:
        starts.append(starts[-1] + n)
    if masked is not None:
        mask = torch.ones(tk, dtype=torch.bool)
        for i, keys in enumerate(masked):
            for j in keys:
                mask[starts[i] + j] = False
                k[starts[i] + j] = v[starts[i] + j] = float("nan")     # padded text: garbage
    for t in (q, k, v):
        t[t.shape[0] - GARBAGE_ROWS:] = float("nan")                     # outside every sequence
    dev = torch_device(device)
    cu = lambda lens: torch.tensor([sum(lens[:i]) for i in range(len(lens) + 1)], dtype=torch.int32, device=dev)  # noqa: E731
    batch = varlen_batch(cu(q_lens), None if role == "encoder" else cu(k_lens),
                         key_padding_mask=None if mask is None else mask.to(dev))
    cast = lambda t: t.to(device=dev, dtype=torch_dtype(dtype))  # noqa: E731
    return layer, cast(q), cast(k), cast(v), batch


@pytest.mark.parametrize("backend,variant,device,dtype,name", _params())
def test_varlen_matches_the_reference(backend, variant, device, dtype, name):
    layer, q, k, v, batch = build(name, dtype, device)
    options = {"kernels": {"varlen": KernelTable.only("varlen", variant)}} if variant else {}
    out = load_backend(backend, **options).varlen(q, k, v, layer, batch)
    ref = reference.varlen_attention(q, k, v, layer, batch)
    assert out.dtype == q.dtype and out.shape == ref.shape
    assert_close(out, ref, dtype=dtype, what=f"{backend} {name}")
    assert (out[-GARBAGE_ROWS:] == 0).all()                             # rows outside every sequence


def test_the_reference_is_what_the_formula_says():
    """One sequence, no mask: softmax(q k^T * scale) v written out with plain torch."""
    layer, q, k, v, batch = build("one-long", "fp32", "cpu")
    n = batch.cu_q_cpu[-1]
    q64, k64, v64 = (t[:n].double().transpose(0, 1) for t in (q, k, v))
    want = torch.softmax(q64 @ k64.transpose(1, 2) / 8.0, dim=-1) @ v64            # d64: scale 1/8
    got = reference.varlen_attention(q, k, v, layer, batch)[:n].view(n, 4, 64).transpose(0, 1)
    assert torch.allclose(got, want, atol=1e-12)


@pytest.mark.parametrize("name", ["gqa-ragged", "text-padding-mask", "cross-to-text"])
def test_one_percent_scale_error_is_caught(name):
    layer, q, k, v, batch = build(name, "fp16", "cpu")
    wrong = dataclasses.replace(layer, spec=dataclasses.replace(layer.spec, scale=layer.spec.softmax_scale * 1.01))
    out = load_backend("torch_native").varlen(q, k, v, wrong, batch)
    with pytest.raises(AssertionError):
        assert_close(out, reference.varlen_attention(q, k, v, layer, batch), dtype="fp16")


def _code(fn) -> str:
    with pytest.raises(AttnkitError) as err:
        fn()
    return err.value.code


def test_bad_lengths_are_coded():
    assert _code(lambda: varlen_batch(torch.tensor([1, 4], dtype=torch.int32))) == "AK493"
    assert _code(lambda: varlen_batch(torch.tensor([0, 4, 2], dtype=torch.int32))) == "AK493"
    assert _code(lambda: varlen_batch(torch.tensor([0.0, 4.0]))) == "AK493"
    assert _code(lambda: varlen_batch(torch.tensor([0, 4], dtype=torch.int32),
                                      torch.tensor([0, 1, 2], dtype=torch.int32))) == "AK493"
    cu = torch.tensor([0, 4], dtype=torch.int32)
    assert _code(lambda: varlen_batch(cu, key_padding_mask=torch.ones(4))) == "AK410"
    assert _code(lambda: varlen_batch(cu, key_padding_mask=torch.ones(3, dtype=torch.bool))) == "AK411"


def test_bad_inputs_are_coded():
    layer, q, k, v, batch = build("gqa-ragged", "fp32", "cpu")
    native = load_backend("torch_native")
    assert _code(lambda: native.varlen(q[:10], k, v, layer, batch)) == "AK411"          # fewer rows
    assert _code(lambda: native.varlen(q, k.half(), v, layer, batch)) == "AK410"
    assert _code(lambda: native.varlen(q[:, :4], k, v, layer, batch)) == "AK413"
    causal = dataclasses.replace(layer, spec=dataclasses.replace(layer.spec, role="decoder"))
    assert _code(lambda: native.varlen(q, k, v, causal, batch)) == "AK440"
    window = dataclasses.replace(layer, spec=dataclasses.replace(layer.spec, sliding_window=4))
    assert _code(lambda: native.varlen(q, k, v, window, batch)) == "AK440"


@pytest.mark.parametrize("backend", [n for n, d in declarations().items() if "varlen" not in d.capabilities.features])
def test_a_backend_that_does_not_declare_varlen_refuses_it(backend):
    layer, q, k, v, batch = build("one-long", "fp32", "cpu")
    try:
        impl = load_backend(backend)
    except (AttnkitError, ImportError) as exc:
        pytest.skip(f"{backend} cannot be loaded here: {exc}")
    assert _code(lambda: impl.varlen(q, k, v, layer, batch)) == "AK420"
