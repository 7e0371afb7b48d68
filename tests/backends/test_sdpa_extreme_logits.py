"""sdpa at logits near -1e4 * D * scale (FlashInfer #4450 / #4451): equal to the float64
reference. On CUDA the fused kernels returned whole rows of zeros there (fp16); on CPU the
test reproduces that logic with a kernel whose running maximum starts at a finite sentinel
(-5e4, FlashInfer's math::inf), which sdpa's key centring must make harmless."""
from __future__ import annotations

import pytest
import torch

from attnkit.backends.sdpa import backend as sdpa_backend
from attnkit.registry import load_backend
from factories import assert_close, make_case, make_layer

SENTINEL = -5e4


def sentinel_kernel(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """SDPA as a kernel with a finite sentinel computes it: the running maximum starts at -5e4,
    so a row whose logits all lie below it gets weights exp(s - (-5e4)) = 0 and output 0."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1).float(), v.repeat_interleave(group, 1).float()
    s = (q.float() @ k.transpose(-1, -2)) * scale
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf"))
    m = s.amax(-1, keepdim=True).clamp_min(SENTINEL)
    p = torch.exp(s - m)
    den = p.sum(-1, keepdim=True)
    return ((p @ v) / torch.where(den == 0, torch.ones_like(den), den)).to(q.dtype)


def _extreme_case(device: str, dtype: str, prefix, new):
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=64, dtype=dtype, device=device, seed=4)
    case = make_case(layer, prefix_lens=prefix, new_lens=new, page_size=16, dtype=dtype,
                     device=device, seed=4)
    # every key near -100, every query near +100: logits about -1e4 * D * scale = -8e4
    lid = layer.spec.layer_id
    for buf in (case.cache.k[lid],):
        buf.copy_((buf.float() * 0.5 - 100).to(buf.dtype))
    case.q.copy_((case.q.float() * 0.5 + 100).to(case.q.dtype))
    case.k.copy_((case.k.float() * 0.5 - 100).to(case.k.dtype))
    case._ref = None
    return case


def _run(case):
    backend = load_backend("sdpa")
    step = backend.prepare(case.meta, case.cache)
    return backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)


MODES = {"decode": ([40, 17, 33], [1, 1, 1]), "mixed": ([0, 40, 9], [12, 1, 5]),
         "prefill": ([0, 0], [9, 9])}


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_sentinel_kernel_sees_no_empty_row(mode, monkeypatch):
    case = _extreme_case("cpu", "fp32", *MODES[mode])
    ref = case.reference()
    assert (ref.abs().amax(-1) > 0.05).all(), "the reference has ordinary (non-zero) rows"
    monkeypatch.setattr(sdpa_backend.F, "scaled_dot_product_attention", sentinel_kernel)
    assert_close(_run(case), ref, dtype="fp32", what=f"sdpa sentinel kernel {mode}")


def test_ordinary_keys_keep_their_bits():
    """Keys near zero are not shifted: the output is SDPA's on the keys as stored. Seeded, and
    rows past a request's count zero as centre_keys' callers leave them: unseeded with 3 rows,
    a chance draw (|c|^2 about 3 sd above its mean, ~1 % of runs) once read as a cluster."""
    counts = [20, 11, 8]
    keys = torch.randn(3, 20, 2, 64, generator=torch.Generator().manual_seed(7))
    for b, n in enumerate(counts):
        keys[b, n:] = 0
    centred = sdpa_backend.centre_keys(keys, torch.tensor(counts, dtype=torch.float32))
    assert torch.equal(centred, keys)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_extreme_logits_equal_the_reference_on_cuda(mode, dtype):
    case = _extreme_case("cuda", dtype, *MODES[mode])
    assert_close(_run(case), case.reference(), dtype=dtype, what=f"sdpa cuda {mode} {dtype}")


def test_new_key_counts_are_built_once_per_step():
    """A step over its own new keys (fresh prefill) builds centre_keys' counts with its first
    layer and reuses them: a captured call (tune's graphed prefill, warmed up first) then copies
    nothing from the host (the H200 tune saw 'eager (RuntimeError)' for every fresh sdpa prefill)."""
    case = _extreme_case("cpu", "fp32", *MODES["prefill"])
    backend = load_backend("sdpa")
    step = backend.prepare(case.meta, case.cache)
    backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    counts = step.prepared.new_counts
    assert counts is not None and counts.tolist() == [9.0, 9.0]
    backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert step.prepared.new_counts is counts


def fp16_logits_kernel(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """SDPA as a kernel that rounds its logits to fp16 and adds the mask as -inf computes it
    (the H200's fp16 path, call 1 of 2026-12-02): a masked logit that overflowed to +inf becomes
    NaN, and a row holding one is lost."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1).float(), v.repeat_interleave(group, 1).float()
    s = ((q.float() @ k.transpose(-1, -2)) * scale).half().float()
    if attn_mask is not None:
        s = s + torch.zeros_like(s).masked_fill(~attn_mask, float("-inf"))
    return (torch.softmax(s, -1) @ v).to(q.dtype)


@pytest.mark.parametrize("mode", ["decode", "mixed"])
def test_padded_keys_stay_small_after_centring(mode, monkeypatch):
    """Requests shorter than the step's longest: their padded key rows are zero again after the
    keys are centred, so q.(0) is a small masked logit, not q.(-c) (about +8e4, inf in fp16)."""
    case = _extreme_case("cpu", "fp32", *MODES[mode])
    monkeypatch.setattr(sdpa_backend.F, "scaled_dot_product_attention", fp16_logits_kernel)
    assert_close(_run(case), case.reference(), dtype="fp16", what=f"sdpa fp16-logit kernel {mode}")
