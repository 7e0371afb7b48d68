"""Planning DeepSeek sparse attention (docs/dsa.md): DSA models plan to a backend declaring
sparse_topk, with reasons; a backend without it is rejected with a generated reason; one
declaring it with other sizes gets AK111; dense MLA models never take a sparse backend; with no
backend declaring it, AK122 says what serves it elsewhere."""
import dataclasses

from plan_fakes import FAKE, GPU, decl

from attnkit.model import load_model
from attnkit.planning.solver import plan
from attnkit.registry import declarations
from attnkit.registry.capabilities import MultipleOf

SPARSE = dict(platforms=("cuda",), kinds=("mla",), mla_dims=((512, 64),), requires=("torch",),
              page_sizes=(64,), features=frozenset({"sparse_topk"}), sparse_dims=((64, 128),),
              sparse_topks=MultipleOf(64), index_dtypes=("bf16", "fp8_e4m3"))


def run(model, platform="h200", request=None, **kw):
    kw.setdefault("env", {})
    return plan(model, platform, request, **kw)


def test_deepseek_v32_plans_on_a_backend_declaring_sparse_topk():
    """On the H200 the sparse Triton backend where it is registered, else torch_native; on a
    CPU torch_native."""
    sparse = "triton_dsa" if "triton_dsa" in declarations() else "torch_native"
    p = run("deepseek-v3.2", "h200")
    assert p.ok and p.prefill_backend == p.decode_backend == sparse
    cpu = run("deepseek-v3.2", "cpu")
    assert cpu.ok and cpu.prefill_backend == cpu.decode_backend == "torch_native"
    assert "CPU DeepSeek sparse attention" in cpu.why["prefill"]
    assert p.model_info["features"] == ["sparse_topk"]
    for name, reasons in p.rejected.items():       # every other candidate names what it lacks
        assert any(r.field in ("features", "kind") for r in reasons), name
    assert any(r.code == "AK103" and r.actual == "sparse_topk" for r in p.rejected["triton_mla"])
    # the reasons quote DSA buckets only (never a dense-MLA measurement): the shipped H200
    # profile measured triton_dsa at DeepSeek-V3.2's shape (2026-12-02)
    for phase in ("prefill", "decode"):
        assert "top-k 2048, indexer 64x128" in p.why[phase], p.why[phase]
    unmeasured = run("deepseek-v3.2", "h200", profile=False)
    for phase in ("prefill", "decode"):
        assert "DeepSeek sparse attention" in unmeasured.why[phase], unmeasured.why[phase]
        assert "GB/s" not in unmeasured.why[phase] and "TFLOP/s" not in unmeasured.why[phase]
    groups = p.model_info["layer_groups"]
    assert groups[0]["sparse_topk"] == {"topk": 2048, "index_n_heads": 64, "index_head_dim": 128}


def test_the_sparse_backend_is_first_for_dsa_models_and_never_for_dense_ones():
    reg = {**FAKE, "triton_dsa": decl("triton_dsa", **SPARSE),
           "torch_native": dataclasses.replace(FAKE["torch_native"], capabilities=dataclasses.replace(
               FAKE["torch_native"].capabilities, features=FAKE["torch_native"].capabilities.features
               | {"sparse_topk"}, sparse_dims="any", sparse_topks="any",
               index_dtypes=("fp32", "fp16", "bf16", "fp8_e4m3")))}
    p = run(load_model("deepseek-v3.2"), GPU, registry=reg)
    assert p.ok and p.prefill_backend == p.decode_backend == "triton_dsa" and p.settings["page_size"] == 64
    dense = run(load_model("deepseek-v3"), GPU, registry=reg)
    assert dense.ok and "triton_dsa" not in (dense.prefill_backend, dense.decode_backend)


def test_a_sparse_backend_with_other_sizes_is_rejected_with_ak111():
    narrow = decl("triton_dsa", **{**SPARSE, "sparse_dims": ((32, 128),), "sparse_topks": (1024,),
                                   "index_dtypes": ("bf16",)})
    model = load_model("deepseek-v3.2")
    p = run(model, GPU, {"kv_cache_dtype": "fp8_e4m3"}, registry={**FAKE, "triton_dsa": narrow})
    reasons = {r.field: r for r in p.rejected["triton_dsa"] if r.code == "AK111"}
    assert set(reasons) == {"sparse_dims", "sparse_topks", "index_dtype"}
    assert reasons["sparse_dims"].actual == [64, 128] and reasons["sparse_topks"].actual == 2048
    assert reasons["index_dtype"].actual == "fp8_e4m3" and "layers 0-60" in reasons["sparse_dims"].message


def test_without_a_backend_declaring_it_dsa_is_ak122_naming_what_serves_it_elsewhere():
    p = run(load_model("deepseek-v3.2"), GPU, registry=FAKE)
    assert not p.ok and p.error["code"] == "AK122"
    assert "no attnkit backend implements" in p.error["message"] and "2048" in p.error["message"]
    fixes = " ".join(p.error["solutions"])
    assert "FlashMLA" in fixes and "FLASHMLA_SPARSE" in fixes and "nsa" in fixes
    for name, reasons in p.rejected.items():
        assert any(r.field in ("features", "kind") for r in reasons), name
