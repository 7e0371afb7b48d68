import pytest

from attnkit.errors import AttnkitError
from attnkit.kvcache.allocator import PageAllocator


def test_allocate_grow_free_reuse():
    alloc = PageAllocator(6, page_size=4)
    assert alloc.allocate("a", 9) == [0, 1, 2]          # ceil(9 / 4) pages
    assert alloc.grow("a", 3) == [0, 1, 2]               # 12 tokens still fit
    assert alloc.grow("a", 1) == [0, 1, 2, 3]
    assert alloc.num_tokens("a") == 13 and alloc.num_free == 2
    alloc.free("a")
    assert alloc.num_free == 6
    assert len(alloc.allocate("b", 24)) == 6             # freed pages are reusable


def test_out_of_pages_names_counts():
    alloc = PageAllocator(4)
    alloc.allocate("a", 10, page_size=4)
    with pytest.raises(AttnkitError) as err:
        alloc.allocate("b", 9, page_size=4)
    assert err.value.code == "AK400"
    assert "3" in err.value.message and "1 of 4" in err.value.message
    assert err.value.details == {"requested": 3, "free": 1, "total": 4}
    assert alloc.num_free == 1                            # a failed allocation takes nothing


def test_double_free_and_unknown_ids():
    alloc = PageAllocator(4, page_size=2)
    alloc.allocate("a", 3)
    alloc.free("a")
    for call in (lambda: alloc.free("a"), lambda: alloc.grow("zz", 1), lambda: alloc.row("a")):
        with pytest.raises(AttnkitError) as err:
            call()
        assert err.value.code == "AK401"
    alloc.allocate("b", 1)
    with pytest.raises(AttnkitError, match="already holds"):
        alloc.allocate("b", 1)


def test_shuffled_block_table_rows_are_padded_and_disjoint():
    alloc = PageAllocator(16, page_size=4, shuffle=3)
    alloc.allocate("a", 9)
    alloc.allocate("b", 2)
    table = alloc.block_table(["a", "b"])
    assert len(table[0]) == 3 and table[1][1:] == [-1, -1]
    pages = [p for row in table for p in row if p >= 0]
    assert len(set(pages)) == len(pages) == 4
    assert pages != sorted(pages)                         # non-contiguous on purpose
