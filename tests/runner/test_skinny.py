"""layers/skinny.py: the few-row products with the norm, silu * up, bias and residual add
folded in compute the torch formulas (norm.py, mlp.py, F.linear) with their roundings; the
blocks use them only where they apply, and a model's logits do not change when they do.
Run here by the Triton interpreter (the layers use them on CUDA only)."""
import pytest
import torch
import torch.nn.functional as F

from attnkit.runner.layers import fused, skinny
from attnkit.runner.layers.linear import Linear, row_by_row
from attnkit.runner.layers.norm import NormStyle, _rms_norm
from runner_helpers import close

cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter (CPU) tests")
STYLES = [NormStyle(1e-6), NormStyle(1e-6, offset=1.0, weight_in_fp32=True),
          NormStyle(1e-5, offset=1.0)]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}
# Both inner forms, an uneven K (192 over 128-column steps), one program's tile wider than N
CONFIGS = [skinny.Config(False, 8, 64, 4, 2), skinny.Config(True, 32, 64),
           skinny.Config(True, 64, 128)]


def rand(*shape, dtype=torch.float32, seed=0, scale=1.0):
    return (torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale).to(dtype)


def product(x, w, bias=None, residual=None):
    """The oracle: float64 products of the (already rounded) inputs, one rounding to the
    dtype, then torch's residual add."""
    y = x.double() @ w.double().t()
    if bias is not None:
        y = y + bias.double()
    y = y.to(x.dtype)
    return y if residual is None else residual + y


@cpu_only
@pytest.mark.parametrize("cfg", CONFIGS, ids=["fma", "dot32", "dot64"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m", [1, 3, 16])
def test_plain_bias_and_residual(cfg, dtype, m):
    x, w = rand(m, 192, dtype=dtype), rand(40, 192, dtype=dtype, seed=1, scale=0.1)
    b, r = rand(40, dtype=dtype, seed=2), rand(m, 40, dtype=dtype, seed=3)
    torch.testing.assert_close(skinny.mm(x, w, cfg=cfg), product(x, w), **TOL[dtype])
    got = skinny.mm(x, w, bias=b, residual=r, cfg=cfg)
    torch.testing.assert_close(got, product(x, w, b, r), **TOL[dtype])
    with pytest.raises(AssertionError):                              # the residual matters
        torch.testing.assert_close(got, product(x, w, b), **TOL[dtype])


@cpu_only
@pytest.mark.parametrize("style", STYLES, ids=["llama", "gemma", "offset_cast"])
@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=["fma", "dot32"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_norm_prologue(style, cfg, dtype):
    x, w = rand(3, 192, dtype=dtype, scale=4), rand(40, 192, dtype=dtype, seed=1, scale=0.1)
    nw = rand(192, dtype=dtype, seed=2)
    got = skinny.mm(x, w, norm=(nw, style), cfg=cfg)
    torch.testing.assert_close(got, product(_rms_norm(x, nw, style), w), **TOL[dtype])
    with pytest.raises(AssertionError):                              # the norm happened
        torch.testing.assert_close(got, product(x, w), **TOL[dtype])


@cpu_only
@pytest.mark.parametrize("cfg", CONFIGS, ids=["fma", "dot32", "dot64"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_silu_prologue_with_the_residual(cfg, dtype):
    gate_up, w = rand(2, 2 * 192, dtype=dtype, scale=3), rand(40, 192, dtype=dtype, seed=1, scale=0.1)
    r = rand(2, 40, dtype=dtype, seed=3)
    gate, up = gate_up.split(192, dim=-1)
    got = skinny.mm(gate_up, w, silu=True, residual=r, cfg=cfg)
    torch.testing.assert_close(got, product(F.silu(gate) * up, w, residual=r), **TOL[dtype])
    with pytest.raises(AssertionError):                              # gate and up not swapped
        torch.testing.assert_close(got, product(F.silu(up) * gate, w, residual=r), **TOL[dtype])


@cpu_only
def test_bad_operands_are_refused():
    x, w = rand(2, 64, dtype=torch.float16), rand(8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="one prologue"):
        skinny.mm(x, w, silu=True, norm=(w[0], STYLES[0]))
    with pytest.raises(ValueError, match=r"want \[M, 128\]"):
        skinny.mm(x, w, silu=True)
    with pytest.raises(ValueError, match="one dtype"):
        skinny.mm(x.float(), w)


@cpu_only
def test_usable_only_where_measured(monkeypatch):
    """Few rows of a 16-bit whole Linear on CUDA (forced here), not in row_by_row, not with
    ATTNKIT_SKINNY=0; the launch configuration by rows and outputs."""
    lin = Linear(rand(8, 64, dtype=torch.float16))
    x = rand(skinny.MAX_ROWS, 64, dtype=torch.float16)
    assert not skinny.usable(x, lin)                                 # CPU
    monkeypatch.setattr(fused, "enabled", lambda t: True)
    assert skinny.usable(x, lin) and skinny.usable(x[:1], lin)
    assert not skinny.usable(rand(skinny.MAX_ROWS + 1, 64, dtype=torch.float16), lin)
    assert not skinny.usable(x[:0], lin)
    assert not skinny.usable(x.float(), Linear(lin.weight.float()))
    assert not skinny.usable(x, Linear(rand(8, 64, dtype=torch.bfloat16)))
    assert not skinny.usable(x, object())                            # e.g. a RowParallel
    with row_by_row():
        assert not skinny.usable(x, lin)
    monkeypatch.setenv("ATTNKIT_SKINNY", "0")
    assert not skinny.usable(x, lin)
    assert skinny.config(1, 6144) == skinny.Config(False, 8, 512, 4, 2)
    assert skinny.config(1, 28672).dot and skinny.config(2, 6144).block_n == 64
    assert skinny.config(4, 4096) == skinny.Config(True, 32, 256)


SPLITS = [skinny.Config(True, 32, 64, split=2), skinny.Config(True, 64, 64, 4, 3, split=3),
          skinny.Config(False, 8, 64, 4, 2, split=4)]


@cpu_only
@pytest.mark.parametrize("cfg", SPLITS, ids=["dot32/2", "dot64/3", "fma/4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("m", [1, 5, 40])
def test_split_k_merges_to_the_product(cfg, dtype, m):
    """K cut across programs (320 columns in 64-column steps: 3 + 2, 2 + 2 + 1, 2 + 1 + 1 + 1),
    the last program of a column tile merging: the product with bias and residual, the same
    bits twice, the ticket counters back at zero."""
    x, w = rand(m, 320, dtype=dtype), rand(72, 320, dtype=dtype, seed=1, scale=0.1)
    b, r = rand(72, dtype=dtype, seed=2), rand(m, 72, dtype=dtype, seed=3)
    got = skinny.mm(x, w, bias=b, residual=r, cfg=cfg)
    torch.testing.assert_close(got, product(x, w, b, r), **TOL[dtype])
    assert torch.equal(skinny.mm(x, w, bias=b, residual=r, cfg=cfg), got)
    assert not skinny._COUNTERS[torch.device("cpu")].any()
    with pytest.raises(AssertionError):                              # every split counted
        torch.testing.assert_close(got, product(x[:, :256], w[:, :256], b, r), **TOL[dtype])


@cpu_only
def test_split_k_counts(monkeypatch):
    """Splits are whole BLOCK_K steps, none empty; no split where a graph is being captured
    and the counters do not exist yet (they could not be zeroed before the replay)."""
    cpu = torch.device("cpu")
    assert skinny._split(320, skinny.Config(True, 64, 64, split=3), 2, cpu) == (3, 128)
    assert skinny._split(128, skinny.Config(True, 64, 64, split=8), 2, cpu) == (2, 64)
    assert skinny._split(4096, skinny.Config(True, 64, 128), 64, cpu) == (1, 4096)
    assert skinny._split(4096, skinny.Config(True, 64, 128, split=2), 1 << 20, cpu) == (1, 4096)
    gpu = torch.device("cuda", 7)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert skinny._split(4096, skinny.Config(True, 64, 128, split=2), 64, gpu) == (1, 4096)
    assert gpu not in skinny._COUNTERS


def test_row_limit_switch(monkeypatch):
    """ATTNKIT_SKINNY_ROWS moves the row limit (1-128); anything else leaves MAX_ROWS."""
    assert skinny.max_rows() == skinny.MAX_ROWS
    for raw, want in (("64", 64), ("500", 128), ("0", 1), ("x", skinny.MAX_ROWS)):
        monkeypatch.setenv("ATTNKIT_SKINNY_ROWS", raw)
        assert skinny.max_rows() == want, raw
    assert skinny.config(64, 4096).split == 2 and skinny.config(64, 6144).split == 1
    assert skinny.config(64, 28672) == skinny.Config(True, 128, 128, 8, 3)
    assert skinny.config(32, 28672) == skinny.Config(True, 64, 128)


@cpu_only
@pytest.mark.parametrize("fold", ["", "norm", "silu", "norm,silu"])
@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])   # plain, biases, q/k norms
def test_folded_blocks_give_the_same_logits(tiny_model, family, fold, monkeypatch):
    """An fp16 engine with the CUDA-only kernels forced on (the interpreter runs them): decode
    steps of <= 16 tokens run every block and the LM head through skinny.mm, the residual adds
    in its epilogue and the prologues ATTNKIT_SKINNY_FOLD names in it, and their logits equal
    those with ATTNKIT_SKINNY=0 (the separate norm / silu / add kernels and F.linear)."""
    from attnkit.runner import Engine

    if fold:
        monkeypatch.setenv("ATTNKIT_SKINNY_FOLD", fold)
    path, _ = tiny_model(family)
    prompts = [[1, 5, 9, 3, 7], [4, 6], [3, 3, 9]]
    monkeypatch.setattr(fused, "enabled", lambda t: True)
    calls = []
    real = skinny.mm
    monkeypatch.setattr(skinny, "mm", lambda *a, **k: calls.append(
        sorted(key for key, v in k.items() if key != "bias" and v is not None and v is not False))
        or real(*a, **k))
    out = {}
    for flag in ("0", "1"):
        monkeypatch.setenv("ATTNKIT_SKINNY", flag)
        engine = Engine.from_pretrained(path, page_size=4, dtype=torch.float16)
        engine.prefill(prompts)
        out[flag] = [engine.decode([2, 8, 11]), engine.decode([5, 5, 5])]
        engine.release()
        if flag == "0":
            assert calls == []
    norm, silu = ["norm"] if "norm" in fold else [], ["silu"] if "silu" in fold else []
    block = [norm, ["residual"], norm, ["residual"] + silu]
    step = block * 2 + [norm]                           # 2 layers, then the final norm + head
    assert calls == step * 3                            # the prefill (10 tokens), 2 decodes
    for a, b in zip(out["0"], out["1"]):
        for ra, rb in zip(a, b):
            close(rb, ra, rtol=5e-3)


def _cuda_chain(dev, seed=0):
    """A layer's products at the Llama-3-8B shape, small K / N where they do not matter."""
    return dict(nw=rand(4096, seed=seed + 1).to(**dev),
                qkv=rand(6144, 4096, seed=seed + 2, scale=0.02).to(**dev),
                o=rand(4096, 4096, seed=seed + 3, scale=0.02).to(**dev),
                gate_up=rand(2 * 14336, 4096, seed=seed + 4, scale=0.02).to(**dev),
                down=rand(4096, 14336, seed=seed + 5, scale=0.01).to(**dev))


def _rel(got, want):
    return ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 5, 16, 33, 64])
def test_compiled_on_cuda_against_float64(m):
    """bf16 on the GPU, each product form at its measured configuration (config): within
    about one bf16 rounding of the float64 product of the same rounded inputs."""
    c = _cuda_chain(dict(device="cuda", dtype=torch.bfloat16))
    h, style = rand(m, 4096, seed=6, scale=3).to("cuda", torch.bfloat16), STYLES[0]
    bias = rand(6144, seed=9).to("cuda", torch.bfloat16)
    got = skinny.mm(h, c["qkv"], bias=bias, norm=(c["nw"], style))
    assert _rel(got, product(_rms_norm(h, c["nw"], style), c["qkv"], bias)) < 8e-3
    r = rand(m, 4096, seed=7).to("cuda", torch.bfloat16)
    x = rand(m, 4096, seed=8).to("cuda", torch.bfloat16)
    assert _rel(skinny.mm(x, c["o"], residual=r), product(x, c["o"], residual=r)) < 8e-3
    gu = skinny.mm(h, c["gate_up"], norm=(c["nw"], style))
    assert _rel(gu, product(_rms_norm(h, c["nw"], style), c["gate_up"])) < 8e-3
    gate, up = gu.split(14336, dim=-1)
    got = skinny.mm(gu, c["down"], silu=True, residual=r)
    assert _rel(got, product(F.silu(gate) * up, c["down"], residual=r)) < 8e-3


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 17, 64, 128])
@pytest.mark.parametrize("cfg", [skinny.Config(True, 64, 128, 4, 4, split=2),
                                 skinny.Config(True, 128, 64, 4, 5, split=4),
                                 skinny.Config(False, 16, 256, 4, 2, split=4)],
                         ids=["dot64/2", "dot128/4", "fma/4"])
def test_split_k_on_cuda_replays_to_the_same_bits(cfg, m):
    """bf16 split-K products of the Llama shapes on the GPU: within about one bf16 rounding of
    the float64 product, and a CUDA graph of three of them (o + residual, down + residual,
    qkv) replays to the eager bits, input after input, the counters left at zero."""
    if not cfg.dot and m > 1:
        pytest.skip("the CUDA-core form serves one row")
    c = _cuda_chain(dict(device="cuda", dtype=torch.bfloat16))
    x = rand(m, 4096, seed=8).to("cuda", torch.bfloat16)
    r = rand(m, 4096, seed=7).to("cuda", torch.bfloat16)
    xd = rand(m, 14336, seed=9).to("cuda", torch.bfloat16)

    def body():
        return (skinny.mm(x, c["o"], residual=r, cfg=cfg),
                skinny.mm(xd, c["down"], residual=r, cfg=cfg), skinny.mm(x, c["qkv"], cfg=cfg))

    eager = body()
    assert _rel(eager[0], product(x, c["o"], residual=r)) < 8e-3
    assert _rel(eager[1], product(xd, c["down"], residual=r)) < 8e-3
    assert _rel(eager[2], product(x, c["qkv"])) < 8e-3
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = body()
    for seed in range(3):
        x.copy_(rand(m, 4096, seed=30 + seed).to("cuda", torch.bfloat16))
        want = body()
        graph.replay()
        for got, w in zip(outs, want):
            assert torch.equal(got, w), seed
    torch.cuda.synchronize()
    assert not skinny._COUNTERS[x.device].any()


@pytest.mark.gpu
@pytest.mark.parametrize("fold,rows", [("norm", 4), ("none", 4), ("none", 1)])
def test_programmatic_dependent_launches_replay_to_the_same_bits(fold, rows, monkeypatch):
    """ATTNKIT_FUSED_PDL=1, ``early`` (with 1 and 4 tiles of W prefetched) and ``ahead`` (at
    one row: the kernels between products let the next launch before they wait): the chain
    qkv -> o+residual -> gate_up -> down+residual, the norms and silu * up folded in or as
    fused.py's kernels, each a programmatic dependent of the one before, replays in a CUDA
    graph to the bits it gives without, input after input; at one row also with the
    products on stream_mm.py (where it runs: sm_90, Triton 3.6), against its own bits."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch: sm_90+")
    c = _cuda_chain(dict(device="cuda", dtype=torch.bfloat16))
    h = torch.empty(rows, 4096, device="cuda", dtype=torch.bfloat16)
    norm = (c["nw"], STYLES[0])

    def body():
        if fold == "norm":
            a = skinny.mm(h, c["qkv"], norm=norm)[:, :4096]
            h2 = skinny.mm(a, c["o"], residual=h)
            gu = skinny.mm(h2, c["gate_up"], norm=norm)
            return skinny.mm(gu, c["down"], silu=True, residual=h2)
        a = skinny.mm(fused.rms_norm(h, *norm), c["qkv"])[:, :4096]
        h2 = skinny.mm(a, c["o"], residual=h)
        gu = skinny.mm(fused.rms_norm(h2, *norm), c["gate_up"])
        return skinny.mm(fused.silu_mul(gu), c["down"], residual=h2)

    streams = ["0-0"] + (["1-1"] if rows == 1 and skinny._stream(h, c["o"]) else [])
    outs = {}
    for stream in streams:
        for flag, tiles in (("0", "1"), ("1", "1"), ("early", "1"), ("early", "4"), ("ahead", "1"),
                            ("auto", "1")):
            monkeypatch.setenv("ATTNKIT_STREAM_MM", stream)
            monkeypatch.setenv("ATTNKIT_FUSED_PDL", flag)
            monkeypatch.setenv("ATTNKIT_SKINNY_PREFETCH", tiles)
            body()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = body()
            got = []
            for seed in range(4):
                h.copy_(rand(rows, 4096, seed=20 + seed).to("cuda", torch.bfloat16))
                graph.replay()
                got.append(out.clone())
            outs[stream, flag, tiles] = torch.stack(got)
    for (stream, flag, tiles), got in outs.items():
        assert torch.equal(got, outs[stream, "0", "1"]), (stream, flag, tiles)
    assert not torch.equal(outs["0-0", "1", "1"][0], outs["0-0", "1", "1"][1])      # the inputs moved it


def test_pdl_modes_and_prefetch_depth(monkeypatch):
    """The switches' values: by default early at one row and off at more; unknown ones mean
    off / one tile; the depth never passes K; never on the CPU."""
    assert fused.pdl_mode(1) == 2 and fused.pdl_mode(2) == 0 and fused.pdl_mode(0) == 0
    for flag, want in (("0", 0), ("1", 1), ("early", 2), ("yes", 0), ("auto", 2)):
        monkeypatch.setenv("ATTNKIT_FUSED_PDL", flag)
        assert fused.pdl_mode(1) == want, flag
        assert fused._pdl(torch.zeros(1, 8)) == {"PDL": 0}              # CPU: never
    monkeypatch.setenv("ATTNKIT_FUSED_PDL", "1")
    assert fused.pdl_mode(64) == 1
    monkeypatch.setenv("ATTNKIT_FUSED_PDL", "ahead")      # the kernels between products: 3
    assert [fused.pdl_mode(r) for r in (1, 2)] == [2, 0]
    assert [fused.pdl_mode(r, between=True) for r in (0, 1, 2)] == [0, 3, 0]
    monkeypatch.setenv("ATTNKIT_FUSED_PDL", "auto")      # 3 at stream_mm's rows (one by default)
    monkeypatch.setenv("ATTNKIT_STREAM_MM", "0-0")
    assert fused.pdl_mode(1, between=True) == 2
    monkeypatch.delenv("ATTNKIT_STREAM_MM")
    assert fused.pdl_mode(1, between=True) == 3
    monkeypatch.setenv("ATTNKIT_SKINNY_PREFETCH", "4")
    assert skinny._prefetch(4096, 512) == 4 and skinny._prefetch(1024, 512) == 2
    assert skinny._prefetch(256, 512) == 1
    monkeypatch.setenv("ATTNKIT_SKINNY_PREFETCH", "3")
    assert skinny._prefetch(4096, 512) == 1
