"""What a decode forward of triton_mla runs around its core, op by op: the latent store, q_nope
@ w_kc, the core, @ w_vc, and nothing else (every op is a kernel in a CUDA-graph replay).

The core is replaced by a spy (its numerics are tests/triton_mla/test_absorbed.py's), so this
runs on the CPU without the interpreter; torch ops are recorded by a dispatch mode."""
import torch
from factories import make_case, make_layer
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from attnkit.backends.triton_mla import backend as mla_backend
from attnkit.backends.triton_mla.backend import TritonMLABackend

ALLOCATIONS = {"empty", "empty_strided", "new_empty", "new_empty_strided"}


class _Ops(TorchDispatchMode):
    def __init__(self, names: list):
        super().__init__()
        self.names = names

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not func.is_view and name not in ALLOCATIONS:
            self.names.append(name)
        return func(*args, **(kwargs or {}))


def _core(q_lat, q_pe, *args, **kw):
    """The core's stand-in: out_lat = q_lat token-major (outside the dispatch mode)."""
    with _disable_current_modes():
        return q_lat.transpose(0, 1).contiguous()        # [T, H, L]


def test_decode_forward_runs_store_projections_and_core_only(monkeypatch):
    """Three decode requests (a token-major output that is not the projection's layout): the
    output projection writes [T, H, Dv] in place, so no copy follows it (there was one: the
    reshape of the transposed product, a kernel of its own on the GPU)."""
    monkeypatch.setattr(mla_backend, "absorbed_attention", _core)
    layer = make_layer(kind="mla", num_heads=4, dtype="fp32")
    case = make_case(layer, prefix_lens=[7, 20, 3], new_lens=[1, 1, 1], page_size=16, seed=2)
    be = TritonMLABackend()
    step = be.prepare(case.meta, case.cache)
    names: list = []
    with _Ops(names):
        out = be.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert names == ["index_put_", "bmm", "bmm"]
    # the product itself: out_lat (here q_lat) @ w_vc per head, token-major
    mla = layer.spec.mla
    q_lat = torch.einsum("thd,hdl->thl", case.q[..., :mla.qk_nope_head_dim], layer.w_kc)
    want = torch.einsum("thl,hlv->thv", q_lat, layer.w_vc).reshape(3, -1)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)



def test_one_token_forward_launches_no_copy(monkeypatch):
    """One token ([H, 1, Dv] is token-major once transposed): the plain product, no copy."""
    monkeypatch.setattr(mla_backend, "absorbed_attention", _core)
    layer = make_layer(kind="mla", num_heads=4, dtype="fp32")
    case = make_case(layer, prefix_lens=[9], new_lens=[1], page_size=16, seed=4)
    be = TritonMLABackend()
    step = be.prepare(case.meta, case.cache)
    names: list = []
    with _Ops(names):
        out = be.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert names == ["index_put_", "bmm", "bmm"]
    assert out.shape == (1, 4 * layer.spec.mla.v_head_dim) and out.is_contiguous()
