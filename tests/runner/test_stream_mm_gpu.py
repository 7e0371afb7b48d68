"""layers/stream_mm.py on the GPU (sm_90, Triton 3.6): the warp-specialised stream-K product
against float64, with every kind of range boundary (tiles wholly owned, cut between two or
many programs, ranges inside one tile), uneven N and K (TMA's zero fill), bias and residual,
fp16 and bf16, the same bits twice, the counters back at zero, CUDA-graph replays and
programmatic dependent launch. On the CPU only the host checks run (``ready``)."""
import pytest
import torch

from attnkit.runner.layers import skinny, stream_mm

# (M, N, K): Llama-3-8B's o / qkv / down at 64 rows, a few-row step, uneven N and K, fewer
# column tiles than programs, two column tiles, and 128 rows
SHAPES = [(64, 4096, 4096), (64, 6144, 4096), (64, 4096, 14336), (17, 4096, 4096),
          (33, 1000, 520), (48, 300, 4096), (5, 128, 2048), (128, 512, 256)]


def rand(*shape, seed=0, scale=1.0, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(*shape, generator=g, device="cuda") * scale).to(dtype)


def product(x, w, bias=None, residual=None):
    """float64 product of the rounded inputs, one rounding, then torch's residual add."""
    y = x.double() @ w.double().t()
    if bias is not None:
        y = y + bias.double()
    y = y.to(x.dtype)
    return y if residual is None else residual + y


def _rel(got, want):
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()


def _need_gluon():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    probe = torch.zeros(16, 16, device="cuda", dtype=torch.bfloat16)
    if not stream_mm.ready(probe, probe):
        pytest.skip("stream_mm needs sm_90 and Triton 3.6")


def _counters():
    return skinny.counters(torch.device("cuda", torch.cuda.current_device()))


@pytest.mark.gpu
def test_ready_refuses_what_tma_cannot_read():
    """CPU tensors, fp32, more than MAX_ROWS rows, rows of a stride TMA cannot step,
    broadcast rows, an empty K (on a machine where the kernel runs at all)."""
    _need_gluon()
    cpu = torch.zeros(4, 64, dtype=torch.bfloat16)
    assert not stream_mm.ready(cpu, cpu)
    w = torch.zeros(256, 64, device="cuda", dtype=torch.bfloat16)
    assert stream_mm.ready(w[:4], w)
    assert not stream_mm.ready(w[:4].float(), w.float())
    assert not stream_mm.ready(torch.zeros(129, 64, device="cuda", dtype=torch.bfloat16), w)
    odd = torch.zeros(4, 65, device="cuda", dtype=torch.bfloat16)[:, :64]      # row stride 130 B
    assert not stream_mm.ready(odd, w)
    assert not stream_mm.ready(w[:1].expand(4, 64), w)                            # broadcast rows
    empty = torch.zeros(256, 0, device="cuda", dtype=torch.bfloat16)
    assert not stream_mm.ready(empty[:4], empty)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("programs", [None, 7, 1000])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_against_float64(shape, programs, dtype):
    """Within about one rounding of the float64 product (bias and residual on the even-numbered
    shapes, the plain product on the others),
    the stream-K split at the SM count, at 7 ranges (long ranges over several tiles) and at as
    many ranges as units (one K step each: every tile cut between all its programs)."""
    _need_gluon()
    m, n, k = shape
    x, w = rand(m, k, seed=1, dtype=dtype), rand(n, k, seed=2, scale=0.02, dtype=dtype)
    extras = {}
    if SHAPES.index(shape) % 2 == 0:
        extras = dict(bias=rand(n, seed=3, dtype=dtype), residual=rand(m, n, seed=4, dtype=dtype))
    counters = _counters()
    got = stream_mm.mm(x, w, counters=counters, programs=programs, **extras)
    want = product(x, w, **extras)
    assert _rel(got, want) < (8e-3 if dtype == torch.bfloat16 else 2e-3), shape
    again = stream_mm.mm(x, w, counters=counters, programs=programs, **extras)
    assert torch.equal(got, again)
    torch.cuda.synchronize()
    assert not counters.any()


@pytest.mark.gpu
def test_skinny_hands_the_switched_rows_over(monkeypatch):
    """With ATTNKIT_STREAM_MM=17-128, skinny.mm's product of 64 rows (bias, a broadcast [N]
    residual) is stream_mm's, bit for bit, and close to float64; unset, skinny's own kernel
    and cuBLAS run as before (usable refuses 64 rows)."""
    from attnkit.runner.layers.linear import Linear
    _need_gluon()
    x, w = rand(64, 4096, seed=20), rand(1024, 4096, seed=21, scale=0.02)
    bias, r = rand(1024, seed=22), rand(1024, seed=23)
    lin = Linear(w, bias)
    monkeypatch.delenv("ATTNKIT_STREAM_MM", raising=False)
    assert not skinny.usable(x, lin)
    monkeypatch.setenv("ATTNKIT_STREAM_MM", "17-128")
    assert skinny.usable(x, lin)
    got = skinny.mm(x, w, bias=bias, residual=r)
    direct = stream_mm.mm(x, w, bias=bias, residual=r.expand(64, 1024).contiguous(),
                          counters=_counters())
    assert torch.equal(got, direct)
    assert _rel(got.double() - r.double(), product(x, w, bias)) < 8e-3


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", [(128, 128, 4), (128, 64, 8), (64, 128, 4)])
def test_tiles(tiles):
    """Each measured tile of bench_skinny on an uneven shape, at 64 and 128 rows where its
    accumulator fits (BN x BM <= 8192 float32 a warpgroup)."""
    _need_gluon()
    for m in (64, 128):
        if tiles[0] * max(16, m) > 8192:
            continue
        x, w = rand(m, 3000, seed=5), rand(1100, 3000, seed=6, scale=0.02)
        r = rand(m, 1100, seed=7)
        got = stream_mm.mm(x, w, residual=r, counters=_counters(), tiles=tiles)
        assert _rel(got, product(x, w, residual=r)) < 8e-3, (tiles, m)


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [0, 1, 2])
def test_a_cuda_graph_of_a_chain_replays_to_the_eager_bits(pdl):
    """o + residual -> down + residual -> qkv, at 64 rows, captured (as programmatic dependents
    of one another with pdl 1 / 2): replays equal the eager bits input after input, and the
    counters are back at zero."""
    _need_gluon()
    o, down, qkv = (rand(4096, 4096, seed=8, scale=0.02), rand(4096, 14336, seed=9, scale=0.01),
                    rand(6144, 4096, seed=10, scale=0.02))
    x, xd, r = rand(64, 4096, seed=11), rand(64, 14336, seed=12), rand(64, 4096, seed=13)
    counters = _counters()
    opts = {"PDL": pdl, "launch_pdl": True} if pdl else {"PDL": 0}

    def body():
        h = stream_mm.mm(x, o, residual=r, counters=counters, pdl=opts)
        h2 = stream_mm.mm(xd, down, residual=h, counters=counters, pdl=opts)
        return h, h2, stream_mm.mm(h2, qkv, counters=counters, pdl=opts)

    eager = body()
    assert _rel(eager[0], product(x, o, residual=r)) < 8e-3
    assert _rel(eager[1], product(xd, down, residual=eager[0])) < 8e-3
    assert _rel(eager[2], product(eager[1], qkv)) < 8e-3
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = body()
    for seed in range(3):
        x.copy_(rand(64, 4096, seed=40 + seed))
        want = body()
        graph.replay()
        for got, w in zip(outs, want):
            assert torch.equal(got, w), seed
    torch.cuda.synchronize()
    assert not counters.any()


def test_the_row_switch_and_its_pdl(monkeypatch):
    """ATTNKIT_STREAM_MM="lo-hi" sets the rows stream_mm serves (STREAM_ROWS otherwise, a
    malformed value too: one row) and lifts the column limit (ATTNKIT_STREAM_MM_N sets it);
    under ATTNKIT_FUSED_PDL=auto launches over those rows are ``early`` programmatic
    dependents (the products load W before they wait), the kernels between the products
    there PDL 3, others over more than one row plain."""
    from attnkit.runner.layers import fused

    for name in ("ATTNKIT_STREAM_MM", "ATTNKIT_STREAM_MM_N", "ATTNKIT_FUSED_PDL"):
        monkeypatch.delenv(name, raising=False)
    assert fused.stream_rows() == (1, 1) == fused.STREAM_ROWS
    assert fused.stream_cols() == fused.STREAM_COLS == 4096
    assert [fused.pdl_mode(r) for r in (0, 1, 2, 64)] == [0, 2, 0, 0]
    assert [fused.pdl_mode(r, between=True) for r in (0, 1, 2, 64)] == [0, 3, 0, 0]
    for raw, want in (("33-64", (33, 64)), ("17-500", (17, 128)), ("0-0", (1, 0)),
                      ("0-8", (1, 8)), ("64", (1, 1)), ("a-b", (1, 1))):
        monkeypatch.setenv("ATTNKIT_STREAM_MM", raw)
        assert fused.stream_rows() == want, raw
    assert fused.stream_cols() == 4096                          # "a-b": malformed, the default
    monkeypatch.setenv("ATTNKIT_STREAM_MM", "0-0")              # none: the kernels between stay 2
    assert fused.pdl_mode(1, between=True) == 2 and fused.stream_cols() > 1 << 40
    monkeypatch.setenv("ATTNKIT_STREAM_MM", "33-64")
    assert [fused.pdl_mode(r) for r in (0, 1, 16, 32, 33, 64, 65)] == [0, 2, 0, 0, 2, 2, 0]
    assert [fused.pdl_mode(r, between=True) for r in (1, 33, 65)] == [2, 3, 0]
    monkeypatch.setenv("ATTNKIT_STREAM_MM_N", "6144")
    assert fused.stream_cols() == 6144
    monkeypatch.setenv("ATTNKIT_FUSED_PDL", "0")
    assert fused.pdl_mode(64) == 0


def test_the_stream_k_split_sizes():
    """programs_for and _pieces: ranges a multiple of the column tiles where they fit the SMs
    (each tile cut into the same number of pieces), the SM count past that; _pieces is the most
    ranges any tile meets (1: no partials)."""
    assert stream_mm.programs_for(64, 132) == 128 and stream_mm.programs_for(96, 132) == 96
    assert stream_mm.programs_for(448, 132) == 132
    assert stream_mm._pieces(64 * 32, 128, 32) == 2 and stream_mm._pieces(96 * 32, 96, 32) == 1
    assert stream_mm._pieces(1024, 132, 32) == 5      # 7.76 units a range over 32-unit tiles
