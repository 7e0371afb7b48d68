"""dual_chunk declaration and planner check (torch-free), and the backend's refusals."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from dca_session import make_seqs, run_steps
from factories import make_layer

from attnkit.backends.batch import Request, build_batch
from attnkit.backends.dual_chunk.backend import DualChunkBackend
from attnkit.backends.dual_chunk.declaration import DECLARATION, check
from attnkit.backends.metadata import ForwardMode
from attnkit.errors import CATALOG, AttnkitError
from attnkit.hardware import get_preset
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import DualChunkConfig, LayerAttention, ModelAttention
from attnkit.planning.reasons import check_backend, model_needs
from attnkit.registry import declarations, load_backend

TOY = DualChunkConfig(chunk_size=8, local_size=2)                 # cl = 6
QWEN = DualChunkConfig(262144, 8192, 262144)


def model(config=QWEN, layers=2):
    return ModelAttention("qwen-1m-ish", "Qwen2ForCausalLM", tuple(
        LayerAttention(layer_id=i, num_heads=28, num_kv_heads=4, head_dim=128, dual_chunk=config)
        for i in range(layers)))


def test_registered_and_loadable():
    assert declarations()["dual_chunk"] is DECLARATION
    caps = DECLARATION.capabilities.to_dict()
    assert caps["features"] == ["cuda_graph", "dual_chunk"] and caps["kinds"] == ["mha"]
    assert isinstance(load_backend("dual_chunk"), DualChunkBackend)


def test_declaration_import_is_torch_free():
    code = ("import sys, attnkit.backends.dual_chunk.declaration; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_check_accepts_divisor_and_unset_page_size():
    for page in (None, 1, 16, 64, 8192):
        assert check(model=model(), platform=None, phase="decode", settings={"page_size": page}) == []


def test_check_rejects_non_divisor_naming_both_values():
    [(field, required, actual, message)] = check(model=model(TOY), platform=None, phase="prefill",
                                                 settings={"page_size": 4})
    assert field == "page_size" and actual == 4 and "6" in required
    assert "4" in message and "6" in message and "3, 6" in message     # nearest valid sizes


def test_check_rejects_models_without_dual_chunk():
    plain = ModelAttention("llama", "LlamaForCausalLM",
                           (LayerAttention(layer_id=0, num_heads=8, num_kv_heads=8, head_dim=64),))
    [(field, _, actual, message)] = check(model=plain, platform=None, phase="decode", settings={})
    assert field == "dual_chunk" and actual == [0] and "llama" in message


def test_check_rejects_invalid_config():
    bad = check(model=model(DualChunkConfig(8, 8)), platform=None, phase="decode", settings={})
    assert [b[0] for b in bad] == ["dual_chunk.local_size"]


def test_planner_turns_check_into_reasons():
    m = model(TOY)
    reasons = check_backend(DECLARATION, model=m, needs=model_needs(m), platform=get_preset("cpu"),
                            phase="decode", settings={"page_size": 4})
    assert [(r.code, r.field, r.actual) for r in reasons] == [("AK110", "page_size", 4)]


def test_every_code_raised_has_a_catalog_entry():
    root = Path(__file__).resolve().parents[2] / "src" / "attnkit"
    files = [*root.joinpath("backends", "dual_chunk").glob("*.py"), root / "runner" / "layers" / "rotary.py"]
    codes = {c for f in files for c in re.findall(r'"(AK\d{3})"', f.read_text())}
    assert {"AK440", "AK470", "AK473", "AK474"} <= codes      # AK472: the shared validation.py
    assert codes <= set(CATALOG)


def _step(layer, *, page_size=3, cache_page_size=None, mode=None, q=None):
    """A 5-token prefill of ``layer`` as a thunk, so a test can expect its refusal."""
    spec = layer.spec
    cache = PagedKVCache([spec], num_pages=4, page_size=cache_page_size or page_size, dtype=torch.float32)
    meta = build_batch([Request(0, 5, [0, 1])], page_size=page_size, mode=mode)
    q = torch.zeros(5, 3, spec.num_heads, spec.head_dim) if q is None else q
    k = torch.zeros(5, spec.num_kv_heads, spec.head_dim)
    backend = DualChunkBackend()
    return lambda: backend.forward(q, k, k.clone(), layer, cache, backend.prepare(meta, cache))


def code_of(fn):
    with pytest.raises(AttnkitError) as err:
        fn()
    return err.value


def test_page_size_not_dividing_chunk_length_is_ak470():
    layer = make_layer(num_heads=2, head_dim=8, dual_chunk=TOY)
    seqs = make_seqs(layer.spec, [9])
    err = code_of(lambda: run_steps(layer, seqs, [[9]], page_size=4))
    assert err.code == "AK470" and "4" in err.message and "6" in err.message
    assert err.details == {"chunk_len": 6, "page_size": 4}


@pytest.mark.parametrize("layer_kw,step_kw,code", [
    (dict(dual_chunk=None), dict(q=torch.zeros(5, 2, 8)), "AK440"),     # plain layer (was AK471)
    ({}, dict(q=torch.zeros(5, 2, 8)), "AK472"),                        # q without variants
    (dict(sliding_window=4), {}, "AK440"),                              # feature not served
    ({}, dict(mode=ForwardMode.VERIFY), "AK420"),                       # mode not served
    (dict(dual_chunk=DualChunkConfig(4, 4)), {}, "AK473"),              # cl = 0
    ({}, dict(cache_page_size=6), "AK418"),                             # cache vs batch pages
], ids=["plain-layer", "flat-q", "sliding-window", "verify", "bad-config", "cache-pages"])
def test_refusals(layer_kw, step_kw, code):
    layer = make_layer(num_heads=2, head_dim=8, **({"dual_chunk": TOY} | layer_kw))
    assert code_of(_step(layer, **step_kw)).code == code
