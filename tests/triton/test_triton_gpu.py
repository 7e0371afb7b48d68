"""The triton backend on a CUDA GPU: bf16, the declared head dims and page sizes, larger shapes.

Each test runs one step through prepare + forward and compares with the float64 reference
(computed on the GPU). These are the runs behind the declaration in declaration.py.
"""
import pytest
from factories import assert_close, make_case, make_layer

from attnkit.backends.metadata import ForwardMode

pytestmark = pytest.mark.gpu

MIXED = dict(prefix_lens=[300, 0, 1000, 77], new_lens=[200, 37, 1, 129])
DECODE = dict(prefix_lens=[300, 1, 2500, 77], new_lens=[1, 1, 1, 1])


def _check(run_triton, layer_kw, case_kw, *, dtype="bf16", kv_dtype=None, what="", **options):
    layer = make_layer(**layer_kw, dtype=dtype, device="cuda")
    case = make_case(layer, dtype=dtype, kv_dtype=kv_dtype, device="cuda", **case_kw)
    assert_close(run_triton(case, **options), case.reference(), dtype=dtype, kv_dtype=kv_dtype,
                 what=what)


HEAD_DIMS = [64, 80, 96, 128, 192, 256]
DTYPE_SHAPES = ([(d, "bf16", shape) for d in HEAD_DIMS for shape in ("mixed", "decode")]
                + [(d, dt, "mixed") for d in HEAD_DIMS for dt in ("fp16", "fp32")]
                + [(128, dt, "decode") for dt in ("fp16", "fp32")])


@pytest.mark.parametrize("head_dim,dtype,shape", DTYPE_SHAPES)
def test_head_dims_and_dtypes(run_triton, head_dim, dtype, shape):
    case_kw = dict(MIXED if shape == "mixed" else DECODE, page_size=16)
    _check(run_triton, dict(num_heads=8, num_kv_heads=2, head_dim=head_dim), case_kw, dtype=dtype,
           what=f"d{head_dim} {dtype} {shape}")


@pytest.mark.parametrize("shape", ["mixed", "decode"])
@pytest.mark.parametrize("page_size", [1, 8, 32, 64, 128])
def test_page_sizes(run_triton, page_size, shape):
    case_kw = dict(MIXED if shape == "mixed" else DECODE, page_size=page_size)
    _check(run_triton, dict(num_heads=8, num_kv_heads=1, head_dim=128), case_kw, what=f"page {page_size}")


FEATURES = {
    "window": dict(sliding_window=64),
    "softcap": dict(logit_softcap=30.0),
    "sinks": dict(sinks=True),
    "encoder": dict(role="encoder"),
    "all": dict(sliding_window=100, logit_softcap=20.0, sinks=True),
}


@pytest.mark.parametrize("shape", ["mixed", "decode"])
@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_features(run_triton, feature, shape):
    if feature == "encoder" and shape == "decode":
        pytest.skip("encoder layers have no decode step")
    case_kw = dict(MIXED if shape == "mixed" else DECODE, page_size=16, q_scale=4.0)
    if feature == "encoder":
        case_kw.update(prefix_lens=[0, 0, 0], new_lens=[300, 37, 129])
    _check(run_triton, dict(num_heads=32, num_kv_heads=8, head_dim=128, **FEATURES[feature]),
           case_kw, what=feature)


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("shape", ["mixed", "decode"])
def test_fp8_kv(run_triton, kv_dtype, shape):
    case_kw = dict(MIXED if shape == "mixed" else DECODE, page_size=16)
    _check(run_triton, dict(num_heads=8, num_kv_heads=2, head_dim=128), case_kw, kv_dtype=kv_dtype,
           what=kv_dtype)


def test_verify(run_triton):
    case_kw = dict(prefix_lens=[500, 33, 2000], new_lens=[5, 5, 5], page_size=16,
                   mode=ForwardMode.VERIFY)
    _check(run_triton, dict(num_heads=32, num_kv_heads=8, head_dim=128, sliding_window=256),
           case_kw, what="verify")


@pytest.mark.parametrize("splits", [None, 7])
def test_long_decode_splits_with_sinks_and_window(run_triton, splits):
    case_kw = dict(prefix_lens=[9000, 40], new_lens=[1, 1], page_size=16)
    _check(run_triton, dict(num_heads=32, num_kv_heads=8, head_dim=128, sinks=True,
                            sliding_window=4000), case_kw, what=f"splits {splits}", num_splits=splits)
