"""Runtime inputs a hostile user tries (the adversarial review of 2026-12-02): each runs and
matches the reference, or is refused with a coded error that leaves the state unchanged."""
import pytest
import torch

from attnkit.backends.base import StepState
from attnkit.errors import AttnkitError
from attnkit.kvcache.paged import PagedKVCache
from attnkit.registry import load_backend
from factories import assert_close, make_case, make_layer

BACKENDS = ["torch_native", "sdpa", "triton"]     # triton through the interpreter on CPU


def _case(**kw):
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp32")
    return make_case(layer, prefix_lens=[5, 9], new_lens=[3, 1], page_size=4, dtype="fp32", **kw)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_step_forwarded_with_a_cache_of_fewer_pages_is_checked_against_it(backend):
    """prepare checked the step against one cache; forward with another of fewer pages indexed
    past its end (IndexError on CPU, an illegal access on a GPU)."""
    case = _case()
    be = load_backend(backend)
    step = be.prepare(case.meta, case.cache)
    small = PagedKVCache([case.layer.spec], num_pages=1, page_size=4, dtype=torch.float32)
    with pytest.raises(AttnkitError) as err:
        be.forward(*case.args()[:3], case.layer, small, step)
    assert err.value.code == "AK414"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_step_forwarded_with_a_cache_of_another_page_size_is_refused(backend):
    """Written into the other cache at slots computed for page size 4 (wrong pages, no error)."""
    case = _case()
    be = load_backend(backend)
    step = be.prepare(case.meta, case.cache)
    other = PagedKVCache([case.layer.spec], num_pages=case.cache.num_pages, page_size=8, dtype=torch.float32)
    before = other.k[0].clone()
    with pytest.raises(AttnkitError) as err:
        be.forward(*case.args()[:3], case.layer, other, step)
    assert err.value.code == "AK418" and torch.equal(other.k[0], before)


@pytest.mark.parametrize("maker", ["sdpa", "torch_native", "by hand"])
def test_triton_runs_a_step_it_did_not_prepare(maker):
    """Another backend's plan or none at all: AttributeError deep in triton's forward."""
    case = _case()
    step = StepState(case.meta) if maker == "by hand" else load_backend(maker).prepare(case.meta, case.cache)
    out = load_backend("triton").forward(*case.args(), step)
    assert_close(out, case.reference(), dtype="fp32")


def test_a_step_with_the_same_cache_layout_is_not_prepared_again():
    """The transformers integration prepares once and forwards with fresh caches of one layout."""
    case = _case()
    be = load_backend("sdpa")
    step = be.prepare(case.meta, case.cache)
    plan = step.prepared
    twin = PagedKVCache([case.layer.spec], num_pages=case.cache.num_pages, page_size=4, dtype=torch.float32)
    twin.k[0].copy_(case.cache.k[0])
    twin.v[0].copy_(case.cache.v[0])
    assert_close(be.forward(*case.args()[:4], twin, step), case.reference(), dtype="fp32")
    assert step.prepared is plan


@pytest.mark.parametrize("backend", ["torch_native", "triton"])
def test_a_sinks_layer_without_its_sink_logits_is_ak443(backend):
    """triton raised AttributeError ('NoneType' has no attribute 'to'); torch_native said AK443."""
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, sinks=True, dtype="fp32")
    layer.sinks = None
    case = make_case(layer, prefix_lens=[5], new_lens=[1], page_size=4, dtype="fp32")
    be = load_backend(backend)
    with pytest.raises(AttnkitError) as err:
        be.forward(*case.args(), be.prepare(case.meta, case.cache))
    assert (err.value.code, err.value.field) == ("AK443", "layer.sinks")


@pytest.mark.parametrize("encoder", [dict(encoder_lens_cpu=[-4], encoder_block_tables_cpu=[[2]]),
                                     dict(encoder_slot_mapping_cpu=[8, 9])])
def test_hand_made_metadata_with_impossible_encoder_fields_is_ak405(encoder):
    """build_batch refuses a negative encoder length; BatchMetadata made directly took it (and
    encoder slots without encoder lengths), and prepare + forward ran with it."""
    from attnkit.backends.metadata import BatchMetadata, ForwardMode
    with pytest.raises(AttnkitError) as err:
        BatchMetadata(mode=ForwardMode.DECODE, page_size=4, seq_lens_cpu=[3], prefix_lens_cpu=[2],
                      block_tables_cpu=[[1]], slot_mapping_cpu=[6], **encoder)
    assert err.value.code == "AK405" and err.value.field.startswith("meta.encoder_")


def _static_meta():
    from attnkit.backends.static import StaticDecode
    return StaticDecode(max_batch=4, max_pages=4, page_size=4, scratch_pages=[7], device="cpu").meta(2)


def _host(meta):
    return (meta.seq_lens_cpu, meta.prefix_lens_cpu, meta.block_tables_cpu, meta.slot_mapping_cpu,
            meta.mode, meta.page_size)


@pytest.mark.parametrize("values, code", [
    (dict(seq_lens_cpu=[3, 4, 5]), "AK405"),          # three requests over buffers of two: was set, then refused
    (dict(mode="prefill"), "AK405"),                  # not a host value: mode was changed, then refused
    (dict(page_size=0), "AK405"),
    (dict(_static=False), "AK405"),
    (dict(foo=1), "AK405"),                           # was AttributeError
    (dict(prefix_lens_cpu=[-1, 0]), "AK405"),
])
def test_refresh_host_refuses_and_leaves_the_metadata_unchanged(values, code):
    meta = _static_meta()
    before = _host(meta)
    with pytest.raises(AttnkitError) as err:
        meta.refresh_host(**values)
    assert err.value.code == code and _host(meta) == before and meta._static


def _buffers(b=1):
    i32 = torch.int32
    return dict(query_start_loc=torch.arange(b + 1, dtype=i32), seq_lens=torch.full((b,), 3, dtype=i32),
                prefix_lens=torch.full((b,), 2, dtype=i32), block_tables=torch.ones(b, 1, dtype=i32),
                slot_mapping=torch.full((b,), 6), positions=torch.full((b,), 2))


HOST = dict(seq_lens_cpu=[3], prefix_lens_cpu=[2], block_tables_cpu=[[1]], slot_mapping_cpu=[6])


@pytest.mark.parametrize("tensors, host", [
    ({k: v for k, v in _buffers().items() if k != "slot_mapping"}, HOST),   # KeyError
    (5, HOST),                                                              # TypeError
    ({**_buffers(), "slot_mapping": [6]}, HOST),                           # AttributeError
    (_buffers(), {}),                                                       # AttributeError
    (_buffers(), {**HOST, "foo": 1}),                                       # AttributeError
    ({**_buffers(), "seq_lens": torch.tensor([3, 4], dtype=torch.int32)}, HOST),   # accepted
    (_buffers(2), HOST),                                                    # accepted
])
def test_on_buffers_refuses_buffers_that_do_not_fit_its_host_values(tensors, host):
    from attnkit.backends.metadata import BatchMetadata, ForwardMode
    with pytest.raises(AttnkitError) as err:
        BatchMetadata.on_buffers(tensors, mode=ForwardMode.DECODE, page_size=4, **host)
    assert err.value.code == "AK405"


def test_on_buffers_still_makes_static_metadata():
    from attnkit.backends.metadata import BatchMetadata, ForwardMode
    meta = BatchMetadata.on_buffers(_buffers(), mode=ForwardMode.DECODE, page_size=4, **HOST)
    assert meta._static and meta.seq_lens_cpu == (3,) and meta.slot_mapping.tolist() == [6]


@pytest.mark.parametrize("changes, code", [
    (dict(device="bogus"), "AK430"), (dict(device=None), "AK430"),          # RuntimeError / TypeError
    (dict(scratch_pages=None), "AK458"),                                     # TypeError
    (dict(scratch_pages=[2**70]), "AK458"),                                  # OverflowError
    (dict(max_batch=64, page_size=64, max_pages=2**30), "AK431"),            # RuntimeError (256 GiB)
])
def test_static_decode_arguments_are_coded(changes, code):
    from attnkit.backends.static import StaticDecode
    args = dict(max_batch=4, max_pages=4, page_size=4, scratch_pages=[7], device="cpu") | changes
    with pytest.raises(AttnkitError) as err:
        StaticDecode(**args)
    assert err.value.code == code


def _requests(*rows, prefix=2):
    from attnkit.backends.batch import Request
    return [Request(prefix, 1, row) for row in rows]


@pytest.mark.parametrize("requests", [
    None,                                          # TypeError
    _requests([2**40]),                            # OverflowError (int32 table)
    _requests([1], [1]),                           # two rows write slot 6: a race in the captured kernel
])
def test_a_fill_that_cannot_be_staged_is_refused_and_changes_nothing(requests):
    from attnkit.backends.static import StaticDecode
    s = StaticDecode(max_batch=4, max_pages=4, page_size=4, scratch_pages=[7], device="cpu")
    s.fill(2, _requests([3], [5]))
    meta = s.meta(2)
    before = (s._lens.clone(), s._slots.clone(), s.block_tables.clone(), _host(meta))
    with pytest.raises(AttnkitError) as err:
        s.fill(2, requests)
    assert err.value.code == "AK458"
    after = (s._lens, s._slots, s.block_tables, _host(s.meta(2)))
    assert all(torch.equal(a, b) for a, b in zip(before[:3], after[:3])) and before[3] == after[3]


def test_requests_sharing_a_prefix_page_still_fill():
    """Only the slot a new token is written to must be distinct; a shared read-only page is fine."""
    from attnkit.backends.static import StaticDecode
    s = StaticDecode(max_batch=4, max_pages=4, page_size=4, scratch_pages=[7], device="cpu")
    meta = s.fill(2, _requests([1, 2], [1, 3], prefix=5))
    assert meta.slot_mapping_cpu == (9, 13)


@pytest.mark.parametrize("layer_id", [[0], {0: 1}, True, 0.0])
def test_cache_write_with_a_layer_id_that_is_not_an_int_is_ak418(layer_id):
    """A list raised TypeError (unhashable); True and 0.0 are equal to layer ids 1 and 0."""
    layer = make_layer(num_heads=4, num_kv_heads=2, head_dim=64, dtype="fp32", layer_id=1)
    cache = PagedKVCache([layer.spec, make_layer(layer_id=0).spec], num_pages=4, page_size=4,
                         dtype=torch.float32)
    before = [t.clone() for t in (*cache.k.values(), *cache.v.values())]
    with pytest.raises(AttnkitError) as err:
        cache.write(layer_id, torch.tensor([1]), torch.randn(1, 4, 64), torch.randn(1, 4, 64))
    assert err.value.code == "AK418"
    assert all(torch.equal(a, b) for a, b in zip(before, (*cache.k.values(), *cache.v.values())))


@pytest.mark.parametrize("name, options", [
    ("triton", dict(decode_config={"BLOCK_N": 3})),      # InterpreterError at the first decode
    ("triton", dict(extend_config={"BLOCK_M": 0})),      # ValueError at the first extend
    ("triton", dict(decode_config=5)),                   # TypeError
    ("triton", dict(num_splits=0)),
    ("triton_mla", dict(block_n=3)), ("triton_mla", dict(block_h=5)),        # InterpreterError
    ("triton_mla", dict(mha_form_min_query="a")),                             # TypeError
    ("triton_mla", dict(mha_form_min_query=-1)), ("triton_mla", dict(num_splits=0)),
    ("triton_mla", dict(num_warps=3)), ("triton_mla", dict(extend_tiles=(1, 2))),
    ("triton_mla", dict(extend_tiles=(64, 48, 4, 2))),
])
def test_launch_options_a_kernel_cannot_take_are_ak407_when_the_backend_is_made(name, options):
    with pytest.raises(AttnkitError) as err:
        load_backend(name, **options)
    assert err.value.code == "AK407"


def test_valid_launch_options_still_load():
    load_backend("triton", decode_config={"BLOCK_N": 32, "num_warps": 4, "num_stages": 2}, num_splits=2)
    load_backend("triton_mla", block_n=16, block_h=64, num_splits=3, mha_form_min_query=None,
                 extend_tiles=(64, 32, 4, 2))


HUGE = 10**5000     # past Python's 4300-digit limit: formatting it into a message raised ValueError


@pytest.mark.parametrize("call, code", [
    (lambda r: r.BatchMetadata(mode=r.ForwardMode.EXTEND, page_size=4, seq_lens_cpu=[HUGE],
                               prefix_lens_cpu=[HUGE - 1], block_tables_cpu=[[1]], slot_mapping_cpu=[6]), "AK405"),
    (lambda r: r.BatchMetadata(mode=r.ForwardMode.DECODE, page_size=4, seq_lens_cpu=[3], prefix_lens_cpu=[2],
                               block_tables_cpu=[[1]], slot_mapping_cpu=[HUGE]), "AK405"),
    (lambda r: r.build_batch([r.Request(HUGE, 1, [1])], page_size=4), "AK405"),
    (lambda r: r.build_batch([r.Request(2, 1, [HUGE])], page_size=4), "AK405"),
    (lambda r: r.build_batch([r.Request(2, 1, [1])], page_size=HUGE), "AK405"),
    (lambda r: r.PagedKVCache([r.LayerAttention(0, 4, 2, 64)], num_pages=HUGE, page_size=4), "AK430"),
    (lambda r: r.PagedKVCache([r.LayerAttention(0, 4, 2, 64)], num_pages=4, page_size=HUGE), "AK430"),
    (lambda r: r.PageAllocator(8, page_size=4).allocate("a", HUGE), "AK405"),
    (lambda r: r.PageAllocator(HUGE).allocate("a", HUGE, page_size=1), "AK405"),       # OverflowError
])
def test_a_5000_digit_integer_is_refused_with_its_code(call, code):
    import attnkit.runtime as r
    with pytest.raises(AttnkitError) as err:
        call(r)
    assert err.value.code == code and "too large to print" in err.value.message


@pytest.mark.parametrize("args", [dict(max_batch=HUGE), dict(max_pages=HUGE)])
def test_static_decode_sizes_past_int32_are_ak458(args):
    from attnkit.backends.static import StaticDecode
    with pytest.raises(AttnkitError) as err:
        StaticDecode(**(dict(max_batch=2, max_pages=4, page_size=4, scratch_pages=[7], device="cpu") | args))
    assert err.value.code == "AK458"


def test_a_static_fill_with_a_5000_digit_prefix_is_ak458():
    from attnkit.backends.static import StaticDecode
    s = StaticDecode(max_batch=2, max_pages=4, page_size=4, scratch_pages=[7], device="cpu")
    with pytest.raises(AttnkitError) as err:
        s.fill(2, _requests([1], prefix=HUGE))
    assert err.value.code == "AK458"
