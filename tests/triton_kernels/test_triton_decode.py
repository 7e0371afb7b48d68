"""Split-KV decode kernel and its reduction against the float64 reference (interpreter on CPU)."""
import pytest
from factories import assert_close, make_case, make_layer

from attnkit.backends.metadata import ForwardMode
from attnkit.backends.triton.decode import DECODE_VARIANTS, choose_splits, pick_decode_variant

CASES = {
    "gqa-page16": (dict(num_heads=8, num_kv_heads=2, head_dim=64),
                   dict(prefix_lens=[40, 7, 63], page_size=16)),
    "mqa-page1": (dict(num_heads=4, num_kv_heads=1, head_dim=64), dict(prefix_lens=[20, 9], page_size=1)),
    "window-odd-page": (dict(num_heads=4, num_kv_heads=2, head_dim=64, sliding_window=13),
                        dict(prefix_lens=[50, 5], page_size=5)),
    "softcap-sinks": (dict(num_heads=4, num_kv_heads=2, head_dim=64, logit_softcap=4.0, sinks=True),
                      dict(prefix_lens=[45, 17], page_size=8, q_scale=6.0)),
    "head-dim-80": (dict(num_heads=2, num_kv_heads=2, head_dim=80), dict(prefix_lens=[33], page_size=16)),
}


@pytest.mark.parametrize("variant", DECODE_VARIANTS)
@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_decode_matches_reference(run_triton, name, num_splits, variant):
    layer_kw, case_kw = CASES[name]
    dtype = "fp32" if num_splits == 1 else "fp16"
    prefix = case_kw["prefix_lens"]
    case = make_case(make_layer(**layer_kw, dtype=dtype), dtype=dtype, new_lens=[1] * len(prefix),
                     seed=len(name), **{k: v for k, v in case_kw.items() if k != "prefix_lens"},
                     prefix_lens=prefix)
    assert case.meta.mode is ForwardMode.DECODE
    out = run_triton(case, num_splits=num_splits, decode_variant=variant)
    assert_close(out, case.reference(), dtype=dtype, what=f"{name} splits={num_splits} {variant}")
    # the new token's K/V reached the cache (v2 writes it from inside the kernel)
    k_cache = case.cache.k[case.layer.spec.layer_id].view(-1, *case.k.shape[1:])
    assert k_cache[case.meta.slot_mapping].equal(case.k.to(k_cache.dtype))


@pytest.mark.parametrize("variant", DECODE_VARIANTS)
def test_decode_first_token_and_splits_longer_than_the_request(run_triton, variant):
    """kv_len 1 (only the new key), and a split count whose last splits hold no keys."""
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, sinks=True, dtype="fp16")
    case = make_case(layer, prefix_lens=[0, 70, 3], new_lens=[1, 1, 1], page_size=8, dtype="fp16")
    for splits in (1, 4):
        assert_close(run_triton(case, num_splits=splits, decode_variant=variant), case.reference(),
                     dtype="fp16", what=f"splits {splits} {variant}")


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_decode_fp8_kv_cache(run_triton, kv_dtype):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, sinks=True, dtype="fp16")
    case = make_case(layer, prefix_lens=[37, 12], new_lens=[1, 1], page_size=4, dtype="fp16",
                     kv_dtype=kv_dtype)
    assert_close(run_triton(case, num_splits=2), case.reference(), dtype="fp16", kv_dtype=kv_dtype)


def test_splits_fill_the_machine_for_one_long_request_and_stay_one_for_big_batches():
    splits, chunk = choose_splits(32768, 1, 8, block_n=64, num_sms=132)
    assert splits * 8 >= 132 and chunk % 64 == 0 and splits * chunk >= 32768
    assert choose_splits(4096, 64, 8, block_n=64, num_sms=132) == (1, 4096)
    splits, chunk = choose_splits(100, 1, 8, block_n=64, num_sms=132)   # short: never below a tile
    assert (splits, chunk) == (2, 64)
    assert choose_splits(1024, 1, 8, block_n=64, num_sms=132) == (16, 64)   # one tile a split
    assert choose_splits(4096, 1, 8, block_n=64, num_sms=132) == (32, 128)  # 3 waves: 50 wanted
    assert choose_splits(1024, 1, 8, block_n=16, num_sms=132) == (16, 64)   # >= 64 keys a split


# Launch-config switches of the decode kernel (configs.py): PACK KV heads per program, masks on
# the edge tiles only (EDGE_MASK); each must compute what the plain kernel computes.
SWITCHES = [dict(PACK=2), dict(EDGE_MASK=True), dict(PACK=2, EDGE_MASK=True)]


@pytest.mark.parametrize("switch", SWITCHES, ids=lambda c: "-".join(f"{k}{v}" for k, v in c.items()))
@pytest.mark.parametrize("variant", DECODE_VARIANTS)
@pytest.mark.parametrize("name", ["gqa-page16", "window-odd-page", "softcap-sinks", "head-dim-80"])
def test_decode_config_switches_match_reference(run_triton, name, variant, switch):
    layer_kw, case_kw = CASES[name]
    prefix = case_kw["prefix_lens"]
    case = make_case(make_layer(**layer_kw, dtype="fp16"), dtype="fp16", new_lens=[1] * len(prefix),
                     seed=3, **{k: v for k, v in case_kw.items() if k != "prefix_lens"},
                     prefix_lens=prefix)
    for splits in (1, 3):
        out = run_triton(case, num_splits=splits, decode_variant=variant,
                         decode_config=dict(BLOCK_N=16, num_warps=4, num_stages=1, **switch))
        assert_close(out, case.reference(), dtype="fp16", what=f"{name} {switch} splits={splits}")


def test_heads_pack_only_where_the_rows_of_adjacent_heads_are_adjacent():
    """PACK takes effect on power-of-two head dims whose KV heads it divides, with dense rows;
    anything else runs one KV head a program (so the switch tests above do pack)."""
    from attnkit.backends.triton.decode import decode_pack

    layer = make_layer(num_heads=8, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[40, 7], new_lens=[1, 1], page_size=16, dtype="fp16")
    k_cache, v_cache = case.cache.k[0], case.cache.v[0]
    assert decode_pack(2, k_cache, v_cache, (case.k, case.v)) == 2
    assert decode_pack(4, k_cache, v_cache) == 1                      # 2 KV heads: 4 does not divide
    assert decode_pack(2, k_cache[..., :32], v_cache) == 1             # rows not adjacent
    wide = case.k.new_zeros(*case.k.shape[:2], 128)[..., :64]          # head stride 128, not 64
    assert decode_pack(2, k_cache, v_cache, (wide, case.v)) == 1
    odd = make_case(make_layer(num_heads=2, num_kv_heads=2, head_dim=80, dtype="fp16"),
                    prefix_lens=[33], new_lens=[1], page_size=16, dtype="fp16")
    assert decode_pack(2, odd.cache.k[0], odd.cache.v[0]) == 1


def test_decode_launch_shapes_are_per_head_dim_then_per_variant(monkeypatch):
    """configs.decode_config reads DECODE_TILES by padded head dim; a DECODE_VARIANT_TILES entry
    replaces it for that variant only, and the plan's launch_config prints the same."""
    from attnkit.backends.triton import configs
    from attnkit.hardware import get_preset
    from attnkit.planning.profile import Shape

    assert configs.decode_config(80, False, interpret=False) == configs.DECODE_TILES[128]
    wide_rows = configs.decode_config(192, False, interpret=False, variant="split_write")
    assert wide_rows == configs.DECODE_TILES[256]
    for (width, variant), tile in configs.DECODE_VARIANT_TILES.items():
        assert configs.decode_config(width, False, interpret=False, variant=variant) == tile
    wide = dict(BLOCK_N=32, num_warps=4, num_stages=5, PDL=True)
    monkeypatch.setitem(configs.DECODE_VARIANT_TILES, (128, "split_write"), wide)
    assert configs.decode_config(128, False, interpret=False, variant="split_write") == wide
    launch = lambda variant, d: configs.launch_config(  # noqa: E731
        variant, role="decode", shape=Shape("mha", 8, 2, d, d, "bf16", "bf16"), dtype="bf16",
        platform=get_preset("h200"))
    assert launch("split_write", 96) == wide
    assert launch("split", 128) == configs.DECODE_TILES[128]
    assert configs.decode_config(128, True, interpret=False, variant="split_write")["BLOCK_N"] == 32
