"""A plan with a separate extend backend, end to end on CPU: a synthetic profile of this CPU
ranks torch_native first for fresh prefills and decode, sdpa first for extends; the engine
runs each step kind on its backend, and every step's logits equal transformers'."""
import json

import torch

from attnkit.backends.hybrid import HybridBackend
from attnkit.planning.profile import SCHEMA, VERSION
from attnkit.runner import Engine
from attnkit.runner.engine.setup import platform_of
from runner_helpers import close, hf_greedy, hf_logits

PROMPTS = [[1, 5, 9, 3, 7, 8, 20, 21, 22, 23, 24, 100], [4, 6, 8, 10, 12], [3, 3, 9, 17]]


def _entry(backend, phase, rate, *, new, context, batch=1):
    bucket = {"kind": "mha", "phase": phase, "batch": batch, "new": new, "context": context, "heads": 4,
              "kv_heads": 2, "head_dim": 16, "v_head_dim": 16, "dtype": "fp32", "kv_dtype": "fp32", "page_size": 4}
    return {"backend": backend, "phase": phase, "bucket": bucket, "status": "ok", "work": 1e9,
            "graph_ms": None, "eager_ms": 1e9 / rate / (1e6 if phase == "decode" else 1e9)}


def cpu_profile(path):
    cpu = platform_of(torch.device("cpu"))
    rates = {("prefill", 0): {"torch_native": 2.0, "sdpa": 1.0}, ("prefill", 64): {"torch_native": 1.0, "sdpa": 2.0},
             ("decode", 64): {"torch_native": 20.0, "sdpa": 10.0}}
    entries = [_entry(b, phase, r, new=1 if phase == "decode" else 64, context=64 + prefix)
               for (phase, prefix), by in rates.items() for b, r in by.items()]
    path.write_text(json.dumps({"schema": SCHEMA, "version": VERSION, "device": {"kind": "cpu", "name": cpu.name},
                                "software": {}, "date": "2026-12-02", "smoke": False, "method": {},
                                "entries": entries}))
    return str(path)


def test_each_step_kind_runs_on_its_planned_backend(tiny_model, tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNKIT_PROFILE", cpu_profile(tmp_path / "cpu.json"))
    path, hf = tiny_model("llama")
    engine = Engine.from_pretrained(path, page_size=4, max_tokens=256)
    plan = engine.plan
    assert (plan.prefill_backend, plan.extend_backend, plan.decode_backend) == ("torch_native", "sdpa", "torch_native")
    hybrid = engine.backend
    assert isinstance(hybrid, HybridBackend)
    assert (hybrid.prefill.name, hybrid.extend.name, hybrid.decode.name) == ("torch_native", "sdpa", "torch_native")
    assert hybrid.prefill is hybrid.decode                         # one object for one name
    served, route = [], hybrid.route
    hybrid.route = lambda meta: served.append(route(meta).name) or route(meta)
    a, b = PROMPTS[0], PROMPTS[1]
    out = engine.step({0: a[:7]})                                  # fresh prefill
    close(out[0], hf_logits(hf, a[:7]))
    out = engine.step({0: a[7:]})                                  # chunked-prefill continuation
    close(out[0], hf_logits(hf, a)[7:])
    out = engine.step({0: [40], 1: b})                             # MIXED: a decode and a fresh prompt
    close(out[0], hf_logits(hf, a + [40])[-1:])
    close(out[1], hf_logits(hf, b))
    out = engine.step({0: [41], 1: [42]})                          # DECODE
    close(out[0], hf_logits(hf, a + [40, 41])[-1:])
    close(out[1], hf_logits(hf, b + [42])[-1:])
    assert served == ["torch_native", "sdpa", "sdpa", "torch_native"]
    engine.release()
    assert engine.generate(PROMPTS, max_new_tokens=5) == [hf_greedy(hf, p, 5) for p in PROMPTS]


def test_the_tensor_parallel_recipe_carries_the_extend_backend(tiny_model, tmp_path, monkeypatch):
    """tp 2 builds every rank from the recipe: rank 0's hybrid has the planned extend backend,
    and a fresh prefill, a chunked continuation and a decode equal tp 1's."""
    monkeypatch.setenv("ATTNKIT_PROFILE", cpu_profile(tmp_path / "cpu.json"))
    path, _ = tiny_model("llama")
    one, two = (Engine.from_pretrained(path, page_size=4, max_tokens=256, tp_size=n) for n in (1, 2))
    assert (two.plan.prefill_backend, two.plan.extend_backend, two.plan.decode_backend) == \
        ("torch_native", "sdpa", "torch_native")
    assert isinstance(two.backend, HybridBackend) and two.backend.extend.name == "sdpa"
    a = PROMPTS[0]
    for step in ({0: a[:7]}, {0: a[7:]}, {0: [40]}):
        close(two.step(step)[0], one.step(step)[0], rtol=1e-5)
