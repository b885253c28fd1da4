"""The repository speaks of the product: no line of the user-facing files names how it was built (sessions,
leases, issues by number, seed documents) or paths outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORDS = re.compile(r"\bsessions?\b|\bleases?\b|\bissues? #?\d+|\bseeds\b|\.\./shared", re.I)
SUFFIXES = {".py", ".md", ".sh", ".sbatch", ".cfg", ".toml", ".txt", ".yml", ""}


def files() -> list[Path]:
    out = [REPO / "README.md", REPO / "Makefile", REPO / "setup.cfg", REPO / "mkdocs.yml"]
    for folder in ("docs", "pipelines", "benchmarks", "slurm", "dali_stream"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and path.suffix in SUFFIXES and "results" not in path.relative_to(REPO).parts \
                    and "__pycache__" not in path.parts:
                out.append(path)
    return out


def test_no_line_speaks_of_how_the_product_was_built():
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()[:120]}"
             for path in files() for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
             if WORDS.search(line)]
    assert not found, "\n".join(found)


# the tests too, where pytest's word for a run ("session" scope) and random generators' seeds are their own words
TEST_WORDS = re.compile(r"\bleases?\b|\bissues? #?\d+|\.\./shared", re.I)


def test_no_test_speaks_of_how_the_product_was_built():
    found = [f"{path.relative_to(REPO)}:{n}: {line.strip()[:120]}"
             for path in sorted((REPO / "tests").rglob("*.py")) if path.name != "test_words.py"
             for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1) if TEST_WORDS.search(line)]
    assert not found, "\n".join(found)


def test_the_pattern_catches_what_it_should():
    for text in ("this session's runs", "A lease is short", "issue 25's numbers", "Issue 28's targets",
                 "the seeds' definition", "../shared/gpu-staging"):
        assert WORDS.search(text), text
    for text in ("released", "seed=0", "the issue", "decoder instance"):
        assert not WORDS.search(text), text
