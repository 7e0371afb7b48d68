"""`attnkit tune` on a CUDA GPU: a small grid through every usable backend, CUDA-graph timed,
and the planner then ranks by the profile it wrote. (Marker gpu: skipped without CUDA.)"""
import pytest

from attnkit.planning.profile import Shape
from attnkit.planning.solver import plan
from attnkit.tune.grid import Runtime
from attnkit.tune.run import tune

SMALL = [(Shape("mha", 8, 2, 128, 128, "bf16", "bf16"), Runtime(((4, 1024),), ((512, 0, 1), (256, 768, 1)))),
         (Shape("mha", 8, 2, 128, 128, "bf16", "fp8_e4m3"), Runtime(((4, 1024),), ())),
         (Shape("mla", 16, 1, 192, 128, "bf16", "bf16", 512, 64), Runtime(((4, 1024),), ((256, 768, 1),), (16, 64)))]


@pytest.mark.gpu
def test_tune_on_the_gpu_then_plan_with_it(tmp_path):
    path, prof = tune(device="cuda", shapes=SMALL, out=tmp_path / "gpu.json")
    backends = {e.backend for e in prof.entries}
    assert {"triton", "triton_mla", "sdpa", "torch_native"} <= backends and not prof.smoke
    bad = [e for e in prof.entries if e.status != "ok"]
    assert not bad, bad
    assert all(e.graph_ms and e.eager_ms for e in prof.entries if e.backend != "torch_native")
    mla_decode = [e for e in prof.entries if (e.backend, e.bucket.phase) == ("triton_mla", "decode")]
    assert {e.bucket.page_size for e in mla_decode} == {16, 64}            # the MLA runtime's two page sizes
    p = plan("llama-3.1-8b", "auto", {"tp_size": 4}, profile=path)       # 8/2 heads per rank
    # a grid with fresh (prefix 0) and extend buckets may plan extends apart ("extend")
    phases = p.to_dict()["profile"]["phases"]
    assert p.ok and phases[:2] == ["prefill", "decode"] and set(phases) <= {"prefill", "decode", "extend"}
    assert all(p.why[ph].startswith(f"{ph}: ") for ph in phases)
    again, prof2 = tune(device="cuda", shapes=SMALL, out=path)                # resumes: nothing new
    assert len(prof2.entries) == len(prof.entries)
