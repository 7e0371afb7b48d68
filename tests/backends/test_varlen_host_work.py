"""The varlen call's per-layer host work (backends/varlen.py, triton/varlen_path.py): a layer's
call makes no device-to-host copy (a DiT step runs it 40-60 times on one batch; each copy is
a device sync that starves a 0.4 ms kernel) and recomputes nothing the batch already holds.

Counted with mocks on the CPU (each device-to-host path torch offers: ``tolist``, ``item``,
``cpu``, ``nonzero``, ``__bool__``, ``__int__``); on the GPU, torch's sync debug mode raises on
any synchronising call instead.
"""
from __future__ import annotations

import contextlib

import pytest
import torch

from attnkit import reference
from attnkit.backends.base import RuntimeLayer
from attnkit.backends.sdpa.backend import SdpaBackend
from attnkit.backends.torch_native.backend import TorchNativeBackend
from attnkit.backends.varlen import varlen_batch
from attnkit.model.spec import LayerAttention
from factories import assert_close

SYNCING = ("tolist", "item", "cpu", "nonzero", "__bool__", "__int__")


@contextlib.contextmanager
def counted_syncs():
    """Counts the calls of every Tensor method (and torch function) that copies to the host."""
    calls: list[str] = []
    saved = {name: getattr(torch.Tensor, name) for name in SYNCING}
    saved_fn = torch.nonzero

    def wrap(name, real):
        def counted(self, *a, **k):
            calls.append(name)
            return real(self, *a, **k)
        return counted

    for name, real in saved.items():
        setattr(torch.Tensor, name, wrap(name, real))
    torch.nonzero = wrap("torch.nonzero", saved_fn)
    try:
        yield calls
    finally:
        for name, real in saved.items():
            setattr(torch.Tensor, name, real)
        torch.nonzero = saved_fn


def _inputs(*, masked: bool, lens=(7, 12, 5)):
    layer = RuntimeLayer(LayerAttention(layer_id=0, num_heads=4, num_kv_heads=2, head_dim=32, role="encoder"))
    gen = torch.Generator().manual_seed(3)
    n = sum(lens)
    q, k, v = (torch.randn(n, h, 32, generator=gen) for h in (4, 2, 2))
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32)
    mask = None
    if masked:
        mask = torch.ones(n, dtype=torch.bool)
        mask[[2, 9, 10, n - 1]] = False
    return q, k, v, layer, varlen_batch(cu, key_padding_mask=mask)


@pytest.mark.parametrize("masked", [False, True], ids=["no-mask", "key-mask"])
@pytest.mark.parametrize("make", [TorchNativeBackend, SdpaBackend], ids=["torch_native", "sdpa"])
def test_a_layer_call_copies_nothing_to_the_host(make, masked):
    """Before: each call of a masked batch ran torch.nonzero per sequence (a sync each)."""
    q, k, v, layer, batch = _inputs(masked=masked)
    be = make()
    with counted_syncs() as calls:
        outs = [be.varlen(q, k, v, layer, batch) for _ in range(3)]      # three layers, one batch
    assert calls == [], f"{be.name}: device-to-host copies per call: {calls}"
    ref = reference.varlen_attention(q, k, v, layer, batch)
    for out in outs:
        assert_close(out, ref, dtype="fp32", what=f"{be.name} varlen")


def test_the_batch_holds_the_attending_keys_once():
    q, k, v, layer, batch = _inputs(masked=True)
    assert [i.tolist() for i in batch.visible] == [[0, 1, 3, 4, 5, 6], [7, 8, 11, 12, 13, 14, 15, 16, 17, 18],
                                                   [19, 20, 21, 22]]
    assert batch.spans == ((0, 7), (7, 19), (19, 24)) and batch.point == (3, 8, 8)


def test_the_triton_call_checks_the_gluon_kernel_once_and_zeroes_only_past_the_sequences(monkeypatch):
    """The Gluon forms (pretended ready: they cannot run on the CPU) take one check per call,
    not one per sequence (Qwen2.5-VL's windows are hundreds), no host copy, and the output
    buffer is not zeroed over the sequences' rows, which the kernel writes (before: a memset of
    the whole output per call, 28 MB at FLUX.1's shape)."""
    from attnkit.backends.triton import tma_path
    from attnkit.backends.triton.backend import TritonBackend

    checks, launches = [], []
    monkeypatch.setattr(tma_path, "gluon_prefill_ready", lambda *a, **kw: checks.append(1) or True)
    monkeypatch.setattr(tma_path, "prefill_gluon_attention",
                        lambda q, k, v, out, **kw: launches.append(q.shape[0]) or out.fill_(7.0))
    layer = RuntimeLayer(LayerAttention(layer_id=0, num_heads=4, num_kv_heads=4, head_dim=64, role="encoder"))
    q = torch.zeros(30, 4, 64, dtype=torch.float16)          # 2 rows past the last sequence
    batch = varlen_batch(torch.tensor([0, 10, 10, 28], dtype=torch.int32))
    real_zero = torch.Tensor.zero_
    zeroed: list[int] = []
    monkeypatch.setattr(torch.Tensor, "zero_", lambda self: zeroed.append(self.numel()) or real_zero(self))
    with counted_syncs() as calls:
        out = TritonBackend(varlen_kernel="gluon").varlen(q, q, q, layer, batch)
    assert calls == [] and checks == [1] and launches == [10, 18]
    assert zeroed == [2 * 4 * 64], zeroed
    assert (out[:28] == 7.0).all() and (out[28:] == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["tile", "gluon", "persistent", "split"])
def test_the_triton_varlen_call_never_syncs_on_the_gpu(kernel):
    """torch's sync debug mode ("error") raises on any synchronising call inside the call."""
    from attnkit.backends.triton.backend import TritonBackend

    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    layer = RuntimeLayer(LayerAttention(layer_id=0, num_heads=8, num_kv_heads=8, head_dim=128, role="encoder"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(700, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    batch = varlen_batch(torch.tensor([0, 300, 700], dtype=torch.int32, device="cuda"))
    be = TritonBackend(varlen_kernel=kernel)
    be.varlen(q, k, v, layer, batch)          # compiles
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = be.varlen(q, k, v, layer, batch)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert_close(out, reference.varlen_attention(q, k, v, layer, batch), dtype="bf16", what=f"varlen {kernel}")


def test_sdpa_runs_one_dit_sequence_on_the_tensors_as_given(monkeypatch):
    """B = 1 (a DiT step): one SDPA call on views of q / k / v and its output returned as is
    (before: torch.stack copied q, k and v, and the output was copied into a zeroed buffer:
    the profile's sdpa row paid for both)."""
    from attnkit.backends.sdpa import backend as sdpa_backend

    q, k, v, layer, _ = _inputs(masked=False, lens=(24,))
    batch = varlen_batch(torch.tensor([0, 24], dtype=torch.int32))
    seen, real = [], sdpa_backend.sdpa
    monkeypatch.setattr(sdpa_backend, "sdpa", lambda *a, **kw: seen.append(a) or real(*a, **kw))
    out = SdpaBackend().varlen(q, k, v, layer, batch)
    (qi, ki, vi), = seen
    assert qi.data_ptr() == q.data_ptr() and ki.data_ptr() == k.data_ptr() and vi.data_ptr() == v.data_ptr()
    assert_close(out, reference.varlen_attention(q, k, v, layer, batch), dtype="fp32", what="sdpa B=1")
