"""The index of the code's Notes (docs/design.md)."""
import os
import re

from .common import rel_link, table

NOTE_DIRS = ["runtime", "ops", "kernels", "solver", "models", "tools", "tests", "cmake"]
NOTE_FILES = ["CMakeLists.txt"]
NOTE_EXT = (".h", ".cpp", ".cu", ".cuh", ".py", ".sh", ".cmake", ".txt")
NOTE_ALONE = re.compile(r"^\s*(?://|#) Note \[([^\]]+)\]\s*$")
NOTE_INLINE = re.compile(r"^\s*(?://|#) Note \[([^\]]+)\]:")
NOTE_ANY = re.compile(r"Note \[([^\]]+)\]")


def source_files(root):
    for name in NOTE_FILES:
        if os.path.isfile(os.path.join(root, name)):
            yield name
    for d in NOTE_DIRS:
        for base, dirs, files in os.walk(os.path.join(root, d)):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__" and not x.startswith("."))
            for f in sorted(files):
                rel = os.path.relpath(os.path.join(base, f), root)
                if f.endswith(NOTE_EXT) and rel != "tools/bench/tables/notes.py":  # its patterns
                    yield rel


def note_index(root):
    alone, inline, cited = {}, {}, {}
    for rel in source_files(root):
        try:
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                lines = f.readlines()
        except OSError:
            continue
        for line in lines:
            for pattern, into in ((NOTE_ALONE, alone), (NOTE_INLINE, inline)):
                m = pattern.match(line)
                if m:
                    into.setdefault(m.group(1), []).append(rel)
            for name in NOTE_ANY.findall(line):
                cited.setdefault(name, []).append(rel)
    out = {}
    for name in cited:
        if name in alone:
            out[name] = (sorted(set(alone[name])), True)
        elif name in inline:  # cited as "Note [x]: ..." too: the header outside tests/ first
            out[name] = ([min(inline[name], key=lambda f: (f.startswith("tests/"),
                                                            not f.endswith(".h"), f))], True)
        else:
            out[name] = (sorted(set(cited[name])), False)
    return out


def gen_notes(root, doc):
    rows = []
    for name, (files, defined) in sorted(note_index(root).items(), key=lambda x: x[0].lower()):
        where = ", ".join(f"[{f}]({rel_link(doc, f, root)})" for f in files)
        rows.append([f"Note [{name}]", where if defined else f"cited in {where}; no note text"])
    return table(["note", "defined in"], rows)
