"""Page size by measurement: did the device profile find the decode backend clearly faster with
pages of another size (torch-free)?

A backend's speed can depend on the page size (triton_mla's Hopper decode kernel needs pages of
a multiple of 64 keys; with 16 a slower kernel runs). ``attnkit tune`` measures the MLA decode
buckets at more than one page size, and the page size rule (rules.page_size_rule) asks here
whether a size every chosen backend accepts beats the default. The comparison (docs/profile.md):
the decode buckets of the model's own shape (heads a rank, dims, dtypes: a nearest other shape
does not count, as the kernel a backend runs, and so the page size's effect, depends on it), those
at the default page size (or the one bucket nearest a decode workload), each also measured at
the other size; the decode backend ``ok`` in all of them at both sizes; the geometric means of
its rates by one method (CUDA-graph replays where every one of those entries has a graph time,
else eager calls). Backend ranking is not touched: it compares buckets of one page size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

from attnkit.planning.measured import geomean, nearest_runtime, nearest_static, rate_text, source_text, best_entries
from attnkit.planning.profile import UNITS, Bucket, Profile, Shape

# Another page size is filled only when its geometric-mean rate beats the default's by more
# than this: the page size sets the cache layout of every phase (only decode was compared) and
# the allocation grain (up to page - 1 unused slots per request, page-granular prefix sharing),
# and two timings of the same kernel differ by a few percent from run to run.
MARGIN = 0.10


@dataclass(frozen=True)
class PageGain:
    """``backend`` decodes at ``rate`` with pages of ``size`` against ``base_rate`` with ``base``."""
    backend: str
    size: int
    base: int
    rate: float
    base_rate: float
    method: str                     # "graph" or "eager"
    buckets: tuple[Bucket, ...]     # the compared buckets, at the base page size
    profile: Profile

    def reason(self, platform) -> str:
        """``triton_mla decode measured 2.10x faster with 64-key pages than with 16 (...)``."""
        where = source_text(self.profile, platform, self.method, list(self.buckets), None)
        return (f"{self.backend} decode measured {self.rate / self.base_rate:.2f}x faster with {self.size}-key "
                f"pages than with {self.base} ({rate_text(self.rate)} vs {rate_text(self.base_rate)} "
                f"{UNITS['decode']}; {where})")


def page_gain(profile: Profile, shape: Shape, backend: str, base: int, sizes: Iterable[int],
              workload: Mapping[str, int] | None = None, allowed=None) -> PageGain | None:
    """The fastest of ``sizes`` at which ``profile`` measured ``backend`` decoding ``shape`` more
    than MARGIN faster than at page size ``base``, over the same buckets; None if none did."""
    group = nearest_static(profile, shape, "decode")
    ours = [b for b in group if b.page_size == base]
    if not ours or ours[0].shape != shape:
        return None     # measured on another shape only: which kernel runs, and so the page
        #                 size's effect, depends on the shape (heads a rank, dtypes)
    if workload:
        ours = [nearest_runtime(ours, workload)]
    ours.sort(key=lambda b: b.runtime())
    best_of = best_entries(profile, set(group), allowed)   # its fastest kernel variant that can run
    ok = {b: e for (n, b), e in best_of.items() if n == backend and e.status == "ok"}
    alike = {(b.runtime(), b.page_size): b for b in group}
    best = None
    for size in sorted(set(sizes) - {base}):
        pairs = [(ok.get(b), ok.get(alike.get((b.runtime(), size)))) for b in ours]
        if not all(x and y for x, y in pairs):
            continue
        method = "graph" if all(x.graph_ms and y.graph_ms for x, y in pairs) else "eager"
        rates = [(x.rate(method), y.rate(method)) for x, y in pairs]
        if not all(r0 and r1 for r0, r1 in rates):
            continue
        old, new = geomean([r0 for r0, _ in rates]), geomean([r1 for _, r1 in rates])
        if new > old * (1 + MARGIN) and (best is None or new > best.rate):
            best = PageGain(backend, size, base, new, old, method, tuple(ours), profile)
    return best
