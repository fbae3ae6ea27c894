#!/usr/bin/env python3
"""`moet export-hf` of a run is a directory transformers uses as it is (docs/huggingface.md):
AutoTokenizer loads the run's tokenizer from it and encodes as moet does, the config's bos/eos
are the tokenizer's end of document, AutoModelForCausalLM loads it and generates — for a run
with a BPE tokenizer.json and for one with the byte tokenizer; the MTP modules are the only
unexpected keys, and --no-mtp leaves none.

usage: export_generate_interop.py MOET CONFIG   (the project venv's python)
"""

import json
import os
import subprocess
import sys
import tempfile
import warnings

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

MOET, CONFIG = sys.argv[1], sys.argv[2]
TEXTS = ["An apple a day keeps the doctor away.", "naïve café — 日本語 ok", "  two  spaces\n"]
failures = []


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"FAIL: {' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def check(ok, line):
    print(("ok: " if ok else "FAIL: ") + line)
    if not ok:
        failures.append(line)


def moet_ids(tokenizer, text):
    out = run([MOET, "tokenizer", "encode", "--tokenizer", tokenizer, "--text", text, "--ids-only"])
    return [int(x) for x in out.split()]


def case(name, d, train_args, vocab):
    cfg = json.load(open(CONFIG))
    cfg["vocab_size"] = vocab
    model_json = os.path.join(d, f"{name}.json")
    json.dump(cfg, open(model_json, "w"))
    run_dir = os.path.join(d, f"run-{name}")
    run([MOET, "train", "--model", model_json, "--steps", "2", "--eval-batches", "0", "--quiet",
         "--out", run_dir] + train_args)
    for mtp in (True, False):
        out = os.path.join(d, f"hf-{name}-{'mtp' if mtp else 'nomtp'}")
        said = run([MOET, "export-hf", run_dir, out] + ([] if mtp else ["--no-mtp"]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tok = AutoTokenizer.from_pretrained(out)
            model, info = AutoModelForCausalLM.from_pretrained(out, output_loading_info=True)
        hf_cfg = json.load(open(os.path.join(out, "config.json")))
        spec = os.path.join(run_dir, "tokenizer.json")
        spec = spec if os.path.exists(spec) else "byte"
        # the byte tokenizer's end of document is id 256 (no text spells it there)
        eod = [256] if spec == "byte" else moet_ids(spec, "<|endoftext|>")
        check(hf_cfg["eos_token_id"] == tok.eos_token_id == eod[0] and
              hf_cfg["bos_token_id"] == eod[0],
              f"{name}: config bos/eos {hf_cfg['bos_token_id']}/{hf_cfg['eos_token_id']}, "
              f"tokenizer eos {tok.eos_token_id}, moet's end of document {eod}")
        for t in TEXTS:
            theirs = tok(t, add_special_tokens=False)["input_ids"]
            check(theirs == moet_ids(spec, t), f"{name}: AutoTokenizer encodes {t!r} as moet does")
        unexpected = sorted(info.get("unexpected_keys", []))
        if mtp:
            layer = f"model.layers.{cfg['num_hidden_layers']}."
            check(unexpected and all(k.startswith(layer) for k in unexpected) and
                  "unexpected keys" in said,
                  f"{name}: the unexpected keys are the MTP module's ({len(unexpected)}), and "
                  f"export-hf said so")
        else:
            check(not unexpected, f"{name} --no-mtp: no unexpected keys ({unexpected[:3]})")
            check(not info.get("missing_keys"), f"{name} --no-mtp: no missing keys")
        ids = tok("An apple", return_tensors="pt")
        with torch.no_grad():
            gen = model.generate(**ids, max_new_tokens=5, do_sample=False,
                                 pad_token_id=tok.pad_token_id)
        check(gen.shape[1] == ids["input_ids"].shape[1] + 5 or
              int(gen[0, -1]) == tok.eos_token_id,
              f"{name}: AutoModelForCausalLM generates: {gen[0].tolist()} "
              f"-> {tok.decode(gen[0][ids['input_ids'].shape[1]:])!r}")


with tempfile.TemporaryDirectory() as d:
    corpus = os.path.join(d, "c.txt")
    with open(corpus, "w") as f:
        for i in range(300):
            f.write(f"An apple a day, number {i}, keeps the doctor away; naïve café 日本語.\n%\n")
    tok = os.path.join(d, "tok.json")
    run([MOET, "tokenizer", "train", "--input", corpus, "--vocab-size", "320", "--output", tok])
    case("bpe", d, ["--data", corpus, "--tokenizer", tok], 320)
    case("byte", d, ["--data", corpus], 257)

if failures:
    print(f"FAIL: {len(failures)} checks")
    sys.exit(1)
print("PASS")
