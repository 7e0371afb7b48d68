"""The triton backend's varlen call runs what the plan's varlen table lists: the first variant
that can take the call (varlen_path.py). On the CPU (the Triton interpreter) the Gluon forms
cannot run, so a table listing them first runs the tile, and the output is the reference's;
a table naming a variant of another role is refused; tune measures a varlen bucket."""
import pytest
import torch

from attnkit import reference
from attnkit.backends.base import RuntimeLayer
from attnkit.backends.triton.backend import TritonBackend
from attnkit.backends.varlen import varlen_batch
from attnkit.errors import AttnkitError
from attnkit.model.spec import LayerAttention
from attnkit.planning.profile import Bucket, Shape
from attnkit.registry.kernels import KernelTable
from attnkit.tune import varlen_case
from attnkit.tune.run import measure_entry
from factories import assert_close


def _call(be, lens=(20, 33)):
    layer = RuntimeLayer(LayerAttention(layer_id=0, num_heads=4, num_kv_heads=2, head_dim=64, role="encoder"))
    gen = torch.Generator().manual_seed(1)
    n = sum(lens)
    q, k, v = (torch.randn(n, h, 64, generator=gen, dtype=torch.float16) for h in (4, 2, 2))
    batch = varlen_batch(torch.tensor([0, lens[0], n], dtype=torch.int32))
    return be.varlen(q, k, v, layer, batch), reference.varlen_attention(q, k, v, layer, batch)


def test_a_table_of_gluon_forms_first_runs_the_tile_where_they_cannot(monkeypatch):
    from attnkit.backends.triton import varlen as tile
    ran, real = [], tile.varlen_attention
    monkeypatch.setattr(tile, "varlen_attention", lambda *a, **k: ran.append(1) or real(*a, **k))
    table = KernelTable("varlen", fallback=("varlen_gluon", "varlen_gluon_persistent", "varlen_tile"))
    out, ref = _call(TritonBackend(kernels={"varlen": table}))
    assert ran, "the tile did not run"
    assert_close(out, ref, dtype="fp16", what="varlen through the plan's table")


def test_the_varlen_option_runs_one_variant_and_refuses_others():
    assert TritonBackend(varlen_kernel="gluon").kernels["varlen"].fallback == ("varlen_gluon",)
    assert TritonBackend(varlen_kernel="varlen_tile").kernels["varlen"].fallback == ("varlen_tile",)
    assert TritonBackend(varlen_kernel="split").kernels["varlen"].fallback == ("varlen_gluon_split",)
    with pytest.raises(AttnkitError) as err:
        TritonBackend(varlen_kernel="fused")
    assert err.value.code == "AK407"
    with pytest.raises(AttnkitError) as err:       # a prefill variant in the varlen table
        TritonBackend(kernels={"varlen": KernelTable.only("varlen", "gluon")})
    assert err.value.code == "AK407"


def test_tune_measures_the_triton_tile_on_a_varlen_bucket():
    b = Bucket(Shape("mha", 4, 2, 64, 64, "fp16", "fp16"), "varlen", 2, 24, 24, 16)
    case = varlen_case.make_case(b, "cpu")
    e = measure_entry(case, TritonBackend(kernels={"varlen": KernelTable.only("varlen", "varlen_tile")}), "cpu",
                      variant="varlen_tile")
    assert e.status == "ok" and e.rel_err < 1e-2 and e.variant == "varlen_tile"
    assert e.work == 2 * 4 * 2 * 24 * 24 * 128


def test_a_cross_layer_never_runs_a_gluon_form(monkeypatch):
    """The declaration's excludes (self-attention only) hold at run time, even where the Gluon
    kernel could take the shapes (here pretended: it cannot run on the CPU)."""
    import dataclasses

    from attnkit.backends.triton import tma_path, varlen_path
    monkeypatch.setattr(tma_path, "gluon_prefill_ready", lambda *a, **k: True)
    spec = LayerAttention(layer_id=0, num_heads=4, num_kv_heads=4, head_dim=64, role="encoder")
    q = torch.zeros(8, 4, 64, dtype=torch.float16)
    batch = varlen_batch(torch.tensor([0, 8], dtype=torch.int32))
    args = ((q, q, q), q, batch)
    for form in varlen_path.GLUON_FORMS:
        assert varlen_path.runnable(form, args[0], args[1], RuntimeLayer(spec), args[2])
        cross = RuntimeLayer(dataclasses.replace(spec, role="cross"))
        assert not varlen_path.runnable(form, args[0], args[1], cross, args[2])
    assert varlen_path.runnable("varlen_tile", args[0], args[1], RuntimeLayer(dataclasses.replace(spec, role="cross")), args[2])
