"""What the Gluon rows kernels' GPU tests share (test_prefill_gluon_rows_gpu.py,
test_prefill_gluon_chain_gpu.py): the sm_90 / Triton 3.6 skip, a launch counter on one of
tma_path's kernel entries, one backend step, and the packed fresh step the kernels are called
on directly with the keywords its rows take."""
import pytest
import torch
import triton
from factories import make_case, make_layer

from attnkit.backends._triton import LOG2E
from attnkit.backends.triton.backend import TritonBackend, query_blocks

needs_gluon_rows = pytest.mark.skipif(not (torch.cuda.is_available()
                                           and torch.cuda.get_device_capability() == (9, 0)
                                           and triton.__version__.startswith("3.6.")),
                                      reason="the Gluon rows kernel runs on sm_90 with Triton 3.6")
PACKED_LENS = (129, 1, 640, 255)


def count_launches(monkeypatch, module, name: str, record) -> list:
    """Calls of ``module.name`` from here on, each as ``record(kwargs)``; the real kernel runs."""
    calls = []
    real = getattr(module, name)

    def counted(q, *args, **kwargs):
        calls.append(record(kwargs))
        return real(q, *args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def run_step(case, variant: str):
    """[T, H * D] of one prepare + forward of the triton backend's ``variant``, synchronised."""
    be = TritonBackend(extend_variant=variant)
    out = be.forward(case.q, case.k, case.v, case.layer, case.cache, be.prepare(case.meta, case.cache))
    if out.is_cuda:
        torch.cuda.synchronize()
    return out


def packed_step(*, device: str, lens=PACKED_LENS):
    """(case, kernel keywords) of a fresh step of ``lens`` (8 / 2 heads, d128, bf16, pages of
    16): block_req / block_m (backend.query_blocks at 128 rows), query_start_loc [B + 1],
    key_start (each request's first new row: the packed rows), seq_lens, qk_scale, v_scale."""
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=128, dtype="bf16", device=device)
    case = make_case(layer, prefix_lens=[0] * len(lens), new_lens=list(lens), page_size=16,
                     dtype="bf16", device=device, q_scale=4.0, seed=7)
    cu = torch.tensor([sum(lens[:i]) for i in range(len(lens) + 1)], dtype=torch.int32, device=device)
    block_req, block_m = query_blocks(list(lens), list(lens), 128, device=device)
    return case, dict(block_req=block_req, block_m=block_m, query_start_loc=cu, key_start=cu[:-1],
                      seq_lens=cu[1:] - cu[:-1], qk_scale=layer.spec.softmax_scale * LOG2E,
                      v_scale=1.0)
