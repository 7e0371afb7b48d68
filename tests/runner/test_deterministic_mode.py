"""The runner with ``require=("batch_invariant", "deterministic")``: a request's greedy tokens
and log-probabilities are bit for bit the same alone, inside a batch of 64 other requests of
other lengths (arriving while it decodes, so its steps are EXTEND, DECODE and MIXED ones), and
in a second run. CPU here (tiny Llama, torch_native planned); the GPU case is marked gpu.

Covered: attention (the planned backends declare both properties), the GEMMs (run one row at
a time in this mode: layers/linear.row_by_row; without it this test fails, 1e-6 apart), the
norms and the greedy pick. Not covered: MoE expert matmuls (layers/moe.py), tensor-parallel
reductions, and sampling with temperature (its random draws are seeded, not batch-invariant).
"""
from __future__ import annotations

import pytest
import torch

from attnkit.runner.engine.engine import Engine

REQUIRE = ("batch_invariant", "deterministic")
TARGET = [1, 17, 5, 99, 23, 8, 41]
STEPS = 6


def _others(n: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(3)
    return [torch.randint(1, 120, (int(torch.randint(1, 40, (1,), generator=gen)),),
                          generator=gen).tolist() for _ in range(n)]


def greedy(engine: Engine, *, others: list[list[int]]) -> tuple[list[int], list[torch.Tensor]]:
    """The target's greedy tokens and log-probability rows over STEPS steps. ``others`` join
    in waves (a third before the target's prefill, a third at its first decode, the rest at
    its third), each decoding every step after its prefill."""
    waves = [others[i::3] for i in range(3)]
    live: dict = {}
    tokens, logprobs = [], []
    batch = {"t": TARGET} | {("o", 0, i): p for i, p in enumerate(waves[0])}
    for step in range(STEPS):
        if step in (1, 3):
            w = 1 if step == 1 else 2
            batch |= {("o", w, i): p for i, p in enumerate(waves[w])}
        out = engine.step(batch, logits="last")
        row = torch.log_softmax(out["t"][-1].float(), dim=-1)
        nxt = int(row.argmax())
        tokens.append(nxt)
        logprobs.append(row)
        live = {k: [int(v[-1].argmax())] for k, v in out.items()}
        batch = live
    engine.release()
    return tokens, logprobs


def _engine(path, device="cpu", dtype=torch.float32):
    return Engine.from_pretrained(path, device=device, dtype=dtype, require=REQUIRE, max_tokens=8192,
                                  cuda_graph=False)


def _check(engine):
    alone = greedy(engine, others=[])
    crowd = greedy(engine, others=_others(64))
    again = greedy(engine, others=_others(64))
    assert alone[0] == crowd[0] == again[0], (alone[0], crowd[0], again[0])
    for i, (a, b, c) in enumerate(zip(alone[1], crowd[1], again[1])):
        assert torch.equal(a, b), f"step {i}: log-probs alone != in a batch of 64 (max |diff| " \
                                  f"{(a - b).abs().max().item():.3g})"
        assert torch.equal(b, c), f"step {i}: log-probs differ between two runs"


def test_planned_backends_declare_the_requirement(tiny_model):
    path, _ = tiny_model("llama")
    engine = _engine(path)
    from attnkit.registry import declarations

    assert engine.plan.run.numerics == REQUIRE
    for role in engine.plan.run.roles:   # the backend declares both, or its tables list only variants that do
        decl = declarations()[role.backend]
        if not set(REQUIRE) <= decl.capabilities.features:
            assert role.kernels is not None and role.kernels.variants()
            assert all(set(REQUIRE) <= next(k for k in decl.variants if k.name == v).numerics
                       for v in role.kernels.variants())


def test_alone_in_a_batch_of_64_and_again_bitwise(tiny_model):
    path, _ = tiny_model("llama")
    _check(_engine(path))


@pytest.mark.gpu
def test_alone_in_a_batch_of_64_and_again_bitwise_gpu(tiny_model):
    path, _ = tiny_model("llama")
    _check(_engine(path, device="cuda", dtype=torch.bfloat16))
