"""moet <-> Hugging Face transformers, against the real client (docs/huggingface.md).

Run in the project venv (scripts/venv.sh: transformers, safetensors, torch from PyPI):

  python tests/hf_interop.py --hf-tool build/tests/hf_tool --moet build/moet --root . \
      --workdir build/hf_interop

Checks, each on configs/tiny.json (YaRN), configs/small.json (plain RoPE) and a tiny variant with
tied embeddings and no YaRN:
  a) DeepseekV3ForCausalLM.from_pretrained(moet's fp32 export) gives moet's logits on the same
     ids (max |diff| / max |logit| <= 1e-4); the bf16 export and a sharded export load too, and
     moet loading its own bf16 export agrees with transformers on it;
  b) a model initialised and saved by transformers loads into moet (its config.json as
     transformers 5 writes it) with transformers' logits;
  c) moet -> transformers (load, save_pretrained) -> moet is bitwise, and transformers' saved
     tensors are byte for byte moet's export;
and, through the moet command (tiny): `moet import-hf` of the transformers-saved model, `moet eval
--dump` logits vs transformers on the dumped ids, `moet export-hf` of that import back in
transformers.
Prints one line per check with the measured difference; exits non-zero on the first failure.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

import transformers  # noqa: E402
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM  # noqa: E402

REL_TOL = 1e-4


def run(cmd):
    """Runs cmd; its stdout (exits on failure with both streams)."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    return p.stdout


def relative_max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def check(ok: bool, line: str):
    print(("ok   " if ok else "FAIL ") + line, flush=True)
    if not ok:
        sys.exit(1)


def make_ids(cfg: dict, path: str, batch: int = 2, seq: int = 16, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    seq = min(seq, cfg["max_position_embeddings"])
    ids = torch.randint(0, cfg["vocab_size"], (batch, seq), generator=g, dtype=torch.int64)
    save_file({"input_ids": ids}, path)
    return ids


def hf_logits(model_dir: str, ids: torch.Tensor) -> torch.Tensor:
    model = DeepseekV3ForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def moet_logits(tool, config, seed, ids_path, out_path, hf_dir=None) -> torch.Tensor:
    run([tool, "logits", config, str(seed), ids_path, out_path] + ([hf_dir] if hf_dir else []))
    with safe_open(out_path, "pt") as f:
        return f.get_tensor("logits")


def tensors_of(model_dir: str) -> dict:
    """name -> tensor of a Hugging Face directory (single file or shards)."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    files = (sorted(set(json.load(open(index))["weight_map"].values()))
             if os.path.exists(index) else ["model.safetensors"])
    out = {}
    for name in files:
        with safe_open(os.path.join(model_dir, name), "pt") as f:
            for k in f.keys():
                out[k] = f.get_tensor(k)
    return out


def export_checks(tool, name, config, work):
    cfg = json.load(open(config))
    seed = 11
    d = os.path.join(work, name)
    ids_path = os.path.join(d, "ids.safetensors")
    os.makedirs(d, exist_ok=True)
    ids = make_ids(cfg, ids_path)

    # a) fp32 export: transformers' logits are moet's
    fp32_dir = os.path.join(d, "export-fp32")
    run([tool, "export", config, str(seed), fp32_dir, "fp32"])
    mine = moet_logits(tool, config, seed, ids_path, os.path.join(d, "moet.safetensors"))
    theirs = hf_logits(fp32_dir, ids)
    err = relative_max_diff(theirs, mine)
    check(theirs.shape == mine.shape and err <= REL_TOL,
          f"{name}: transformers on moet's fp32 export vs moet: max rel diff {err:.2e} "
          f"(logits {tuple(mine.shape)})")

    # controls: the config fields that carry no weights do matter to transformers' logits
    controls = {"rope_interleave=false": lambda c: c.update(rope_interleave=False)}
    if cfg.get("rope_scaling"):
        controls["no rope_scaling"] = lambda c: c.update(rope_scaling=None)
    for what, edit in controls.items():
        wrong = os.path.join(d, "control")
        shutil.rmtree(wrong, ignore_errors=True)
        shutil.copytree(fp32_dir, wrong)
        c = json.load(open(os.path.join(wrong, "config.json")))
        edit(c)
        json.dump(c, open(os.path.join(wrong, "config.json"), "w"))
        moved = relative_max_diff(hf_logits(wrong, ids), mine)
        check(moved > 10 * REL_TOL,
              f"{name}: control: the export with {what} moves transformers' logits by {moved:.2e}")

    # a) a sharded export (a few shards) loads to the same logits
    shard_dir = os.path.join(d, "export-sharded")
    total = os.path.getsize(os.path.join(fp32_dir, "model.safetensors"))
    run([tool, "export", config, str(seed), shard_dir, "fp32", str(total // 3)])
    index = json.load(open(os.path.join(shard_dir, "model.safetensors.index.json")))
    n_files = len(set(index["weight_map"].values()))
    sharded = hf_logits(shard_dir, ids)
    check(n_files >= 3 and torch.equal(sharded, theirs),
          f"{name}: sharded export ({n_files} files) loads in transformers to the same logits")

    # a) bf16 export: transformers and moet read the same rounded weights
    bf16_dir = os.path.join(d, "export-bf16")
    run([tool, "export", config, str(seed), bf16_dir, "bf16"])
    theirs_bf16 = hf_logits(bf16_dir, ids)
    mine_bf16 = moet_logits(tool, config, seed + 1, ids_path,
                            os.path.join(d, "moet-bf16.safetensors"), bf16_dir)
    err_bf16 = relative_max_diff(theirs_bf16, mine_bf16)
    effect = relative_max_diff(mine_bf16, mine)
    check(err_bf16 <= REL_TOL and effect > 10 * REL_TOL,
          f"{name}: bf16 export, transformers vs moet loading it: max rel diff {err_bf16:.2e} "
          f"(bf16 rounding itself moves the logits by {effect:.2e})")

    # c) moet -> transformers -> moet, bitwise
    resaved = os.path.join(d, "resaved-by-transformers")
    model = DeepseekV3ForCausalLM.from_pretrained(fp32_dir, dtype=torch.float32)
    model.save_pretrained(resaved)
    exported, saved = tensors_of(fp32_dir), tensors_of(resaved)
    common = sorted(set(exported) & set(saved))
    differ = [k for k in common if not torch.equal(exported[k], saved[k])]
    main_only = sorted(k for k in set(exported) - set(saved))
    mtp_prefix = f"model.layers.{cfg['num_hidden_layers']}."
    check(not differ and set(saved) <= set(exported)
          and all(k.startswith(mtp_prefix) for k in main_only),
          f"{name}: transformers re-saves moet's export byte for byte ({len(common)} tensors; "
          f"{len(main_only)} MTP tensors dropped, transformers has no MTP modules)"
          + (f"; differ: {differ[:3]}" if differ else ""))
    out = run([tool, "compare", config, str(seed), resaved])
    check(True, f"{name}: moet -> transformers -> moet: {out.strip().splitlines()[-1]}")


def cli_checks(moet, name, saved, work):
    """The same through the moet command: import-hf, eval --dump, export-hf."""
    d = os.path.join(work, name)
    ckpt = os.path.join(d, "imported-checkpoint")
    run([moet, "import-hf", saved, ckpt])
    dump = os.path.join(d, "eval-dump.safetensors")
    run([moet, "eval", "--checkpoint", ckpt, "--data", "mock", "--batches", "1",
         "--micro-batch", "2", "--seq", "16", "--dump", dump])
    with safe_open(dump, "pt") as f:
        ids, mine = f.get_tensor("input_ids"), f.get_tensor("logits")
    theirs = hf_logits(saved, ids)
    err = relative_max_diff(mine, theirs)
    check(err <= REL_TOL, f"{name}: moet import-hf + eval --dump vs transformers on the dumped "
          f"ids: max rel diff {err:.2e}")
    exported = os.path.join(d, "export-hf-of-import")
    run([moet, "export-hf", ckpt, exported, "--dtype", "fp32"])
    again = hf_logits(exported, ids)
    check(torch.equal(again, theirs),
          f"{name}: transformers -> moet import-hf -> moet export-hf -> transformers: same logits")


def import_checks(tool, name, config, work):
    """b) a model transformers initialises and saves loads into moet with the same logits."""
    cfg = json.load(open(config))
    d = os.path.join(work, name)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(5)
    model = DeepseekV3ForCausalLM(DeepseekV3Config(**cfg)).float().eval()
    with torch.no_grad():  # non-trivial values where transformers initialises ones and zeros
        for p in model.parameters():
            if p.dim() == 1:
                p.copy_(1 + 0.1 * torch.randn_like(p))
        for mod in model.modules():
            if hasattr(mod, "e_score_correction_bias"):
                mod.e_score_correction_bias.copy_(0.05 * torch.randn_like(mod.e_score_correction_bias))
    saved = os.path.join(d, "saved-by-transformers")
    model.save_pretrained(saved)
    ids_path = os.path.join(d, "ids.safetensors")
    ids = make_ids(cfg, ids_path, seed=1)
    with torch.no_grad():
        theirs = model(input_ids=ids).logits.float()
    # moet reads transformers' own config.json (rope_parameters) as the model config
    mine = moet_logits(tool, os.path.join(saved, "config.json"), 3, ids_path,
                       os.path.join(d, "moet.safetensors"), saved)
    err = relative_max_diff(mine, theirs)
    check(err <= REL_TOL, f"{name}: moet loading a transformers-saved model vs transformers: "
          f"max rel diff {err:.2e}")
    return saved


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf-tool", required=True)
    ap.add_argument("--moet", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    torch.set_num_threads(2)
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}", flush=True)

    tiny = os.path.join(a.root, "configs", "tiny.json")
    variant = json.load(open(tiny))
    variant.pop("rope_scaling")
    variant["tie_word_embeddings"] = True
    variant["rope_theta"] = 50000
    tied = os.path.join(a.workdir, "tiny-tied-plain-rope.json")
    json.dump(variant, open(tied, "w"), indent=2)
    configs = [("tiny", tiny), ("small", os.path.join(a.root, "configs", "small.json")),
               ("tiny-tied", tied)]
    for name, config in configs:
        export_checks(a.hf_tool, name, config, a.workdir)
    for name, config in configs:
        saved = import_checks(a.hf_tool, "import-" + name, config, a.workdir)
        if name == "tiny":
            cli_checks(a.moet, "import-" + name, saved, a.workdir)
    print("all Hugging Face interop checks passed")


if __name__ == "__main__":
    main()
