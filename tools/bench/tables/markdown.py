"""The Markdown files: their generated blocks rewritten, and their relative links checked."""
import difflib
import os
import re

from .common import DataError
from .registry import TABLES

MARKER = re.compile(r"^<!-- tables:([a-z0-9-]+) (begin|end) -->$")


def markdown_files(root):
    out = ["README.md"] if os.path.isfile(os.path.join(root, "README.md")) else []
    for base, dirs, files in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        out += [os.path.relpath(os.path.join(base, f), root) for f in sorted(files)
                if f.endswith(".md")]
    return out


def regenerate(root, doc, text):
    """`text` with every generated block rewritten; raises DataError for bad markers or data."""
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        m = MARKER.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        name, kind = m.groups()
        if kind == "end":
            raise DataError(f"{doc}:{i + 1}: 'tables:{name} end' without its begin")
        if name not in TABLES:
            raise DataError(f"{doc}:{i + 1}: unknown table '{name}' (known: "
                            f"{', '.join(sorted(TABLES))})")
        j = i + 1
        while j < len(lines) and not MARKER.match(lines[j]):
            j += 1
        if j == len(lines) or MARKER.match(lines[j]).groups() != (name, "end"):
            raise DataError(f"{doc}:{i + 1}: 'tables:{name} begin' without its end")
        out += [lines[i], TABLES[name](root, doc), lines[j]]
        i = j + 1
    return "\n".join(out)



LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(text):
    found, seen = set(), {}
    fence = False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        m = re.match(r"^#{1,6} (.*)$", line)
        if m:
            base = slug(re.sub(r"`([^`]*)`", r"\1", m.group(1)))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def prose(text):
    """The text without fenced blocks, indented code blocks and code spans."""
    out, fence = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith("    "):
            continue
        out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def broken_links(root, doc, text, read):
    bad = []
    for target in LINK.findall(prose(text)):
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(os.path.join(root, doc)), path)) \
            if path else os.path.join(root, doc)
        if not os.path.exists(full):
            bad.append(f"{doc}: link '{target}': no file {os.path.relpath(full, root)}")
            continue
        if anchor and full.endswith(".md") and anchor not in anchors(read(full)):
            bad.append(f"{doc}: link '{target}': no heading '#{anchor}' in "
                       f"{os.path.relpath(full, root)}")
    return bad


def check(root, texts):
    """Problems of the Markdown files `texts` ({doc: text}): differences and broken links."""
    problems = []

    def read(full):
        rel = os.path.relpath(full, root)
        if rel in texts:
            return texts[rel]
        with open(full, encoding="utf-8") as f:
            return f.read()
    for doc, text in texts.items():
        try:
            want = regenerate(root, doc, text)
        except DataError as e:
            problems.append(str(e))
            continue
        if want != text:
            diff = list(difflib.unified_diff(text.split("\n"), want.split("\n"), doc,
                                             doc + " (generated)", n=0, lineterm=""))
            problems.append(f"{doc}: generated tables differ from tools/bench/results "
                            f"(run tools/bench/make_tables.py):\n" + "\n".join(diff[:12]))
        problems += broken_links(root, doc, text, read)
    return problems


def read_all(root):
    texts = {}
    for doc in markdown_files(root):
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            texts[doc] = f.read()
    return texts
