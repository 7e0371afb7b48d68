"""Page sizes: which ones a set of backends accepts for a model.

A declaration's ``page_sizes`` says what the backend accepts for any model; its optional
``page_sizes_for`` hook narrows that for one model (e.g. divisors of the model's
dual chunk length, so a page never straddles two chunks). Nothing here names a backend.
"""
from __future__ import annotations

import itertools
from typing import Iterable, Mapping

from attnkit.model.spec import ModelAttention
from attnkit.registry.discovery import load_hook
from attnkit.registry.capabilities import BackendDeclaration

DEFAULT_PAGE_SIZE = 16      # the page size a plan fills where every chosen backend accepts it


def model_page_sizes(decl: BackendDeclaration, model: ModelAttention) -> frozenset[int] | None:
    """The page sizes ``decl``'s hook allows for ``model``; None when it adds no limit."""
    if decl.page_sizes_for is None:
        return None
    sizes = load_hook(decl.page_sizes_for)(model)
    return None if sizes is None else frozenset(sizes)


def accepts(decls: Iterable[BackendDeclaration], model: ModelAttention, size: int) -> bool:
    """Every one of ``decls`` accepts pages of ``size`` tokens for ``model``."""
    return size in common_page_sizes(decls, model, among=(size,))


def common_page_sizes(decls: Iterable[BackendDeclaration], model: ModelAttention, *,
                      limit: int = 4096, among: Iterable[int] | None = None) -> list[int]:
    """Page sizes every one of ``decls`` accepts for ``model``, ascending: of ``among``, or
    else of the powers of two up to ``limit`` and the sizes the declarations list."""
    decls = list(decls)
    allowed = [a for a in (model_page_sizes(d, model) for d in decls) if a is not None]
    if among is None:
        among = {1 << i for i in range(13)} | {s for d in decls if isinstance(d.capabilities.page_sizes, tuple)
                                               for s in d.capabilities.page_sizes}
        among = [s for s in among if s <= limit]
    return [s for s in sorted(among) if all(d.capabilities.accepts_page_size(s) for d in decls)
            and all(s in a for a in allowed)]


def first_sharing_pages(registry: Mapping[str, BackendDeclaration], model: ModelAttention, roles: list[str],
                        options: Mapping[str, list[str]]) -> dict[str, str] | None:
    """role -> backend: of the combinations of each role's ``options`` (fastest first), the one
    earliest in every order whose backends share a page size for ``model``; None when none does."""
    combos = sorted(itertools.product(*(list(enumerate(options[r])) for r in roles)),
                    key=lambda c: (sum(i for i, _ in c), c[0][0]))
    for combo in combos:
        names = [n for _, n in combo]
        if common_page_sizes([registry[n] for n in set(names)], model):
            return dict(zip(roles, names))
    return None
