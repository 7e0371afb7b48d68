"""StaticDecode (the static metadata of captured decode steps) and prepare_static's checks."""
import pytest
import torch

from attnkit.backends.metadata import BatchMetadata

from attnkit.backends.batch import Request, build_batch
from attnkit.backends.static import StaticDecode
from attnkit.backends.triton.decode import decode_span, max_decode_span
from attnkit.errors import AttnkitError
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import DualChunkConfig
from attnkit.registry import load_backend
from factories import make_layer


def static(max_batch=4, max_pages=4, page_size=4, pages=20):
    need = StaticDecode.scratch_need(max_batch, page_size)
    return StaticDecode(max_batch=max_batch, max_pages=max_pages, page_size=page_size,
                        scratch_pages=range(pages - need, pages), device="cpu")


def code(fn) -> str:
    with pytest.raises(AttnkitError) as err:
        fn()
    return err.value.code


def test_fill_writes_real_rows_pads_the_rest_and_keeps_one_metadata_object():
    s = static()
    meta = s.meta(4)
    reqs = [Request(5, 1, [3, 7]), Request(0, 1, [9])]
    assert s.fill(4, reqs) is meta
    assert meta.seq_lens.tolist() == list(meta.seq_lens_cpu) == [6, 1, 3, 4]
    assert meta.prefix_lens.tolist() == list(meta.prefix_lens_cpu) == [5, 0, 2, 3]
    assert meta.positions.tolist() == [5, 0, 2, 3]
    assert meta.slot_mapping.tolist() == list(meta.slot_mapping_cpu) == [7 * 4 + 1, 9 * 4, 19 * 4 + 2, 19 * 4 + 3]
    assert meta.block_tables[:2, :2].tolist() == [[3, 7], [9, -1]]
    assert meta.block_tables_cpu == ((3, 7), (9, -1), (19, -1), (19, -1))   # host rows padded with -1
    assert meta.query_start_loc.tolist() == [0, 1, 2, 3, 4] and meta.max_seq_len == 6
    # every padded row writes its own scratch slot: the step is a valid batch
    cache = PagedKVCache([make_layer(num_heads=2, head_dim=8).spec], num_pages=20, page_size=4)
    from attnkit.backends.validation import validate_batch

    validate_batch(meta, cache)


def test_other_buckets_see_the_same_buffers_and_their_host_lists_follow():
    s = static()
    small = s.meta(2)
    s.fill(4, [Request(1, 1, [2]), Request(2, 1, [4]), Request(3, 1, [6])])
    assert small.seq_lens.tolist() == [2, 3]                       # the same buffers
    assert s.meta(2) is small and list(small.seq_lens_cpu) == [2, 3]      # host lists on asking
    assert small.seq_lens.data_ptr() == s.meta(4).seq_lens.data_ptr()


def test_static_decode_refuses_what_does_not_fit():
    s = static()
    assert code(lambda: s.fill(5, [])) == "AK458"                                  # > max_batch
    assert code(lambda: s.fill(2, [Request(1, 1, [2])] * 3)) == "AK458"            # > bucket
    assert code(lambda: s.fill(2, [Request(1, 2, [2])])) == "AK458"                # two tokens
    assert code(lambda: s.fill(2, [Request(16, 1, [1, 2, 3, 4, 5])])) == "AK458"   # > max_pages
    assert code(lambda: s.fill(2, [Request(4, 1, [1])])) == "AK458"                # page missing
    assert code(lambda: s.fill(2, [Request(1, 1, [19])])) == "AK458"               # scratch page
    assert code(lambda: StaticDecode(max_batch=8, max_pages=2, page_size=4, scratch_pages=[9],
                                     device="cpu")) == "AK458"                      # needs 2
    assert code(lambda: StaticDecode(max_batch=0, max_pages=2, page_size=4, scratch_pages=[9],
                                     device="cpu")) == "AK458"
    before = s.meta(2).seq_lens_cpu
    assert code(lambda: s.fill(2, [Request(1, 1, [2]), Request(1, 1, [19])])) == "AK458"
    assert s.meta(2).seq_lens_cpu == before        # a refused fill leaves the buffers as they were


def test_prepare_static_checks_the_step():
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64)
    cache = PagedKVCache([layer.spec], num_pages=20, page_size=4)
    triton = load_backend("triton")
    s = static()
    prefill = build_batch([Request(0, 3, [1])], page_size=4)
    assert code(lambda: triton.prepare_static(prefill, cache, max_seq_len=16)) == "AK457"
    assert code(lambda: triton.prepare_static(s.meta(4), cache, max_seq_len=17)) == "AK457"
    assert code(lambda: triton.prepare_static(s.meta(4), cache, max_seq_len="16")) == "AK457"
    built = build_batch([Request(3, 1, [1])], page_size=4)
    tensors = {n: getattr(built, n) for n in ("query_start_loc", "seq_lens", "prefix_lens",
                                                "slot_mapping", "positions")}
    wide = BatchMetadata.on_buffers(tensors | {"block_tables": built.block_tables.long()},
                                    mode=built.mode, page_size=4, seq_lens_cpu=built.seq_lens_cpu,
                                    prefix_lens_cpu=built.prefix_lens_cpu,
                                    block_tables_cpu=built.block_tables_cpu,
                                    slot_mapping_cpu=built.slot_mapping_cpu)   # int64 tables
    assert code(lambda: triton.prepare_static(wide, cache, max_seq_len=4)) == "AK457"
    assert triton.prepare_static(s.meta(4), cache, max_seq_len=16).validated


def test_dual_chunk_captures_only_its_triton_path():
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=16,
                       dual_chunk=DualChunkConfig(chunk_size=16, local_size=4))
    cache = PagedKVCache([layer.spec], num_pages=20, page_size=4)
    for impl in ("torch", "auto"):            # auto runs torch on the CPU
        backend = load_backend("dual_chunk", impl=impl)
        assert code(lambda: backend.prepare_static(static().meta(4), cache, max_seq_len=16)) == "AK457"


def test_max_decode_span_bounds_every_span():
    for block_n in (16, 64):
        for window, chunk in ((None, None), (5, None), (None, 8), (70, 24), (3, 200)):
            for max_kv in (1, 17, 300):
                bound = max_decode_span(max_kv, window, chunk, block_n)
                spans = [decode_span(n, window, chunk, block_n) for n in range(1, max_kv + 1)]
                assert bound >= max(spans) and bound <= max_kv


def test_a_hybrid_captures_its_decode_backend():
    """HybridBackend's static step is its decode backend's: the same output as that backend's
    own static step; a hybrid whose decode half cannot be captured refuses (AK457)."""
    from attnkit.backends.hybrid import HybridBackend

    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64)
    outs = []
    for backend in (load_backend("triton"),
                    HybridBackend(prefill=load_backend("sdpa"), decode=load_backend("triton"))):
        cache = PagedKVCache([layer.spec], num_pages=20, page_size=4)
        s = static()
        step = backend.prepare_static(s.meta(4), cache, max_seq_len=16)
        s.fill(4, [Request(5, 1, [3, 7]), Request(2, 1, [9])])
        gen = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(4, h, 64, generator=gen) for h in (4, 2, 2))
        backend.refill_static(step)
        outs.append(backend.forward(q, k, v, layer, cache, step))
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    eager_decode = HybridBackend(prefill=load_backend("triton"), decode=load_backend("sdpa"))
    cache = PagedKVCache([layer.spec], num_pages=20, page_size=4)
    assert code(lambda: eager_decode.prepare_static(static().meta(4), cache, max_seq_len=16)) == "AK457"


def test_advance_moves_real_rows_on_the_device_as_a_fill_of_the_next_step_would():
    """fill(ahead=k) then advance() k times: every buffer (and the host lists) equal a fresh
    fill of the requests k tokens on; padded rows stay; a page boundary is crossed (5 -> 8)."""
    s, fresh = static(), static()
    reqs = [Request(5, 1, [3, 7, 11]), Request(0, 1, [9])]
    meta = s.fill(4, reqs, ahead=3)
    assert meta.block_tables[0, :3].tolist() == [3, 7, 11]        # the pages of the steps ahead
    for _ in range(3):
        s.advance(4)
    want = fresh.fill(4, [Request(8, 1, [3, 7, 11]), Request(3, 1, [9])])
    got = s.meta(4)
    for name in ("seq_lens", "prefix_lens", "positions", "slot_mapping"):
        assert getattr(got, name).tolist() == getattr(want, name).tolist(), name
        assert list(getattr(got, f"{name}_cpu", getattr(got, name).tolist())) == \
            getattr(want, name).tolist(), name
    assert got.slot_mapping.tolist()[:2] == [11 * 4 + 0, 9 * 4 + 3]
    assert got.seq_lens.tolist()[2:] == [3, 4]                     # padded rows did not move


def test_advance_is_refused_past_the_steps_the_fill_covered():
    s = static()
    assert code(lambda: s.fill(2, [Request(5, 1, [3, 7])], ahead=3)) == "AK458"   # page 3 missing
    assert code(lambda: s.fill(2, [Request(1, 1, [2])], ahead=-1)) == "AK458"
    assert code(lambda: s.fill(2, [Request(1, 1, [2])], ahead=True)) == "AK458"
    # the first step's slots differ, a later one's collide: refused before anything is written
    before = s.meta(2).seq_lens.tolist()
    assert code(lambda: s.fill(2, [Request(0, 1, [2]), Request(1, 1, [3, 2])], ahead=3)) == "AK458"
    assert s.meta(2).seq_lens.tolist() == before
    s.fill(2, [Request(1, 1, [2])], ahead=1)
    assert code(lambda: s.advance(4)) == "AK458"                   # not the filled bucket
    s.advance(2)
    assert code(lambda: s.advance(2)) == "AK458"                   # one step ahead, used
    assert s.meta(2).seq_lens.tolist()[0] == 3
