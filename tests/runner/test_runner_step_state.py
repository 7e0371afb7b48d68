"""Per-step state of the runner's forward: built once per step, shared by every layer, equal
(bit for bit) to computing it per layer, and never reused by another step.

- RoPE: ``Rotary.table`` once per step; ``RopeTable.rotate`` equals the pairwise formula.
- Dual chunk: ``DualChunkRotary.tables`` and the length scales once per step.
- the per-step object (``StepContext``) of another step is refused (AK488); a rotary table of
  another token count is refused (AK411) instead of broadcasting.
- ``Linear`` (mm with the transpose taken once) and ``rms_norm`` (no ``0 + w``) equal the
  plain formulas bit for bit.
"""
import dataclasses

import pytest
import torch
import torch.nn.functional as F

from attnkit.backends.batch import Request, build_batch
from attnkit.errors import AttnkitError
from attnkit.runner import Engine
from attnkit.runner.layers import context as context_mod
from attnkit.runner.layers.linear import Linear
from attnkit.runner.layers.norm import NormStyle, rms_norm
from attnkit.runner.layers.rotary import DualChunkRotary, RopeTable, Rotary, rope_cos_sin

PROMPTS = [[1, 5, 9, 3, 7, 8, 20], [4, 6, 8]]


def pairwise(x, cos, sin, *, interleaved, scale=None):
    """RoPE as pairs: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin); rest passes through."""
    rd = 2 * cos.shape[-1]
    xf = x.float()
    c, s = cos[:, None], sin[:, None]
    if interleaved:
        x1, x2 = xf[..., 0:rd:2], xf[..., 1:rd:2]
        turned = torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).flatten(-2)
    else:
        x1, x2 = xf[..., :rd // 2], xf[..., rd // 2:rd]
        turned = torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)
    out = torch.cat([turned, xf[..., rd:]], dim=-1)
    if scale is not None:
        out = out * scale.view(-1, 1, 1)
    return out.to(x.dtype)


@pytest.mark.parametrize("interleaved", [False, True], ids=["neox", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [16, 8], ids=["full", "partial"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_table_equals_pairwise_rotation_bit_for_bit(interleaved, rotary_dim, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 3, 16, generator=g).to(dtype)
    positions = torch.tensor([0, 3, 17, 1000, 123456])
    cos, sin = rope_cos_sin(positions, rotary_dim=rotary_dim, base=10000.0, factor=1.3)
    table = RopeTable.build(cos, sin, interleaved=interleaved)
    assert torch.equal(table.rotate(x), pairwise(x, cos, sin, interleaved=interleaved))
    scale = torch.rand(5, generator=g) + 1
    assert torch.equal(table.rotate(x, scale=scale),
                       pairwise(x, cos, sin, interleaved=interleaved, scale=scale))


def test_rope_table_of_another_token_count_is_refused():
    cos, sin = rope_cos_sin(torch.tensor([7]), rotary_dim=16, base=10000.0)
    with pytest.raises(AttnkitError) as err:      # would broadcast one position to all tokens
        RopeTable.build(cos, sin).rotate(torch.randn(4, 2, 16))
    assert err.value.code == "AK411"


def count_calls(monkeypatch, owner, name):
    calls = []
    original = getattr(owner, name)

    def spy(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return calls


@pytest.mark.parametrize("backend", ["torch_native", "sdpa"])
def test_rotary_table_built_once_per_step(tiny_model, monkeypatch, backend):
    path, _ = tiny_model("llama")
    engine = Engine.from_pretrained(path, backend=backend, page_size=4)
    assert len(engine.model.blocks) > 1
    calls = count_calls(monkeypatch, Rotary, "table")
    engine.prefill(PROMPTS)
    engine.decode([2, 3])
    engine.decode([4, 5])
    assert len(calls) == 3                          # one per step, not one per layer


def test_dual_chunk_tables_and_scales_built_once_per_step(tiny_model, monkeypatch):
    path, _ = tiny_model("qwen2_dca")
    engine = Engine.from_pretrained(path, backend="dual_chunk", page_size=4)
    dcas = {id(b.attention.dca) for b in engine.model.blocks}
    assert len(engine.model.blocks) > 1 and len(dcas) == 1       # one rotary for one config
    tables = count_calls(monkeypatch, DualChunkRotary, "tables")
    scales = count_calls(monkeypatch, context_mod, "step_length_scales")
    engine.prefill(PROMPTS)
    engine.decode([2, 3])
    assert len(tables) == len(scales) == 2


@pytest.mark.parametrize("family,backend", [("llama", "sdpa"), ("qwen2_dca", "dual_chunk"),
                                            ("deepseek_v2", "torch_native")])
def test_shared_context_equals_a_fresh_one_per_layer(tiny_model, family, backend):
    """Every layer reading the step's one context gives the same bits as each layer
    computing its own (the K/V written twice are the same values in the same slots)."""
    path, _ = tiny_model(family)
    engine = Engine.from_pretrained(path, backend=backend, page_size=4)
    engine.prefill(PROMPTS)
    model, ids = engine.model, engine.ids
    reqs = [Request(len(engine.tokens(i)), 1,
                    engine.allocator.grow_to(engine.sequence(i), len(engine.tokens(i)) + 1))
            for i in ids]
    meta = build_batch(reqs, page_size=engine.page_size)
    step = engine.backend.prepare(meta, engine.cache)
    x = torch.randn(len(ids), model.arch.hidden_size, generator=torch.Generator().manual_seed(1))
    shared = model.context(engine.backend, engine.cache, step)
    for block in model.blocks:
        fresh = model.context(engine.backend, engine.cache, step)
        a = block.attention(x, shared)
        b = block.attention(x, fresh)
        assert torch.equal(a, b)
    assert len(shared.dca) == (1 if family == "qwen2_dca" else 0)


def test_context_of_another_step_is_refused(tiny_model):
    """The per-step object holds its step; the model refuses it for another step's tokens."""
    path, _ = tiny_model("llama")
    engine = Engine.from_pretrained(path, backend="sdpa", page_size=4)
    engine.prefill([PROMPTS[0]])
    (seq,) = engine.ids
    n = len(engine.tokens(seq))
    row = engine.allocator.grow_to(engine.sequence(seq), n + 1)
    one = build_batch([Request(n, 1, row)], page_size=4)
    ctx = engine.model.context(engine.backend, engine.cache, engine.backend.prepare(one, engine.cache))
    engine.model.forward(torch.tensor([3]), ctx)
    with pytest.raises(AttnkitError) as err:
        engine.model.forward(torch.tensor([3, 4]), ctx)      # two tokens: another step's
    assert err.value.code == "AK488"


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(3, 8), (2, 3, 8)], ids=["2d", "3d"])
def test_linear_equals_f_linear_bit_for_bit(bias, shape):
    g = torch.Generator().manual_seed(2)
    w, b = torch.randn(5, 8, generator=g), torch.randn(5, generator=g) if bias else None
    x = torch.randn(*shape, generator=g)
    lin = Linear(w, b)
    assert torch.equal(lin(x), F.linear(x, w, b))
    with pytest.raises(dataclasses.FrozenInstanceError):     # weight_t could go stale
        lin.weight = w * 2


@pytest.mark.parametrize("style", [NormStyle(1e-6), NormStyle(1e-6, offset=1.0),
                                   NormStyle(1e-6, weight_in_fp32=True),
                                   NormStyle(1e-6, offset=1.0, weight_in_fp32=True)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_equals_formula_bit_for_bit(style, dtype):
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(4, 16, generator=g).to(dtype), torch.randn(16, generator=g).to(dtype)
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + style.eps)
    if style.weight_in_fp32:
        want = (xf * (style.offset + w.float())).to(dtype)
    else:
        want = (style.offset + w) * xf.to(dtype)
    assert torch.equal(rms_norm(x, w, style), want)
