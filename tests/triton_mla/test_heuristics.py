"""Host-side choices of triton_mla: KV split counts and tile shapes (no kernels run)."""
import pytest

from attnkit.backends.triton_mla.decode import absorbed_config, choose_splits


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
    """v2 splits the latent columns only for 64-row programs on ~227 KB parts; elsewhere the
    launcher falls back to version 1's tile (None)."""
    from attnkit.backends.triton_mla.decode_column_split import absorbed_config_v2, v2_block_h
    assert absorbed_config_v2(128, 512, smem_kb=227) == dict(block_n=32, num_warps=8, num_stages=3,
                                                             programs_per_sm=1, v_split=2)
    assert v2_block_h(128, 512, smem_kb=227) == 128
    assert v2_block_h(64, 512, smem_kb=227) is None
    assert v2_block_h(128, 512, smem_kb=227, fp32=True) is None
    assert absorbed_config_v2(64, 512, smem_kb=227) == dict(block_n=32, num_warps=4, num_stages=3,
                                                            programs_per_sm=1, v_split=2)
    assert absorbed_config_v2(16, 512, smem_kb=227) is None
    assert absorbed_config_v2(64, 512, smem_kb=99) is None
    assert absorbed_config_v2(64, 64, smem_kb=227) is None


@pytest.mark.parametrize("heads, fp32, cache_16bit, smem_kb, expected", [
    (128, False, True, 227, "ws"),     # the measured case: Gluon, else v1 at 64-key tiles
    (256, False, True, 227, "ws"),
    (64, False, True, 227, "v2"),      # fewer heads: v2 (measured at 16)
    (128, False, False, 227, "v2"),    # fp8 cache: v1's 64-key tile not checked
    (128, True, True, 227, "v2"),
    (128, False, True, 163, "v2"),     # sm_80: the 64-key tile does not fit
])
def test_auto_variant(heads, fp32, cache_16bit, smem_kb, expected):
    from attnkit.backends.triton_mla.decode import auto_variant
    assert auto_variant(heads, 512, fp32=fp32, cache_16bit=cache_16bit, smem_kb=smem_kb) == expected
    assert auto_variant(heads, 64, fp32=fp32, cache_16bit=cache_16bit, smem_kb=smem_kb) == "v2"


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
