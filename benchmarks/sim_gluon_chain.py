"""An event simulation of the chained rows kernel's barrier protocol (prefill_gluon_chain.py),
with no GPU, as benchmarks/sim_gluon_barriers.py does for the one-item forms: the loader and
the two warpgroups as generators in random interleavings over phase-counted mbarriers, with the
contents of the Q buffers and ring slots tracked, so a deadlock, or a Q.K / P.V reading a
buffer other than the one it means (a refill too early), is found. It mirrors the kernel's
waits, arrives and indices by hand (NOTES-hopper.md, version 13): change it with them.

    python3 benchmarks/sim_gluon_chain.py [--runs 400] [--variant shipped|one-q-buffer|no-q-wait]

"one-q-buffer" (one Q buffer, indexed u % 1) and "no-q-wait" (the last tile's Q.K issued without
waiting for the next item's Q) are sabotages the simulation must catch. (The program's spare
Q.K releasing its slot too would complete one more phase of k_free that nobody waits for:
harmless, so the kernel's pred is tidiness.)
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sim_gluon_barriers import Bar  # noqa: E402


def run(items_of, NSK, NSV, seed, variant="shipped"):
    """items_of: [(item, key tiles)] one program walks; -> "ok" or "deadlock" (AssertionError:
    a buffer read after its refill)."""
    rnd = random.Random(seed)
    NQ = 1 if variant == "one-q-buffer" else 2
    q_bar, q_free = [Bar(1) for _ in range(NQ)], [Bar(2) for _ in range(NQ)]
    k_ready, k_free = [Bar(1) for _ in range(NSK)], [Bar(2) for _ in range(NSK)]
    v_ready, v_free = [Bar(1) for _ in range(NSV)], [Bar(2) for _ in range(NSV)]
    turn = [Bar(1), Bar(1)]
    turn[0].arrive()
    kslot, vslot, qbuf = [None] * NSK, [None] * NSV, [None] * NQ
    n_items = len(items_of)

    def W(bar, parity):
        while not bar.done(parity):
            yield

    def load_k(g, what):
        s = g % NSK
        yield from W(k_free[s], ((g // NSK) & 1) ^ 1)
        kslot[s] = what
        k_ready[s].arrive()

    def load_q(u):
        b = u % NQ
        yield from W(q_free[b], ((u // NQ) & 1) ^ 1)
        qbuf[b] = items_of[u][0]
        q_bar[b].arrive()

    def loader():
        if n_items:
            yield from load_k(0, (items_of[0][0], 0))
            yield from load_q(0)
        g = 0
        for u, (item, n) in enumerate(items_of):
            for i in range(n):
                if i + 1 < n:
                    yield from load_k(g + i + 1, (item, i + 1))
                elif u + 1 < n_items:
                    yield from load_k(g + n, (items_of[u + 1][0], 0))
                    yield from load_q(u + 1)
                gv = g + i
                yield from W(v_free[gv % NSV], ((gv // NSV) & 1) ^ 1)
                vslot[gv % NSV] = (item, i)
                v_ready[gv % NSV].arrive()
                yield
            g += n

    def compute(WG):
        if n_items:                               # the prologue: item 0's first Q.K
            yield from W(q_bar[0], 0)
            yield from W(k_ready[0], 0)
            yield from W(turn[WG], 0)
            assert qbuf[0] == items_of[0][0] and kslot[0] == (items_of[0][0], 0)
            turn[1 - WG].arrive()
            yield
            assert qbuf[0] == items_of[0][0] and kslot[0] == (items_of[0][0], 0)
            k_free[0].arrive()
        g = t = 0
        for u, (item, n) in enumerate(items_of):
            more = u + 1 < n_items
            for j in range(n):
                if j > 0:
                    v_free[(g + j - 1) % NSV].arrive()
                last = j + 1 == n
                spare = last and not more
                gn = g + j + 1 - spare
                sn = gn % NSK
                uq = u + (last and more)
                want_k = (item, n - 1) if spare else (items_of[u + 1][0], 0) if last else (item, j + 1)
                yield from W(k_ready[sn], (gn // NSK) & 1)
                if variant != "no-q-wait" or uq == u:
                    yield from W(q_bar[uq % NQ], (uq // NQ) & 1)
                yield from W(turn[WG], (t + j + 1) & 1)
                assert kslot[sn] == want_k, (kslot[sn], want_k)
                assert qbuf[uq % NQ] == items_of[uq][0], ("Q", qbuf[uq % NQ], items_of[uq][0])
                gv = g + j
                yield from W(v_ready[gv % NSV], (gv // NSV) & 1)
                assert vslot[gv % NSV] == (item, j)
                turn[1 - WG].arrive()
                yield                              # the Q.K and P.V read while in flight
                assert kslot[sn] == want_k and qbuf[uq % NQ] == items_of[uq][0]
                if not spare:
                    k_free[sn].arrive()
                yield
                assert vslot[gv % NSV] == (item, j)  # P.V in flight until the next tile's wait
            q_free[u % NQ].arrive()
            v_free[(g + n - 1) % NSV].arrive()
            yield
            g += n
            t += n

    alive = [loader(), compute(0), compute(1)]
    steps = 0
    while alive:
        p = rnd.choice(alive)
        try:
            next(p)
        except StopIteration:
            alive.remove(p)
        steps += 1
        if steps > 10**6:
            return "deadlock"
    # every barrier back at a phase start: no arrive left over or missing
    for bar in (*q_bar, *q_free, *k_ready, *k_free, *v_ready, *v_free):
        if bar.pending != bar.count:
            return f"unbalanced barrier ({bar.pending} of {bar.count} arrivals pending)"
    return "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=400)
    ap.add_argument("--variant", choices=("shipped", "one-q-buffer", "no-q-wait"), default="shipped")
    args = ap.parse_args()
    bad = 0
    for seed in range(args.runs):
        rnd = random.Random(seed)
        nsk, nsv = rnd.choice([(4, 2), (3, 3), (2, 2), (4, 4), (3, 2)])
        items = [(i, rnd.choice([1, 1, 2, 3, 5, 8, 13])) for i in range(rnd.randint(0, 7))]
        try:
            result = run(items, nsk, nsv, seed, args.variant)
        except AssertionError as exc:
            result = f"buffer read after its refill {exc}"
        if result != "ok":
            bad += 1
            if bad <= 5:
                print(seed, (nsk, nsv), items, result)
    print(f"{args.variant}: {bad} of {args.runs} interleavings failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
