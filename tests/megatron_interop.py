"""moet's Megatron datasets against the real client, megatron-core from PyPI (docs/data.md):

1. What `moet data prepare` writes (plain text, JSONL with a malformed line, JSONL.gz) opens
   with megatron.core.datasets.indexed_dataset.IndexedDataset: the same documents token for
   token (the byte tokenizer's UTF-8 bytes, then its end-of-document id 256), uint16 (Megatron's
   DType.optimal_dtype for a 257-id vocabulary), one sequence per document.
2. What Megatron's IndexedDatasetBuilder writes (int32 and uint16; documents of several
   sequences) reads back through `moet data inspect` token for token, and `moet train` trains on
   it; a token outside the model's vocabulary stops training with one line naming the file.
3. moet's sample index (the .sampleidx cache `moet train` writes) packs samples as Megatron
   does: helpers.build_sample_idx, given moet's document order, gives the same (document
   position, offset) pairs; and Megatron's blending rule (helpers.build_blending_indices) gives
   the assignment moet's unit test expects.

Usage: megatron_interop.py --moet MOET --config tiny.json --workdir DIR
"""
import argparse
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import warnings

import numpy as np
import torch

warnings.filterwarnings("ignore")  # megatron-core warns that apex/TE are absent (CPU)
from megatron.core.datasets import helpers  # noqa: E402
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder  # noqa: E402

EOD = 256


def run(cmd, env=None, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}: {p.stdout}{p.stderr}")
    return p


def byte_ids(text):
    return list(text.encode("utf-8")) + [EOD]


def check_prepare(moet, wd):
    docs = []
    text_docs = ["Grüße aus Köln — ünïcödé.\n", "Second document\nwith two lines.\n", "x\n"]
    with open(os.path.join(wd, "a.txt"), "w", encoding="utf-8") as f:
        f.write("%\n".join(text_docs))
    docs += text_docs
    lines = [{"text": f"json document {i} ∑ {'z' * (i % 7)}", "id": i} for i in range(50)]
    with open(os.path.join(wd, "b.jsonl"), "w", encoding="utf-8") as f:
        for i, obj in enumerate(lines):
            f.write(json.dumps(obj, ensure_ascii=False) + "\n")
            if i == 10:
                f.write("{broken\n")
    docs += [o["text"] for o in lines]
    with gzip.open(os.path.join(wd, "c.jsonl.gz"), "wt", encoding="utf-8") as f:
        f.write('{"text": "compressed one"}\n{"text": "compressed two"}\n')
    docs += ["compressed one", "compressed two"]
    prefix = os.path.join(wd, "moet_written")
    out = run([moet, "data", "prepare", "--input", os.path.join(wd, "a.txt"),
               os.path.join(wd, "b.jsonl"), os.path.join(wd, "c.jsonl.gz"),
               "--output", prefix, "--workers", "2"]).stdout
    if "1 malformed JSONL lines skipped" not in out:
        sys.exit(f"FAIL: the summary does not count the malformed line: {out}")

    ds = IndexedDataset(prefix)
    if ds.index.dtype != np.uint16:
        sys.exit(f"FAIL: dtype {ds.index.dtype}, Megatron's optimal dtype is uint16")
    if len(ds) != len(docs):
        sys.exit(f"FAIL: megatron-core reads {len(ds)} sequences, expected {len(docs)}")
    if not np.array_equal(ds.document_indices, np.arange(len(docs) + 1)):
        sys.exit(f"FAIL: document indices {ds.document_indices[:10]}...")
    for i, d in enumerate(docs):
        want = byte_ids(d)
        got = ds[i].tolist()
        if got != want or ds.sequence_lengths[i] != len(want):
            sys.exit(f"FAIL: document {i}: megatron-core reads {got[:20]}..., expected {want[:20]}...")
    print(f"moet data prepare -> megatron-core IndexedDataset: {len(docs)} documents equal, uint16")
    return prefix


def write_megatron(path, dtype, docs):
    b = IndexedDatasetBuilder(path + ".bin", dtype=dtype)
    for doc in docs:  # a document of several sequences
        for seq in doc:
            b.add_item(torch.tensor(seq, dtype=torch.int64))
        b.end_document()
    b.finalize(path + ".idx")


def check_megatron_written(moet, config, wd, env):
    rng = np.random.default_rng(7)
    for dtype, hi in ((np.int32, 129280), (np.uint16, 257)):
        docs = [[rng.integers(0, hi, size=int(rng.integers(1, 60))).tolist()
                 for _ in range(int(rng.integers(1, 4)))] for _ in range(40)]
        prefix = os.path.join(wd, f"megatron_{np.dtype(dtype).name}")
        write_megatron(prefix, dtype, docs)
        nseq = sum(len(d) for d in docs)
        ntok = sum(len(s) for d in docs for s in d)
        head = run([moet, "data", "inspect", prefix]).stdout
        want = (f"{np.dtype(dtype).name} tokens, {nseq} sequences, {len(docs)} documents, "
                f"{ntok} tokens")
        if want not in head:
            sys.exit(f"FAIL: moet data inspect says {head!r}, expected {want!r}")
        for i in (0, 17, len(docs) - 1):
            out = run([moet, "data", "inspect", prefix, "--doc", str(i)]).stdout.splitlines()
            got = [int(t) for t in out[2].split()]
            if got != [t for s in docs[i] for t in s]:
                sys.exit(f"FAIL: moet reads document {i} of {prefix} as {got[:10]}...")
        print(f"megatron-core IndexedDatasetBuilder ({np.dtype(dtype).name}, documents of 1-3 "
              f"sequences) -> moet data inspect: equal")
        train = [moet, "train", "--model", config, "--data", prefix, "--steps", "2", "--seq", "16",
                 "--micro-batch", "2", "--threads", "1", "--peak-tflops", "1", "--quiet",
                 "--eval-batches", "0"]
        p = run(train, env=env, check=False)
        if dtype == np.uint16 and p.returncode != 0:
            sys.exit(f"FAIL: moet train on Megatron's uint16 data: {p.stderr}")
        if dtype == np.int32:
            err = p.stderr.strip()
            if p.returncode == 0 or "outside the model's vocabulary of 257" not in err \
                    or len(err.splitlines()) != 1 or prefix + ".bin" not in err:
                sys.exit(f"FAIL: tokens >= vocab should stop training in one line: {err}")
    print("moet train on Megatron-written data: trains (uint16), refuses ids >= vocab in one line")


def read_sampleidx(path):
    with open(path, "rb") as f:
        b = f.read()
    assert b[:8] == b"MOETSIX1", path
    (klen,) = struct.unpack_from("<Q", b, 8)
    at = 16 + klen
    epochs, per_epoch, n, ndoc = struct.unpack_from("<4Q", b, at)
    at += 32
    doc_idx = np.frombuffer(b, dtype=np.int32, count=ndoc, offset=at)
    at += 4 * ndoc
    sample_idx = np.frombuffer(b, dtype=np.int64, count=2 * (n + 1), offset=at).reshape(-1, 2)
    return epochs, doc_idx, sample_idx


def check_packing(moet, config, wd, env, prefix):
    for seq in (16, 64):
        out = run([moet, "train", "--model", config, "--data", prefix, "--steps", "40",
                   "--seq", str(seq), "--micro-batch", "4", "--threads", "1", "--peak-tflops", "1",
                   "--eval-batches", "0", "--split", "100,0", "--log-every", "1000"],
                  env=env).stdout
        # the header's data line: "data: ... sample index ... written PATH"
        path = out.split(" written ")[1].splitlines()[0].split(" |")[0].strip()
        epochs, doc_idx, ours = read_sampleidx(path)
        ds = IndexedDataset(prefix)
        sizes = ds.sequence_lengths.astype(np.int32)
        theirs = helpers.build_sample_idx(sizes, doc_idx.copy(), seq, int(epochs),
                                          int(sizes.sum()), True, True)
        # Lengths. Megatron's array holds every whole sample of the epochs' stream; moet's holds
        # whole blocks of one epoch's samples, enough for steps x batch (docs/data.md), with the
        # fewest epochs whose stream holds them: both computed here from the document lengths.
        tokens = int(sizes.sum())
        per_epoch = (tokens - 1) // seq
        want = -(-40 * 4 // per_epoch) * per_epoch
        want_epochs = next(e for e in range(1, 1000) if (e * tokens - 1) // seq >= want)
        if len(ours) - 1 != want or epochs != want_epochs:
            sys.exit(f"FAIL: seq {seq}: moet's sample index has {len(ours) - 1} samples over "
                     f"{epochs} epochs, expected {want} over {want_epochs}")
        if len(theirs) - 1 != (epochs * tokens - 1) // seq or len(theirs) < len(ours):
            sys.exit(f"FAIL: seq {seq}: Megatron's build_sample_idx has {len(theirs) - 1} samples, "
                     f"not the {(epochs * tokens - 1) // seq} of {epochs} epochs")
        if not np.array_equal(theirs[:len(ours)], ours):
            bad = int(np.nonzero((theirs[:len(ours)] != ours).any(axis=1))[0][0])
            sys.exit(f"FAIL: seq {seq}: sample {bad}: moet ({ours[bad]}) vs Megatron "
                     f"build_sample_idx ({theirs[bad]})")
        print(f"seq {seq}: moet's sample index ({len(ours) - 1} samples, {epochs} epochs) equals "
              f"the first {len(ours)} entries of Megatron's build_sample_idx on the same document "
              f"order ({len(theirs) - 1} samples: the rest of the last epoch's stream)")
    di = np.zeros(10, dtype=np.int16)
    dsi = np.zeros(10, dtype=np.int64)
    helpers.build_blending_indices(di, dsi, np.array([0.7, 0.3]), 2, 10, False)
    if di.tolist() != [0, 1, 0, 0, 1, 0, 0, 1, 0, 0]:
        sys.exit(f"FAIL: Megatron's blending gives {di.tolist()}, moet's test expects otherwise")
    print("Megatron's build_blending_indices gives what moet's blend test expects")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moet", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    env = dict(os.environ, MOET_CACHE_DIR=os.path.join(a.workdir, "cache"))
    prefix = check_prepare(a.moet, a.workdir)
    check_megatron_written(a.moet, a.config, a.workdir, env)
    check_packing(a.moet, a.config, a.workdir, env, prefix)
    print("megatron interop: all checks passed")


if __name__ == "__main__":
    main()
