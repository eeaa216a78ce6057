#!/usr/bin/env python3
"""The char_lm example's model, data split and batches in PyTorch, for a
side-by-side comparison: trains N steps, then prints the validation loss and
the training speed in tokens/s.

Same as examples/char_lm.cpp: bytes as tokens (vocabulary 256); the last 5 %
of the text held out; batch windows drawn by splitmix64 from (seed, step,
row); a pre-norm GELU transformer with learned positions and the head tied to
the token embedding, initialised GPT-2 style (matrices N(0, 0.02^2), biases 0);
AdamW (weight decay 0.05) with a cosine schedule over the run. The module
names are the example's state-dict names, so its weights load here one to one.
Only the initial random draws differ (each library has its own generator).

    python3 bench/char_lm_torch.py --steps 2000 --threads 2
    char_lm --epochs 4 --steps-per-epoch 500 --threads 2     # the same 2000 steps

--cuda-graph (f32, CUDA) is the strongest GPU peer: the whole step (forward,
backward, AdamW, zeroing the gradients) is captured once in a CUDA graph and
replayed on static batch tensors. The first steps run eagerly, as capture
requires; every step still trains on its own batch with its own learning rate.
Tokens/s then counts only the replayed steps.
"""
import argparse
import contextlib
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

FORTUNES = "/usr/share/games/fortunes"
MASK64 = (1 << 64) - 1


def read_text(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if os.path.isfile(os.path.join(path, n)) and not n.endswith((".dat", ".u8")))
        files = [os.path.join(path, n) for n in names]
    else:
        files = [path]
    data = b""
    for f in files:
        with open(f, "rb") as fh:
            data += fh.read()
    return data


def mix(x):
    """splitmix64, as mix() in char_lm.cpp."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def batch_at(text, step, batch, context, seed, device):
    windows = len(text) - context
    base = mix(seed)
    rows = []
    for r in range(batch):
        start = mix(base ^ (step * batch + r)) % windows
        rows.append(text[start:start + context + 1])
    t = torch.tensor([list(r) for r in rows], dtype=torch.long, device=device)
    return t[:, :-1], t[:, 1:]


class LearnedPositionalEmbedding(nn.Module):
    def __init__(self, max_len, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_len, dim))

    def forward(self, x):
        return x + self.weight[: x.shape[1]]


class GPT(nn.Module):
    def __init__(self, context, d_model, heads, layers, dropout):
        super().__init__()
        self.context = context
        self.token_embedding = nn.Embedding(256, d_model)
        self.position_embedding = LearnedPositionalEmbedding(context, d_model)
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.Sequential(*[
            nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout, activation="gelu",
                                       batch_first=True, norm_first=True) for _ in range(layers)])
        self.norm = nn.LayerNorm(d_model)
        for name, p in self.named_parameters():
            if "norm" in name:
                continue
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)
            else:
                nn.init.zeros_(p)
        self.register_buffer("causal", torch.triu(torch.full((context, context), float("-inf")), 1),
                             persistent=False)

    def forward(self, tokens):
        length = tokens.shape[1]
        x = self.dropout(self.position_embedding(self.token_embedding(tokens)))
        mask = self.causal[:length, :length]
        for block in self.blocks:
            x = block(x, src_mask=mask)
        x = self.norm(x)
        return x @ self.token_embedding.weight.t()


@torch.no_grad()
def evaluate(net, val, batch, context, device):
    net.eval()
    windows = (len(val) - 1) // context
    total, n = 0.0, 0
    for w0 in range(0, windows, batch):
        rows = min(batch, windows - w0)
        chunk = torch.tensor(list(val[w0 * context: (w0 + rows) * context + 1]), dtype=torch.long, device=device)
        x = chunk[:-1].view(rows, context)
        y = chunk[1:].view(rows, context)
        logits = net(x)
        total += F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1), reduction="sum").item()
        n += rows * context
    net.train()
    return total / max(n, 1)


def train_graphed(net, opt, train, val, a, device):
    sx = torch.zeros(a.batch_size, a.context, dtype=torch.long, device=device)
    sy = torch.zeros_like(sx)

    def step():
        loss = F.cross_entropy(net(sx).reshape(-1, 256), sy.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        return loss

    def set_lr(step_index):
        # CosineAnnealingLR's value in closed form, written into the tensor
        # the captured step reads (one fill, no tensor arithmetic per step).
        lr = a.lr * (1 + math.cos(math.pi * step_index / max(a.steps, 1))) / 2
        for group in opt.param_groups:
            group["lr"].fill_(lr)

    def load(step_index):
        x, y = batch_at(train, step_index, a.batch_size, a.context, a.seed, device)
        sx.copy_(x)
        sy.copy_(y)

    # Capture needs a few eager steps on a side stream first (allocator and
    # optimizer state); they are real training steps.
    eager = min(3, a.steps)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for s in range(eager):
            load(s)
            set_lr(s)
            loss = step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = step()
    torch.cuda.synchronize(device)

    start = time.perf_counter()
    for s in range(eager, a.steps):
        load(s)
        set_lr(s)
        graph.replay()
        if (s + 1) % 100 == 0 or s + 1 == a.steps:
            print(f"step {s + 1}: train loss {loss.item():.4f}", file=sys.stderr, flush=True)
    torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    tokens = (a.steps - eager) * a.batch_size * a.context
    val_loss = evaluate(net, val, a.batch_size, a.context, device)
    print(f"after {a.steps} steps: val loss {val_loss:.4f}, {tokens / max(seconds, 1e-9):.0f} tokens/s "
          f"({seconds:.1f} s, {a.steps - eager} replayed steps)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=FORTUNES)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--amp", action="store_true", help="16-bit autocast, with a gradient scaler on GPUs (as char_lm --amp)")
    ap.add_argument("--cuda-graph", action="store_true", help="capture the whole f32 step in a CUDA graph and replay it")
    a = ap.parse_args()
    if a.cuda_graph and (a.amp or not a.device.startswith("cuda")):
        ap.error("--cuda-graph needs a CUDA --device and f32 (no --amp)")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    text = read_text(a.data)
    split = len(text) * 95 // 100
    train, val = text[:split], text[split:]
    net = GPT(a.context, a.d_model, a.heads, a.layers, a.dropout).to(device)
    if a.cuda_graph:
        # A captured step reads its learning rate from device memory; the
        # schedule fills that tensor in place between replays.
        opt = torch.optim.AdamW(net.parameters(), lr=torch.tensor(a.lr, device=device),
                                weight_decay=a.weight_decay, capturable=True)
    else:
        opt = torch.optim.AdamW(net.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(a.steps, 1))
    # --amp: f16 with a loss scaler on GPUs, bf16 on the CPU (as char_lm --amp);
    # torch.cuda.amp.GradScaler is the spelling both Debian's 1.13 and 2.x have.
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    scaler = torch.cuda.amp.GradScaler(enabled=a.amp and device.type == "cuda")
    params = sum(p.numel() for p in net.parameters())
    print(f"char_lm_torch: torch {torch.__version__}, {params} parameters, {len(text)} bytes of text "
          f"({len(val)} held out), {a.threads} threads, device {device}{', amp' if a.amp else ''}"
          f"{', CUDA graph' if a.cuda_graph else ''}", flush=True)
    if a.cuda_graph:
        train_graphed(net, opt, train, val, a, device)
        return

    tokens = 0
    start = time.perf_counter()
    for step in range(a.steps):
        x, y = batch_at(train, step, a.batch_size, a.context, a.seed, device)
        with torch.autocast(device.type, dtype=amp_dtype) if a.amp else contextlib.nullcontext():
            loss = F.cross_entropy(net(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        sched.step()
        tokens += a.batch_size * a.context
        if (step + 1) % 100 == 0 or step + 1 == a.steps:
            print(f"step {step + 1}: train loss {loss.item():.4f}", file=sys.stderr, flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    val_loss = evaluate(net, val, a.batch_size, a.context, device)
    print(f"after {a.steps} steps: val loss {val_loss:.4f}, {tokens / seconds:.0f} tokens/s ({seconds:.1f} s)")


if __name__ == "__main__":
    main()
