"""Render the error catalog as docs/errors/AKxxx.md plus docs/errors/README.md.

``python -m attnkit.errors.docs [DIR]`` (re)writes them; ``--check`` exits 1 if the files on
disk differ from the catalog (tests/planning/test_error_docs.py runs the same comparison).
``attnkit explain CODE`` prints ``page(entry)``.
"""
from __future__ import annotations

import sys
from pathlib import Path

from attnkit.errors.catalog import CATALOG, ErrorEntry

RANGES = (("1", "Model and backend mismatch"), ("2", "Platform and installation"),
          ("3", "Configuration conflicts"), ("4", "Runtime inputs"), ("5", "Model config parsing"),
          ("9", "Internal errors"))
DEFAULT_DIR = Path(__file__).resolve().parents[3] / "docs" / "errors"


def page(e: ErrorEntry) -> str:
    """One entry as a Markdown page (also the text of ``attnkit explain``)."""
    lines = [f"# {e.code}: {e.title}", ""]
    if e.merged_into:
        new = e.merged_into
        lines += [f"> **Merged into [{new}]({new}.md): {CATALOG[new].title}.** attnkit no longer "
                  f"raises {e.code}; the same refusal, from every backend, is {new}. What follows "
                  f"is how {e.code} read before the merge.", ""]
    lines += ["## What it means", "", e.meaning, "", "## When it happens", "", e.trigger, ""]
    if e.situations:
        lines += ["Common situations:", ""] + [f"- {s}" for s in e.situations] + [""]
    lines += ["## Solutions", ""] + [f"{i}. {s}" for i, s in enumerate(e.solutions, 1)] + [""]
    lines += ["## Example fix", "", "Before:", "", "```bash", e.example_before, "```", "",
              "After:", "", "```bash", e.example_after, "```", ""]
    if e.related:
        lines += ["## Related", "", ", ".join(f"[{c}]({c}.md)" if c in CATALOG else c for c in e.related), ""]
    return "\n".join(lines)


def index() -> str:
    lines = ["# attnkit error codes", "",
             "Every error attnkit raises has a stable code and one page here, generated from the "
             "catalog in `src/attnkit/errors/catalog/` by `python -m attnkit.errors.docs`. "
             "`attnkit explain CODE` prints the same page.", ""]
    for digit, title in RANGES:
        codes = [c for c in CATALOG if c[2] == digit]
        if codes:
            lines += [f"## {digit}xx: {title}", "", "| Code | Title |", "|---|---|"]
            lines += [f"| [{c}]({c}.md) | {_title(CATALOG[c])} |" for c in codes] + [""]
    return "\n".join(lines)


def _title(e: ErrorEntry) -> str:
    return f"{e.title} (merged into [{e.merged_into}]({e.merged_into}.md))" if e.merged_into else e.title


def expected_files() -> dict[str, str]:
    """file name -> content, for the whole directory."""
    return {"README.md": index(), **{f"{c}.md": page(e) for c, e in CATALOG.items()}}


def drift(directory: Path = DEFAULT_DIR) -> list[str]:
    """File names that are missing, stale or no longer in the catalog."""
    want = expected_files()
    have = {p.name for p in directory.glob("*.md")} if directory.is_dir() else set()
    stale = [n for n, text in want.items() if n not in have or (directory / n).read_text(encoding="utf-8") != text]
    return sorted(stale + [n for n in have if n not in want])


def write(directory: Path = DEFAULT_DIR) -> int:
    directory.mkdir(parents=True, exist_ok=True)
    want = expected_files()
    for old in directory.glob("*.md"):
        if old.name not in want:
            old.unlink()
    for name, text in want.items():
        (directory / name).write_text(text, encoding="utf-8")
    return len(want)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    directory = Path(args[0]) if args else DEFAULT_DIR
    if check:
        bad = drift(directory)
        sys.stdout.write("".join(f"out of date: {n}\n" for n in bad) or "docs/errors is up to date\n")
        return 1 if bad else 0
    n = write(directory)
    sys.stdout.write(f"wrote {n} files to {directory}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
