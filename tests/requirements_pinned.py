"""Every third-party package the venv-run tests and benchmarks import is pinned.

Run with the project venv's python (scripts/venv.sh). Parses the imports of tests/*.py, bench/*.py,
reference/quant_check.py and reference/fp4_check.py (the venv-run scripts) with ast, drops the
standard library and the project's own modules, maps each remaining module to the PyPI distribution that provides it, and
checks that scripts/python-requirements.txt pins that distribution (`name==version`) and that the
venv has exactly that version. A package pulled in only as a dependency (tokenizers came with
transformers) would otherwise drift with every resolver run. Exits non-zero naming what is wrong.
"""
import ast
import importlib.metadata as md
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1]
req = root / "scripts" / "python-requirements.txt"
scripts = sorted((root / "tests").glob("*.py")) + sorted((root / "bench").glob("*.py"))
scripts += [root / "reference" / "quant_check.py", root / "reference" / "fp4_check.py"]
local = {p.stem for d in ("tests", "bench", "reference") for p in (root / d).glob("*.py")}


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


pins = {}
for line in req.read_text().splitlines():
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)", line)
    if not m:
        sys.exit(f"requirements_pinned: {req.name}: '{line}' is not pinned as name==version")
    pins[norm(m.group(1))] = m.group(2)

providers = md.packages_distributions()
problems, seen = [], {}
for script in scripts:
    for node in ast.walk(ast.parse(script.read_text(), str(script))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in sys.stdlib_module_names or top in local:
                continue
            for dist in providers.get(top, []) or [None]:
                if dist is None:
                    problems.append(f"{script.name} imports '{top}', which no installed package provides")
                    continue
                seen.setdefault(norm(dist), set()).add(script.name)

for dist, users in sorted(seen.items()):
    users = ", ".join(sorted(users))
    if dist not in pins:
        problems.append(f"'{dist}' (imported by {users}) is not pinned in {req.name}")
        continue
    have = md.version(dist)
    if have != pins[dist]:
        problems.append(f"'{dist}' is {have} in the venv but pinned {pins[dist]} in {req.name}")

if problems:
    for p in problems:
        print(f"requirements_pinned: {p}", file=sys.stderr)
    sys.exit(1)
print(f"requirements_pinned: {len(seen)} imported distributions, each pinned and installed at its "
      f"pin: {', '.join(f'{d}=={pins[d]}' for d in sorted(seen))}")
