#!/usr/bin/env python3
"""Checks that the docs' printed outputs are what the commands print today.

    scripts/docs_outputs.sh BUILD OUT        # run every command the docs quote, one file each
    scripts/docs_check.py OUT                # compare each quoted block with its file
    scripts/docs_check.py OUT --update       # carry the files into the blocks
    scripts/docs_check.py OUT --root DIR     # the docs of another tree (README.md, docs/, bench/)

A block that quotes a command's output is marked by the line just before its opening fence:

    <!-- output: study.txt -->

naming the file of OUT it comes from (several, comma-separated, for a block of several "$ command"
segments, in order; "-" for a segment that quotes none, such as `$ echo $?`). The block may leave lines out: its lines, less "$ ..." command lines and "..."
lines, must stand in the file in the same order, each exactly. Lines of measured figures (wall times,
the simulator's own speed) and of results compared against the cpu reference (`max |a - b|`, whose
last digits depend on the host's vector unit) differ from run to run or machine to machine: of those
only the text before the first digit is compared. Prose figures are not checked; docs/testing.md says
so. Exits 1, naming each block and line that differs, when anything differs.
"""
import glob
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = re.compile(r"^<!-- output: (.+?) -->\s*$")
VOLATILE = re.compile(r"[Mm]easured|wall time|max \|")


def docs(root):
    names = ["README.md", "bench/README.md"] + sorted(
        os.path.relpath(p, root) for p in glob.glob(os.path.join(root, "docs", "*.md")))
    return [n for n in names if os.path.exists(os.path.join(root, n))]


def prefix(line):
    return re.match(r"^\D*", line).group(0)


def same(doc_line, out_line):
    if VOLATILE.search(doc_line):
        return prefix(doc_line).rstrip() == prefix(out_line).rstrip()
    return doc_line == out_line


def segments(lines, begin, end):
    """[begin, end) of a block split at its "$ " command lines: (first, last) line ranges."""
    starts = [begin] + [k for k in range(begin + 1, end) if lines[k].startswith("$ ")]
    return list(zip(starts, starts[1:] + [end]))


def carry(doc, first, last, out, origin, update):
    """Matches doc[first:last] against `out` in order; returns the problems (and rewrites doc lines)."""
    problems = []
    at = 0
    for k in range(first, last):
        line = doc[k].rstrip()
        if not line.strip() or line.startswith("$ ") or line.strip() == "...":
            continue
        found = next((i for i in range(at, len(out)) if same(line, out[i])), None)
        if found is None and update:
            # The same line with other figures: the next one of the same leading text.
            found = next((i for i in range(at, len(out))
                          if re.search(r"\d", line) and len(prefix(line).strip()) >= 2
                          and prefix(out[i]) == prefix(line)), None)
            if found is not None:
                doc[k] = out[found]
        if found is None:
            problems.append(f"{origin}:{k + 1}: not in the output, in this order:\n    {line}")
            continue
        at = found + 1
    return problems


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    out_dir, update = argv[1], "--update" in argv[2:]
    root = ROOT
    if "--root" in argv[2:]:  # another tree's docs (the script's own test)
        root = argv[argv.index("--root") + 1]
    problems, blocks, changed = [], 0, []
    for name in docs(root):
        path = os.path.join(root, name)
        with open(path, encoding="utf-8") as f:
            doc = f.read().split("\n")
        before = list(doc)
        for i, line in enumerate(doc):
            marker = MARKER.match(line)
            if not marker:
                continue
            fence = i + 1
            if fence >= len(doc) or not doc[fence].startswith("```"):
                problems.append(f"{name}:{i + 1}: an output marker must stand just before a code block")
                continue
            end = next((k for k in range(fence + 1, len(doc)) if doc[k].startswith("```")), None)
            if end is None:
                problems.append(f"{name}:{fence + 1}: the code block is not closed")
                continue
            files = [f.strip() for f in marker.group(1).split(",")]
            parts = segments(doc, fence + 1, end)
            if len(parts) != len(files):
                problems.append(f"{name}:{i + 1}: the marker names {len(files)} files for {len(parts)} segments")
                continue
            for (first, last), file in zip(parts, files):
                if file == "-":  # a segment that quotes no file of OUT (the shell's exit status)
                    continue
                out_path = os.path.join(out_dir, file)
                if not os.path.exists(out_path):
                    problems.append(f"{name}:{i + 1}: {file} is not in {out_dir}: scripts/docs_outputs.sh writes it?")
                    continue
                with open(out_path, encoding="utf-8") as f:
                    out = [l.rstrip() for l in f.read().split("\n")]
                problems += carry(doc, first, last, out, name, update)
            blocks += 1
        if update and doc != before:
            with open(path, "w", encoding="utf-8") as f:
                f.write("\n".join(doc))
            changed.append(name)
    for problem in problems:
        print(problem)
    if update:
        print(f"docs_check: {blocks} blocks; rewrote {', '.join(changed) or 'nothing'}")
    if problems:
        print(f"docs_check: {len(problems)} differences in {blocks} quoted outputs. Run "
              f"scripts/docs_outputs.sh BUILD OUT and scripts/docs_check.py OUT --update, then read the diff "
              f"(and the prose figures around it).")
        return 1
    if not update:
        print(f"docs_check: {blocks} quoted outputs equal what the commands print")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
