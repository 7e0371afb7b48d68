"""Host-side choices of triton_mla: KV split counts and tile shapes (no kernels run)."""
import pytest

from attnkit.backends.triton_mla.configs import absorbed_config
from attnkit.backends.triton_mla.decode import choose_splits


@pytest.mark.parametrize("programs, max_kv, slots, expected", [
    (128, 4096, 264, 2),      # B=128, H=16: 256 programs fill 132 SMs x 2 in one wave
    (256, 4096, 132, 1),      # B=128, H=128 (two head blocks): already a full wave
    (1, 32768, 264, 231),     # B=1 long context: near one program per slot
    (2, 4096, 132, 29),       # B=1, H=128: capped by 128 keys per split, 90 % of that fill
    (1, 100, 264, 1),         # too short to split
])
def test_split_counts(programs, max_kv, slots, expected):
    assert choose_splits(programs, max_kv, slots=slots) == expected


def test_tiles_fit_shared_memory():
    """sm_90 gets the swept tiles (64-row programs: 64 keys, 3 stages, 221696 B with ptxas);
    sm_80's 163 KB keeps 32 keys; ~99 KB parts (sm_89) get tiles that ptxas fits there."""
    assert absorbed_config(64, 512, smem_kb=227) == dict(block_n=64, num_warps=8, num_stages=3,
                                                         programs_per_sm=1)
    assert absorbed_config(64, 512, smem_kb=163)["block_n"] == 32
    assert absorbed_config(64, 512, smem_kb=99) == dict(block_n=16, num_warps=8, num_stages=2,
                                                        programs_per_sm=1)
    assert absorbed_config(16, 512, smem_kb=163)["programs_per_sm"] == 1
    assert absorbed_config(16, 512, smem_kb=227)["programs_per_sm"] == 2


def test_v2_tiles():
    """v2 splits the latent columns only for 64-row programs on ~227 KB parts; 16-row programs
    (a decode token of <= 16 heads) there get their own tile with the whole latent row;
    elsewhere the launcher falls back to version 1's tile (None)."""
    from attnkit.backends.triton_mla.configs import absorbed_config_v2, v2_block_h
    assert absorbed_config_v2(128, 512, smem_kb=227) == dict(block_n=32, num_warps=8, num_stages=3,
                                                             programs_per_sm=1, v_split=2)
    assert v2_block_h(128, 512, smem_kb=227) == 128
    assert v2_block_h(64, 512, smem_kb=227) is None
    assert v2_block_h(128, 512, smem_kb=227, fp32=True) is None
    assert absorbed_config_v2(64, 512, smem_kb=227) == dict(block_n=32, num_warps=4, num_stages=3,
                                                            programs_per_sm=1, v_split=2)
    assert absorbed_config_v2(16, 512, smem_kb=227) == dict(block_n=32, num_warps=4, num_stages=6,
                                                            programs_per_sm=2, v_split=1)
    assert absorbed_config_v2(32, 512, smem_kb=227) is None
    assert absorbed_config_v2(16, 512, smem_kb=99) is None
    assert absorbed_config_v2(64, 512, smem_kb=99) is None
    assert absorbed_config_v2(64, 64, smem_kb=227) is None


def test_the_plan_tables_choose_each_request_form_and_the_absorbed_kernel():
    """No query-length threshold in the backend: a request takes the MHA form where the plan's
    nearest bucket lists mha_form first; the absorbed part runs the first absorbed kernel."""
    from attnkit.backends.triton_mla.backend import TritonMLABackend
    from attnkit.registry.kernels import KernelRate, KernelRow, KernelTable

    r = lambda v: KernelRate(v, 1.0, "TFLOP/s")  # noqa: E731
    table = KernelTable("extend", rows=(KernelRow(2, 16, 4096, (r("whole_rows"), r("mha_form"))),
                                        KernelRow(2, 2048, 4096, (r("mha_form"), r("column_split")))),
                        fallback=("column_split", "whole_rows", "mha_form"))
    backend = TritonMLABackend(kernels={"extend": table})

    class Meta:      # what _mha_requests and _table read of a step
        from attnkit.backends.metadata import ForwardMode
        mode = ForwardMode.MIXED
        query_lens_cpu, seq_lens_cpu, prefix_lens_cpu = [1, 1500], [3000, 3500], [2999, 2000]
    assert backend._mha_requests(Meta) == [False, True]
    part = type("P", (), {"query_lens": [1], "kv_lens": [3000], "static_kv": None})
    assert backend._absorbed_kernels(Meta, part) == ("v1", "v2")    # whole_rows, then the general one
    assert TritonMLABackend()._mha_requests(Meta) == [False, False]   # no table: declaration order
    assert TritonMLABackend(mha_form_min_query=2)._mha_requests(Meta) == [False, True]


def test_ws_serves_only_the_triton_and_launch_it_was_checked_on(monkeypatch):
    """"ws" is Gluon code written for Triton 3.6 (3.9 already spells warp_specialize another
    way): any other Triton, an interpreted launch or a non-64-head block runs v1 instead."""
    import types

    from attnkit.backends.triton_mla import decode
    q = types.SimpleNamespace(is_cuda=True, shape=(128, 1, 512))
    monkeypatch.setattr(decode.triton, "__version__", "3.9.0")
    assert not decode.ws_ready(q, None, page_size=64, block_t=1, block_h=64)
    monkeypatch.setattr(decode.triton, "__version__", "3.6.0")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not decode.ws_ready(q, None, page_size=64, block_t=1, block_h=64)
