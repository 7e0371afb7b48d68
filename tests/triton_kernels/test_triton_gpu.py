"""The triton backend on a CUDA GPU: bf16, the declared head dims and page sizes, larger shapes.

Each test runs one step through prepare + forward and compares with the float64 reference
(computed on the GPU). These are the runs behind the declaration in declaration.py.
"""
import pytest
from factories import assert_close, assert_replays_match, make_case, make_layer

from attnkit.backends.metadata import ForwardMode
from attnkit.backends.triton.decode import DECODE_VARIANTS
from attnkit.backends.triton.extend import EXTEND_VARIANTS

pytestmark = pytest.mark.gpu
# Each shape runs through both variants of its kernel: extend (v1: all keys via the block
# table; v2: new tokens from k / v) for "mixed", decode (v1: separate K/V write; v2: the
# kernel writes the new K/V) for "decode".
# The Gluon rows variants (sm_90, Triton 3.6) run the same mixed steps: where they cannot (a
# head dim without tiles, a window, softcap, sinks, an encoder) the step runs paged.
GLUON_ROWS = ("gluon_rows", "gluon_rows_persistent")
SHAPES = ([("mixed", v) for v in EXTEND_VARIANTS + GLUON_ROWS]
          + [("decode", v) for v in DECODE_VARIANTS])


def _variant(shape, variant):
    """The backend option that selects ``variant`` for a shape's kernel."""
    return dict(extend_variant=variant) if shape == "mixed" else dict(decode_variant=variant)

MIXED = dict(prefix_lens=[300, 0, 1000, 77], new_lens=[200, 37, 1, 129])
DECODE = dict(prefix_lens=[300, 1, 2500, 77], new_lens=[1, 1, 1, 1])


def _check(run_triton, layer_kw, case_kw, *, dtype="bf16", kv_dtype=None, what="", **options):
    layer = make_layer(**layer_kw, dtype=dtype, device="cuda")
    case = make_case(layer, dtype=dtype, kv_dtype=kv_dtype, device="cuda", **case_kw)
    assert_close(run_triton(case, **options), case.reference(), dtype=dtype, kv_dtype=kv_dtype,
                 what=what)


HEAD_DIMS = [64, 80, 96, 128, 192, 256]
DTYPE_SHAPES = ([(d, "bf16", shape, var) for d in HEAD_DIMS for shape, var in SHAPES]
                + [(d, dt, "mixed", var) for d in HEAD_DIMS for dt in ("fp16", "fp32")
                   for var in EXTEND_VARIANTS]
                + [(128, dt, "decode", var) for dt in ("fp16", "fp32") for var in DECODE_VARIANTS])


@pytest.mark.parametrize("head_dim,dtype,shape,variant", DTYPE_SHAPES)
def test_head_dims_and_dtypes(run_triton, head_dim, dtype, shape, variant):
    case_kw = dict(MIXED if shape == "mixed" else DECODE, page_size=16)
    _check(run_triton, dict(num_heads=8, num_kv_heads=2, head_dim=head_dim), case_kw, dtype=dtype,
           what=f"d{head_dim} {dtype} {shape} {variant}", **_variant(shape, variant))


@pytest.mark.parametrize("shape,variant", SHAPES)
@pytest.mark.parametrize("page_size", [1, 8, 32, 64, 128])
def test_page_sizes(run_triton, page_size, shape, variant):
    case_kw = dict(MIXED if shape == "mixed" else DECODE, page_size=page_size)
    _check(run_triton, dict(num_heads=8, num_kv_heads=1, head_dim=128), case_kw,
           what=f"page {page_size} {variant}", **_variant(shape, variant))


FEATURES = {
    "window": dict(sliding_window=64),
    "softcap": dict(logit_softcap=30.0),
    "sinks": dict(sinks=True),
    "encoder": dict(role="encoder"),
    "all": dict(sliding_window=100, logit_softcap=20.0, sinks=True),
}


@pytest.mark.parametrize("shape,variant", SHAPES)
@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_features(run_triton, feature, shape, variant):
    if feature == "encoder" and shape == "decode":
        pytest.skip("encoder layers have no decode step")
    case_kw = dict(MIXED if shape == "mixed" else DECODE, page_size=16, q_scale=4.0)
    if feature == "encoder":
        case_kw.update(prefix_lens=[0, 0, 0], new_lens=[300, 37, 129])
    _check(run_triton, dict(num_heads=32, num_kv_heads=8, head_dim=128, **FEATURES[feature]),
           case_kw, what=f"{feature} {variant}", **_variant(shape, variant))


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("shape", ["mixed", "decode"])
def test_fp8_kv(run_triton, kv_dtype, shape):
    case_kw = dict(MIXED if shape == "mixed" else DECODE, page_size=16)
    _check(run_triton, dict(num_heads=8, num_kv_heads=2, head_dim=128), case_kw, kv_dtype=kv_dtype,
           what=kv_dtype)


@pytest.mark.parametrize("variant", EXTEND_VARIANTS)
def test_verify(run_triton, variant):
    case_kw = dict(prefix_lens=[500, 33, 2000], new_lens=[5, 5, 5], page_size=16,
                   mode=ForwardMode.VERIFY)
    _check(run_triton, dict(num_heads=32, num_kv_heads=8, head_dim=128, sliding_window=256),
           case_kw, what=f"verify {variant}", extend_variant=variant)


@pytest.mark.parametrize("variant", EXTEND_VARIANTS)
@pytest.mark.parametrize("config", [None, dict(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=2)])
def test_long_prefill_with_prefix_and_window(run_triton, variant, config):
    """Long enough for every loop of both kernels (window edge, unmasked middle, diagonal),
    a prefix that ends mid-tile, and a tile config other than the default."""
    case_kw = dict(prefix_lens=[0, 1037], new_lens=[1500, 700], page_size=16)
    for window in (None, 300):
        _check(run_triton, dict(num_heads=16, num_kv_heads=4, head_dim=128, sliding_window=window),
               case_kw, what=f"long {variant} window {window}", extend_variant=variant,
               extend_config=config)


@pytest.mark.parametrize("variant", DECODE_VARIANTS)
@pytest.mark.parametrize("splits", [None, 7])
def test_long_decode_splits_with_sinks_and_window(run_triton, splits, variant):
    case_kw = dict(prefix_lens=[9000, 40], new_lens=[1, 1], page_size=16)
    _check(run_triton, dict(num_heads=32, num_kv_heads=8, head_dim=128, sinks=True,
                            sliding_window=4000), case_kw, what=f"splits {splits} {variant}",
           num_splits=splits, decode_variant=variant)


# The decode kernel's config switches (configs.DECODE_TILES), at the tiles the sweep times.
DECODE_SWITCHES = [(64, dict(BLOCK_N=64, num_warps=4, num_stages=3, PACK=2)),
                   (64, dict(BLOCK_N=128, num_warps=8, num_stages=3, PACK=2, EDGE_MASK=True)),
                   (128, dict(BLOCK_N=64, num_warps=4, num_stages=4, EDGE_MASK=True)),
                   (256, dict(BLOCK_N=32, num_warps=4, num_stages=2, EDGE_MASK=True)),
                   (64, dict(BLOCK_N=32, num_warps=4, num_stages=3, PACK=4)),
                   (128, dict(BLOCK_N=64, num_warps=4, num_stages=5, PDL=True)),
                   (64, dict(BLOCK_N=32, num_warps=4, num_stages=5, PACK=2, PDL=True))]


@pytest.mark.parametrize("variant", DECODE_VARIANTS)
@pytest.mark.parametrize("head_dim,config", DECODE_SWITCHES)
def test_decode_config_switches(run_triton, head_dim, config, variant):
    case_kw = dict(prefix_lens=[3000, 40, 1023, 64], new_lens=[1, 1, 1, 1], page_size=16)
    for window, sinks, splits in ((None, False, None), (700, True, 5)):
        _check(run_triton, dict(num_heads=32, num_kv_heads=8, head_dim=head_dim, sinks=sinks,
                                sliding_window=window), case_kw,
               what=f"d{head_dim} {config} {variant} window {window} splits {splits}",
               num_splits=splits, decode_variant=variant, decode_config=config)


@pytest.mark.parametrize("variant", ["v1", "v2"])
def test_decode_with_pdl_replays_in_a_cuda_graph(variant):
    """PDL (the reduce launch as a programmatic dependent of the split kernel) captured in a
    CUDA graph: every replay gives the reference, with the queries changed between replays
    (so a replay that read stale partials would show)."""
    from attnkit.backends.triton.backend import TritonBackend

    layer = make_layer(num_heads=32, num_kv_heads=8, head_dim=128, dtype="bf16", device="cuda")
    case = make_case(layer, dtype="bf16", device="cuda", prefix_lens=[1000, 37, 4000],
                     new_lens=[1, 1, 1], page_size=16)
    backend = TritonBackend(num_splits=8, decode_variant=variant,
                            decode_config=dict(BLOCK_N=64, num_warps=4, num_stages=4, PDL=True))
    step = backend.prepare(case.meta, case.cache)
    assert_replays_match(backend, case, step, dtype="bf16", what=variant)
