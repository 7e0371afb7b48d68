"""Decode variant stream (decode_stream.py) off its GPU: the split rule's geometry, the
launch configuration the plan prints, and the fall-back where the kernel cannot run (no sm_90
with Triton 3.6: here, the interpreter), which must still give the reference. The kernel
itself: test_triton_decode_stream_gpu.py."""
import pytest
from factories import assert_close, make_case, make_layer

from attnkit.backends.triton import configs
from attnkit.backends.triton.decode_stream import stream_splits


@pytest.mark.parametrize("max_kv,reqs,want", [
    (1024, 16, 1),        # 16 x 8 pairs fill 128 of 132 SMs: no split
    (4096, 64, 1),        # more pairs than SMs
    (1024, 1, 4),         # 8 pairs leave 124 SMs idle: 16 wanted, 1024 / 256 keys allow 4
    (32768, 1, 16),       # 132 // 8 = 16 splits of 2048 keys
    (32768, 8, 2),        # 64 pairs: 2 fill 128 SMs
])
def test_stream_splits_only_where_the_pairs_leave_sms_idle(max_kv, reqs, want):
    splits, chunk = stream_splits(max_kv, reqs, 8, num_sms=132, block_n=64, min_keys=256)
    assert splits == want
    assert chunk % 64 == 0 and splits * chunk >= max_kv > (splits - 1) * chunk   # every split holds keys


def test_stream_splits_never_cut_a_tile_and_cover_short_requests():
    for max_kv in (1, 15, 63, 64, 65, 300, 2501):
        splits, chunk = stream_splits(max_kv, 1, 1, num_sms=132, block_n=128, min_keys=256)
        assert chunk % 128 == 0 and splits * chunk >= max_kv and splits >= 1


def test_stream_launch_config_is_its_tile_for_d64_and_d128_only():
    from types import SimpleNamespace
    for d in (64, 128):
        cfg = configs.launch_config("stream", role="decode", shape=SimpleNamespace(head_dim=d),
                                    dtype="bf16", platform=None)
        assert cfg == configs.DECODE_STREAM_TILES[d]
    assert configs.launch_config("stream", role="decode", shape=SimpleNamespace(head_dim=256),
                                 dtype="bf16", platform=None) is None


@pytest.mark.interpreter
def test_stream_falls_back_to_split_where_it_cannot_run():
    """On the interpreter stream_ok is False: the step runs split (its own K/V write), whose
    output is the reference, and the cache holds the new K/V."""
    from attnkit.backends.triton.backend import TritonBackend
    from attnkit.backends.triton.decode_stream import stream_ok
    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[40, 7], new_lens=[1, 1], page_size=16, dtype="fp16")
    assert not stream_ok(case.q, case.k, case.v, case.layer, case.cache)
    backend = TritonBackend(decode_variant="stream")
    step = backend.prepare(case.meta, case.cache)
    out = backend.forward(case.q, case.k, case.v, case.layer, case.cache, step)
    assert not any(key[0] == "stream" for key in step.prepared.splits)
    assert_close(out, case.reference(), dtype="fp16", what="stream's fall-back")
    k_cache = case.cache.k[0].view(-1, *case.k.shape[1:])
    assert k_cache[case.meta.slot_mapping].equal(case.k.to(k_cache.dtype))
