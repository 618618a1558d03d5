"""The front page stays a front page, and the documentation stays inside the repository.

A newcomer reads README.md first, then follows links into docs/. Every relative link must lead to a file
of the repository (and to a heading of it, when the link names one); nothing may send the reader to a
path outside the clone, such as the shared folder beside it where the project's notes once lived.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


# [text](target) and [text](target "title"); images too. Code spans and fenced blocks are removed first.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?", re.M)  # [name]: target
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def links(path: Path) -> list[str]:
    text = CODE_SPAN.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    return LINK.findall(text) + REFERENCE.findall(text)


def is_external(target: str) -> bool:
    return re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I) is not None  # https:, mailto:, ...


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading.strip()).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    for line in text.splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def broken_links() -> list[str]:
    """The links that resolve to nothing inside the repository (a file, or a heading of a page)."""
    broken: list[str] = []
    for page in markdown_files():
        where = page.relative_to(ROOT)
        for target in links(page):
            if is_external(target):
                continue
            file_part, _, anchor = target.partition("#")
            resolved = (page.parent / file_part).resolve() if file_part else page
            try:
                inside = resolved.relative_to(ROOT).as_posix()
            except ValueError:
                broken.append(f"{where}: {target} leads outside the repository")
                continue
            if not resolved.exists():
                broken.append(f"{where}: {target} names no file of the repository")
                continue
            if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{where}: {target} names no heading of {inside}")
    return broken


def test_the_front_page_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 220, f"README.md has {lines} lines: move detail into docs/ and link to it"


def test_the_front_page_keeps_the_two_set_up_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_there_are_docs_pages_and_an_index():
    pages = sorted(p.name for p in DOCS.glob("*.md"))
    assert "README.md" in pages
    assert len(pages) >= 5, pages


def test_the_index_and_the_front_page_link_every_docs_page():
    linked = set()
    for page in (ROOT / "README.md", DOCS / "README.md"):
        for target in links(page):
            if not is_external(target):
                file_part = target.partition("#")[0]
                if file_part:
                    linked.add((page.parent / file_part).resolve())
    orphans = [p.name for p in DOCS.glob("*.md") if p.name != "README.md" and p.resolve() not in linked]
    assert not orphans, f"docs pages no index links to: {orphans}"


def test_every_relative_link_resolves_inside_the_repository():
    broken = broken_links()
    assert not broken, "\n".join(broken)


def test_the_link_checker_catches_what_it_should(tmp_path, monkeypatch):
    # The checker itself, on a made-up repository: a page outside, a missing file, a missing heading.
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md#b-c) [out](../x.md) [gone](docs/z.md) [h](docs/a.md#no)\n"
        "`[code](not/a/link.md)` [web](https://example.com) [r][r]\n\n[r]: docs/y.md\n")
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## B `c`\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    monkeypatch.setitem(globals(), "DOCS", tmp_path / "docs")
    broken = broken_links()
    assert [b.split(": ", 1)[1] for b in broken] == [
        "../x.md leads outside the repository",
        "docs/z.md names no file of the repository",
        "docs/a.md#no names no heading of docs/a.md",
        "docs/y.md names no file of the repository",
    ]


def tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: nothing is tracked")
    return [name for name in out.stdout.decode().split("\0") if name]


def test_no_tracked_file_points_at_the_shared_folder_outside_the_repository():
    needle = "../" + "shared"  # spelled in two parts so this file does not name it itself
    offenders = []
    for name in tracked_files():
        path = ROOT / name
        if not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files carry no references to read
        offenders += [f"{name}:{n}" for n, line in enumerate(text.splitlines(), 1) if needle in line]
    assert not offenders, f"files that send the reader outside the repository: {offenders}"
