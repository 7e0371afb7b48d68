"""The fused GPU kernels (layers/fused.py) compute their torch formulas: RMSNorm with and
without the residual add, RoPE (neox / interleaved, partial, strided input), SiLU * up.
Run here by the Triton interpreter (the layers use them on CUDA only)."""
import pytest
import torch
import torch.nn.functional as F

from attnkit.runner.layers import fused
from attnkit.runner.layers.norm import NormStyle, _rms_norm
from attnkit.runner.layers.rotary import RopeTable, rope_cos_sin

# The interpreter tests run where there is no GPU; the gpu-marked ones on the GPU only (a
# module-wide skip on CUDA machines skipped those too until 2026-12-02).
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="interpreter (CPU) tests")
STYLES = [NormStyle(1e-6), NormStyle(1e-6, offset=1.0, weight_in_fp32=True),
          NormStyle(1e-5, weight_in_fp32=True)]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float16: dict(rtol=1e-3, atol=1e-3)}


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


@cpu_only
@pytest.mark.parametrize("style", STYLES, ids=["llama", "gemma", "gpt_oss"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rms_norm_and_the_residual_add(style, dtype):
    x, r, w = rand(5, 48, dtype=dtype), rand(5, 48, dtype=dtype, seed=1), rand(48, dtype=dtype, seed=2)
    torch.testing.assert_close(fused.rms_norm(x, w, style), _rms_norm(x, w, style), **TOL[dtype])
    y, h = fused.rms_norm(x, w, style, residual=r)
    assert torch.equal(h, r + x)                                 # one rounding, as torch's add
    torch.testing.assert_close(y, _rms_norm(r + x, w, style), **TOL[dtype])
    with pytest.raises(AssertionError):                          # the residual matters
        torch.testing.assert_close(y, _rms_norm(x, w, style), **TOL[dtype])


@cpu_only
@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [16, 8], ids=["full", "partial"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_rope(interleaved, rotary_dim, dtype):
    positions = torch.tensor([0, 3, 17, 1000])
    table = RopeTable.build(*rope_cos_sin(positions, rotary_dim=rotary_dim, base=10000.0,
                                          factor=1.2), interleaved=interleaved)
    qkv = rand(4, 5 * 16, dtype=dtype)
    x = qkv[:, 16:64].view(4, 3, 16)                             # a strided view, as q/k are
    want = table.rotate(x)                                       # CPU: the torch formula
    got = fused.rope(x, table.cos, table.sin, interleaved=interleaved)
    torch.testing.assert_close(got, want, **TOL[dtype])
    other = fused.rope(x, table.cos, table.sin, interleaved=not interleaved)
    with pytest.raises(AssertionError):                          # the pair layout matters
        torch.testing.assert_close(other, want, **TOL[dtype])
    k = qkv[:, 64:80].view(4, 1, 16)                             # queries and keys, one launch
    got_q, got_k = fused.rope(x, table.cos, table.sin, interleaved=interleaved, other=k)
    assert torch.equal(got_q, got) and torch.equal(got_k, fused.rope(k, table.cos, table.sin,
                                                                     interleaved=interleaved))


@cpu_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("inter", [24, 1500])
def test_silu_mul(dtype, inter):
    gate_up = rand(3, 2 * inter, dtype=dtype) * 3
    gate, up = gate_up.split(inter, dim=-1)
    torch.testing.assert_close(fused.silu_mul(gate_up), F.silu(gate) * up, **TOL[dtype])


@cpu_only
def test_used_on_cuda_only(monkeypatch):
    assert not fused.enabled(torch.zeros(1))
    monkeypatch.setenv("ATTNKIT_FUSED", "0")
    assert not fused.enabled(torch.zeros(1))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kernels_on_cuda_match_the_torch_formulas(dtype, monkeypatch):
    """Compiled for the GPU: bf16 within one rounding of the torch formulas (which the layers
    run on CUDA with ATTNKIT_FUSED=0)."""
    tol = TOL[torch.float32] if dtype == torch.float32 else dict(rtol=1.6e-2, atol=1e-2)
    dev = dict(device="cuda", dtype=dtype)
    x, r, w = rand(7, 4096).to(**dev), rand(7, 4096, seed=1).to(**dev), rand(4096, seed=2).to(**dev)
    table = RopeTable.build(*rope_cos_sin(torch.arange(7, device="cuda") * 97, rotary_dim=128,
                                          base=500000.0))
    q = rand(7, 32 * 128 + 2 * 8 * 128).to(**dev)[:, :32 * 128].view(7, 32, 128)
    gate_up = rand(7, 2 * 14336).to(**dev)
    gate, up = gate_up.split(14336, dim=-1)
    got_rope, got_mlp = table.rotate(q), fused.silu_mul(gate_up)
    got_norm = [fused.rms_norm(x, w, style, residual=r) for style in STYLES]
    monkeypatch.setenv("ATTNKIT_FUSED", "0")
    torch.testing.assert_close(got_rope, table.rotate(q), **tol)
    torch.testing.assert_close(got_mlp, F.silu(gate) * up, **tol)
    for (y, h), style in zip(got_norm, STYLES):
        assert torch.equal(h, r + x)
        torch.testing.assert_close(y, _rms_norm(r + x, w, style), **tol)
    for logits in _argmax_cases("cuda") + [rand(64, 128256).cuda()]:
        assert torch.equal(fused.argmax_rows(logits), logits.argmax(-1))


def _argmax_cases(device="cpu"):
    """Rows that order logits every way torch.argmax does: random (one chunk and several,
    a vocabulary that is no power of two), ties within and across chunks, all -inf, +inf, NaN
    (the first NaN wins), a NaN in a later chunk than a larger number."""
    x = rand(9, 9000).to(device)
    x[1] = 0.0
    x[1, 8000], x[1, 100] = 1.0, 1.0                    # a tie across chunks: the lower column
    x[2] = float("-inf")
    x[3, 5], x[3, 7000] = float("inf"), float("inf")
    x[4, 6000], x[4, 5000] = float("nan"), float("nan")
    x[5, 3], x[5, 8999] = float("inf"), float("nan")
    x[6, 4095], x[6, 4096] = 50.0, 50.0                 # the two sides of a chunk edge
    return [x, rand(3, 7).to(device), rand(2, 4096).to(device), x[:, :8193]]


@cpu_only
def test_argmax_rows_is_torch_argmax():
    for x in _argmax_cases():
        assert torch.equal(fused.argmax_rows(x), x.argmax(-1))
    x = _argmax_cases()[0]
    assert not torch.equal(fused.argmax_rows(x), x.argmin(-1))       # the check can fail
    assert fused.argmax_rows(x[:0]).shape == (0,)
    assert torch.equal(fused.argmax_rows(x.t().contiguous().t()), x.argmax(-1))   # strided rows


@pytest.mark.gpu
def test_programmatic_dependent_launches_replay_as_plain_ones(monkeypatch):
    """ATTNKIT_FUSED_PDL=1 (each fused kernel a programmatic dependent of the GEMM before it,
    waiting for it before its first load) and ``early`` (each also letting the next launch
    once it has waited): a CUDA graph of GEMM -> norm -> GEMM -> silu * up -> GEMM -> argmax
    replays to the same bits as without, input after input."""
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch: sm_90+")
    dev = dict(device="cuda", dtype=torch.bfloat16)
    x = torch.empty(4, 1024, **dev)
    w1, w2, w3 = rand(1024, 1024).to(**dev) / 32, rand(2 * 2048, 1024).to(**dev) / 32, rand(32000, 2048).to(**dev) / 45
    nw = rand(1024, seed=3).to(**dev)

    def body():
        h = fused.rms_norm(x @ w1.t(), nw, STYLES[0])
        return fused.argmax_rows((fused.silu_mul(h @ w2.t()) @ w3.t()).float())

    outs = {}
    for flag in ("0", "1", "early"):
        monkeypatch.setenv("ATTNKIT_FUSED_PDL", flag)
        body()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = body()
        got = []
        for seed in range(4):
            x.copy_(rand(4, 1024, seed=10 + seed).to(**dev))
            graph.replay()
            got.append(out.clone())
        outs[flag] = torch.stack(got)
    assert torch.equal(outs["0"], outs["1"]) and torch.equal(outs["0"], outs["early"])
    assert len({tuple(r.tolist()) for r in outs["1"]}) > 1          # the inputs moved the tokens


@cpu_only
def test_greedy_sends_float32_rows_to_the_kernel_and_the_rest_to_torch(monkeypatch):
    """greedy's dispatch, with the CUDA check forced on (the interpreter runs the kernel):
    2-D float32 logits go to argmax_rows, other dtypes and shapes to torch.argmax; the kernel
    refuses what it cannot order exactly."""
    calls = []
    real = fused.argmax_rows
    monkeypatch.setattr(fused, "enabled", lambda x: True)
    monkeypatch.setattr(fused, "argmax_rows", lambda x: calls.append(x.dtype) or real(x))
    x = _argmax_cases()[0]
    assert torch.equal(fused.greedy(x), x.argmax(-1)) and calls == [torch.float32]
    for other in (x.double(), x.half(), x[0]):
        assert torch.equal(fused.greedy(other), other.argmax(-1))
    assert calls == [torch.float32]
    with pytest.raises(ValueError, match="float32"):
        real(x.double())
