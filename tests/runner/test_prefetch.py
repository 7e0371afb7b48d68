"""layers/prefetch.py: o_proj's weight read into L2 on a side stream while the attention runs.
Only while a CUDA graph is captured, on CUDA; it writes nothing, so the graphs' logits are
the same bits with it, without it, and with the evict-last hint."""
import pytest
import torch

from attnkit.runner.layers import fused, prefetch
from runner_helpers import save_tiny


def test_modes(monkeypatch):
    """ATTNKIT_L2_PREFETCH: 0 / 1 / last; auto (and anything else) is DEFAULT up to MAX_ROWS
    rows and off above."""
    for raw, want in (("0", 0), ("1", 1), ("last", 2)):
        monkeypatch.setenv("ATTNKIT_L2_PREFETCH", raw)
        assert prefetch.mode(1) == want and prefetch.mode(512) == want
    for raw in ("auto", "yes"):
        monkeypatch.setenv("ATTNKIT_L2_PREFETCH", raw)
        assert prefetch.mode(1) == prefetch.DEFAULT
        assert prefetch.mode(prefetch.MAX_ROWS) == prefetch.DEFAULT
        assert prefetch.mode(prefetch.MAX_ROWS + 1) == 0


def test_nothing_is_launched_off_cuda_or_outside_a_capture(monkeypatch):
    """A CPU weight (even with the fused kernels forced on, as the interpreter tests force
    them, and a capture said to be under way): no fork, no launch; ``finish`` of that is a
    no-op."""
    monkeypatch.setenv("ATTNKIT_L2_PREFETCH", "1")
    launched = []
    monkeypatch.setattr(prefetch, "launch", lambda *a: launched.append(a))
    w = torch.ones(64, 64)
    assert prefetch.wanted(w, 1) == 0 and prefetch.start(w, 1) is None
    monkeypatch.setattr(fused, "enabled", lambda t: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert prefetch.start(w, 1) is None
    prefetch.finish(None)
    assert launched == []


gpu = pytest.mark.gpu


@gpu
def test_the_kernel_writes_nothing():
    """Every line of an uneven tensor (its last line partial), both hints: the tensor is the
    same bits after, and the stream has no error."""
    w = torch.randn(4097, 33, device="cuda", dtype=torch.bfloat16)
    before = w.clone()
    for last in (False, True):
        prefetch.launch(w, last)
        prefetch.launch(w, last, 1000)                     # a first part: 8 lines, one partial
    torch.cuda.synchronize()
    assert torch.equal(w, before)


@gpu
def test_the_extent_is_the_whole_o_proj_where_it_fits():
    """The Llama-3-8B o_proj (33.5 MB) whole on a 50 MiB L2 (H100, H200: the first version
    refused weights over half the L2, so the engine never prefetched it); a weight four times
    the L2: its first L2_SHARE of the L2 only."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    o = torch.empty(4096, 4096, device="cuda", dtype=torch.bfloat16)
    if l2 >= 50 * 2**20:
        assert prefetch.extent(o) == o.numel() * 2
    big = torch.empty(2 * l2, device="cuda", dtype=torch.bfloat16)
    assert l2 // 2 <= prefetch.extent(big) < l2


@gpu
def test_graphed_decode_gives_the_same_bits_with_every_mode(tmp_path, monkeypatch):
    """A bf16 Llama under CUDA graphs, the prefetch off, plain and evict-last: the kernel is
    captured once a layer for every bucket (and never without), and the decode steps'
    logits are equal bit for bit."""
    from attnkit.runner import Engine

    path, _ = save_tiny(tmp_path, "LlamaConfig", "LlamaForCausalLM",
                        dict(vocab_size=128, hidden_size=256, intermediate_size=256,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             initializer_range=0.2), seed=5)
    real, launched = prefetch.launch, []
    monkeypatch.setattr(prefetch, "launch", lambda w, last: launched.append(last) or real(w, last))
    logits = {}
    for raw in ("0", "1", "last"):
        monkeypatch.setenv("ATTNKIT_L2_PREFETCH", raw)
        launched.clear()
        e = Engine.from_pretrained(path, page_size=16, device="cuda", dtype=torch.bfloat16,
                                   max_num_seqs=4, cuda_graph=True)
        assert launched == ([] if raw == "0" else [raw == "last"] * len(launched))
        assert raw == "0" or len(launched) >= 2 * len(e.graphs.buckets)      # 2 layers a graph
        e.prefill([[1, 5, 9, 3, 7], [4, 6], [3, 3, 9]])
        logits[raw] = torch.stack([e.decode([s + 2, 8, 11]) for s in range(4)])
        assert e.graphs.stats["replays"] >= 4
        e.release()
    assert torch.equal(logits["1"], logits["0"]) and torch.equal(logits["last"], logits["0"])
