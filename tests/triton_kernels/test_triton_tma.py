"""The tensor-descriptor extend kernel (prefill_tma.py) and its routes (tma_path.py) against
the float64 reference, on the Triton interpreter (fp16; bf16 and real shapes: the gpu tests).

WS=True runs the kernel's single-loop form (every tile masked), the form Triton
warp-specialises on sm_90; WS=False its three-loop form (masked edges, unmasked middle).
FUSED_SCALE=True takes the row max of the raw products and one multiply-add a logit
(online_softmax_step_scaled) where there is no softcap; False the separate scale.
"""
import pytest
import torch
from factories import assert_close, make_case, make_layer

from attnkit.backends.triton import tma_path
from attnkit.backends.triton.backend import TritonBackend

FORMS = pytest.mark.parametrize("ws", [False, True], ids=["three-loops", "one-loop"])
SCALES = pytest.mark.parametrize("fused", [False, True], ids=["scaled-logits", "fused-scale"])
CASES = {
    # name: (layer options, case options, route taken)
    "one-prefill": (dict(num_heads=4, num_kv_heads=2, head_dim=64),
                    dict(prefix_lens=[0], new_lens=[45], page_size=16), "direct"),
    "gqa-prefix-two-reqs": (dict(num_heads=4, num_kv_heads=2, head_dim=64),
                            dict(prefix_lens=[21, 0], new_lens=[19, 34], page_size=16), "rows"),
    "window-softcap-sinks": (dict(num_heads=4, num_kv_heads=1, head_dim=64, sliding_window=9,
                                  logit_softcap=3.0, sinks=True),
                             dict(prefix_lens=[25, 3], new_lens=[20, 7], page_size=7), "rows"),
    # no softcap, so FUSED_SCALE takes its form: a window of 5 leaves the later rows of a
    # 16-row block no visible key in the first loaded tile (an all-masked tile while m_i is
    # still the empty NEG_BIG, or the sink), and sinks start m_i at a finite logit
    "window-sinks": (dict(num_heads=4, num_kv_heads=2, head_dim=64, sliding_window=5,
                          sinks=True),
                     dict(prefix_lens=[29, 0], new_lens=[18, 40], page_size=8), "rows"),
    "window-one-prefill": (dict(num_heads=2, num_kv_heads=1, head_dim=64, sliding_window=3),
                           dict(prefix_lens=[0], new_lens=[50], page_size=16), "direct"),
    "encoder-non-causal": (dict(num_heads=2, num_kv_heads=1, head_dim=64, role="encoder"),
                           dict(prefix_lens=[0], new_lens=[37], page_size=8), "direct"),
    "mixed-decode-rows": (dict(num_heads=4, num_kv_heads=2, head_dim=64),
                          dict(prefix_lens=[30, 0, 17], new_lens=[1, 13, 1], page_size=16), "rows"),
}


@pytest.fixture(autouse=True)
def _interpreter_only(request):
    """These run the tiny interpreter tiles on CPU tensors; on a CUDA machine the gpu tests
    (test_triton_gpu.py, variant "tma") cover the kernel at real tiles."""
    from attnkit.backends._triton import interpreting
    if (not interpreting() and "warp_specialised" not in request.node.name
            and request.node.get_closest_marker("gpu") is None):
        pytest.skip("interpreter test on a CUDA machine: test_triton_gpu.py covers the GPU")


def _run(case, config=None):
    backend = TritonBackend(extend_variant="tma", extend_config=config)
    return backend.forward(case.q, case.k, case.v, case.layer, case.cache,
                           backend.prepare(case.meta, case.cache))


@SCALES
@FORMS
@pytest.mark.parametrize("name", sorted(CASES))
def test_tma_kernel_matches_reference(name, ws, fused):
    layer_kw, case_kw, route = CASES[name]
    case = make_case(make_layer(**layer_kw, dtype="fp16"), dtype="fp16", seed=len(name), **case_kw)
    assert tma_path.tma_route(case.q, case.k, case.v, case.layer, case.cache,
                              case.meta) == route
    out = _run(case, dict(WS=ws, FUSED_SCALE=fused))
    assert not out.isnan().any()
    assert_close(out, case.reference(), dtype="fp16", what=f"{name} ws={ws} fused={fused}")


@pytest.mark.parametrize("kv_dtype", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_pages_are_gathered_exactly_and_scaled(kv_dtype):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[0], new_lens=[23], page_size=4, dtype="fp16",
                     kv_dtype=kv_dtype)
    assert tma_path.tma_route(case.q, case.k, case.v, layer, case.cache, case.meta) == "rows"
    assert_close(_run(case), case.reference(), dtype="fp16", kv_dtype=kv_dtype, what=kv_dtype)


@SCALES
@FORMS
def test_tiles_that_cross_request_ends(ws, fused):
    """Query blocks and key tiles that straddle the diagonal and the end of each request (rows
    of a block that see no key of the diagonal tile: an all-masked row in that tile)."""
    layer = make_layer(num_heads=2, num_kv_heads=1, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[13, 40], new_lens=[37, 5], page_size=3, dtype="fp16")
    for cfg in (dict(BLOCK_M=16, BLOCK_N=32), dict(BLOCK_M=32, BLOCK_N=16)):
        assert_close(_run(case, dict(cfg, WS=ws, FUSED_SCALE=fused)), case.reference(),
                     dtype="fp16", what=f"{cfg} ws={ws} fused={fused}")


def _launches(monkeypatch):
    """Record the FUSED_SCALE each launch of the tma kernel gets."""
    from attnkit.backends.triton import prefill_tma
    seen, kernel = [], prefill_tma._prefill_tma_kernel

    class Spy:
        def __getitem__(self, grid):
            def launch(*args, **kw):
                seen.append(kw["FUSED_SCALE"])
                return kernel[grid](*args, **kw)
            return launch
    monkeypatch.setattr(prefill_tma, "_prefill_tma_kernel", Spy())
    return seen


@pytest.mark.parametrize("scale", [-0.2, 0.0], ids=["negative", "zero"])
def test_fused_scale_is_taken_only_where_it_is_the_same_softmax(monkeypatch, scale):
    """max(qk) * c is max(qk * c) only for c > 0 (and -inf * 0 is NaN): with a softcap, or a
    softmax scale <= 0, FUSED_SCALE=True keeps the separate scale and stays right."""
    seen = _launches(monkeypatch)
    layer = make_layer(num_heads=2, num_kv_heads=1, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[0], new_lens=[21], page_size=4, dtype="fp16")
    _run(case, dict(FUSED_SCALE=True))
    odd = make_layer(num_heads=2, num_kv_heads=1, head_dim=64, scale=scale, dtype="fp16")
    odd_case = make_case(odd, prefix_lens=[0], new_lens=[21], page_size=4, dtype="fp16", seed=1)
    assert_close(_run(odd_case, dict(FUSED_SCALE=True)), odd_case.reference(), dtype="fp16",
                 what=f"scale {scale}")
    capped = make_layer(num_heads=2, num_kv_heads=1, head_dim=64, logit_softcap=2.0,
                        dtype="fp16")
    capped_case = make_case(capped, prefix_lens=[0], new_lens=[21], page_size=4, dtype="fp16")
    assert_close(_run(capped_case, dict(FUSED_SCALE=True)), capped_case.reference(),
                 dtype="fp16", what="softcap")
    _run(case)                                   # the default tile: the separate scale
    assert seen == [True, False, False, False]


def test_tma_only_keys_stay_off_the_paged_kernels(monkeypatch):
    """extend_variant "tma" on a step the kernel does not serve (fp32) runs the paged kernels
    with the override's tiles but not its WS / FUSED_SCALE switches: a GPU launch raises
    KeyError on a keyword the kernel does not take (the interpreter ignores it)."""
    from attnkit.backends.triton import backend as triton_backend
    configs = []

    def spy(real):
        def run(*args, config, **kw):
            configs.append(dict(config))
            return real(*args, config=config, **kw)
        return run
    for name in ("extend_attention", "extend_attention_v2"):
        monkeypatch.setattr(triton_backend, name, spy(getattr(triton_backend, name)))
    layer = make_layer(num_heads=2, num_kv_heads=1, head_dim=64)
    case = make_case(layer, prefix_lens=[0], new_lens=[9], page_size=4)
    out = _run(case, dict(WS=False, FUSED_SCALE=True, BLOCK_N=32))
    assert_close(out, case.reference(), dtype="fp32", what="fp32 through the paged kernel")
    assert configs and configs[0]["BLOCK_N"] == 32
    assert not set(configs[0]) & {"WS", "FUSED_SCALE"}


def test_kernel_switches_must_be_booleans():
    from attnkit.errors import AttnkitError
    for key in ("WS", "FUSED_SCALE"):
        with pytest.raises(AttnkitError) as err:
            TritonBackend(extend_variant="tma", extend_config={key: 1})
        assert err.value.code == "AK407" and key in err.value.message


@FORMS
def test_a_nan_in_one_request_stays_there(ws):
    """The last key tile of request 0 reaches into request 1's rows: NaN keys and values there
    must not reach request 0 (its keys' weights are selected to 0, its rows are not read)."""
    layer = make_layer(num_heads=2, num_kv_heads=1, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[0, 0], new_lens=[20, 12], page_size=4, dtype="fp16")
    ref = case.reference()
    case.k[20:] = float("nan")
    case.v[20:] = float("nan")
    out = _run(case, dict(WS=ws, BLOCK_N=32))
    assert_close(out[:20], ref[:20], dtype="fp16", what="request 0 beside a NaN request")


def test_the_route_is_the_step_s_structure_not_a_work_threshold(monkeypatch):
    """Whether tma runs at all is the plan's (its kernel table); the route only says how: one
    fresh request reads k / v directly, anything else a gathered copy, nothing past the
    staging buffer's memory limit; fp32 and odd head dims are not served."""
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[0], new_lens=[8], page_size=4, dtype="fp16")
    args = (case.q, case.k, case.v, layer, case.cache, case.meta)
    assert tma_path.tma_route(*args) == "direct"
    short = make_case(layer, prefix_lens=[60], new_lens=[4], page_size=4, dtype="fp16")
    assert tma_path.tma_route(short.q, short.k, short.v, layer, short.cache, short.meta) == "rows"
    monkeypatch.setattr(tma_path, "MAX_ROWS_BYTES", 64)
    assert tma_path.tma_route(short.q, short.k, short.v, layer, short.cache, short.meta) is None
    fp32 = make_case(make_layer(num_heads=4, num_kv_heads=2, head_dim=64), prefix_lens=[0],
                     new_lens=[8], page_size=4)
    assert tma_path.tma_route(fp32.q, fp32.k, fp32.v, fp32.layer, fp32.cache,
                              fp32.meta) is None                  # fp32: the paged kernels
    odd = make_layer(num_heads=2, num_kv_heads=1, head_dim=96, dtype="fp16")
    odd_case = make_case(odd, prefix_lens=[0], new_lens=[8], page_size=4, dtype="fp16")
    assert tma_path.tma_route(odd_case.q, odd_case.k, odd_case.v, odd, odd_case.cache,
                              odd_case.meta) is None               # not a power of two


_BOX_CHECK = r'''
import re, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from attnkit.backends.triton.prefill_tma import _prefill_tma_kernel as K
cfg = dict(BLOCK_M=128, BLOCK_N=128, WS=True, num_warps=4, num_stages=2)   # the sweep's WS tile
bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
sig = {"q_desc": "*bf16", "k_desc": f"tensordesc<bf16[{bn}, 128]>",
       "v_desc": f"tensordesc<bf16[{bn}, 128]>", "Out": "*bf16", "Sinks": "*fp32"}
sig |= {n: "*i32" for n in ("BlockReq", "BlockM", "QStart", "KStart", "SeqLens")}
sig |= {n: "fp32" for n in ("qk_scale", "v_scale", "softcap")}
sig |= {n: "i32" for n in ("window", "stride_ot", "stride_oh", "num_q_rows", "stride_qt")}
consts = dict(NUM_HEADS=32, GROUP=4, D=128, DV=128, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=True,
              HAS_WINDOW=False, HAS_SOFTCAP=False, HAS_SINKS=False, WS=cfg["WS"], FUSED_SCALE=False)
attrs = {(K.arg_names.index(n),): [["tt.divisibility", 16]] for n, t in sig.items()
         if t.startswith("*") or n.startswith("stride")}
src = ASTSource(K, {**sig, **{k: "constexpr" for k in consts}}, consts, attrs)
ttgir = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"])).asm["ttgir"]
copies = [l for l in ttgir.splitlines() if "async_tma_copy_global_to_local" in l]
assert copies and "ttg.warp_specialize" in ttgir, "expected a warp-specialised TMA kernel"
for l in copies:
    tile = re.search(r"tensordesc<(?:tensor<)?([0-9x]+)x", l).group(1)     # 3.6 / 3.9 forms
    dest = re.search(r"-> !ttg.memdesc<(?:1x)?([0-9x]+)x", l).group(1)
    assert tile == dest, f"TMA tile {tile} copied into a {dest} buffer: {l.strip()[:160]}"
print("ok", len(copies))
'''


def test_warp_specialised_copies_fill_exactly_their_buffers():
    """The GPU hang of the first H200 run: with warp specialisation Triton splits the Q tile
    between two warpgroups, and a host descriptor kept the unsplit box, so each copy wrote a
    whole tile into half a buffer. Compile the warp-specialised d128 tile for sm_90 (no GPU
    needed) and require every TMA copy's tile to equal its destination buffer."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, TRITON_INTERPRET="0")      # the compiler, not the interpreter
    proc = subprocess.run([sys.executable, "-c", _BOX_CHECK], env=env, capture_output=True,
                          text=True, timeout=240)
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stderr[-2000:]


_WS_ON_GPU = r'''
import sys, torch
sys.path.insert(0, "tests")
from factories import assert_close, make_case, make_layer
from attnkit.backends.triton.backend import TritonBackend
T = lambda bm, bn, s: dict(BLOCK_M=bm, BLOCK_N=bn, WS=True, num_warps=4, num_stages=s)
for dim, cfgs in ((128, (T(128, 128, 2), T(128, 64, 2))), (64, (T(128, 128, 2),)),
                  (256, (T(128, 32, 2),))):
    for feats in (dict(), dict(sliding_window=300, logit_softcap=20.0, sinks=True)):
        layer = make_layer(num_heads=16, num_kv_heads=4, head_dim=dim, dtype="bf16",
                           device="cuda", **feats)
        for pl, nl in (([0], [1500]), ([1037, 0, 5], [700, 1500, 3])):
            case = make_case(layer, prefix_lens=pl, new_lens=nl, page_size=16, dtype="bf16",
                             device="cuda", q_scale=4.0)
            for cfg in cfgs:
                be = TritonBackend(extend_variant="tma", extend_config=cfg)
                out = be.forward(case.q, case.k, case.v, layer, case.cache,
                                 be.prepare(case.meta, case.cache))
                torch.cuda.synchronize()
                assert_close(out, case.reference(), dtype="bf16",
                             what=f"d{dim} {feats} {pl} {cfg}")
print("ok")
'''


@pytest.mark.gpu
def test_warp_specialised_tiles_on_gpu():
    """The warp-specialised tiles (not the default until measured) against the reference at
    bf16, with window + softcap + sinks, one prefill (direct route) and a batch with a prefix
    (rows route). In a subprocess with a time limit: a hung kernel fails this test instead of
    stalling the suite."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        proc = subprocess.run([sys.executable, "-c", _WS_ON_GPU], cwd=root, capture_output=True,
                              text=True, timeout=300)
    except subprocess.TimeoutExpired:
        pytest.fail("the warp-specialised kernel did not finish in 300 s (hung?)")
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]


_T = lambda bm, bn, w, s: dict(BLOCK_M=bm, BLOCK_N=bn, WS=False, num_warps=w, num_stages=s)  # noqa: E731
FUSED_GPU_TILES = {64: [_T(128, 64, 8, 3), _T(128, 128, 8, 3), _T(64, 128, 4, 3)],
                   128: [_T(128, 64, 8, 3)], 256: [_T(128, 64, 8, 2)]}


@pytest.mark.gpu
@pytest.mark.parametrize("dim", sorted(FUSED_GPU_TILES))
@pytest.mark.parametrize("feats", [dict(), dict(sliding_window=300, sinks=True),
                                   dict(role="encoder"), dict(logit_softcap=20.0)],
                         ids=["causal", "window-sinks", "non-causal", "softcap"])
def test_fused_scale_tiles_on_gpu(dim, feats):
    """FUSED_SCALE at the sweep's tiles against the reference at bf16: one prefill (direct
    route) and a batch with a prefix (rows route); softcap falls back to the separate scale."""
    layer = make_layer(num_heads=16, num_kv_heads=4, head_dim=dim, dtype="bf16", device="cuda",
                       **feats)
    shapes = [([0], [1500])] + ([] if feats.get("role") else [([1037, 0, 5], [700, 1500, 3])])
    for pl, nl in shapes:
        case = make_case(layer, prefix_lens=pl, new_lens=nl, page_size=16, dtype="bf16",
                         device="cuda", q_scale=4.0)
        for cfg in FUSED_GPU_TILES[dim]:
            for fused in (False, True):
                assert_close(_run(case, dict(cfg, FUSED_SCALE=fused)), case.reference(),
                             dtype="bf16", what=f"d{dim} {feats} {pl} {cfg} fused={fused}")


def test_warp_specialised_three_stage_tiles_are_refused():
    """On the H200 (2026-12-01, Triton 3.6) every warp-specialised tile at 3 stages returned NaN;
    the backend refuses such a config when it is made (AK407), before any step."""
    from attnkit.backends.triton.backend import TritonBackend
    from attnkit.errors import AttnkitError

    with pytest.raises(AttnkitError) as err:
        TritonBackend(extend_variant="tma", extend_config=dict(WS=True, num_stages=3))
    assert err.value.code == "AK407" and "stages" in err.value.message
    TritonBackend(extend_variant="tma", extend_config=dict(WS=True, num_stages=2))   # served


def test_gluon_switch_falls_back_where_gluon_cannot_run():
    """GLUON=True asks for prefill_gluon.py on the direct route; where it cannot run (here: the
    interpreter, no sm_90) the tma kernel serves the step, right; a non-bool is refused."""
    from attnkit.backends.triton.backend import TritonBackend
    from attnkit.errors import AttnkitError

    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp16")
    case = make_case(layer, prefix_lens=[0], new_lens=[40], page_size=16, dtype="fp16")
    assert_close(_run(case, dict(GLUON=True)), case.reference(), dtype="fp16", what="gluon off")
    with pytest.raises(AttnkitError) as err:
        TritonBackend(extend_variant="tma", extend_config=dict(GLUON=1))
    assert err.value.code == "AK407"


def test_gluon_is_a_variant_not_a_tile_default():
    """The Gluon kernel runs where the plan lists the gluon variant (or GLUON=True is asked
    for); no head dim turns it on by default."""
    from attnkit.backends.triton.tma_path import merged_tma_config, tma_config

    for d in (64, 128, 256):
        assert tma_config(d, interpret=False)["GLUON"] is False
        assert merged_tma_config(d, dict(BLOCK_N=32), interpret=False)["BLOCK_N"] == 32
        assert merged_tma_config(d, dict(GLUON=True), interpret=False)["GLUON"] is True
