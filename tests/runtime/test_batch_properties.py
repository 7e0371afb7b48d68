"""Any batch built from allocator rows validates; any single corrupted slot is caught."""
import dataclasses

from hypothesis import given, settings, strategies as st

from attnkit.backends.batch import Request, build_batch
from attnkit.backends.validation import validate_batch
from attnkit.errors import AttnkitError
from attnkit.kvcache.allocator import PageAllocator
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import LayerAttention

SPEC = LayerAttention(layer_id=0, num_heads=2, num_kv_heads=1, head_dim=4)
requests = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 12)), max_size=6)
POOL = 6 * 52 + 10          # enough pages for the largest batch at page size 1


def _batch(reqs, page_size, seed):
    alloc = PageAllocator(POOL, page_size=page_size, shuffle=seed)
    built = [Request(p, n, alloc.allocate(i, p + n)) for i, (p, n) in enumerate(reqs)]
    cache = PagedKVCache([SPEC], num_pages=POOL, page_size=page_size, dtype="fp32")
    return build_batch(built, page_size=page_size), cache


@settings(max_examples=60, deadline=None)
@given(reqs=requests, page_size=st.sampled_from([1, 3, 16]), seed=st.integers(0, 9))
def test_built_batches_validate(reqs, page_size, seed):
    meta, cache = _batch(reqs, page_size, seed)
    validate_batch(meta, cache)
    assert len(set(meta.slot_mapping_cpu)) == meta.num_tokens == sum(n for _, n in reqs)
    assert meta.positions.tolist() == [p + j for p, n in reqs for j in range(n)]


@settings(max_examples=60, deadline=None)
@given(reqs=requests.filter(bool), page_size=st.sampled_from([1, 3, 16]), seed=st.integers(0, 9),
       data=st.data())
def test_one_corrupted_slot_is_caught(reqs, page_size, seed, data):
    meta, cache = _batch(reqs, page_size, seed)
    slots = list(meta.slot_mapping_cpu)
    j = data.draw(st.integers(0, len(slots) - 1))
    slots[j] = data.draw(st.integers(-5, POOL * page_size + 5).filter(lambda s: s != slots[j]))
    try:
        validate_batch(dataclasses.replace(meta, slot_mapping_cpu=slots), cache)
    except AttnkitError as err:
        assert err.code in ("AK415", "AK416")
    else:
        raise AssertionError(f"slot {j} changed to {slots[j]} was not caught")
