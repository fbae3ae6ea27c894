"""moet's rank grids against megatron-core's (PyPI): for layouts of 1 to 32 ranks, every group
of one and two dimensions that moet's RankGrid gives (tests/rank_grid_dump) is the group list
megatron.core.parallel_state.RankGenerator.get_ranks gives for the same token — the attention
grid as Megatron's decoder generator (tp, cp, dp, pp, ep = 1, order tp-cp-ep-dp-pp) and the
experts' as its expert generator (tp = etp, ep, dp = edp, pp, cp = 1, order tp-ep-dp-pp).
And a world the grids do not factor is refused in one line.
"""
import argparse
import itertools
import json
import subprocess
import sys
import warnings

warnings.filterwarnings("ignore")
from megatron.core.parallel_state import RankGenerator  # noqa: E402

MEGATRON_NAME = {"etp": "tp", "edp": "dp"}


def megatron(gen, token):
    return gen.get_ranks("-".join(MEGATRON_NAME.get(n, n) for n in token.split("-")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump", required=True)
    a = ap.parse_args()
    checked = 0
    for tp, cp, pp, etp, ep, dp in itertools.product([1, 2], [1, 2], [1, 2, 4], [1, 2], [1, 2, 4], [1, 2]):
        world = tp * cp * pp * dp
        if world % (etp * ep * pp):
            continue
        out = subprocess.run([a.dump, str(world), str(tp), str(cp), str(pp), str(etp), str(ep)],
                             capture_output=True, text=True, check=True).stdout
        mine = json.loads(out)
        attn = RankGenerator(tp=tp, ep=1, dp=dp, pp=pp, cp=cp, order="tp-cp-ep-dp-pp")
        edp = world // (etp * ep * pp)
        expert = RankGenerator(tp=etp, ep=ep, dp=edp, pp=pp, cp=1, order="tp-ep-dp-pp")
        for grid, gen in (("attention", attn), ("experts", expert)):
            for token, groups in mine[grid].items():
                want = megatron(gen, token)
                if groups != want:
                    sys.exit(f"FAIL: world {world} tp{tp} cp{cp} pp{pp} etp{etp} ep{ep}, {grid} "
                             f"'{token}': moet {groups}, megatron-core {want}")
                checked += 1
    # the control: a layout the world does not factor
    r = subprocess.run([a.dump, "6", "2", "1", "4", "1", "1"], capture_output=True, text=True)
    if r.returncode != 1 or r.stderr.strip().count("\n") != 0 or \
            "--tp 2 --cp 1 --pp 4 need a multiple of 8 ranks, got 6" not in r.stderr:
        sys.exit(f"FAIL: 6 ranks under --tp 2 --pp 4: rc {r.returncode}, {r.stderr!r}")
    print(f"ok: {checked} group lists equal megatron-core's RankGenerator; a world the grid does "
          "not factor refused in one line")


if __name__ == "__main__":
    main()
