#!/usr/bin/env python3
"""Runs every shell block of README.md, CONTRIBUTING.md and docs/*.md that can run on a CPU
without LibTorch, so that the commands the docs show keep working as written.

A block is a fenced ```sh block. It runs with bash -e in a fresh scratch folder where profiles/,
models/ and tests/ of the source tree are linked, with `gpipe-plan` (the binary under test) first
on PATH. A block whose first line is a comment starting "# not run by the docs test:" is skipped;
the rest of that line says why (needs LibTorch, a GPU, minutes of training, builds the project).
Every block of a file shares one scratch folder, in order, so a later block may use a file an
earlier one wrote (plan.json).

usage: run_doc_blocks.py GPIPE_PLAN SOURCE_DIR [FILE.md ...]
Exit 0 when every runnable block exits 0; otherwise each failure is printed with its file and line.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = "# not run by the docs test:"
LINKED = ("profiles", "models", "tests")


def blocks(path: pathlib.Path):
    """(first line number, text) of each ```sh block."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            start = i + 1
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            yield start + 1, "\n".join(lines[start:j])
            i = j
        i += 1


def main() -> int:
    binary, source = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
    files = [pathlib.Path(f) for f in sys.argv[3:]] or (
        [source / "README.md", source / "CONTRIBUTING.md"] + sorted((source / "docs").glob("*.md")))
    bindir = tempfile.mkdtemp(prefix="gpipe-docs-bin-")
    os.symlink(binary, os.path.join(bindir, "gpipe-plan"))
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"])
    failures, ran, skipped = [], 0, 0
    started = time.monotonic()
    for path in files:
        if not path.exists():
            continue
        scratch = tempfile.mkdtemp(prefix="gpipe-docs-")
        for name in LINKED:
            os.symlink(source / name, os.path.join(scratch, name))
        for line, text in blocks(path):
            first = text.lstrip().splitlines()[0] if text.strip() else ""
            if first.startswith(SKIP):
                skipped += 1
                continue
            ran += 1
            try:
                done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", text], cwd=scratch, env=env,
                                      capture_output=True, text=True, timeout=120)
                code, output = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired:
                code, output = "timeout (120 s)", ""
            if code != 0:
                failures.append(f"{path.relative_to(source) if path.is_relative_to(source) else path}:{line}: "
                                f"exit {code}\n{text}\n--- output (last 40 lines) ---\n"
                                + "\n".join(output.splitlines()[-40:]))
        shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree(bindir, ignore_errors=True)
    print(f"{ran} blocks run, {skipped} marked not run, {len(failures)} failed, "
          f"{time.monotonic() - started:.1f} s")
    for failure in failures:
        print("\n" + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
