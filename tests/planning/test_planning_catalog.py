"""Every code the planner can raise has a catalog entry, and docs/errors matches the catalog."""
import re
from pathlib import Path

from attnkit.errors import CATALOG
from attnkit.errors import docs

SRC = Path(__file__).resolve().parents[2] / "src" / "attnkit"
MINE = [SRC / "planning", SRC / "cli"]


def test_every_code_raised_by_the_planner_is_catalogued():
    codes = {c for d in MINE for f in d.glob("*.py") for c in re.findall(r'"(AK\d{3})"', f.read_text())}
    assert codes and codes <= set(CATALOG), sorted(codes - set(CATALOG))


def test_catalog_entries_are_complete():
    for code, e in CATALOG.items():
        assert e.title and e.meaning and e.trigger and e.solutions and e.example_before and e.example_after, code


def test_docs_errors_is_in_sync_with_the_catalog():
    stale = docs.drift()
    assert not stale, f"docs/errors is out of date ({stale[:5]}): run python -m attnkit.errors.docs"


def test_docs_render_every_section():
    text = docs.page(CATALOG["AK121"])
    for heading in ("## What it means", "## When it happens", "## Solutions", "## Example fix", "## Related"):
        assert heading in text


def test_merged_codes_keep_a_page_that_points_to_a_live_code():
    """A code merged into another (one code per runtime concept) keeps its catalog entry and
    docs page, marked, naming the code raised now; that code is live, and nothing raises the old."""
    merged = {c: e.merged_into for c, e in CATALOG.items() if e.merged_into}
    assert {"AK441", "AK450", "AK460", "AK471", "AK451", "AK462", "AK453", "AK461", "AK463",
            "AK452", "AK465", "AK464", "AK466"} <= set(merged)
    for old, new in merged.items():
        assert new in CATALOG and not CATALOG[new].merged_into, (old, new)
        page = docs.page(CATALOG[old])
        assert f"Merged into [{new}]({new}.md)" in page.splitlines()[2], old
        assert f"merged into [{new}]" in docs.index()
    raised = {c for f in SRC.rglob("*.py") if "catalog" not in f.parts
              for c in re.findall(r'fail\(\s*"(AK\d{3})"', f.read_text())}
    assert not raised & set(merged), sorted(raised & set(merged))
