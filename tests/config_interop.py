#!/usr/bin/env python3
"""moet reads a DeepSeek-V3 config.json as transformers does (docs/model.md): for the shipped
configs and edited ones, the model `moet config --json` reports equals, field by field, what
transformers' DeepseekV3Config.from_pretrained builds from the same file (fields the file leaves
out take DeepseekV3Config's defaults in both); a field that sizes the model and is missing is
refused in one line naming it (transformers would silently take DeepSeek-V3 671B's value); a key
that is no known field gets a warning naming the nearest one; transformers loads every shipped
config without a warning (YaRN's factor agrees with its context lengths).

usage: config_interop.py MOET REPO_ROOT   (the project venv's python: transformers from PyPI)
"""

import copy
import json
import logging
import os
import subprocess
import sys
import tempfile
import warnings

from transformers import DeepseekV3Config

MOET, ROOT = sys.argv[1], sys.argv[2]
FIELDS = ["vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
          "num_hidden_layers", "first_k_dense_replace", "num_attention_heads", "q_lora_rank",
          "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
          "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "n_group", "topk_group",
          "routed_scaling_factor", "norm_topk_prob", "rms_norm_eps", "max_position_embeddings",
          "num_nextn_predict_layers", "tie_word_embeddings", "initializer_range"]
YARN = ["factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
        "mscale_all_dim"]
failures = []


def moet_config(cfg, d):
    path = os.path.join(d, "config.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    r = subprocess.run([MOET, "config", path, "--json"], capture_output=True, text=True)
    return r, path


class Captured(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def hf_config(d, warn_free=None):
    """transformers' config of directory d; warn_free: a name whose load must log no warning."""
    captured = Captured()
    log = logging.getLogger("transformers")
    log.addHandler(captured)
    try:
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            c = DeepseekV3Config.from_pretrained(d)
    finally:
        log.removeHandler(captured)
    said = captured.lines + [str(w.message) for w in ws]
    if warn_free and said:
        failures.append(f"{warn_free}: transformers warns: {said[0][:200]}")
    return c


def compare(name, cfg, shipped=False):
    with tempfile.TemporaryDirectory() as d:
        r, _ = moet_config(cfg, d)
        if r.returncode != 0:
            failures.append(f"{name}: moet refused: {r.stderr.strip()}")
            return
        ours = json.loads(r.stdout)
        theirs = hf_config(d, warn_free=name if shipped else None)
    diffs = []
    for k in FIELDS:
        t = getattr(theirs, k)
        if ours[k] != t and not (isinstance(t, float) and abs(ours[k] - t) <= 1e-12 * abs(t)):
            diffs.append(f"{k}: moet {ours[k]!r}, transformers {t!r}")
    rp = getattr(theirs, "rope_parameters", None) or {}
    theta = rp.get("rope_theta", getattr(theirs, "rope_theta", None))
    if ours["rope_theta"] != theta:
        diffs.append(f"rope_theta: moet {ours['rope_theta']}, transformers {theta}")
    yarn = rp.get("rope_type", rp.get("type")) == "yarn"
    if (ours["rope_scaling"] is not None) != yarn:
        diffs.append(f"yarn: moet {ours['rope_scaling'] is not None}, transformers {yarn}")
    elif yarn:
        for k in YARN:
            t = rp.get(k)
            o = ours["rope_scaling"].get(k)
            if k in ("mscale", "mscale_all_dim"):
                # unset: moet leaves the key out, as transformers' config does (both read 0 as
                # unset, so a file's 0 reads as no key)
                if o == 0:
                    diffs.append(f"rope_scaling.{k}: moet writes an unset {k} as 0")
                o, t = o or 0.0, t or 0.0
            if t is None and k in ("beta_fast", "beta_slow"):
                t = {"beta_fast": 32.0, "beta_slow": 1.0}[k]
            if float(o) != float(t):
                diffs.append(f"rope_scaling.{k}: moet {o}, transformers {t}")
    if diffs:
        failures.append(f"{name}: " + "; ".join(diffs))
    else:
        print(f"{name}: {len(FIELDS) + 2} fields equal")


def refused(name, cfg, field, unknown=None, near=None):
    with tempfile.TemporaryDirectory() as d:
        r, path = moet_config(cfg, d)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    errors = [l for l in lines if "error:" in l]
    if r.returncode == 0 or len(errors) != 1 or f"missing required field '{field}'" not in errors[0]:
        failures.append(f"{name}: wanted one error naming missing '{field}', got rc "
                        f"{r.returncode}: {r.stderr.strip()}")
        return
    if unknown:
        want = f"unknown field '{unknown}' (did you mean '{near}'?)"
        if not any(want in l for l in lines):
            failures.append(f"{name}: no warning '{want}' in: {r.stderr.strip()}")
            return
    print(f"{name}: refused, naming '{field}'" + (f", warning about '{unknown}'" if unknown else ""))


def load(rel):
    with open(os.path.join(ROOT, rel)) as f:
        return json.load(f)


for rel in ["configs/tiny.json", "configs/small.json", "configs/small-bpe.json",
            "configs/bench-dsv3.json", "configs/deepseek-v3-671b.json"] + \
        sorted("tests/variants/" + f for f in os.listdir(os.path.join(ROOT, "tests/variants"))):
    compare(rel, load(rel), shipped=True)  # and transformers loads it without a warning

small = load("configs/small.json")
# the fields that take DeepseekV3Config's defaults, left out one by one and all at once
defaulted = ["first_k_dense_replace", "n_shared_experts", "n_group", "topk_group",
             "routed_scaling_factor", "norm_topk_prob", "rms_norm_eps", "rope_theta",
             "max_position_embeddings", "num_nextn_predict_layers", "tie_word_embeddings",
             "initializer_range"]
for k in defaulted:
    cfg = copy.deepcopy(small)
    del cfg[k]
    compare(f"small.json without {k}", cfg)
cfg = copy.deepcopy(small)
for k in defaulted:
    del cfg[k]
compare("small.json without every defaulted field", cfg)
# YaRN without mscale and mscale_all_dim (unset: neither moet nor transformers holds them), and
# with them 0 (transformers reads 0 as unset, as moet does)
tiny = load("configs/tiny.json")
for value in (None, 0.0):
    cfg = copy.deepcopy(tiny)
    for k in ("mscale", "mscale_all_dim"):
        if value is None:
            del cfg["rope_scaling"][k]
        else:
            cfg["rope_scaling"][k] = value
    compare(f"tiny.json with mscale {'left out' if value is None else 0}", cfg)
# a key moet does not read: a warning, and the same model
cfg = copy.deepcopy(small)
cfg["my_note"] = "trained on fortunes"
compare("small.json with an unknown key", cfg)
with tempfile.TemporaryDirectory() as d:
    r, _ = moet_config(cfg, d)
    if "unknown field 'my_note'" not in r.stderr:
        failures.append(f"unknown key: no warning in {r.stderr!r}")
# misspellings of fields that size the model: refused, the typo named
for wrong, right in [("n_routed_expert", "n_routed_experts"),
                     ("num_experts_per_token", "num_experts_per_tok"),
                     ("moe_intermediate_sizes", "moe_intermediate_size"),
                     ("hidden_sizes", "hidden_size")]:
    cfg = copy.deepcopy(small)
    cfg[wrong] = cfg.pop(right)
    refused(f"small.json with '{wrong}'", cfg, right, wrong, right)

if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("PASS")
