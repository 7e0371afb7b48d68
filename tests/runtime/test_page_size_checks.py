"""A page size is checked once at each boundary, each with one code: a request's by the planner
(AK306), a cache's by its construction (AK430), a runtime input's (an allocation, a batch, static
decode buffers) by kvcache.allocator.check_page_size (AK405), and each step's batch against its
cache by the runtime check layer (AK418)."""
import pytest

from attnkit import plan
from attnkit.backends.batch import Request, build_batch
from attnkit.backends.static import StaticDecode
from attnkit.errors import AttnkitError
from attnkit.kvcache import allocator
from attnkit.kvcache.allocator import PageAllocator
from attnkit.kvcache.paged import PagedKVCache
from attnkit.model.spec import LayerAttention

RUNTIME_INPUTS = {
    "build_batch": lambda ps: build_batch([Request(2, 1, [0])], page_size=ps),
    "StaticDecode": lambda ps: StaticDecode(max_batch=2, max_pages=2, page_size=ps, scratch_pages=[0, 1],
                                            device="cpu"),
    "PageAllocator": lambda ps: PageAllocator(8, page_size=ps),
    "PageAllocator.allocate": lambda ps: PageAllocator(8).allocate("a", 3, page_size=ps),
}


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "16", 2**31])
@pytest.mark.parametrize("where", sorted(RUNTIME_INPUTS))
def test_runtime_inputs_share_one_check_and_one_code(where, bad):
    with pytest.raises(AttnkitError) as err:
        RUNTIME_INPUTS[where](bad)
    assert err.value.code == "AK405" and err.value.field == "page_size"
    assert "page_size must be an int >= 1 (and < 2**31)" in err.value.message


@pytest.mark.parametrize("where", sorted(RUNTIME_INPUTS))
def test_the_one_check_is_the_one_called(where, monkeypatch):
    """Each runtime input calls check_page_size (a change there is seen by every one)."""
    seen = []
    real = allocator.check_page_size
    for module in ("attnkit.kvcache.allocator", "attnkit.backends.batch", "attnkit.backends.static",
                   "attnkit.backends.metadata"):
        monkeypatch.setattr(f"{module}.check_page_size", lambda v, **kw: seen.append(v) or real(v, **kw))
    try:
        RUNTIME_INPUTS[where](4)
    except AttnkitError:
        pass                     # some inputs are refused for other reasons; the check ran first
    assert 4 in seen


def test_the_other_boundaries_keep_their_codes():
    with pytest.raises(AttnkitError) as err:
        plan("llama-3.1-8b", "h100", {"page_size": 0})
    assert err.value.code == "AK306"
    with pytest.raises(AttnkitError) as err:
        PagedKVCache([LayerAttention(0, 4, 2, 64)], num_pages=4, page_size=0)
    assert err.value.code == "AK430"
