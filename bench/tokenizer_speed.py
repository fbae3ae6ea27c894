"""Encoding speed of moet's tokenizer against Hugging Face `tokenizers` (docs/benchmarks.md).

Both encode the same lines (English text of Debian's fortunes package, repeated to --mb MB, one
text per line) with the same byte-level BPE tokenizer.json (trained by `moet tokenizer train`,
GPT-2 style), at 1 and 2 threads: moet with `moet tokenizer encode --input --threads N --timing`
(the time of encoding only, not loading or printing), tokenizers with `encode_batch` and
`encode_batch_fast` under RAYON_NUM_THREADS=N (each in a fresh process). Best of --repeat runs
each; the ids are checked equal. Prints the CPU model, MB/s and the ratios.

Usage: PY=$(bash scripts/venv.sh) && "$PY" bench/tokenizer_speed.py --moet build/moet
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

from cpu import cpu_model

PEER = r"""
import sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
data = open(sys.argv[2], encoding="utf-8", newline="").read()
lines = data.split("\n")  # one text per line, as moet reads --input
if data.endswith("\n"):
    lines.pop()
size = len(data.encode())
for name in ("encode_batch", "encode_batch_fast"):
    fn = getattr(tok, name, None)
    if fn is None:
        continue
    best = 1e9
    for _ in range(int(sys.argv[3])):
        t0 = time.perf_counter()
        out = fn(lines, add_special_tokens=False)
        best = min(best, time.perf_counter() - t0)
    print(name, size / 1e6 / best)
if len(sys.argv) > 4:
    with open(sys.argv[4], "w") as f:
        for e in tok.encode_batch(lines, add_special_tokens=False):
            f.write(" ".join(map(str, e.ids)) + "\n")
"""



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moet", required=True)
    ap.add_argument("--mb", type=float, default=8.0)
    ap.add_argument("--vocab-size", type=int, default=32000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    root = "/usr/share/games/fortunes"
    parts = []
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        if "." not in name and os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                parts.append(f.read())
    base = "\n".join(parts)
    text = base
    while len(text) < a.mb * 1e6:
        text += "\n" + base
    with tempfile.TemporaryDirectory() as d:
        corpus = os.path.join(d, "fortunes.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write(text)
        tok = os.path.join(d, "tokenizer.json")
        train_src = os.path.join(d, "train.txt")
        with open(train_src, "w", encoding="utf-8") as f:
            f.write(base)
        print(subprocess.run([a.moet, "tokenizer", "train", "--input", train_src, "--vocab-size",
                              str(a.vocab_size), "--output", tok], check=True,
                             capture_output=True, text=True).stdout.strip())
        size = os.path.getsize(corpus)
        print(f"CPU: {cpu_model()} ({os.cpu_count()} cores); text: {size / 1e6:.1f} MB, "
              f"{text.count(chr(10)) + 1} lines")
        results = {}
        for threads in (1, 2):
            best = 0.0
            for _ in range(a.repeat):
                r = subprocess.run([a.moet, "tokenizer", "encode", "--tokenizer", tok, "--input",
                                    corpus, "--ids-only", "--threads", str(threads), "--timing"],
                                   check=True, capture_output=True, text=True)
                best = max(best, float(re.search(r"([0-9.]+) MB/s", r.stderr).group(1)))
                moet_ids = r.stdout
            env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
            ids_file = os.path.join(d, "peer_ids.txt")
            peer = subprocess.run([sys.executable, "-c", PEER, tok, corpus, str(a.repeat),
                                   ids_file], check=True, capture_output=True, text=True,
                                  env=env).stdout
            speeds = {l.split()[0]: float(l.split()[1]) for l in peer.strip().splitlines()}
            with open(ids_file) as f:
                peer_ids = f.read()
            same = peer_ids == moet_ids
            if not same:
                a_l, b_l = moet_ids.split("\n"), peer_ids.split("\n")
                i = next((k for k in range(min(len(a_l), len(b_l))) if a_l[k] != b_l[k]), None)
                print(f"first difference at line {i} of {len(a_l)}/{len(b_l)}: "
                      f"{text.split(chr(10))[i] if i is not None else ''!r}")
            results[threads] = (best, speeds, same)
            peer_best = max(speeds.values())
            print(f"{threads} thread(s): moet {best:.2f} MB/s; " +
                  ", ".join(f"tokenizers {k} {v:.2f} MB/s" for k, v in speeds.items()) +
                  f"; moet / best tokenizers = {best / peer_best:.2f}x; ids equal: {same}")
        if not all(r[2] for r in results.values()):
            print("ids differ between moet and tokenizers")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
