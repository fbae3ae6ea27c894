"""`moet generate --temperature 0` against transformers' greedy `generate` (docs/generate.md).

Run in the project venv (scripts/venv.sh: transformers, safetensors, torch from PyPI):

  python tests/generate_interop.py --moet build/moet --root . --workdir build/generate_interop

Trains configs/tiny.json (YaRN, MoE layers) a few dozen steps on the default English corpus (so
the next-token logits are far from ties), exports it with `moet export-hf --dtype fp32`, and for
several prompts compares the token ids `moet generate --prompt-ids ... --temperature 0
--print-ids` prints with DeepseekV3ForCausalLM.generate(do_sample=False) on the export: they must
be the same tokens. A trained tiny model soon repeats itself, so the same runs on a second model
whose greedy continuations keep changing: one transformers initialises (initializer_range 0.3,
norm weights 1 ± 0.1, random expert biases), saves and `moet import-hf` reads. Prints each
prompt's smallest margin between transformers' two best logits (how far the greedy choices are
from a tie). Exits non-zero if any prompt's tokens differ.
"""

import argparse
import os
import shutil
import subprocess
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
import json  # noqa: E402

from transformers import DeepseekV3Config, DeepseekV3ForCausalLM  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

PROMPTS = ["The ", "Q: What is", "A fool and his money", "Hello, world"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    return p


def compare(a, checkpoint, hf_dir, what):
    """Greedy ids of moet generate vs transformers' generate for each prompt; True on a difference."""
    model = DeepseekV3ForCausalLM.from_pretrained(hf_dir, dtype=torch.float32,
                                                  attn_implementation="eager").eval()
    failed = False
    for prompt in PROMPTS:
        ids = list(prompt.encode("utf-8"))  # the byte tokenizer: one id per byte
        p = run([a.moet, "generate", "--checkpoint", checkpoint, "--prompt-ids",
                 " ".join(map(str, ids)), "--temperature", "0", "--max-new-tokens",
                 str(a.new_tokens), "--print-ids", "--threads", "2"])
        mine = [int(t) for t in p.stdout.split()]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids),
                                 dtype=torch.long), do_sample=False,
                                 max_new_tokens=a.new_tokens, output_scores=True,
                                 return_dict_in_generate=True)
        theirs = out.sequences[0, len(ids):].tolist()
        margins = []
        for s in out.scores:
            top2 = torch.topk(s[0].double(), 2).values
            margins.append(float(top2[0] - top2[1]))
        ok = mine == theirs
        failed |= not ok
        print(("ok   " if ok else "FAIL ") + f"{what} model, prompt {prompt!r}: {len(theirs)} "
              f"greedy tokens {'equal' if ok else 'differ'} ({len(set(theirs))} distinct); "
              f"smallest top-2 logit margin {min(margins):.3e}", flush=True)
        if not ok:
            print(f"  moet:         {mine}\n  transformers: {theirs}", flush=True)
    print("     " + p.stderr.strip().splitlines()[-1], flush=True)
    return failed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moet", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--new-tokens", type=int, default=24)
    a = ap.parse_args()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    os.makedirs(a.workdir, exist_ok=True)
    run_dir = os.path.join(a.workdir, "run")
    hf_dir = os.path.join(a.workdir, "hf")
    shutil.rmtree(run_dir, ignore_errors=True)
    run([a.moet, "train", "--model", os.path.join(a.root, "configs/tiny.json"), "--steps",
         str(a.steps), "--micro-batch", "4", "--seq", "32", "--lr", "3e-3", "--warmup", "4",
         "--out", run_dir, "--quiet"])
    run([a.moet, "export-hf", run_dir, hf_dir, "--dtype", "fp32", "--overwrite"])
    failed = compare(a, run_dir, hf_dir, "trained")

    # a random model transformers initialises and saves, read by moet import-hf
    cfg = json.load(open(os.path.join(a.root, "configs/tiny.json")))
    cfg["initializer_range"] = 0.3
    torch.manual_seed(3)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**cfg)).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn_like(p))
        for mod in model.modules():
            if hasattr(mod, "e_score_correction_bias"):
                bias = mod.e_score_correction_bias
                bias.copy_(0.1 * torch.randn_like(bias))
    saved = os.path.join(a.workdir, "random-hf")
    shutil.rmtree(saved, ignore_errors=True)
    model.save_pretrained(saved)
    ckpt = os.path.join(a.workdir, "random-imported")
    shutil.rmtree(ckpt, ignore_errors=True)
    run([a.moet, "import-hf", saved, ckpt])
    failed |= compare(a, ckpt, saved, "random")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
