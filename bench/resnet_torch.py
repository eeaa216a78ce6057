#!/usr/bin/env python3
"""The resnet example's model and training in PyTorch, for a side-by-side
comparison: trains --epochs over Fashion-MNIST, printing the train loss, the
test loss and accuracy, and the training speed in samples/s after each.

Same as examples/resnet.cpp (and examples/support/resnet.hpp): pixels scaled
to [0, 1], then normalised with the training set's mean and standard
deviation; ResNet-18 for small images (a 3x3 stem without pooling, four
stages of two BasicBlocks of widths w, 2w, 4w, 8w with strides 1, 2, 2, 2, a
1x1 stride-2 projection where the shape changes, global average pool, a
linear head), torchvision's module names; cross-entropy; SGD (momentum 0.9,
Nesterov, weight decay 5e-4) with a one-cycle schedule over the run (its
momentum cycled between 0.95 and 0.85, PyTorch's default and the example's);
batch 128, shuffled each epoch, the last partial batch dropped; --limit
trains on the first N examples of each epoch's order. PyTorch's default
initialisation (which rumus's modules follow). The shuffled order and the
initial random draws differ (each library has its own generator).

    python3 bench/resnet_torch.py --epochs 1 --limit 2560 --threads 2
    resnet --epochs 1 --limit 2560 --threads 2
"""
import argparse
import gzip
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from autoencoder_torch import FASHION_MNIST, read_images  # noqa: E402


def read_labels(directory, name):
    """i64 [N] from an IDX label file, raw or .gz (as data::Mnist)."""
    path = os.path.join(directory, name)
    if not os.path.exists(path):
        path += ".gz"
    with (gzip.open(path) if path.endswith(".gz") else open(path, "rb")) as f:
        data = f.read()
    return torch.frombuffer(bytearray(data[8:]), dtype=torch.uint8).long()


def conv3x3(cin, cout, stride):
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(cin, cout, stride), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = conv3x3(cout, cout, 1), nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (self.downsample(x) if self.downsample is not None else x))


class ResNet18(nn.Module):
    def __init__(self, in_channels=1, classes=10, width=64):
        super().__init__()
        self.conv1, self.bn1 = conv3x3(in_channels, width, 1), nn.BatchNorm2d(width)
        cin = width
        for s in range(4):
            cout, stride = width << s, 1 if s == 0 else 2
            setattr(self, f"layer{s + 1}", nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.fc = nn.Linear(8 * width, classes)

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.layer4(self.layer3(self.layer2(self.layer1(h))))
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


@torch.no_grad()
def evaluate(net, images, labels, batch, device):
    net.eval()
    loss, correct = 0.0, 0
    for i in range(0, images.shape[0], batch):
        x, y = images[i:i + batch].to(device), labels[i:i + batch].to(device)
        logits = net(x)
        loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
    net.train()
    return loss / images.shape[0], correct / images.shape[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=FASHION_MNIST)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--limit", type=int, default=0, help="training examples per epoch (0: all)")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    train = read_images(a.data, "train-images-idx3-ubyte").float().div_(255).unsqueeze(1)
    test = read_images(a.data, "t10k-images-idx3-ubyte").float().div_(255).unsqueeze(1)
    mean, std = train.mean().item(), train.std().item()
    train, test = (train - mean) / std, (test - mean) / std
    train_labels = read_labels(a.data, "train-labels-idx1-ubyte")
    test_labels = read_labels(a.data, "t10k-labels-idx1-ubyte")
    used = min(a.limit, train.shape[0]) if a.limit else train.shape[0]
    steps_per_epoch = used // a.batch_size
    net = ResNet18(1, 10, a.width).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9, nesterov=True, weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, a.lr, total_steps=max(steps_per_epoch * a.epochs, 2))
    params = sum(p.numel() for p in net.parameters())
    print(f"resnet_torch: torch {torch.__version__}, {params} parameters (width {a.width}), "
          f"batch {a.batch_size}, {a.threads} threads, device {device}", flush=True)

    shuffle = torch.Generator().manual_seed(a.seed)
    all_samples, all_seconds = 0, 0.0
    for epoch in range(a.epochs):
        order = torch.randperm(train.shape[0], generator=shuffle)
        loss_sum = torch.zeros((), device=device)
        start = time.perf_counter()
        for s in range(steps_per_epoch):
            rows = order[s * a.batch_size:(s + 1) * a.batch_size]
            x, y = train[rows].to(device), train_labels[rows].to(device)
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.detach()
            if (s + 1) % 50 == 0:
                print(f"epoch {epoch + 1}: step {s + 1}/{steps_per_epoch}: train loss {loss.item():.4f}",
                      file=sys.stderr, flush=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        samples = steps_per_epoch * a.batch_size
        all_samples += samples
        all_seconds += seconds
        test_loss, accuracy = evaluate(net, test, test_labels, a.batch_size, device)
        print(f"epoch {epoch + 1}: train loss {loss_sum.item() / steps_per_epoch:.4f}, test loss {test_loss:.4f}, "
              f"test accuracy {accuracy:.4f}, {samples / seconds:.0f} samples/s", flush=True)
    print(f"after {a.epochs} epochs: {all_samples / all_seconds:.0f} samples/s ({all_seconds:.1f} s of training)")


if __name__ == "__main__":
    main()
