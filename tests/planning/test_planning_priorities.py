"""Priority tables are data; every registered backend is reachable."""
from attnkit.planning import priorities
from attnkit.registry.capabilities import PLATFORM_KINDS
from attnkit.registry import declarations


def test_every_registered_backend_is_reachable():
    named = priorities.named_backends()
    for name, decl in declarations().items():
        # dual_chunk is chosen by the dual-chunk rule (it declares the feature), not by a table
        by_rule = "dual_chunk" in decl.capabilities.features
        assert name in named or decl.explicit_only or by_rule, f"{name} is in no priority table"


def test_every_platform_kind_and_phase_has_a_table():
    for kind in PLATFORM_KINDS:
        for model_kind in ("mha", "mla"):
            for phase in ("prefill", "decode"):
                cc = (9, 0) if kind == "cuda" else None
                entry = priorities.lookup(kind, cc, model_kind, phase)
                assert entry is not None and entry.why and entry.backends


def test_capability_ranges_pick_the_specific_entry():
    assert priorities.lookup("cuda", (9, 0), "mha", "decode").backends[0] == "triton"
    assert priorities.lookup("cuda", (7, 5), "mha", "decode").backends[0] == "sdpa"
    assert priorities.lookup("cuda", (9, 0), "mla", "prefill").backends[0] == "triton_mla"
    assert priorities.lookup("cuda", (9, 0), "nope", "prefill") is None
