#!/usr/bin/env python3
"""The autoencoder example's model and training in PyTorch, for a
side-by-side comparison: trains --epochs over Fashion-MNIST, printing the
train and test reconstruction loss (mean squared error per pixel) and the
training speed in samples/s after each.

Same as examples/autoencoder.cpp: pixels scaled to [0, 1], not normalised;
encoder Conv2d 1->16->32 (3x3, stride 2, padding 1, ReLU) and Conv2d
32->latent (7x7, the code); decoder ConvTranspose2d latent->32 (7x7), then
32->16->1 (3x3, stride 2, padding 1, output padding 1), ReLU between, sigmoid
at the end; MSE against the input; AdamW (weight decay 0.05) with a one-cycle
schedule over the run; batches shuffled each epoch, the last partial one
dropped; --limit trains on the first N examples of each epoch's order.
PyTorch's default initialisation (which rumus's modules follow); the module
names are the example's state-dict names. The shuffled order and the initial
random draws differ (each library has its own generator).

    python3 bench/autoencoder_torch.py --epochs 2 --threads 2
    autoencoder --epochs 2 --threads 2
"""
import argparse
import gzip
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"


def read_images(directory, name):
    """u8 [N, rows, cols] from an IDX file, raw or .gz (as data::Mnist)."""
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        path += ".gz"
    with (gzip.open(path) if path.endswith(".gz") else open(path, "rb")) as f:
        data = f.read()
    n, rows, cols = (int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(3))
    return torch.frombuffer(bytearray(data[16:]), dtype=torch.uint8).view(n, rows, cols)


class Autoencoder(nn.Module):
    def __init__(self, latent):
        super().__init__()
        self.enc1 = nn.Conv2d(1, 16, 3, stride=2, padding=1)
        self.enc2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.enc3 = nn.Conv2d(32, latent, 7)
        self.dec1 = nn.ConvTranspose2d(latent, 32, 7)
        self.dec2 = nn.ConvTranspose2d(32, 16, 3, stride=2, padding=1, output_padding=1)
        self.dec3 = nn.ConvTranspose2d(16, 1, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        z = self.enc3(F.relu(self.enc2(F.relu(self.enc1(x)))))
        return torch.sigmoid(self.dec3(F.relu(self.dec2(F.relu(self.dec1(z))))))


@torch.no_grad()
def evaluate(net, images, batch, device):
    net.eval()
    total = 0.0
    for i in range(0, images.shape[0], batch):
        x = images[i:i + batch].to(device)
        total += F.mse_loss(net(x), x, reduction="sum").item()
    net.train()
    return total / images.numel()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=FASHION_MNIST)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--limit", type=int, default=0, help="training examples per epoch (0: all)")
    ap.add_argument("--latent", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    train = read_images(a.data, "train-images-idx3-ubyte").float().div_(255).unsqueeze(1)
    test = read_images(a.data, "t10k-images-idx3-ubyte").float().div_(255).unsqueeze(1)
    used = min(a.limit, train.shape[0]) if a.limit else train.shape[0]
    steps_per_epoch = used // a.batch_size
    net = Autoencoder(a.latent).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, a.lr, total_steps=max(steps_per_epoch * a.epochs, 2))
    params = sum(p.numel() for p in net.parameters())
    print(f"autoencoder_torch: torch {torch.__version__}, {params} parameters (latent {a.latent}), "
          f"batch {a.batch_size}, {a.threads} threads, device {device}", flush=True)

    shuffle = torch.Generator().manual_seed(a.seed)
    all_samples, all_seconds = 0, 0.0
    for epoch in range(a.epochs):
        order = torch.randperm(train.shape[0], generator=shuffle)
        loss_sum = torch.zeros((), device=device)
        start = time.perf_counter()
        for s in range(steps_per_epoch):
            x = train[order[s * a.batch_size:(s + 1) * a.batch_size]].to(device)
            loss = F.mse_loss(net(x), x)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.detach()
            if (s + 1) % 200 == 0:
                print(f"epoch {epoch + 1}: step {s + 1}/{steps_per_epoch}: train loss {loss.item():.5f}",
                      file=sys.stderr, flush=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        samples = steps_per_epoch * a.batch_size
        all_samples += samples
        all_seconds += seconds
        test_loss = evaluate(net, test, a.batch_size, device)
        print(f"epoch {epoch + 1}: train loss {loss_sum.item() / steps_per_epoch:.5f}, test loss {test_loss:.5f}, "
              f"{samples / seconds:.0f} samples/s", flush=True)
    print(f"after {a.epochs} epochs: {all_samples / all_seconds:.0f} samples/s ({all_seconds:.1f} s of training)")


if __name__ == "__main__":
    main()
