#!/usr/bin/env python3
"""moet's TensorBoard event files and HTML report, read by the real clients.

--check tensorboard: trains configs/tiny.json a few steps with --tensorboard, --metrics and
--log-expert-load 1 (one process, and with --mpirun 2 ranks --ep 2), then reads the event
directory with TensorBoard's own EventAccumulator (tensorboard from PyPI, the project venv): every
scalar equals the metrics JSONL's value as float32, for every step and tag (and there is no
scalar the JSONL lacks; each MoE layer's balance loss too, adding up to balance_loss); each
layer's expert-load histogram holds exactly the JSONL's counts; the main layers' counts add up
to tokens x top-k (summed over micro-batches and ranks); the JSONL's expert biases replay from
those loads (the aux-loss-free update) and each layer's bias histogram holds them. Also:
--tensorboard naming an existing file is refused with one line and the file is left alone; a run
resumed from an earlier checkpoint shows in TensorBoard each step once, the resumed run's value.

--check report: `moet report` on such a run writes one HTML file (refusing to overwrite it
without --overwrite; a metrics file whose last line is cut short reads up to that line) whose
heatmaps have a colour scale and name the MTP layer, and which shows what --precision auto
resolved to; a run resumed on other data has the data change marked on its loss chart, both
starts listed and both starts' time added; `moet report RUN_A RUN_B RUN_C` writes compare.html
(legends naming each run, final values, the options that differ; refusing to overwrite, bad
input refused in one line with nothing written); headless Debian chromium (--no-sandbox: the
tests run as root) renders both pages with no console message, the charts present in the DOM,
and screenshots that are not blank. Exits 77 (CTest: skipped) when chromium is not installed.

Usage: tensorboard_interop.py --check tensorboard|report --moet MOET --config tiny.json
       --workdir DIR [--mpirun CMD...]
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np

# TensorBoard tag -> metrics JSONL key (docs/metrics.md; src/metrics/tensorboard.cpp).
TAGS = {
    "lm loss": "lm_loss",
    "total loss": "loss",
    "mtp loss": "mtp_loss",
    "load_balancing_loss": "balance_loss",
    "z_loss": "z_loss",
    "lm loss validation": "eval_loss",
    "learning-rate": "lr",
    "grad-norm": "grad_norm",
    "iteration-time": "step_time_s",
    "throughput": "tflops",
    "tokens-per-sec": "tokens_per_s",
    "mfu": "mfu",
    "max-expert-load": "max_expert_load",
    "a2a-time": "a2a_s",
    "exposed-comm-time": "exposed_comm_s",
    "a2a-exposed-time": "a2a_exposed_s",
    "grad-sync-time": "grad_sync_s",
    "comm-bytes": "comm_bytes",
    "grad-sync-bytes": "grad_sync_bytes",
    "ep-load-imbalance": "ep_load_imbalance",
    "mem-max-rss-mb": "peak_rss_mb",
    "save-time": "save_s",
    "pp-bubble": "pp_bubble",
    "consumed-tokens": "tokens",
}
STEPS, SEQ, MB = 4, 32, 2


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def train(a, name, extra=(), prefix=(), fresh=True):
    d = os.path.join(a.workdir, name)
    if fresh:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    cmd = list(prefix) + [a.moet, "train", "--model", a.config, "--steps", str(STEPS), "--seq",
                          str(SEQ), "--micro-batch", str(MB), "--threads", "1", "--eval-every",
                          "2", "--eval-batches", "1", "--log-every", "2", "--tensorboard",
                          os.path.join(d, "tb"), "--metrics", os.path.join(d, "metrics.jsonl"),
                          "--log-expert-load", "1", "--out", os.path.join(d, "run")] + list(extra)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    print(out.strip().splitlines()[-1] if out.strip() else "(quiet)")
    return d, out


def check_tensorboard(a, d, ranks, event_files=1):
    from tensorboard.backend.event_processing import event_accumulator as ea_mod

    cfg = json.load(open(a.config))
    records = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    if [r["step"] for r in records] != list(range(1, STEPS + 1)):
        fail(f"{d}: metrics steps {[r['step'] for r in records]}")
    files = os.listdir(os.path.join(d, "tb"))
    if len(files) != event_files or any("tfevents" not in f for f in files):
        fail(f"{d}: expected {event_files} event files, found {files}")
    acc = ea_mod.EventAccumulator(os.path.join(d, "tb"), size_guidance={"scalars": 0,
                                                                        "histograms": 0})
    acc.Reload()
    tags = acc.Tags()
    compared = 0
    # every JSONL value is in TensorBoard, as float32, at its step
    expected = {}  # tag -> {step: float32}
    for r in records:
        for tag, key in TAGS.items():
            if r.get(key) is not None:
                expected.setdefault(tag, {})[r["step"]] = np.float32(r[key])
        for layer, ratio in zip(r.get("expert_load_layers", []), r.get("expert_load_imbalance",
                                                                      [])):
            if ratio is not None:
                expected.setdefault(f"moe/expert_load_imbalance_layer_{layer}",
                                    {})[r["step"]] = np.float32(ratio)
        # each MoE layer's balance loss, every step: global, so they add up to balance_loss
        per, layers = r.get("balance_loss_per_layer"), r.get("balance_loss_layers")
        if per is None or layers != r["expert_load_layers"] or len(per) != len(layers):
            fail(f"{d}: step {r['step']}: balance_loss_per_layer {per} layers {layers}")
        if abs(sum(per) - r["balance_loss"]) > 1e-12 * abs(r["balance_loss"]):
            fail(f"{d}: step {r['step']}: the layers' balance losses add up to {sum(per)!r}, "
                 f"balance_loss is {r['balance_loss']!r}")
        for layer, v in zip(layers, per):
            expected.setdefault(f"moe/balance_loss_layer_{layer}", {})[r["step"]] = np.float32(v)
    for tag in ("lm loss", "lm loss validation", "learning-rate", "grad-norm", "throughput",
                "mfu", "iteration-time", "load_balancing_loss"):
        if tag not in expected:
            fail(f"{d}: the metrics have no value for '{tag}'")
    if ranks > 1 and "exposed-comm-time" not in expected:
        fail(f"{d}: no communication metrics under {ranks} ranks")
    if set(tags["scalars"]) != set(expected):
        fail(f"{d}: TensorBoard tags {sorted(tags['scalars'])} != JSONL's {sorted(expected)}")
    for tag, by_step in expected.items():
        got = {e.step: np.float32(e.value) for e in acc.Scalars(tag)}
        if got.keys() != by_step.keys():
            fail(f"{d}: '{tag}' steps {sorted(got)} != {sorted(by_step)}")
        for step, v in by_step.items():
            if got[step] != v:
                fail(f"{d}: '{tag}' at step {step}: TensorBoard {got[step]!r} != JSONL {v!r}")
            compared += 1
    # histograms: the expert-load counts, per layer and step
    K, E = cfg["num_experts_per_tok"], cfg["n_routed_experts"]
    tokens_per_step = records[0]["tokens"]  # the global batch
    if tokens_per_step != ranks * MB * SEQ:
        fail(f"{d}: {tokens_per_step} tokens per step, expected {ranks} x {MB} x {SEQ}")
    hist = 0
    for r in records:
        loads, layers = r["expert_load"], r["expert_load_layers"]
        if len(loads) != len(layers) or not loads:
            fail(f"{d}: step {r['step']}: expert_load {loads} layers {layers}")
        for layer, load in zip(layers, loads):
            if len(load) != E:
                fail(f"{d}: layer {layer} has {len(load)} experts, the config {E}")
            if layer < cfg["num_hidden_layers"] and sum(load) != tokens_per_step * K:
                fail(f"{d}: layer {layer} step {r['step']}: {sum(load)} assignments, "
                     f"expected {tokens_per_step} tokens x {K}")
            events = [e for e in acc.Histograms(f"moe/expert_load_layer_{layer}")
                      if e.step == r["step"]]
            if len(events) != 1:
                fail(f"{d}: {len(events)} histograms of layer {layer} at step {r['step']}")
            h = events[0].histogram_value
            if list(h.bucket) != [float(x) for x in load] or h.num != sum(load):
                fail(f"{d}: layer {layer} step {r['step']}: histogram {list(h.bucket)} "
                     f"(num {h.num}) != JSONL {load}")
            hist += 1
    # the expert biases after each step's update: replayed from the loads (the aux-loss-free
    # update b += rate * sign(mean load - load), in float32 from zero), and TensorBoard's
    # histogram of them per layer
    rate = json.load(open(os.path.join(d, "run", "run.json")))["options"]["optim"][
        "bias_update_rate"]
    bias = {}
    for r in records:
        for layer, load, got in zip(r["expert_load_layers"], r["expert_load"], r["expert_bias"]):
            b = bias.get(layer, np.zeros(E, dtype=np.float32))
            mean = sum(load) / E
            b = (b.astype(np.float64) + rate * np.sign(mean - np.array(load, dtype=np.float64))
                 ).astype(np.float32)
            bias[layer] = b
            if len(got) != E or any(np.float32(x) != y for x, y in zip(got, b)):
                fail(f"{d}: layer {layer} step {r['step']}: expert_bias {got} != replayed {b}")
            events = [e for e in acc.Histograms(f"moe/expert_bias_layer_{layer}")
                      if e.step == r["step"]]
            if len(events) != 1:
                fail(f"{d}: {len(events)} bias histograms of layer {layer} at step {r['step']}")
            h = events[0].histogram_value
            values, counts = np.unique(np.array(got, dtype=np.float32), return_counts=True)
            if (h.num != E or list(h.bucket) != [float(c) for c in counts]
                    or np.float32(h.min) != values[0] or np.float32(h.max) != values[-1]
                    or np.float32(h.bucket_limit[-1]) != values[-1]):
                fail(f"{d}: layer {layer} step {r['step']}: bias histogram {h} != {got}")
            hist += 1
    print(f"{d}: {compared} scalars and {hist} histograms equal the metrics JSONL; the expert "
          f"biases replay from the loads")


def check_refuses_file(a):
    f = os.path.join(a.workdir, "not_a_dir")
    with open(f, "w") as fh:
        fh.write("keep")
    p = subprocess.run([a.moet, "train", "--model", a.config, "--steps", "1", "--tensorboard", f],
                       capture_output=True, text=True)
    if p.returncode == 0 or "not a directory" not in p.stderr or len(p.stderr.splitlines()) != 1:
        fail(f"--tensorboard FILE: rc {p.returncode}, stderr {p.stderr!r}")
    if open(f).read() != "keep":
        fail("--tensorboard FILE changed the file")


def png_colours(path):
    """Distinct RGB(A) colours of an 8-bit, non-interlaced PNG (standard library + numpy)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path} is not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or ctype not in (2, 6) or interlace:
                fail(f"{path}: PNG depth {depth} colour type {ctype} interlace {interlace}")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = np.zeros(stride, dtype=np.int32)
    rows = []
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, dtype=np.uint8, count=stride,
                             offset=y * (stride + 1) + 1).astype(np.int32)
        if f == 0:
            cur = line
        elif f == 2:
            cur = (line + prev) & 255
        else:  # Sub, Average, Paeth: byte by byte
            cur = np.zeros(stride, dtype=np.int32)
            for i in range(stride):
                left = cur[i - bpp] if i >= bpp else 0
                up, ul = prev[i], (prev[i - bpp] if i >= bpp else 0)
                if f == 1:
                    pred = left
                elif f == 3:
                    pred = (left + up) // 2
                else:
                    p = left + up - ul
                    pa, pb, pc = abs(p - left), abs(p - up), abs(p - ul)
                    pred = left if pa <= pb and pa <= pc else (up if pb <= pc else ul)
                cur[i] = (line[i] + pred) & 255
        rows.append(cur)
        prev = cur
    px = np.array(rows, dtype=np.uint8).reshape(h, w, bpp)[:, :, :3].reshape(-1, 3)
    return len(np.unique(px, axis=0)), w, h


def check_report(a, d):
    run = os.path.join(d, "run")
    rep = os.path.join(run, "report.html")
    subprocess.run([a.moet, "report", run], check=True)
    if not os.path.isfile(rep):
        fail("moet report RUN_DIR wrote no RUN_DIR/report.html")
    p = subprocess.run([a.moet, "report", run], capture_output=True, text=True)
    if p.returncode == 0 or "already exists" not in p.stderr:
        fail(f"moet report overwrote {rep} without --overwrite: {p.stderr!r}")
    subprocess.run([a.moet, "report", run, "--overwrite"], check=True)
    other = os.path.join(d, "from_metrics.html")  # the metrics file instead of the directory
    subprocess.run([a.moet, "report", os.path.join(d, "metrics.jsonl"), "--out", other], check=True)
    # a run still writing: its last line is cut short
    partial = os.path.join(d, "partial.jsonl")
    lines = open(os.path.join(d, "metrics.jsonl")).read().splitlines()
    with open(partial, "w") as f:
        f.write("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    subprocess.run([a.moet, "report", partial, "--out", os.path.join(d, "partial.html")],
                   check=True)
    if f"<th>steps</th><td>{STEPS - 1} of {STEPS}</td>" not in open(os.path.join(d,
                                                                                "partial.html")).read():
        fail("the report of a metrics file with a partial last line does not show the steps before it")
    html = open(rep).read()
    self_contained(html, rep)
    cfg = json.load(open(a.config))
    mtp = f"layer {cfg['num_hidden_layers']} (MTP module 1): tokens per expert"
    if mtp not in html or html.count('class="heat-legend"') != html.count("chart heatmap"):
        fail("the heatmaps do not name the MTP layer or lack their colour scale")
    if "auto → " not in html or '&quot;precision&quot;: &quot;auto&quot;' in html:
        fail("the report does not show what --precision auto resolved to")
    changed = check_resumed_report(a)
    other, _ = train(a, "other", ["--lr", "0.002"])
    compare = check_compare(a, d, other, changed)
    chromium = shutil.which("chromium")
    if not chromium:
        print("SKIPPED: chromium is not installed (scripts/install_deps.sh installs it)")
        sys.exit(77)
    for page, min_charts, min_heat, min_lines in ((rep, 8, 1, 6), (compare, 6, 0, 12)):
        render(chromium, page, min_charts, min_heat, min_lines)


def self_contained(html, path):
    for bad in ("<script", "http://", "https://"):
        if bad in html.replace('xmlns="http://www.w3.org/2000/svg"', ""):
            fail(f"{path} is not self-contained: it has {bad!r}")


def check_resumed_report(a):
    """A run stopped after step 4, resumed from step 2 on other data: the report marks the data
    change on the loss chart, lists both starts and adds both starts' time."""
    ckpt = ["--save-every", "2", "--sync-save"]
    d, _ = train(a, "changed", ckpt)
    shutil.rmtree(os.path.join(d, "run", "step-0000004"))
    with open(os.path.join(d, "run", "latest"), "w") as f:
        f.write("step-0000002\n")
    text = os.path.join(d, "other.txt")
    with open(text, "w") as f:
        for i in range(300):
            f.write(f"Document {i}: a few words about tokens and experts.\n%\n")
    train(a, "changed", ckpt + ["--resume", "auto", "--data", text], fresh=False)
    run = os.path.join(d, "run")
    subprocess.run([a.moet, "report", run], check=True, capture_output=True)
    html = open(os.path.join(run, "report.html")).read()
    records = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    if [r["step"] for r in records] != list(range(1, STEPS + 1)):
        fail(f"resumed run: metrics steps {[r['step'] for r in records]}")
    # each start's elapsed_s counts from its own first step: steps 1-2, then 3-4
    total = records[1]["elapsed_s"] + records[3]["elapsed_s"]
    want = f"<th>elapsed</th><td>{total:.2f} s" if total < 10 else f"<th>elapsed</th><td>{total:.1f} s"
    if want not in html or "over 2 starts" not in html:
        i = html.find("<th>elapsed</th>")
        fail(f"the elapsed time is not both starts' ({want!r}): {html[i:i + 120]!r}")
    if html.count('class="marker-line"') != 1 or ">data changed</text>" not in html:
        fail("the data change at the resume is not marked on the loss chart")
    if html.count('<tr class="segment">') != 2 or "<b>data changed</b>" not in html:
        fail("the report does not list both starts and the data change")
    print(f"resumed on other data: marked, 2 starts listed, elapsed {total:.3f} s over both")
    return d


def check_compare(a, one, other, changed):
    """moet report RUN_A RUN_B RUN_C: one page comparing them; bad input refused in one line."""
    runs = [os.path.join(x, "run") for x in (one, other, changed)]
    out = os.path.join(a.workdir, "compare.html")
    for f in (out, out + ".tmp"):
        if os.path.exists(f):
            os.remove(f)
    # the default page: compare.html in the current directory, never replaced without --overwrite
    p = subprocess.run([a.moet, "report"] + runs, capture_output=True, text=True, cwd=a.workdir)
    if p.returncode != 0 or not os.path.isfile(out):
        fail(f"moet report RUN_A RUN_B RUN_C: rc {p.returncode} {p.stderr!r}, no {out}")
    if "(3 runs: one/run other/run changed/run)" not in p.stdout:
        fail(f"the runs are not named by their directories: {p.stdout!r}")
    before = open(out).read()
    p = subprocess.run([a.moet, "report"] + runs, capture_output=True, text=True, cwd=a.workdir)
    if p.returncode == 0 or "already exists" not in p.stderr or open(out).read() != before:
        fail(f"moet report RUN_A RUN_B replaced {out} without --overwrite: {p.stderr!r}")
    empty = os.path.join(a.workdir, "empty.jsonl")
    open(empty, "w").close()
    bad_out = os.path.join(a.workdir, "bad.html")
    for bad, why in (([runs[0], os.path.join(a.workdir, "missing")], "does not exist"),
                     ([runs[0], empty], "no step record"),
                     ([runs[0], os.path.join(one, "metrics.jsonl")], "are the same run")):
        p = subprocess.run([a.moet, "report"] + bad + ["--out", bad_out], capture_output=True,
                           text=True)
        if (p.returncode == 0 or why not in p.stderr or len(p.stderr.splitlines()) != 1
                or not p.stderr.startswith("moet: error: ") or os.path.exists(bad_out)):
            fail(f"moet report {bad}: rc {p.returncode}, stderr {p.stderr!r}")
    html = before
    self_contained(html, out)
    for name in ("one/run", "other/run", "changed/run"):
        if html.count(f'class="legend">{name}<') != 6:
            fail(f"run {name} is not in the legend of the 6 charts")
    finals = {}  # the final values table against the runs' metrics
    for d in (one, other, changed):
        recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
        finals[d] = f"{recs[-1]['lm_loss']:.4f}"
        if finals[d] not in html:
            fail(f"the final LM loss {finals[d]} of {d} is not in the table")
    for row in ("<th>optim.lr</th>", "<th>data.data</th>", "<th>checkpoint.resume</th>"):
        if row not in html:
            fail(f"the options that differ lack {row}")
    for row in ("<th>optim.steps</th>", "<th>checkpoint.out</th>", "<th>logging.metrics</th>"):
        if row in html:
            fail(f"the options that differ show {row}, which does not differ or is a path")
    if "auto → " not in html or ">data changed (changed/run)</text>" not in html:
        fail("the comparison lacks the resolved precision or the data-change marker")
    print(f"compare: 3 runs, legends, final values {sorted(finals.values())}, the differing "
          f"options; bad input refused in one line")
    return out


def render(chromium, page, min_charts, min_heat, min_lines):
    base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
            "--v=0", "--window-size=1200,1600"]
    url = "file://" + os.path.abspath(page)
    p = subprocess.run(base + ["--dump-dom", url], capture_output=True, text=True, timeout=120)
    console = [l for l in p.stderr.splitlines() if ":CONSOLE" in l]
    if p.returncode != 0 or console:
        fail(f"chromium rc {p.returncode}, console: {console}")
    dom = p.stdout
    charts = dom.count("<svg")
    heat = dom.count('class="chart heatmap"')
    if charts < min_charts or heat < min_heat or dom.count("<polyline") < min_lines:
        fail(f"{page}: the rendered DOM has {charts} svg, {heat} heatmaps, "
             f"{dom.count('<polyline')} lines")
    shot = os.path.splitext(page)[0] + ".png"
    if os.path.exists(shot):
        os.remove(shot)
    p = subprocess.run(base + ["--screenshot=" + shot, url], capture_output=True, text=True,
                       timeout=120)
    if p.returncode != 0 or not os.path.isfile(shot):
        fail(f"chromium --screenshot rc {p.returncode}: {p.stderr[-500:]}")
    colours, w, h = png_colours(shot)
    if colours < 16:
        fail(f"the screenshot ({w}x{h}) of {page} has {colours} colours: blank")
    print(f"{os.path.basename(page)}: {charts} charts ({heat} heatmaps) rendered by chromium "
          f"without a console message; screenshot {w}x{h} with {colours} colours")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", choices=["tensorboard", "report"], required=True)
    ap.add_argument("--moet", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--mpirun", nargs=argparse.REMAINDER, default=[])
    a = ap.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    d, out = train(a, "one")
    if a.check == "tensorboard":
        check_tensorboard(a, d, 1)
        if "done:" not in out or "moet report" not in out:
            fail(f"no final summary in the output:\n{out}")
        if a.mpirun:
            d2, _ = train(a, "ep2", ["--ep", "2"], a.mpirun + ["2"])
            check_tensorboard(a, d2, 2)
        check_refuses_file(a)
        # a resumed run: the interrupted run's steps after its checkpoint (3 and 4 here) are in
        # its event file; the resumed run's file marks the restart, so TensorBoard drops them
        ckpt = ["--save-every", "2", "--sync-save"]
        d3, _ = train(a, "resume", ckpt)
        shutil.rmtree(os.path.join(d3, "run", "step-0000004"))
        with open(os.path.join(d3, "run", "latest"), "w") as f:
            f.write("step-0000002\n")
        train(a, "resume", ckpt + ["--resume", "auto"], fresh=False)
        check_tensorboard(a, d3, 1, event_files=2)
    else:
        check_report(a, d)
    print("PASS")


if __name__ == "__main__":
    main()
