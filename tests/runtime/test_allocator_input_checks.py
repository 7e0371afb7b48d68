"""PageAllocator rejects impossible counts and page sizes (AK405) instead of corrupting state."""
import pytest

from attnkit.errors import AttnkitError
from attnkit.kvcache.allocator import PageAllocator


def test_negative_grow_is_rejected_and_state_kept():
    alloc = PageAllocator(4, page_size=2)
    alloc.allocate("x", 3)
    with pytest.raises(AttnkitError) as err:
        alloc.grow("x", -10)
    assert err.value.code == "AK405" and "-10" in err.value.message
    assert err.value.field == "num_new_tokens"
    assert alloc.num_tokens("x") == 3 and alloc.row("x") == [0, 1]


def test_grow_by_zero_is_allowed():
    alloc = PageAllocator(4, page_size=2)
    alloc.allocate("x", 3)
    assert alloc.grow("x", 0) == [0, 1] and alloc.num_tokens("x") == 3


@pytest.mark.parametrize("page_size", [0, -4])
def test_explicit_bad_page_size_is_not_replaced_by_default(page_size):
    alloc = PageAllocator(4, page_size=2)
    with pytest.raises(AttnkitError) as err:
        alloc.allocate("q", 3, page_size=page_size)
    assert err.value.code == "AK405" and err.value.field == "page_size"
    assert str(page_size) in err.value.message
    assert alloc.num_free == 4


def test_default_page_size_still_used_when_none():
    alloc = PageAllocator(4, page_size=2)
    assert alloc.allocate("q", 3, page_size=None) == [0, 1]


@pytest.mark.parametrize("kwargs", [dict(num_pages=2.5), dict(num_pages=None),
                                    dict(num_pages=4, page_size=0), dict(num_pages=4, page_size=1.5)])
def test_bad_constructor_arguments(kwargs):
    with pytest.raises(AttnkitError) as err:
        PageAllocator(**kwargs)
    assert err.value.code == "AK405"


@pytest.mark.parametrize("call", [lambda a: a.allocate("y", 2.5), lambda a: a.allocate("y", None),
                                  lambda a: (a.allocate("y", 1), a.grow("y", 1.5))])
def test_non_integer_token_counts(call):
    with pytest.raises(AttnkitError) as err:
        call(PageAllocator(4, page_size=2))
    assert err.value.code == "AK405"
