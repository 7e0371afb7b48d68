"""dual_chunk's Triton path (triton_parts.py): the three parts on the Triton extend and decode
kernels, against the dense float64 DCA reference and against the torch path.

On CPU the kernels run in the Triton interpreter (small shapes); on CUDA (marker gpu) "auto"
picks this path, and these tests also force it at head dim 128 with a long multi-chunk
prefix, in bf16."""
import pytest
import torch
from dca_session import make_seqs, reference, run_steps
from factories import assert_close, make_layer, torch_dtype

from attnkit.backends.dual_chunk.backend import DualChunkBackend
from attnkit.errors import AttnkitError
from attnkit.model.spec import DualChunkConfig

TOY = DualChunkConfig(chunk_size=8, local_size=2)                 # cl = 6
CUDA_BF16 = pytest.param("cuda", "bf16", id="cuda-bf16", marks=pytest.mark.gpu)
CUDA_FP32 = pytest.param("cuda", "fp32", id="cuda-fp32", marks=pytest.mark.gpu)


def run_both(layer, seqs, steps, *, page_size, device="cpu"):
    return [run_steps(layer, seqs, steps, page_size=page_size, device=device,
                      backend=DualChunkBackend(impl=impl)) for impl in ("triton", "torch")]


@pytest.mark.parametrize("device,dtype", [pytest.param("cpu", "fp32", id="cpu-fp32"), CUDA_FP32, CUDA_BF16])
def test_prefill_pieces_decode_and_mixed_steps(device, dtype):
    """One to five chunks per request; prefill pieces over a cached prefix, MIXED steps
    (decode + extend) and DECODE steps, against the reference and the torch path."""
    layer = make_layer(num_heads=6, num_kv_heads=2, head_dim=16, dual_chunk=TOY, device=device, dtype=dtype)
    lengths = [31, 8, 19]
    seqs = make_seqs(layer.spec, lengths, seed=11, dtype=torch_dtype(dtype), device=device)
    steps = [[13, 8, 2], [1, 0, 11], [9, 0, 1], [1, 0, 1], [1, 0, 4], [6, 0, 0]]
    assert [sum(c) for c in zip(*steps)] == lengths
    tri, ref_impl = run_both(layer, seqs, steps, page_size=3, device=device)
    for i, seq in enumerate(seqs):
        assert_close(tri.outputs[i], reference(layer.spec, seq, tri.lengths[i]), dtype=dtype,
                     what=f"triton request {i}")
        assert_close(tri.outputs[i], ref_impl.outputs[i], dtype=dtype, what=f"triton vs torch {i}")


def test_decode_batch_where_requests_sit_in_different_chunks():
    """One DECODE step over requests in chunk 0, 1 and 4: empty parts weigh nothing."""
    layer = make_layer(num_heads=4, num_kv_heads=4, head_dim=16, dual_chunk=TOY)
    lengths = [4, 10, 28]
    seqs = make_seqs(layer.spec, lengths, seed=12)
    steps = [[3, 9, 27], [1, 1, 1]]
    run = run_steps(layer, seqs, steps, page_size=2, backend=DualChunkBackend(impl="triton"))
    for i, seq in enumerate(seqs):
        assert_close(run.outputs[i], reference(layer.spec, seq, run.lengths[i]), dtype="fp32")


@pytest.mark.gpu
def test_long_prefix_head_dim_128_on_cuda():
    """Real-sized heads: 1500 new tokens over a 2600-token prefix crossing several chunks of
    cl = 448, then two decode steps; triton vs the torch path, in bf16."""
    cfg = DualChunkConfig(chunk_size=512, local_size=64)
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=128, dual_chunk=cfg, device="cuda", dtype="bf16")
    seqs = make_seqs(layer.spec, [4102], seed=13, dtype=torch.bfloat16, device="cuda")
    tri, ref_impl = run_both(layer, seqs, [[2600], [1500], [1], [1]], page_size=64, device="cuda")
    assert_close(tri.outputs[0], ref_impl.outputs[0], dtype="bf16", what="triton vs torch")
    rows = [0, 447, 448, 2599, 2600, 4100, 4101]
    assert_close(tri.outputs[0][rows], reference(layer.spec, seqs[0], tri.lengths[0], positions=rows),
                 dtype="bf16", what="triton vs reference")


def test_impl_option_is_checked():
    with pytest.raises(AttnkitError) as err:
        DualChunkBackend(impl="cuda")
    assert err.value.code == "AK407"


def test_decode_splits_every_part_several_times(monkeypatch):
    """Keys past min_chunk per part: the decode kernel's part axis holds several splits per
    part (part_starts), with the K/V write inside the kernel; prefill runs on the torch path.
    The SM count of an H200 makes the split chooser spread the keys as on the GPU."""
    from attnkit.backends.dual_chunk import triton_parts
    from attnkit.backends.dual_chunk.triton_parts import DcaTritonStep
    from attnkit.backends.hybrid import HybridBackend

    monkeypatch.setattr(triton_parts, "sm_count", lambda device: 132)
    cfg = DualChunkConfig(chunk_size=320, local_size=20)          # cl = 300
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, dual_chunk=cfg)
    lengths = [900, 650, 40]         # the first request's last query: 300 keys in each part
    seqs = make_seqs(layer.spec, lengths, seed=14)
    hybrid = HybridBackend(DualChunkBackend(impl="torch"), DualChunkBackend(impl="triton"))
    run = run_steps(layer, seqs, [[n - 1 for n in lengths], [1, 1, 1]], page_size=4, backend=hybrid)
    for i, seq in enumerate(seqs):
        last = [lengths[i] - 1]
        assert_close(run.outputs[i][last], reference(layer.spec, seq, run.lengths[i], positions=last),
                     dtype="fp32", what=f"decode row of request {i}")
    # the layout those numbers came from: 3 parts, each split more than once
    from attnkit.backends.batch import Request, build_batch
    meta = build_batch([Request(n - 1, 1, list(range(-(-n // 4)))) for n in lengths], page_size=4)
    groups = DcaTritonStep.build(meta, "cpu").chunk_groups(300, 4)
    slots, chunk, starts = groups.decode_splits(2, 16, num_sms=132)
    assert [b - a for a, b in zip(starts.tolist(), starts.tolist()[1:])] == [
        -(-max(p.kv_lens) // chunk) for p in groups.parts]
    assert min(b - a for a, b in zip(starts.tolist(), starts.tolist()[1:])) >= 2


def test_decode_of_many_requests():
    """Eighteen decode requests of other lengths, the K/V write its own launch."""
    layer = make_layer(num_heads=2, num_kv_heads=1, head_dim=16, dual_chunk=TOY)
    lengths = [3 + (5 * i) % 23 for i in range(18)]
    seqs = make_seqs(layer.spec, lengths, seed=15)
    run = run_steps(layer, seqs, [[n - 1 for n in lengths], [1] * len(lengths)], page_size=2,
                    backend=DualChunkBackend(impl="triton"))
    for i, seq in enumerate(seqs):
        last = [lengths[i] - 1]
        assert_close(run.outputs[i][last], reference(layer.spec, seq, run.lengths[i], positions=last),
                     dtype="fp32", what=f"request {i}")


FP8_CASES = [pytest.param("cpu", "fp32", "fp8_e4m3", id="cpu-e4m3"),
             pytest.param("cpu", "fp32", "fp8_e5m2", id="cpu-e5m2"),
             pytest.param("cuda", "bf16", "fp8_e4m3", id="cuda-bf16-e4m3", marks=pytest.mark.gpu),
             pytest.param("cuda", "bf16", "fp8_e5m2", id="cuda-bf16-e5m2", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device,dtype,kv_dtype", FP8_CASES)
@pytest.mark.parametrize("impl", ["torch", "triton"])
def test_fp8_kv_cache_against_the_reference_on_what_the_cache_holds(device, dtype, kv_dtype, impl):
    """fp8 pages (with K and V scales): the backend equals the dense DCA of the keys and values
    read back from the cache, so the only rounding allowed is the compute dtype's."""
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, dual_chunk=TOY, device=device,
                       dtype=dtype)
    lengths = [23, 9]
    seqs = make_seqs(layer.spec, lengths, seed=16, dtype=torch_dtype(dtype), device=device)
    steps = [[11, 9], [5, 0], [1, 0], [6, 0]]
    run = run_steps(layer, seqs, steps, page_size=3, device=device, kv_dtype=kv_dtype,
                    kv_scales=(0.5, 2.0), backend=DualChunkBackend(impl=impl))
    for i, seq in enumerate(seqs):
        want = reference(layer.spec, seq, run.lengths[i], cached=run.cached_kv(layer, i))
        assert_close(run.outputs[i], want, dtype=dtype, what=f"{impl} {kv_dtype} request {i}")
        raw = reference(layer.spec, seq, run.lengths[i])
        assert (run.outputs[i] - raw).abs().max() > 1e-4          # fp8 rounding is in play


@pytest.mark.parametrize("capability,hip,auto", [((7, 5), None, False), ((8, 0), None, True),
                                                 ((9, 0), None, True), ((9, 4), "6.2", False)])
def test_auto_runs_triton_only_where_its_kernels_are_declared(monkeypatch, capability, hip, auto):
    """The triton backend's kernels are declared for NVIDIA sm80+ (bf16 tiles): below that, or
    on ROCm, "auto" takes the torch path, and an explicit impl="triton" is refused (AK211)
    instead of failing inside a kernel compile."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.version, "hip", hip)
    cuda = torch.device("cuda")
    assert DualChunkBackend(impl="auto")._use_triton(cuda) is auto
    assert DualChunkBackend(impl="torch")._use_triton(cuda) is False
    if auto:
        assert DualChunkBackend(impl="triton")._use_triton(cuda) is True
    else:
        with pytest.raises(AttnkitError) as err:
            DualChunkBackend(impl="triton")._use_triton(cuda)
        assert err.value.code == "AK211" and "impl='torch'" in str(err.value)


EDGES = {   # name: (chunk_size, local_size, lengths, steps, page_size); cl = cs - ls
    "prefix-ends-on-chunk-boundary": (8, 2, [31], [[6], [6], [1], [17], [1]], 3),
    "chunk-length-equals-page": (8, 2, [31], [[12], [1], [18]], 6),
    "page-1-piece-over-four-chunks": (8, 2, [25], [[2], [22], [1]], 1),
    "chunk-length-1": (4, 3, [9, 5], [[3, 2], [1, 1], [4, 1], [1, 1]], 1),
    "no-successor-or-inter-anywhere": (8, 2, [5, 4], [[3, 2], [1, 1], [1, 1]], 2),
    "mixed-decode-chunk-0-extend-to-chunk-4": (8, 2, [4, 30], [[3, 20], [1, 10]], 2),
    "decode-on-first-position-of-chunks": (8, 2, [7, 13], [[6, 12], [1, 1]], 3),
}


@pytest.mark.parametrize("name", sorted(EDGES))
def test_chunk_and_page_edges_with_extra_trailing_pages(name):
    """Index-math edges of the pseudo-requests; every block-table row holds two pages past its
    sequence, so a shifted row's clamped columns point at real (never written) pages."""
    cs, ls, lengths, steps, page_size = EDGES[name]
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16,
                       dual_chunk=DualChunkConfig(chunk_size=cs, local_size=ls))
    seqs = make_seqs(layer.spec, lengths, seed=17)
    run = run_steps(layer, seqs, steps, page_size=page_size, extra_pages=2,
                    backend=DualChunkBackend(impl="triton"))
    for i, seq in enumerate(seqs):
        assert_close(run.outputs[i], reference(layer.spec, seq, run.lengths[i]), dtype="fp32",
                     what=f"{name} request {i}")


def test_explicit_triton_refuses_a_head_dim_its_kernels_do_not_hold():
    """Head dims above 256 are outside the kernels' one-tile rows: impl="triton" says so
    (AK453) rather than quietly running the torch path; impl="auto" would take torch."""
    layer = make_layer(num_heads=2, num_kv_heads=1, head_dim=272, dual_chunk=TOY)
    seqs = make_seqs(layer.spec, [9], seed=18)
    with pytest.raises(AttnkitError) as err:
        run_steps(layer, seqs, [[9]], page_size=3, backend=DualChunkBackend(impl="triton"))
    assert err.value.code == "AK453" and "impl='torch'" in str(err.value)
    run = run_steps(layer, seqs, [[9]], page_size=3, backend=DualChunkBackend(impl="torch"))
    assert_close(run.outputs[0], reference(layer.spec, seqs[0], run.lengths[0]), dtype="fp32")


@pytest.mark.parametrize("impl", ["torch", "triton"])
@pytest.mark.parametrize("device,dtype", [pytest.param("cpu", "fp32", id="cpu-fp32"), CUDA_FP32, CUDA_BF16])
def test_garbage_outside_a_request_never_reaches_its_output(impl, device, dtype):
    """Every slot holds NaN / +-inf until a step writes it, page 0 is nobody's, rows hold spare
    pages: prefill pieces, MIXED and DECODE steps of ragged requests still match the
    reference, so no part reads a padded entry, another request's page or a slot past a
    request's length (a zero weight times NaN would show)."""
    if impl == "triton" and device == "cpu" and dtype != "fp32":
        pytest.skip("interpreter: fp32 only")
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16, dual_chunk=TOY, device=device, dtype=dtype)
    lengths = [23, 5, 14]
    seqs = make_seqs(layer.spec, lengths, seed=21, dtype=torch_dtype(dtype), device=device)
    steps = [[13, 4, 2], [1, 1, 9], [8, 0, 1], [1, 0, 1], [0, 0, 1]]
    assert [sum(c) for c in zip(*steps)] == lengths
    run = run_steps(layer, seqs, steps, page_size=3, device=device, extra_pages=2, garbage=True,
                    backend=DualChunkBackend(impl=impl))
    for i, seq in enumerate(seqs):
        assert torch.isfinite(run.outputs[i]).all(), f"request {i}: non-finite output"
        assert_close(run.outputs[i], reference(layer.spec, seq, run.lengths[i]), dtype=dtype,
                     what=f"{impl} request {i}")
