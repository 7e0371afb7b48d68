"""`attnkit tune` on DSA buckets (docs/dsa.md): their own shapes, their work, the DSA reference as
the check (a backend that attends densely is recorded wrong), and plans that match DSA models to
DSA buckets only."""
import dataclasses

import pytest

from attnkit.backends.torch_native.backend import TorchNativeBackend
from attnkit.planning.measured import model_shape
from attnkit.model import load_model
from attnkit.tune import grid
from attnkit.tune.case import _selected, make_case, work
from attnkit.tune.run import measure_entry

DSA_BUCKETS = [b for b in grid.buckets(grid.CPU_QUICK) if b.shape.topk is not None]


class Dense(TorchNativeBackend):
    """A deliberately wrong DSA backend: stores the index keys, then attends to every key."""

    def _forward(self, q, k, v, layer, cache, step, *, indexer=None):
        cache.store_index(layer.layer_id, step.meta.slot_mapping, indexer.k)
        return super()._forward(q, k, v, layer, cache, step)


def test_every_grid_has_dsa_buckets_of_deepseek_v32s_shape():
    shape = model_shape(load_model("deepseek-v3.2"), {"dtype": "bf16"})
    assert shape.topk == 2048 and (shape.index_heads, shape.index_dim) == (64, 128)
    for g in (grid.GPU_FULL, grid.GPU_QUICK):
        assert {s for s, _ in g if s.topk is not None} == {shape}
    assert DSA_BUCKETS and {b.phase for b in DSA_BUCKETS} == {"decode", "prefill"}


@pytest.mark.parametrize("bucket", DSA_BUCKETS, ids=lambda b: b.phase)
def test_a_dense_answer_to_a_dsa_bucket_is_wrong(bucket, monkeypatch):
    assert bucket.context > bucket.shape.topk            # selection matters in the bucket
    case = make_case(bucket, "cpu")
    monkeypatch.setattr("attnkit.tune.run.measure", lambda *a, **k: {"graph_ms": None, "eager_ms": 1.0,
                                                                     "note": "stub"})
    assert measure_entry(case, Dense(), "cpu").status == "wrong"
    ok = measure_entry(case, TorchNativeBackend(), "cpu")
    assert ok.status == "ok" and ok.rel_err < 1e-5


def test_dsa_work_counts_the_selection_and_the_indexer():
    b = next(x for x in grid.buckets(grid.GPU_FULL) if x.shape.topk and x.phase == "decode" and x.context == 32768)
    s = b.shape
    dense = dataclasses.replace(b, shape=dataclasses.replace(s, topk=None, index_heads=None, index_dim=None))
    latent = (s.kv_lora_rank + s.rope_dim) * 2
    assert work(b) == b.batch * (b.context * s.index_dim * 2 + s.topk * latent)
    assert work(b) < work(dense)
    assert _selected(0, 3, 8) == 1 + 2 + 3 and _selected(10, 12, 4) == 8


def test_tune_models_deepseek_v32_measures_its_dsa_shape_at_the_dsa_runtimes():
    from attnkit.hardware import resolve_platform

    got = grid.model_grid([load_model("deepseek-v3.2")], "cuda", False, resolve_platform("h200"))
    assert [(s.topk, rt) for s, rt in got] == [(2048, grid.DSA_MAIN)]
    dense = grid.model_grid([load_model("deepseek-v3")], "cuda", False, resolve_platform("h200"))
    assert [(s.topk, rt) for s, rt in dense] == [(None, grid.MLA_MAIN)]


def test_an_fp8_dsa_bucket_reads_its_cached_index_keys_back():
    """The cached fp8 index keys of a tune case have scales (not the cache's zeros)."""
    b = dataclasses.replace(DSA_BUCKETS[0], shape=dataclasses.replace(DSA_BUCKETS[0].shape, kv_dtype="fp8_e4m3"))
    case = make_case(b, "cpu")
    assert case.cache.is_index_fp8 and (case.cache.index_k_scale[0] == 1).all()
    assert measure_entry(case, TorchNativeBackend(), "cpu").status == "ok"
