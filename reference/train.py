"""Training step of the reference (docs/model.md, "Training step").

grad accumulation -> global-norm clipping -> AdamW (PyTorch semantics, decay on 2-D
weights only) with warm-up + cosine LR -> aux-loss-free router-bias update.
"""

import math
from dataclasses import dataclass, fields
from typing import Dict, List

import torch

from model import DeepseekV3, LossWeights, combine_losses


@dataclass
class TrainHParams:
    lr: float = 1e-3                 # lr_max
    min_lr_ratio: float = 0.1        # lr_min = min_lr_ratio * lr_max
    warmup: int = 0
    schedule: str = "cosine"         # "cosine" | "constant"
    steps: int = 1                   # S, total optimizer steps (for the cosine)
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    mtp_lambda: float = 0.3
    balance_alpha: float = 1e-4
    z_loss_coef: float = 0.0
    bias_update_rate: float = 0.001  # γ

    @staticmethod
    def from_dict(d: dict) -> "TrainHParams":
        names = {f.name for f in fields(TrainHParams)}
        return TrainHParams(**{k: v for k, v in d.items() if k in names})

    def loss_weights(self) -> LossWeights:
        return LossWeights(self.mtp_lambda, self.balance_alpha, self.z_loss_coef)


def lr_at(step: int, hp: TrainHParams) -> float:
    """LR for 0-based step s of S: linear warm-up to lr_max, then cosine to lr_min (or
    constant)."""
    s, S, W = step, hp.steps, hp.warmup
    if s < W:
        return hp.lr * (s + 1) / W
    if hp.schedule == "constant":
        return hp.lr
    if hp.schedule != "cosine":
        raise ValueError(f"unknown schedule {hp.schedule}")
    lr_min = hp.min_lr_ratio * hp.lr
    return lr_min + (hp.lr - lr_min) * (1 + math.cos(math.pi * (s - W) / max(1, S - W))) / 2


def make_optimizer(model: DeepseekV3, hp: TrainHParams, foreach=None) -> torch.optim.AdamW:
    """torch.optim.AdamW with weight decay on 2-D weights (incl. the embedding) only."""
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": hp.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=hp.lr, betas=(hp.beta1, hp.beta2), eps=hp.eps,
                             foreach=foreach)


def clip_grad_global_norm(params: List[torch.Tensor], clip: float) -> float:
    """norm = sqrt(Σ g²) over every parameter; g *= min(1, clip / (norm + 1e-6)).
    Returns the pre-clip norm."""
    grads = [p.grad for p in params if p.grad is not None]
    # per-tensor norms in the gradient dtype, combined in float64
    norm = torch.stack([torch.linalg.vector_norm(g) for g in grads]).double().norm()
    coef = min(1.0, clip / (norm.item() + 1e-6))
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return norm.item()


def update_router_bias(model: DeepseekV3, loads: Dict[int, torch.Tensor], gamma: float):
    """b_e += γ · sign(mean_e(load) − load_e) per MoE layer (sign(0) = 0)."""
    with torch.no_grad():
        for layer_idx, load in loads.items():
            bias = model.model.layers[layer_idx].mlp.gate.e_score_correction_bias
            lf = load.to(torch.float64)
            bias.add_((gamma * torch.sign(lf.mean() - lf)).to(bias.dtype))


def train_step(model: DeepseekV3, opt: torch.optim.AdamW, micro_batches: List[torch.Tensor],
               hp: TrainHParams, step: int) -> dict:
    """One optimizer step over `micro_batches` (each [B, T+1] int64 tokens).

    Gradients are summed over micro-batches then divided by their count; the reported loss
    is the mean of the micro-batch losses.  Returns a dict of floats."""
    params = [p for p in model.parameters()]
    for p in params:
        p.grad = None
    weights = hp.loss_weights()
    D = model.cfg.num_nextn_predict_layers
    ga = len(micro_batches)
    losses, lm_losses = [], []
    step_loads: Dict[int, torch.Tensor] = {}
    for seq in micro_batches:
        out = model(seq)
        loss, parts = combine_losses(out, weights, D)
        (loss / ga).backward()          # == sum of micro-batch grads divided by grad_accum
        losses.append(loss.item())
        lm_losses.append(parts["lm_loss"].item())
        for l, c in out.loads.items():
            step_loads[l] = step_loads.get(l, 0) + c
    # Experts that got no token this step still take a (zero-gradient) AdamW step, like a
    # dense implementation: weight decay and moment decay apply to every parameter.
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    gnorm = clip_grad_global_norm(params, hp.grad_clip)
    lr = lr_at(step, hp)
    for g in opt.param_groups:
        g["lr"] = lr
    opt.step()
    update_router_bias(model, step_loads, hp.bias_update_rate)
    return {"loss": sum(losses) / ga, "lm_loss": sum(lm_losses) / ga, "grad_norm": gnorm, "lr": lr}
