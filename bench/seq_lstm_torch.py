#!/usr/bin/env python3
"""The seq_lstm example's model, data split and batches in PyTorch, for a
side-by-side comparison: trains --epochs of --steps-per-epoch steps, printing
the validation loss after each, and the training speed in tokens/s.

Same as examples/seq_lstm.cpp: bytes as tokens (vocabulary 256); the last 5 %
of the text held out; batch windows drawn by splitmix64 from (seed, step,
row), as char_lm's (read and drawn by bench/char_lm_torch.py's functions);
Embedding(256, E) -> LSTM(E, hidden, layers, batch_first, dropout between
layers) -> Linear(hidden, 256), PyTorch's default initialisation (which
rumus's modules follow); every window starts from a zero state; AdamW
(weight decay 0.05) with a cosine schedule over the run; the gradients'
joint norm clipped to --clip. Validation reads the held-out text in
consecutive windows. The module names are the example's state-dict names,
so its weights load here one to one. Only the initial random draws differ
(each library has its own generator).

    python3 bench/seq_lstm_torch.py --epochs 3 --threads 2
    seq_lstm --epochs 3 --threads 2                        # the same 3 x 500 steps
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from char_lm_torch import FORTUNES, batch_at, evaluate, read_text


class LstmLm(nn.Module):
    def __init__(self, embedding, hidden, layers, dropout):
        super().__init__()
        self.embedding = nn.Embedding(256, embedding)
        self.lstm = nn.LSTM(embedding, hidden, layers, batch_first=True, dropout=dropout)
        self.head = nn.Linear(hidden, 256)

    def forward(self, tokens):
        out, _ = self.lstm(self.embedding(tokens))
        return self.head(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=FORTUNES)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--steps-per-epoch", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--embedding", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0, help="largest gradient norm (0: no clipping)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    text = read_text(a.data)
    split = len(text) * 95 // 100
    train, val = text[:split], text[split:]
    net = LstmLm(a.embedding, a.hidden, a.layers, a.dropout).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    total = a.epochs * a.steps_per_epoch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, max(total, 1))
    params = sum(p.numel() for p in net.parameters())
    print(f"seq_lstm_torch: torch {torch.__version__}, {params} parameters, {len(text)} bytes of text "
          f"({len(val)} held out), {a.threads} threads, device {device}", flush=True)

    step = 0
    all_tokens, all_seconds = 0, 0.0
    for epoch in range(a.epochs):
        loss_sum = torch.zeros((), device=device)
        tokens = 0
        start = time.perf_counter()
        for _ in range(a.steps_per_epoch):
            x, y = batch_at(train, step, a.batch_size, a.context, a.seed, device)
            loss = F.cross_entropy(net(x).reshape(-1, 256), y.reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if a.clip > 0:
                torch.nn.utils.clip_grad_norm_(net.parameters(), a.clip)
            opt.step()
            sched.step()
            step += 1
            loss_sum += loss.detach()
            tokens += a.batch_size * a.context
            if step % 100 == 0:
                print(f"step {step}: train loss {loss.item():.4f}", file=sys.stderr, flush=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        all_tokens += tokens
        all_seconds += seconds
        val_loss = evaluate(net, val, a.batch_size, a.context, device)
        print(f"epoch {epoch + 1}: train loss {loss_sum.item() / a.steps_per_epoch:.4f}, val loss {val_loss:.4f}, "
              f"{tokens / seconds:.0f} tokens/s", flush=True)
    print(f"after {step} steps: {all_tokens / all_seconds:.0f} tokens/s ({all_seconds:.1f} s of training)")


if __name__ == "__main__":
    main()
