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


class _Holder:
    """A row kept by its holder, as the runner's Sequence keeps its pages."""

    def __init__(self, seq_id):
        self.seq_id, self.pages = seq_id, []


def test_holder_rows_grow_shrink_back_exactly_and_keep_scratch_apart():
    alloc = PageAllocator(6, page_size=4, scratch=2)
    assert alloc.scratch_pages == [6, 7] and alloc.num_free == 6
    a, b = _Holder("a"), _Holder("b")
    assert alloc.grow_to(a, 5) == [0, 1] and alloc.shortfall(a, 8) == 0 and alloc.shortfall(a, 9) == 1
    alloc.grow_to(b, 4)
    alloc.release(a)                                     # 0, 1 back after the never-used 3, 4, 5
    before = alloc.free_pages()
    assert before == [3, 4, 5, 0, 1]
    for tokens in (8, 12, 16):                           # fresh pages only, then freed ones too
        alloc.grow_to(a, tokens)
        alloc.grow_to(b, 8)
        alloc.shrink(b, 1)                               # undone in reverse order
        alloc.shrink(a, 0)
        assert alloc.free_pages() == before and a.pages == [] and b.pages == [2]
    with pytest.raises(AttnkitError) as err:             # 6 pages; the scratch never handed out
        alloc.grow_to(a, 24)
    assert err.value.code == "AK400" and "'a'" in err.value.message
    assert alloc.free_pages() == before
