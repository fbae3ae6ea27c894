#!/usr/bin/env python3
"""Keeps the commands in README.md and docs/*.md true to the program.

Every shell line of a fenced code block that calls moet (`build/moet ...`, `moet ...`, under
mpirun or scripts/cluster.sh too) is checked against the program itself:

- its command (and sub-command) exists: `moet CMD [SUB] --help` succeeds;
- every flag it names appears in that command's --help;
- every repository file a documented command names (configs/..., bench/..., scripts/...) exists.

Each concrete line (no placeholders such as CONFIG.json, [optional] parts or "...") that is cheap
to run — the simulator and planner, anything on configs/tiny.json, a train of a few steps and
the commands of the same block after it — is also run, block by block, in a scratch directory
that holds links to configs/, bench/ and scripts/ (and where /tmp/ paths are redirected), and
must exit 0.

Prose paths: every `bench/...`, `scripts/...`, `configs/...`, `src/...`, `tests/...`, `docs/...`
named anywhere in README.md and docs/*.md must exist (brace and glob patterns expanded).

Usage: doc_commands.py --moet build/moet --root REPO [--no-run] [--list]
Exit status 1 with one line per problem.
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

# Things a documented command may name that are not placeholders but look like them.
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z0-9_]*(?:[./][A-Za-z0-9_]+)*|.*\.\.\..*|\[.*|.*\].*)$")
REPO_PATH = re.compile(r"\b((?:bench|scripts|configs|tests|src|docs)/[A-Za-z0-9_./{},*-]+)")
# Prose paths that name another project's files, not moet's.
FOREIGN = ("configs/systems/local.json",  # written by `moet bench`, not shipped
           "docs/discussions/", "scripts/performance/")
# Flags of mpirun / cluster.sh that come before the moet binary.
LAUNCHERS = {"mpirun", "mpiexec", "scripts/cluster.sh"}


def fenced_blocks(text):
    """(first line number, [lines]) of each fenced block whose language is sh, bash or empty."""
    blocks, cur, start, lang = [], None, 0, None
    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if s.startswith("```"):
            if cur is None:
                lang, cur, start = s[3:].strip(), [], i + 1
            else:
                if lang in ("", "sh", "bash", "console", "shell"):
                    blocks.append((start, cur))
                cur = None
            continue
        if cur is not None:
            cur.append(line)
    return blocks


def logical_lines(lines, first):
    """Joins backslash continuations; yields (line number, text)."""
    out, buf, at = [], "", first
    for k, line in enumerate(lines):
        if not buf:
            at = first + k
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        if buf.strip():
            out.append((at, buf.strip()))
        buf = ""
    if buf.strip():
        out.append((at, buf.strip()))
    return out


def split_words(cmd):
    try:
        return shlex.split(cmd, comments=True)
    except ValueError:
        return None


def moet_call(words):
    """Index of the moet binary when the line runs moet (directly, after VAR=value
    assignments, or under mpirun / scripts/cluster.sh), else None: a script that is merely
    given build/moet as an argument is not a moet command line."""
    k = 0
    while k < len(words) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[k]):
        k += 1
    if k < len(words) and words[k] == "sudo":
        k += 1
    if k >= len(words):
        return None
    is_moet = lambda w: w in ("moet", "build/moet") or w.endswith("/build/moet")
    if is_moet(words[k]):
        return k
    if words[k] in LAUNCHERS:
        for i in range(k + 1, len(words)):
            if is_moet(words[i]):
                return i
    return None


def subcommand(words, at, helps):
    """The (sub)command path after the binary: ['train'], ['checkpoint', 'inspect'], ..."""
    path = []
    for w in words[at + 1:at + 3]:
        if w.startswith("-") or not re.fullmatch(r"[a-z][a-z-]*", w):
            break
        trial = path + [w]
        if helps(trial) is None:
            break
        path = trial
    return path


def flags_in(words):
    """Every --flag named in the words, alternatives of [--a x|y] included."""
    flags = set()
    for w in words:
        for m in re.finditer(r"(?:^|[\[|(\s])(--[a-z0-9][a-z0-9-]*)", w):
            flags.add(m.group(1))
    return flags


def without_optional(words):
    """The words with every [optional] group left out: `--gpus 256 [--json]` runs as written
    without the flag."""
    out, depth = [], 0
    for w in words:
        opens, closes = w.count("["), w.count("]")
        if depth == 0 and opens == 0:
            out.append(w)
        depth += opens - closes
    return out


def concrete(words):
    return all(not PLACEHOLDER.match(w) for w in words) and "|" not in " ".join(
        w for w in words if w.startswith("--"))


class Helps:
    def __init__(self, moet):
        self.moet, self.cache = moet, {}

    def __call__(self, path):
        key = tuple(path)
        if key not in self.cache:
            r = subprocess.run([self.moet, *path, "--help"], capture_output=True, text=True)
            self.cache[key] = r.stdout if r.returncode == 0 and path else (
                r.stdout if not path else None)
        return self.cache[key]


def cheap(words, at, sub):
    """Whether a concrete line is quick enough to run in the test (scripts/cluster.sh needs
    root and network namespaces: the cluster tests run it)."""
    if words[0] == "scripts/cluster.sh":
        return False
    if sub and sub[0] in ("simulate", "plan"):
        return True
    if "configs/tiny.json" in words:
        return True
    if sub and sub[0] == "train" and "--steps" in words:
        k = words.index("--steps")
        return k + 1 < len(words) and words[k + 1].isdigit() and int(words[k + 1]) <= 3
    return False


def run_line(words, at, scratch, moet, root):
    args = []
    for w in words:
        if w in ("build/moet", "moet"):
            w = moet
        elif w.startswith("/tmp/"):
            w = os.path.join(scratch, "tmp", w[len("/tmp/"):])
        args.append(w)
    if args[0] in ("mpirun", "mpiexec"):
        extra = ["--oversubscribe"]
        if os.geteuid() == 0:
            extra.append("--allow-run-as-root")
        args = [args[0], *extra, *args[1:]]
    r = subprocess.run(args, cwd=scratch, capture_output=True, text=True, errors="replace",
                       timeout=600)
    return r


def check_file(path, root):
    if any(path.startswith(f) for f in FOREIGN):
        return True
    path = path.rstrip(".,:;)")
    # {h,cpp} braces: every alternative must exist.
    m = re.search(r"\{([^}]*)\}", path)
    if m:
        return all(check_file(path[:m.start()] + alt + path[m.end():], root)
                   for alt in m.group(1).split(","))
    if "*" in path:
        return bool(glob.glob(os.path.join(root, path)))
    return os.path.exists(os.path.join(root, path))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moet", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--no-run", action="store_true", help="only check commands and flags")
    ap.add_argument("--list", action="store_true", help="print what is checked and run")
    a = ap.parse_args()
    root, moet = os.path.abspath(a.root), os.path.abspath(a.moet)
    helps = Helps(moet)
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs/*.md")))
    problems, checked, ran = [], 0, 0
    for doc in docs:
        rel = os.path.relpath(doc, root)
        text = open(doc, encoding="utf-8").read()
        # Prose paths.
        for m in REPO_PATH.finditer(text):
            if not check_file(m.group(1), root):
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{rel}:{line}: names {m.group(1)}, which the repository lacks")
        for first, block in fenced_blocks(text):
            scratch = None
            made = set()  # paths the block's earlier run lines named: later lines may use them
            for at, cmd in logical_lines(block, first):
                words = split_words(cmd)
                if not words:
                    continue
                i = moet_call(words)
                if i is None:
                    continue
                checked += 1
                where = f"{rel}:{at}"
                sub = subcommand(words, i, helps)
                if not sub:
                    problems.append(f"{where}: no moet command in: {cmd}")
                    continue
                text_help = helps(sub)
                tail = words[i + 1 + len(sub):]
                for f in sorted(flags_in(tail)):
                    if not re.search(r"(?<![a-z0-9-])" + re.escape(f) + r"(?![a-z0-9-])",
                                     text_help):
                        problems.append(f"{where}: moet {' '.join(sub)} has no flag {f}")
                for w in words:
                    for m in REPO_PATH.finditer(w):
                        if not check_file(m.group(1), root):
                            problems.append(f"{where}: names {m.group(1)}, which is missing")
                words = without_optional(words)
                uses = any(w in made for w in words[i + 1:])
                run = not a.no_run and concrete(words) and (uses or cheap(words, i, sub))
                if a.list:
                    print(f"{where}: {'RUN ' if run else 'flags'} {cmd}")
                if not run:
                    continue
                made |= {w for w in words[i + 1:] if "/" in w and not os.path.exists(
                    os.path.join(root, w))}
                if scratch is None:
                    scratch = tempfile.mkdtemp(prefix="moet_doc_")
                    os.mkdir(os.path.join(scratch, "tmp"))
                    # configs/ is copied: a command that writes there (moet bench) must not
                    # change the repository.
                    shutil.copytree(os.path.join(root, "configs"), os.path.join(scratch, "configs"))
                    for d in ("bench", "scripts"):
                        os.symlink(os.path.join(root, d), os.path.join(scratch, d))
                ran += 1
                try:
                    r = run_line(words, i, scratch, moet, root)
                except subprocess.TimeoutExpired:
                    problems.append(f"{where}: timed out after 600 s: {cmd}")
                    continue
                if r.returncode != 0:
                    out = r.stderr.strip().splitlines() + r.stdout.strip().splitlines()
                    said = [l for l in out if "error" in l.lower()] or out or ["(no output)"]
                    last = said[0]
                    problems.append(f"{where}: exit {r.returncode}: {cmd}: {last}")
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
    for p in problems:
        print(p)
    print(f"doc_commands: {checked} documented moet commands checked, {ran} run, "
          f"{len(problems)} problems")
    return 1 if problems or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
