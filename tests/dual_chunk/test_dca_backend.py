"""dual_chunk backend: parts-and-merge over the paged cache vs the dense float64 DCA reference.

This file and test_dca_reference.py are the dual_chunk backend's conformance (the shared
suite skips the dual_chunk feature): plain RoPE equality inside one chunk, the worked example,
sequences over one to five chunks, GQA/MQA, prefill whole / in pieces / then decode, MIXED
steps, page sizes dividing the chunk length, and the same on CUDA in bf16/fp16.
"""
import random

import pytest
import torch
from dca_session import BASE, make_seqs, reference, run_steps
from factories import assert_close, make_layer, torch_dtype

from attnkit import reference as plain_reference
from attnkit.backends.batch import Request, build_batch
from attnkit.backends.dual_chunk.backend import DualChunkBackend
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import DualChunkConfig
from attnkit.runner.layers.rotary import apply_rope

TOY = DualChunkConfig(chunk_size=8, local_size=2)                 # cl = 6
WIDE = DualChunkConfig(chunk_size=64, local_size=16)              # cl = 48
CPU_FP32, CPU_BF16, CPU_FP16 = (pytest.param("cpu", d, id=f"cpu-{d}") for d in ("fp32", "bf16", "fp16"))
CUDA_BF16, CUDA_FP16 = (pytest.param("cuda", d, id=f"cuda-{d}", marks=pytest.mark.gpu) for d in ("bf16", "fp16"))
ON_DEVICES = [CPU_FP32, CPU_BF16, CUDA_BF16, CUDA_FP16]


def dca_layer(config=TOY, *, heads=4, kv_heads=2, head_dim=16, device="cpu", dtype="fp32"):
    return make_layer(num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
                      dual_chunk=config, device=device, dtype=dtype)


def check_all(layer, seqs, run, dtype="fp32", what=""):
    for i, seq in enumerate(seqs):
        assert_close(run.outputs[i], reference(layer.spec, seq, run.lengths[i]), dtype=dtype,
                     what=f"{what} request {i}")


@pytest.mark.parametrize("device,dtype", [CPU_FP32, CUDA_BF16])
@pytest.mark.parametrize("config,length", [(TOY, 5), (TOY, 8), (WIDE, 40), (WIDE, 64)])
def test_within_chunk_size_equals_plain_causal_rope(config, length, device, dtype):
    """L <= chunk_size: DCA is ordinary causal RoPE attention (attnkit.reference on q/k rotated
    at their real positions, through a layer without dual_chunk)."""
    layer = dca_layer(config, device=device, dtype=dtype)
    seq = make_seqs(layer.spec, [length], seed=1, dtype=torch_dtype(dtype), device=device)[0]
    out = run_steps(layer, [seq], [[length]], page_size=2, device=device).outputs[0]

    plain = make_layer(num_heads=4, num_kv_heads=2, head_dim=16)
    cache = PagedKVCache([plain.spec], num_pages=length, page_size=1, dtype=torch.float32)
    meta = build_batch([Request(0, length, list(range(length)))], page_size=1)
    pos = torch.arange(length)
    q, k, v = (x.float().cpu() for x in (seq.q, seq.k, seq.v))
    want = plain_reference.attention(apply_rope(q, pos, base=BASE), apply_rope(k, pos, base=BASE),
                                     v, plain, cache, meta)
    assert_close(out, want.view_as(out), dtype=dtype, what="DCA vs plain RoPE")


def test_worked_example_rows_13_and_16():
    """DUAL_CHUNK.md: cs 8, ls 2, 20 tokens; query 13 uses all three parts, query 16 the
    clamped successor position."""
    layer = dca_layer(TOY)
    seq = make_seqs(layer.spec, [20], seed=2)[0]
    out = run_steps(layer, [seq], [[20]], page_size=3).outputs[0]
    assert_close(out[[13, 16]], reference(layer.spec, seq, positions=[13, 16]), dtype="fp32")


@pytest.mark.parametrize("device,dtype", ON_DEVICES)
@pytest.mark.parametrize("config,lengths,page_size", [
    (TOY, [3, 6, 13, 20, 30], 3),          # 1 .. 5 chunks of 6
    (WIDE, [47, 100, 240], 16),            # 1 .. 5 chunks of 48
], ids=["cs8-ls2", "cs64-ls16"])
@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (4, 1)], ids=["gqa", "mqa"])
def test_prefill_equals_reference(config, lengths, page_size, heads, kv_heads, device, dtype):
    layer = dca_layer(config, heads=heads, kv_heads=kv_heads, device=device, dtype=dtype)
    seqs = make_seqs(layer.spec, lengths, seed=3, dtype=torch_dtype(dtype), device=device)
    run = run_steps(layer, seqs, [lengths], page_size=page_size, device=device)
    check_all(layer, seqs, run, dtype=dtype)


@pytest.mark.parametrize("device,dtype", ON_DEVICES + [CPU_FP16])
def test_pieces_and_decode_equal_one_prefill(device, dtype):
    """Prefill in pieces over a cached prefix, then decode, gives the rows of one prefill of
    the whole sequence (L <= omax: the length scale is 1 throughout)."""
    layer = dca_layer(TOY, device=device, dtype=dtype)
    lengths = [29, 17]
    seqs = make_seqs(layer.spec, lengths, seed=4, dtype=torch_dtype(dtype), device=device)
    whole = run_steps(layer, seqs, [lengths], page_size=2, device=device)
    pieces = [[5, 4], [7, 6], [1, 0], [10, 4], [1, 1], [1, 1], [1, 1], [1, 0], [1, 0], [1, 0]]
    assert [sum(col) for col in zip(*pieces)] == lengths
    stepped = run_steps(layer, seqs, pieces, page_size=2, device=device, seed=9)
    atol = 1e-5 if dtype == "fp32" else 1e-2
    for a, b in zip(stepped.outputs, whole.outputs):
        torch.testing.assert_close(a, b, atol=atol, rtol=atol)
    check_all(layer, seqs, stepped, dtype=dtype)


@pytest.mark.parametrize("device,dtype", [CPU_FP32, CUDA_FP16])
def test_mixed_step_decode_and_extend_together(device, dtype):
    layer = dca_layer(TOY, device=device, dtype=dtype)
    seqs = make_seqs(layer.spec, [19, 25], seed=5, dtype=torch_dtype(dtype), device=device)
    run = run_steps(layer, seqs, [[18, 11], [1, 14]], page_size=6, device=device)   # decode + extend
    check_all(layer, seqs, run, dtype=dtype)


@pytest.mark.parametrize("page_size", [1, 2, 3, 6])
def test_page_sizes_dividing_chunk_length(page_size):
    layer = dca_layer(TOY)
    seqs = make_seqs(layer.spec, [20, 9], seed=6)
    check_all(layer, seqs, run_steps(layer, seqs, [[14, 9], [6, 0]], page_size=page_size))


def test_length_scale_reaches_the_logits():
    """omax = 4 < L: keys keep the s of their step, queries get s of theirs; the backend's
    output matches the reference given those lengths, and differs from unscaled DCA."""
    cfg = DualChunkConfig(chunk_size=8, local_size=2, original_max_position_embeddings=4)
    layer = dca_layer(cfg)
    seq = make_seqs(layer.spec, [23], seed=7)[0]
    run = run_steps(layer, [seq], [[9], [6], [1], [7]], page_size=3)
    assert len(set(run.lengths[0])) == 4                # four different scales in play
    assert_close(run.outputs[0], reference(layer.spec, seq, run.lengths[0]), dtype="fp32")
    unscaled = reference(layer.spec, seq, None)
    assert (run.outputs[0] - unscaled).abs().max() > 1e-3


def test_pieces_with_whole_prompt_length_equal_one_prefill_when_scaled():
    """L > omax: with the literal rule (every prefill piece scales by the whole prompt length)
    pieces equal one prefill; scaling by the running length would not."""
    cfg = DualChunkConfig(chunk_size=8, local_size=2, original_max_position_embeddings=4)
    layer = dca_layer(cfg)
    seq = make_seqs(layer.spec, [21], seed=8)[0]
    whole = run_steps(layer, [seq], [[21]], page_size=2)
    literal = run_steps(layer, [seq], [[8], [6], [7]], page_size=2, prompt_lens=[21])
    running = run_steps(layer, [seq], [[8], [6], [7]], page_size=2)
    torch.testing.assert_close(literal.outputs[0], whole.outputs[0], atol=1e-5, rtol=1e-5)
    assert (running.outputs[0] - whole.outputs[0]).abs().max() > 1e-3
    assert_close(running.outputs[0], reference(layer.spec, seq, running.lengths[0]), dtype="fp32")


def test_idle_step_returns_no_rows():
    layer = dca_layer(TOY)
    cache = PagedKVCache([layer.spec], num_pages=2, page_size=6, dtype=torch.float32)
    meta = build_batch([], page_size=6)
    backend = DualChunkBackend()
    out = backend.forward(torch.zeros(0, 3, 4, 16), torch.zeros(0, 2, 16), torch.zeros(0, 2, 16),
                          layer, cache, backend.prepare(meta, cache))
    assert out.shape == (0, 4 * 16)


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize("seed", range(6))
def test_random_layouts_equal_reference(seed, impl):
    """Random chunk settings (local_size 0 .. chunk_size-1, so cl from 1 to chunk_size), head
    counts, page sizes dividing cl, and random prefill pieces followed by decode steps."""
    rng = random.Random(seed)
    cs = rng.choice([4, 6, 9, 12])
    cfg = DualChunkConfig(cs, rng.randrange(cs), rng.choice([0, 0, 7]))
    cl = cfg.chunk_len
    kv_heads = rng.choice([1, 2])
    layer = dca_layer(cfg, heads=kv_heads * rng.choice([1, 3]), kv_heads=kv_heads, head_dim=8)
    lengths = [rng.randint(1, 5 * cl + 3) for _ in range(rng.randint(1, 3))]
    steps, done = [], [0] * len(lengths)
    while done != lengths:
        step = [min(n - d, rng.choice([1, 1, rng.randint(1, 2 * cl + 1)])) for n, d in zip(lengths, done)]
        steps.append(step)
        done = [d + s for d, s in zip(done, step)]
    seqs = make_seqs(layer.spec, lengths, seed=seed)
    page = rng.choice([p for p in range(1, cl + 1) if cl % p == 0])
    run = run_steps(layer, seqs, steps, page_size=page, seed=seed, backend=DualChunkBackend(impl=impl))
    check_all(layer, seqs, run, what=f"{impl} {cfg}")


def test_merging_parts_equals_one_softmax_over_their_union():
    """attend_part over three key ranges, folded by merge_parts (in place, one part at a time,
    a part empty for some rows), equals one softmax over all the keys."""
    from attnkit.backends.dual_chunk.parts import attend_part, merge_parts

    gen = torch.Generator().manual_seed(17)
    q = torch.randn(5, 4, 8, generator=gen)
    k, v = torch.randn(30, 2, 8, generator=gen), torch.randn(30, 2, 8, generator=gen)
    whole = attend_part(q, k, v, scale=0.3)
    parts = [attend_part(q, k[a:b], v[a:b], scale=0.3) for a, b in ((0, 12), (12, 13), (13, 30))]
    parts[1][1][:2] = float("-inf")            # rows 0 and 1 see nothing in the middle range
    parts[1][0][:2] = 0.0
    keep = [0, 1]
    masked_k = torch.cat([k[:12], k[13:]])
    masked_v = torch.cat([v[:12], v[13:]])
    out, lse = merge_parts(parts)
    torch.testing.assert_close(out[2:], whole[0][2:], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse[2:], whole[1][2:], atol=1e-5, rtol=1e-5)
    rest = attend_part(q[keep], masked_k, masked_v, scale=0.3)
    torch.testing.assert_close(out[keep], rest[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse[keep], rest[1], atol=1e-5, rtol=1e-5)
