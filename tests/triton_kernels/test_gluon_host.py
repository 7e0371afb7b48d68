"""The Gluon launches' per-shape host work, built once (gluon_host.py): TMA descriptors from
validated templates, the device's facts asked once, and the varlen call's launch decision made
once per signature (triton/varlen_path.py). On the CPU descriptors are plain objects and the
Gluon check and launch are stand-ins that record what they are asked; the GPU test at the end
runs the kernels."""
from __future__ import annotations

import types

import pytest
import torch

from attnkit.backends.base import RuntimeLayer
from attnkit.backends.triton import gluon_host, varlen_path
from attnkit.backends.varlen import varlen_batch
from attnkit.model.spec import LayerAttention

gluon = pytest.importorskip("triton.experimental.gluon.nvidia.hopper")


def _fields(d) -> tuple:
    return (d.base.data_ptr(), list(d.shape), list(d.strides), list(d.block_shape), d.layout,
            getattr(d, "padding", None))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_descriptor_from_its_template_is_the_one_triton_builds(dtype):
    """Same fields as a freshly built and validated descriptor, pointing at the new tensor;
    the template keeps no tensor alive."""
    gluon_host._TEMPLATES.clear()
    first = torch.zeros(300, 4, 64, dtype=dtype)
    gluon_host.descriptor(first, 128)
    (template,) = gluon_host._TEMPLATES.values()
    assert template.base is None
    second = torch.ones(300, 4, 64, dtype=dtype)
    made = gluon_host.descriptor(second, 128)
    assert made.base is second
    assert _fields(made) == _fields(gluon_host._build(second, (300, 256), 256, (128, 64)))


def test_templates_are_per_shape_and_a_misaligned_base_is_built_and_refused_by_triton(monkeypatch):
    gluon_host._TEMPLATES.clear()
    builds = []
    real = gluon_host._build
    monkeypatch.setattr(gluon_host, "_build", lambda x, shape, stride, block: builds.append(
        (tuple(x.shape), block[0])) or real(x, shape, stride, block))
    a, b = torch.zeros(300, 4, 64, dtype=torch.float16), torch.zeros(200, 4, 64, dtype=torch.float16)
    for _ in range(3):
        gluon_host.descriptor(a, 128)
        gluon_host.descriptor(a, 64)
        gluon_host.descriptor(b, 128)
    assert builds == [((300, 4, 64), 128), ((300, 4, 64), 64), ((200, 4, 64), 128)]
    odd = torch.zeros(300 * 4 * 64 + 1, dtype=torch.float16)[1:].view(300, 4, 64)    # base 2 bytes off
    with pytest.raises(AssertionError):          # Triton's own check: never a template's copy
        gluon_host.descriptor(odd, 128)


def test_a_matrix_descriptor_reads_the_matrix_in_its_blocks():
    """stream_mm's W and x: [R, C] in [rows, cols] blocks, the row stride the tensor's own (a
    view of a wider tensor keeps it); a [T, H, D] descriptor of another 2-D view is its own
    template."""
    gluon_host._TEMPLATES.clear()
    wide = torch.zeros(40, 512, dtype=torch.bfloat16)
    d = gluon_host.matrix_descriptor(wide[:, :256], 64, 128)
    assert (list(d.shape), list(d.strides), list(d.block_shape)) == ([40, 256], [512, 1], [64, 128])
    again = gluon_host.matrix_descriptor(wide[:, 256:], 64, 128)
    assert again.base.data_ptr() == wide[:, 256:].data_ptr() and len(gluon_host._TEMPLATES) == 1
    gluon_host.descriptor(torch.zeros(40, 4, 64, dtype=torch.bfloat16), 64)
    assert len(gluon_host._TEMPLATES) == 2


def test_the_templates_are_bounded(monkeypatch):
    """A vision tower's windows of many lengths: one template each, the oldest dropped past
    MAX_TEMPLATES (no unbounded growth in a long-running server)."""
    gluon_host._TEMPLATES.clear()
    monkeypatch.setattr(gluon_host, "MAX_TEMPLATES", 3)
    for rows in range(1, 6):
        gluon_host.descriptor(torch.zeros(rows * 8, 2, 64, dtype=torch.float16), 64)
    assert [k[1] for k in gluon_host._TEMPLATES] == [(24, 128), (32, 128), (40, 128)]


def test_device_facts_ask_the_driver_once(monkeypatch):
    asked = []
    props = types.SimpleNamespace(major=9, minor=0, multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: asked.append(i) or props)
    gluon_host._facts.cache_clear()
    try:
        for _ in range(3):
            assert gluon_host.device_facts(torch.device("cuda", 0)) == ((9, 0), 132)
        assert asked == [0]
    finally:
        gluon_host._facts.cache_clear()


def _layer(heads=4):
    return RuntimeLayer(LayerAttention(layer_id=0, num_heads=heads, num_kv_heads=heads, head_dim=64,
                                       role="encoder"))


def test_the_varlen_call_decides_once_per_signature(monkeypatch):
    """Before: the variant choice (the table's nearest bucket, the Gluon check) and the
    launch arguments were made again on every call; now once per (table, layer spec, call
    signature), and a new batch of the same lengths (a new step) reuses the decision."""
    from attnkit.backends.triton import tma_path
    from attnkit.backends.triton.backend import TritonBackend

    checks, launches = [], []
    monkeypatch.setattr(tma_path, "gluon_prefill_ready", lambda *a, **kw: checks.append(1) or True)
    monkeypatch.setattr(tma_path, "prefill_gluon_attention",
                        lambda q, k, v, out, **kw: launches.append(q.shape[0]) or out.fill_(1.0))
    be = TritonBackend(varlen_kernel="gluon")
    layer = _layer()
    q = torch.zeros(24, 4, 64, dtype=torch.float16)
    for _ in range(3):                            # three steps: a new batch each
        be.varlen(q, q, q, layer, varlen_batch(torch.tensor([0, 24], dtype=torch.int32)))
    assert checks == [1] and launches == [24] * 3
    be.varlen(q, q, q, layer, varlen_batch(torch.tensor([0, 10, 24], dtype=torch.int32)))   # other lengths
    be.varlen(q[:20], q[:20], q[:20], layer, varlen_batch(torch.tensor([0, 20], dtype=torch.int32)))
    assert checks == [1, 1, 1] and launches == [24, 24, 24, 10, 14, 20]


def test_a_gluon_form_never_takes_heads_a_descriptor_cannot_read(monkeypatch):
    """q [T, H, D] whose heads are not one dense row (a [1, H, T, D] tensor's transpose):
    before, runnable took it for the Gluon kernel, whose descriptor reads H * D contiguous
    elements a row (wrong rows); now the tile kernel runs it."""
    from attnkit.backends.triton import tma_path

    monkeypatch.setattr(tma_path, "gluon_prefill_ready", lambda *a, **kw: True)
    layer = _layer()
    batch = varlen_batch(torch.tensor([0, 24], dtype=torch.int32))
    dense = torch.zeros(24, 4, 64, dtype=torch.float16)
    heads_apart = torch.zeros(1, 4, 24, 64, dtype=torch.float16)[0].transpose(0, 1)      # [T, H, D]
    out = torch.empty(24, 4, 64, dtype=torch.float16)
    assert varlen_path.runnable("varlen_gluon", [dense] * 3, out, layer, batch)
    assert not varlen_path.runnable("varlen_gluon", [heads_apart, dense, dense], out, layer, batch)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["gluon", "persistent", "split"])
def test_repeated_calls_of_several_shapes_match_the_reference_on_the_gpu(kernel):
    """The cached decisions and descriptor templates on the GPU: shapes A, B, A again, A at
    another base (a view one sequence in), and q with its heads apart (the tile kernel takes it),
    each output against the float64 reference."""
    from attnkit import reference
    from attnkit.backends.triton.backend import TritonBackend
    from factories import assert_close

    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    gen = torch.Generator(device="cuda").manual_seed(0)
    rand = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16, generator=gen)  # noqa: E731
    layer = RuntimeLayer(LayerAttention(layer_id=0, num_heads=8, num_kv_heads=8, head_dim=128, role="encoder"))
    be = TritonBackend(varlen_kernel=kernel)
    big = rand(1400, 8, 128)
    apart = rand(1, 8, 700, 128)[0].transpose(0, 1)             # [T, H, D], heads not one row
    calls = [(rand(700, 8, 128), 700), (rand(520, 8, 128), 520), (rand(700, 8, 128), 700),
             (big[700:], 700), (apart, 700)]
    for q, n in calls:
        batch = varlen_batch(torch.tensor([0, n], dtype=torch.int32, device="cuda"))
        out = be.varlen(q, q, q, layer, batch)
        assert_close(out, reference.varlen_attention(q, q, q, layer, batch), dtype="bf16",
                     what=f"varlen {kernel} {list(q.shape)} stride {q.stride()}")
