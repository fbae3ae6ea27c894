"""moet's checkpoint format read by the real clients: every shard of a checkpoint opens with
Hugging Face's `safetensors` (PyPI), every piece's "crc32c:" checksum is the standard CRC-32C
(Castagnoli) computed here independently, the pieces of each tensor cover it exactly once, and
the assembled parameters equal, value for value, what `moet export-hf --dtype fp32` writes for
transformers (per-expert slices of the fused expert weights included). Checked for a one-process
checkpoint, for one written by 2 ranks with --ep 2 --zero1 (pieces spread over two files), and
for one written by a 2-stage pipeline on 4 ranks (--pp 2 --vpp 2 --ep 2 --zero1: four files).

Usage: checkpoint_interop.py --moet MOET --config tiny.json --workdir DIR [--mpirun CMD...]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np
from safetensors.numpy import load_file


def crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def assemble(step_dir):
    index = json.load(open(os.path.join(step_dir, "checkpoint.json")))
    assert index["format"] == "moet-checkpoint" and index["version"] == 1
    shards = {f: load_file(os.path.join(step_dir, f)) for f in index["files"]}
    tensors = {}
    for name, t in index["tensors"].items():
        n = int(np.prod(t["shape"]))
        flat = np.full(n, np.nan, dtype=np.float32)
        covered = 0
        for p in t["pieces"]:
            data = shards[p["file"]][p["key"]]
            assert data.dtype == np.float32, (name, data.dtype)
            assert data.size == p["n"], (name, p)
            assert p["begin"] == covered, (name, p, covered)
            want = int(p["crc"].split(":")[1], 16)
            got = crc32c(data.tobytes())
            assert got == want, f"{name} {p['key']}: crc32c {got:08x} != {want:08x}"
            flat[p["begin"] : p["begin"] + p["n"]] = data.reshape(-1)
            covered += p["n"]
        assert covered == n, (name, covered, n)
        tensors[name] = flat.reshape(t["shape"])
    return index, tensors


def compare_with_export(tensors, hf_dir, cfg):
    hf = load_file(os.path.join(hf_dir, "model.safetensors"))
    F = cfg["moe_intermediate_size"]
    checked = 0
    for name, value in hf.items():
        if name.startswith(f"model.layers.{cfg['num_hidden_layers']}."):
            continue  # MTP modules: their embedding/head copies have no checkpoint tensor of their own
        if ".mlp.experts." in name:
            prefix, rest = name.split(".mlp.experts.")
            e, proj = rest.split(".")[0], rest.split(".")[1]
            e = int(e)
            if proj == "down_proj":
                src = tensors[f"param/{prefix}.mlp.experts.down_proj"][e]
            else:
                gu = tensors[f"param/{prefix}.mlp.experts.gate_up_proj"][e]
                src = gu[:F] if proj == "gate_proj" else gu[F:]
        elif name.endswith(("gate_proj.weight", "up_proj.weight")) and (
            "param/" + name.rsplit(".", 2)[0] + ".gate_up_proj.weight" in tensors
        ):
            gu = tensors["param/" + name.rsplit(".", 2)[0] + ".gate_up_proj.weight"]
            half = gu.shape[0] // 2
            src = gu[:half] if "gate_proj" in name else gu[half:]
        else:
            src = tensors["param/" + name]
        assert src.shape == value.shape, (name, src.shape, value.shape)
        assert np.array_equal(src, value), f"{name}: checkpoint and export differ"
        checked += 1
    assert checked > 20, checked
    return checked


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moet", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpirun", nargs=argparse.REMAINDER, default=[])
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    cfg = json.load(open(a.config))
    train = [a.moet, "train", "--model", a.config, "--data", "mock", "--steps", "3", "--seq", "32",
             "--micro-batch", "2", "--quiet", "--eval-batches", "0", "--threads", "1"]
    runs = [("one", train)]
    if a.mpirun:
        runs.append(("ep2", a.mpirun + ["2"] + train + ["--ep", "2", "--zero1"]))
        # a pipeline's stages each write their own part (the embedding replica not at all)
        runs.append(("pp2", a.mpirun + ["4"] + train + ["--pp", "2", "--vpp", "2", "--pp-layout",
                                                         "Et|t|t|mL", "--ep", "2", "--zero1",
                                                         "--grad-accum", "2"]))
    for label, cmd in runs:
        run = os.path.join(a.workdir, label)
        subprocess.run(cmd + ["--out", run], check=True)
        hf = os.path.join(a.workdir, label + "-hf")
        subprocess.run([a.moet, "export-hf", run, hf, "--dtype", "fp32"], check=True,
                       stdout=subprocess.DEVNULL)
        step = os.path.join(run, "step-0000003")
        index, tensors = assemble(step)
        kinds = {n.split("/")[0] for n in tensors}
        assert kinds == {"param", "adam_m", "adam_v"}, kinds
        pieces = sum(len(t["pieces"]) for t in index["tensors"].values())
        checked = compare_with_export(tensors, hf, cfg)
        print(f"{label}: {len(index['files'])} shard file(s), {len(tensors)} tensors in {pieces} "
              f"pieces: safetensors reads them, CRC-32C matches, {checked} parameters equal the "
              f"Hugging Face export")
    print("PASS")


if __name__ == "__main__":
    sys.exit(main())
