"""An event simulation of the Gluon prefill kernels' barrier protocol (prefill_gluon.py, the
persistent form in prefill_gluon_persistent.py), with no GPU: the loader and the two
warpgroups as Python generators run in random interleavings over mbarriers modelled by their
phase counts (try_wait.parity semantics), with the ring slots' contents tracked, so a deadlock
or a read of a slot after its refill is found. It mirrors the kernels' waits, arrives and ring
indices by hand (NOTES-hopper.md, version 9): change it with them.

    python3 benchmarks/sim_gluon_barriers.py [--runs 400] [--variant shipped|no-q-free|early-k-release]
"""
import argparse
import random
import sys


class Bar:
    """An mbarrier: ``count`` arrivals complete a phase."""

    def __init__(s, count):
        s.count, s.pending, s.phase = count, count, 0

    def arrive(s, n=1):
        s.pending -= n
        assert s.pending >= 0
        if s.pending == 0:
            s.phase += 1
            s.pending = s.count

    def done(s, parity):
        """try_wait.parity: the phase of this parity has completed."""
        return (s.phase & 1) != parity


def run(items_of, NSK, NSV, seed, variant="shipped"):
    """items_of: [(item, key tiles)] one program walks; -> "ok" or "deadlock" (AssertionError: a
    slot read after its refill)."""
    rnd = random.Random(seed)
    q_bar, q_free = Bar(1), Bar(2)
    k_ready, k_free = [Bar(1) for _ in range(NSK)], [Bar(2) for _ in range(NSK)]
    v_ready, v_free = [Bar(1) for _ in range(NSV)], [Bar(2) for _ in range(NSV)]
    turn = [Bar(1), Bar(1)]
    turn[0].arrive()
    kslot, vslot, qslot = [None] * NSK, [None] * NSV, [None]     # (item, tile) each slot holds

    def W(bar, parity):
        while not bar.done(parity):
            yield

    def loader():
        g = 0
        for l, (item, n) in enumerate(items_of):
            s0 = g % NSK
            yield from W(k_free[s0], ((g // NSK) & 1) ^ 1)
            kslot[s0] = (item, 0)
            k_ready[s0].arrive()
            if variant != "no-q-free":
                yield from W(q_free, (l & 1) ^ 1)
            qslot[0] = item
            q_bar.arrive()
            for i in range(n):
                if i + 1 < n:
                    gk = g + i + 1
                    sk = gk % NSK
                    yield from W(k_free[sk], ((gk // NSK) & 1) ^ 1)
                    kslot[sk] = (item, i + 1)
                    k_ready[sk].arrive()
                gv = g + i
                sv = gv % NSV
                yield from W(v_free[sv], ((gv // NSV) & 1) ^ 1)
                vslot[sv] = (item, i)
                v_ready[sv].arrive()
                yield
            g += n

    def compute(WG):
        g = t = 0
        for l, (item, n) in enumerate(items_of):
            s0 = g % NSK
            yield from W(q_bar, l & 1)
            assert qslot[0] == item
            yield from W(k_ready[s0], (g // NSK) & 1)
            yield from W(turn[WG], t & 1)
            assert kslot[s0] == (item, 0), (kslot[s0], item)
            turn[1 - WG].arrive()
            yield
            if n > 1 or variant == "early-k-release":
                k_free[s0].arrive()
            for j in range(n):
                if j > 0:
                    v_free[(g + j - 1) % NSV].arrive()
                gn = g + min(j + 1, n - 1)
                sn = gn % NSK
                yield from W(k_ready[sn], (gn // NSK) & 1)
                yield from W(turn[WG], (t + j + 1) & 1)
                assert kslot[sn] == (item, min(j + 1, n - 1)), (kslot[sn], item, j)
                assert qslot[0] == item
                gv = g + j
                yield from W(v_ready[gv % NSV], (gv // NSV) & 1)
                assert vslot[gv % NSV] == (item, j)
                turn[1 - WG].arrive()
                yield
                if (j + 1 < n) if variant == "early-k-release" else (j + 2 != n):
                    k_free[sn].arrive()
                yield
            q_free.arrive()
            v_free[(g + n - 1) % NSV].arrive()
            yield
            g += n
            t += n + 1

    parts = [loader(), compute(0), compute(1)]
    alive = list(parts)
    stuck = 0
    while alive:
        p = rnd.choice(alive)
        try:
            next(p)
        except StopIteration:
            alive.remove(p)
        stuck += 1
        if stuck > 10**6:
            return "deadlock"
    return "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--variant", choices=("shipped", "no-q-free", "early-k-release"), default="shipped")
    args = ap.parse_args()
    bad = 0
    for seed in range(args.runs):
        rnd = random.Random(seed)
        nsk, nsv = rnd.choice([(4, 2), (3, 3), (2, 2), (6, 6), (3, 2)])
        items = [(i, rnd.choice([1, 1, 2, 3, 5, 8, 13])) for i in range(rnd.randint(1, 6))]
        try:
            result = run(items, nsk, nsv, seed, args.variant)
        except AssertionError as exc:
            result = f"slot read after its refill {exc}"
        if result != "ok":
            bad += 1
            print(seed, (nsk, nsv), items, result)
    print(f"{args.variant}: {bad} of {args.runs} interleavings failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
