"""Writes the shipped harness files that are compositions (another harness plus catalogue
mechanisms, declared as `COMPOSITIONS` in each domain's catalogue: the cpu preset's
`h0_cpu`, chess `h1`), so they are generated, never hand-edited, and cannot drift from the
mechanisms they are made of (tests/test_cpu_start.py checks each file equals its composition).

    python -m whalekit.search.compositions          # rewrite every built-in domain's composed files
"""

from __future__ import annotations

from pathlib import Path

from whalekit.domains.base import BUILT_IN, get_domain
from whalekit.domains.mechanisms import composed_source


def write_compositions(domains: list[str] | None = None) -> list[Path]:
    """Write every (built-in, by default) domain's composed harness files; the paths written."""
    written = []
    for name in sorted(domains or BUILT_IN):
        domain = get_domain(name)
        for composition in domain.compositions():
            path = domain.harness_dir() / f"{composition.name}.py"
            path.write_text(composed_source(domain, composition))
            written.append(path)
    return written


if __name__ == "__main__":
    for written_path in write_compositions():
        print(f"wrote {written_path}")
