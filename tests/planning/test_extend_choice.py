"""A separate extend backend: chosen when the profile ranks fresh prefills (prefix 0) and
extends over a cached prefix (prefix > 0) differently, and not otherwise; named backends win;
every chosen backend shares one page size."""
import dataclasses

import pytest
from plan_fakes import FAKE, GPU, decl, mha, registry
from profile_fakes import MHA_H200, entry, profile, write

from attnkit.planning import profile_search as prof
from attnkit.planning.render import matrix_text, plan_text
from attnkit.planning.solver import plan
from attnkit.registry.capabilities import MultipleOf

# Shaped like the H200 measurement: sdpa prefills fresh faster, triton extends and decodes faster.
FRESH = [entry("triton", "prefill", 470, new=16384, context=16384), entry("sdpa", "prefill", 620, new=16384, context=16384),
         entry("triton", "prefill", 330, new=2048, context=2048), entry("sdpa", "prefill", 305, new=2048, context=2048)]
EXTEND = [entry("triton", "prefill", 481, new=2048, context=34816), entry("sdpa", "prefill", 321, new=2048, context=34816),
          entry("torch_native", "prefill", 20, new=2048, context=34816)]
DECODE = [e for e in MHA_H200 if e["phase"] == "decode"]


@pytest.fixture(autouse=True)
def no_shipped(tmp_path, monkeypatch):
    monkeypatch.setattr(prof, "SHIPPED_DIR", tmp_path / "no-shipped")
    monkeypatch.setenv("ATTNKIT_PROFILE_DIR", str(tmp_path / "no-cache"))
    monkeypatch.delenv("ATTNKIT_PROFILE", raising=False)


@pytest.fixture
def split(tmp_path):
    return write(tmp_path / "split.json", profile(FRESH + EXTEND + DECODE))


def test_a_profile_that_separates_the_workloads_gives_extend_its_own_backend(split):
    p = plan("llama-3.1-8b", "h200", profile=split)
    assert (p.prefill_backend, p.extend_backend, p.decode_backend) == ("sdpa", "triton", "triton")
    # fresh: sdpa sqrt(620*305) = 435 vs triton sqrt(470*330) = 394; extend: the one prefix bucket
    assert p.why["prefill"].startswith("prefill: sdpa, 435 vs 394 TFLOP/s (triton); NVIDIA H200 profile 2026-12-02, "
                                       "CUDA-graph replays, geometric mean over 2 buckets (new 2048-16384, prefix 0)")
    assert p.why["extend"].startswith("extend: triton, 481 vs 321 TFLOP/s (sdpa), 20 (torch_native); NVIDIA H200 "
                                      "profile 2026-12-02, CUDA-graph replays, new=2048 prefix=32768")
    fills = {a["field"]: a for a in p.adjustments}
    assert fills["extend_backend"]["rule"] == "profile" and fills["extend_backend"]["to"] == "triton"
    assert fills["extend_backend"]["reason"].endswith("for steps over a cached prefix")
    assert fills["prefill_backend"]["reason"].endswith("for prefills without a cached prefix")
    d = p.to_dict()
    assert (d["prefill_backend"], d["extend_backend"], d["decode_backend"]) == ("sdpa", "triton", "triton")
    assert d["alternatives"]["extend"] == ["sdpa", "torch_native"]
    text = plan_text(p)
    assert "  prefill         sdpa\n" in text and "  extend          triton\n" in text and "  decode          triton\n" in text
    assert "sdpa/triton/triton p16" in matrix_text([p], ["llama-3.1-8b"], ["h200"])


def test_one_backend_when_the_workloads_agree_or_the_profile_does_not_separate_them(tmp_path, split):
    agree = [dict(e, graph_ms=e["graph_ms"] / 2) if e["backend"] == "triton" else e for e in FRESH]
    for rows in (agree + EXTEND + DECODE, MHA_H200, EXTEND + DECODE):
        p = plan("llama-3.1-8b", "h200", profile=write(tmp_path / "p.json", profile(rows)))
        assert p.extend_backend == p.prefill_backend and "extend" not in p.why
        assert "extend" not in p.alternatives and "extend_backend" not in {a["field"] for a in p.adjustments}
        assert "  extend " not in plan_text(p)
    assert plan("llama-3.1-8b", "h200", profile=False).extend_backend == "triton"      # priority tables
    # a prefill workload names one step to rank by: no split
    one = plan("llama-3.1-8b", "h200", profile=split, workload={"prefill": {"new": 2048, "context": 34816}})
    assert one.prefill_backend == one.extend_backend == "triton" and "extend" not in one.why


def test_a_named_backend_runs_fresh_prefills_and_extends_alike(split):
    for request, expected in (({"prefill_attention_backend": "triton"}, ("triton", "triton", "triton")),
                              ({"prefill_attention_backend": "sdpa"}, ("sdpa", "sdpa", "triton")),
                              ({"attention_backend": "sdpa"}, ("sdpa", "sdpa", "sdpa"))):
        p = plan("llama-3.1-8b", "h200", request, profile=split)
        assert (p.prefill_backend, p.extend_backend, p.decode_backend) == expected, request
        assert "extend" not in p.why
    env = plan("llama-3.1-8b", "h200", profile=split, env={"ATTNKIT_ATTENTION_BACKEND": "sdpa"})
    assert (env.prefill_backend, env.extend_backend) == ("sdpa", "sdpa")
    # naming only the decode backend leaves prefill open: the split still applies
    p = plan("llama-3.1-8b", "h200", {"decode_attention_backend": "sdpa"}, profile=split)
    assert (p.prefill_backend, p.extend_backend, p.decode_backend) == ("sdpa", "triton", "sdpa")


def _pages(sdpa, triton, torch_native):
    """FAKE with these page sizes for its three MHA backends."""
    by = {"sdpa": sdpa, "triton": triton, "torch_native": torch_native}
    return registry(*(dataclasses.replace(d, capabilities=dataclasses.replace(d.capabilities, page_sizes=by[n]))
                      if n in by else d for n, d in FAKE.items()))


def test_the_three_backends_share_one_page_size(tmp_path):
    decode_fast = [entry("torch_native", "decode", 5000, batch=64)] + [e for e in DECODE if e["backend"] != "torch_native"]
    path = write(tmp_path / "p.json", profile(FRESH + EXTEND + decode_fast))
    model = mha(dim=128, heads=32, kv=8)
    p = plan(model, GPU, registry=_pages((16, 32), MultipleOf(32), "any"), env={}, profile=path)
    assert (p.prefill_backend, p.extend_backend, p.decode_backend) == ("sdpa", "triton", "torch_native")
    assert p.settings["page_size"] == 32
    # pairwise compatible, but no page size all three accept: not these three together
    reg = _pages((16, 32), (32, 64), (16, 64))
    p = plan(model, GPU, registry=reg, env={}, profile=path)
    assert p.ok
    chosen = {p.prefill_backend, p.extend_backend, p.decode_backend}
    assert chosen != {"sdpa", "triton", "torch_native"}
    assert all(reg[n].capabilities.accepts_page_size(p.settings["page_size"]) for n in chosen)


def test_a_page_size_the_split_cannot_share_keeps_one_prefill_backend(tmp_path):
    path = write(tmp_path / "p.json", profile(FRESH + EXTEND + DECODE))
    model = mha(dim=128, heads=32, kv=8)
    reg = _pages((8,), MultipleOf(16), "any")
    p = plan(model, GPU, registry=reg, env={}, profile=path)
    assert p.ok and p.extend_backend == p.prefill_backend and "extend" not in p.why
    assert reg[p.prefill_backend].capabilities.accepts_page_size(p.settings["page_size"])
    assert reg[p.decode_backend].capabilities.accepts_page_size(p.settings["page_size"])


def test_an_encoder_has_no_extend_backend(tmp_path):
    """bge-m3 has no decode phase, so no step over a cached prefix: one prefill backend, even
    where the profile ranks its shape's fresh and extend buckets differently."""
    shape = dict(heads=16, kv_heads=16, head_dim=64, dtype="fp32")
    rows = [entry("sdpa", "prefill", 600, new=2048, context=2048, **shape),
            entry("triton", "prefill", 300, new=2048, context=2048, **shape),
            entry("sdpa", "prefill", 100, new=2048, context=8192, **shape),
            entry("triton", "prefill", 500, new=2048, context=8192, **shape)]
    p = plan("bge-m3", "h200", profile=write(tmp_path / "p.json", profile(rows)))
    assert p.ok and p.decode_backend is None
    assert p.extend_backend == p.prefill_backend and "extend" not in p.why and "extend" not in p.alternatives
    assert "  extend " not in plan_text(p)


def test_the_split_replaces_the_warnings_of_the_ranking_over_all_prefill_buckets(tmp_path):
    # sdpa measured fresh only, triton extend only: no backend measured over all prefill buckets
    rows = [entry("sdpa", "prefill", 700, new=2048, context=2048), entry("triton", "prefill", 500, new=2048, context=8192)]
    p = plan("llama-3.1-8b", "h200", profile=write(tmp_path / "a.json", profile(rows + DECODE)))
    assert (p.prefill_backend, p.extend_backend) == ("sdpa", "triton") and "extend" in p.why
    assert not [w for w in p.warnings if "priority order applies" in w]
    # triton wrong over a cached prefix, right and fastest fresh: wrong anywhere in the phase
    # keeps it out of fresh prefills too (a split is never looser than one prefill backend)
    rows = [entry("triton", "prefill", 700, new=2048, context=2048), entry("sdpa", "prefill", 300, new=2048, context=2048),
            entry("triton", "prefill", None, new=2048, context=8192, status="wrong", rel_err=0.3),
            entry("sdpa", "prefill", 300, new=2048, context=8192)]
    p = plan("llama-3.1-8b", "h200", profile=write(tmp_path / "b.json", profile(rows + DECODE)))
    assert (p.prefill_backend, p.extend_backend) == ("sdpa", "sdpa")
    wrong = [w for w in p.warnings if "records triton as wrong" in w]
    assert len(wrong) == 1 and wrong[0].endswith("for prefill: not chosen automatically")
