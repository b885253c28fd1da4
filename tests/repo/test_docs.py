"""README.md and docs/: every `python` and `bash` block runs as copied, links resolve, the README stays short.

A block is run unless the line after its closing fence is `<!-- not run: reason -->` (it needs lerobot, a GPU,
a cluster, or installs the package). A page's blocks run in order, each in its own process, in one fresh folder
where the paths the pages name stand for small datasets written by the sample writer: `path/to/dataset` and
`lerobot/pusht` (a Hub id is a local folder of that name when one exists; 206 episodes, as the episode splits
expect, one `front` camera at 30 fps) and `.demo/mixture/arm6`, `.demo/mixture/arm7` (`make demo-mixture`'s
members). `.demo/sample` is what the blocks write themselves, as a reader would. The docs site's own links and
anchors are checked by `make docs` (mkdocs --strict); the READMEs' links here."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUNNABLE = ("python", "bash")
# README sections whose blocks tests/repo/test_readme_install.py runs as a new user does, in a fresh environment after
# the README's own install line: not run a second time here.
FRESH_SECTIONS = ("Quickstart", "Training lerobot's policies", "Mixtures")
NOT_RUN = re.compile(r"^<!-- not run: (.+) -->$")
FENCE = re.compile(r"^```(\w*)")


def blocks(page: Path | str) -> list[tuple[int, str, str, str | None]]:
    """(line, language, code, why it is not run or None) of every fenced block of a page (a path, or its text)."""
    lines = (page.read_text() if isinstance(page, Path) else page).split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(1)
        i += 1
        while i < len(lines) and lines[i] != "```":
            i += 1
        code = "\n".join(lines[start + 1:i]) + "\n"
        after = lines[i + 1] if i + 1 < len(lines) else ""
        why = NOT_RUN.match(after)
        out.append((start + 1, lang, code, why.group(1) if why else None))
        i += 1
    return out


def runnable(page: Path | str) -> list[tuple[int, str, str]]:
    return [(n, lang, code) for n, lang, code, why in blocks(page) if lang in RUNNABLE and why is None]


def test_every_block_is_a_known_kind_and_says_why_it_is_not_run():
    for page in PAGES:
        for n, lang, _, why in blocks(page):
            assert lang, f"{page.name}:{n}: a block without a language; mark it python, bash or text"
            if why is not None:
                assert lang in RUNNABLE and len(why) > 10, f"{page.name}:{n}: say why the block is not run"


def test_the_readme_is_a_way_in():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250, "README.md holds the way in; the reference goes to docs/"
    first_screen = "\n".join(text.splitlines()[:25])
    for needed in ("LeRobot", "Why use it", "samples/s"):
        assert needed in first_screen, needed
    quick = text.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert sum(len(code.splitlines()) for _, _, code in runnable(quick)) <= 15
    # what, why, install, the first batch, the switch from LeRobotDataset: read in minutes; figures after
    before = text.split("\n## Performance", 1)[0]
    assert len(before.split()) <= 1500, f"{len(before.split())} words before Performance"
    assert text.index("\n## Status") > text.index("\n## Performance"), "the Status table's words come after"


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=206, min_length=4, max_length=6, height=64, width=64, gop=4, episodes_per_file=52,
                      cameras=parse_cameras("front:h264"), seed=7)
    return write_sample(tmp_path_factory.mktemp("docs") / "stand_in", spec)


def _folder(tmp_path: Path, stand_in: Path, embodiments: dict) -> Path:
    for name in ("path/to/dataset", "lerobot/pusht"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).symlink_to(stand_in, target_is_directory=True)
    (tmp_path / ".demo/mixture").mkdir(parents=True)
    for name in ("arm6", "arm7"):
        (tmp_path / ".demo/mixture" / name).symlink_to(embodiments[name], target_is_directory=True)
    return tmp_path


@pytest.mark.parametrize("page", [p for p in PAGES if runnable(p)], ids=lambda p: p.name)
def test_the_blocks_run_as_copied(page, stand_in, embodiments, tmp_path):
    cwd = _folder(tmp_path, stand_in, embodiments)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(key, None)
    fresh = fresh_lines(page) if page.name == "README.md" else set()
    for n, lang, code in runnable(page):
        if n in fresh:
            continue
        cmd = [sys.executable, "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{page.name} line {n} ({lang}) failed:\n{code}\n{proc.stdout[-2000:]}\n" \
                                     f"{proc.stderr[-4000:]}"


def fresh_lines(page: Path) -> set[int]:
    """Lines of the blocks in `FRESH_SECTIONS` of a README (where their heading is)."""
    lines, out, inside = page.read_text().split("\n"), set(), False
    for n, line in enumerate(lines, 1):
        if line.startswith("## "):
            inside = line[3:].strip() in FRESH_SECTIONS
        elif inside and FENCE.match(line):
            out.add(n)
    return out


def test_the_fresh_sections_exist_and_hold_blocks():
    readme = REPO / "README.md"
    assert {h for h in FRESH_SECTIONS if f"\n## {h}\n" in readme.read_text()} == set(FRESH_SECTIONS)
    assert {n for n, *_ in runnable(readme)} & fresh_lines(readme)


def github_slug(heading: str) -> str:
    text = re.sub(r"`|\*", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {github_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", path.read_text(), flags=re.M)}


@pytest.mark.parametrize("readme", ["README.md", "pipelines/README.md", "slurm/README.md", "benchmarks/README.md"])
def test_the_readmes_links_resolve(readme):
    path = REPO / readme
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        assert dest.exists(), f"{readme}: link to {target}: no such file"
        if anchor:
            assert anchor in anchors(dest), f"{readme}: link to {target}: no such heading in {dest.name}"


def test_a_moved_heading_breaks_the_link_check(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("# A\n\n## Host frames and `channels_last`\n")
    assert "host-frames-and-channels_last" in anchors(page)
    assert github_slug("Switching from `LeRobotDataset`") == "switching-from-lerobotdataset"
