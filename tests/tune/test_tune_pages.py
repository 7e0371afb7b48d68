"""The GPU grids measure MLA decode at 16- and 64-key pages (triton_mla runs another kernel at
64); a backend that refuses 64 is not measured there; a 64-page bucket builds 64-key pages."""
import dataclasses

import pytest

from attnkit.backends.sdpa.backend import SdpaBackend
from attnkit.hardware import resolve_platform
from attnkit.model import load_model
from attnkit.planning.profile import Bucket
from attnkit.registry import declarations
from attnkit.tune import grid
from attnkit.tune.case import make_case
from attnkit.tune.run import measure_entry, serving


def twin(b: Bucket, page: int) -> Bucket:
    return dataclasses.replace(b, page_size=page)


@pytest.mark.parametrize("name, extra", [("GPU_FULL", 28), ("GPU_QUICK", 3), ("CPU_FULL", 0), ("CPU_QUICK", 0)])
def test_page_64_buckets_are_the_gpu_mla_decode_buckets_with_a_page_16_twin(name, extra):
    buckets = grid.buckets(getattr(grid, name))
    at_64 = [b for b in buckets if b.page_size == 64]
    assert len(at_64) == extra and len(set(buckets)) == len(buckets)
    assert {b.page_size for b in buckets} <= {16, 64}
    assert all(b.shape.kind == "mla" and b.phase == "decode" and twin(b, 16) in buckets for b in at_64)
    mla_decode = [b for b in buckets if b.shape.kind == "mla" and b.phase == "decode" and b.page_size == 16]
    assert (extra == 0) or all(twin(b, 64) in at_64 for b in mla_decode)


def test_a_models_grid_takes_the_mla_pages_too():
    buckets = grid.buckets(grid.model_grid([load_model("deepseek-v3")], "cuda", False, resolve_platform("h200")))
    assert {(b.phase, b.page_size) for b in buckets} == {("decode", 16), ("decode", 64), ("prefill", 16)}


def test_a_backend_that_refuses_64_is_not_measured_there():
    h200 = resolve_platform("h200")
    b16 = next(b for b in grid.buckets(grid.GPU_QUICK) if b.shape.kind == "mla" and b.phase == "decode")
    b64 = twin(b16, 64)
    decls = dict(declarations())
    assert "triton_mla" in serving(b64, decls, h200, None)
    mla = decls["triton_mla"]
    decls["triton_mla"] = dataclasses.replace(mla, capabilities=dataclasses.replace(mla.capabilities,
                                                                                   page_sizes=(1, 16, 32)))
    assert "triton_mla" not in serving(b64, decls, h200, None) and "triton_mla" in serving(b16, decls, h200, None)


def test_a_page_64_bucket_builds_64_key_pages_and_checks_there():
    shape = grid.CPU_FULL[1][0]                                  # the CPU MLA shape
    b = grid.bucket(shape, "decode", 3, 1, 200, page_size=64)
    case = make_case(b, "cpu")
    assert case.cache.page_size == case.meta.page_size == 64
    assert case.cache.latent[0].shape[:2] == (3 * 4, 64)          # ceil(200 / 64) = 4 pages a request
    assert [len(r) for r in case.rows] == [4, 4, 4]
    e = measure_entry(case, SdpaBackend(), "cpu")
    assert e.status == "ok" and e.bucket.page_size == 64 and e.rel_err < 1e-5


def test_a_models_grid_measures_the_planners_dtype():
    """--models tunes each model in the dtype the planner fills for it on that device (the one
    default): fp16 for a bf16 model on a T4 (no bf16 there), bf16 on an H200 and the CPU."""
    import attnkit

    model = load_model("llama-3.1-8b")
    for device, preset in (("cuda", "t4"), ("cuda", "h200"), ("cpu", "cpu")):
        shapes = {s.dtype for s, _ in grid.model_grid([model], device, True, resolve_platform(preset))}
        assert shapes == {attnkit.plan("llama-3.1-8b", preset).run.dtype}
    assert {s.dtype for s, _ in grid.model_grid([model], "cuda", True, resolve_platform("t4"))} == {"fp16"}


def test_a_models_grid_is_what_plan_runs_for_the_request(monkeypatch):
    """attnkit tune takes a request (what `attnkit plan` takes) and hands it to plan() unchanged;
    the shapes are plan.run's: dtypes, heads a rank (tp), and its page size among the decodes'."""
    from attnkit.planning import solver
    from attnkit.planning.request import parse_request

    request = parse_request({"dtype": "fp16", "tp_size": 8, "page_size": 32})
    seen = []
    real = solver.plan
    monkeypatch.setattr(solver, "plan", lambda m, p, r, **kw: seen.append(r) or real(m, p, r, **kw))
    shapes = grid.model_grid([load_model("deepseek-v3")], "cuda", True, resolve_platform("h200"), request)
    assert seen == [request] and seen[0] is request
    ((shape, rt),) = shapes
    assert (shape.heads, shape.dtype, shape.kv_dtype) == (16, "fp16", "fp16") and 32 in rt.decode_pages


def test_tune_plan_flags_need_models_and_are_parsed_once(capsys):
    from attnkit.cli.main import main
    assert main(["tune", "--device", "cpu", "--dtype", "fp16"]) != 0
    assert "AK306" in capsys.readouterr().err
    assert main(["tune", "--device", "cpu", "--models", "qwen3-4b", "--page-size", "abc"]) != 0
    err = capsys.readouterr().err
    assert "AK306" in err and "page_size" in err
