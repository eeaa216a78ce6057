#!/usr/bin/env python3
"""Where a training step of the MNIST MLP or CNN spends its GPU time, rumus
against PyTorch, kind of kernel by kind of kernel: the table the GPU work
starts from (docs/benchmarks.md, mnist_kernels).

Reads rumus's per-dispatch profile of eager steps, each dispatch named by the
phase, op and kernel that launched it, and PyTorch's kernels charged to phase
and op, both on the GPU:
    RUMUS_VULKAN_PROFILE=1 profile_step cnn_fused 20 vulkan:0 512 > rumus.txt 2>&1
    python3 bench/kernels_torch.py cnn 512 > torch.txt
and writes one bench/results line per kind of kernel (microseconds per step):
    bench/kernel_table.py --net cnn --batch 512 --steps 20 --rumus rumus.txt --torch torch.txt \\
        --machine "one NVIDIA H100, Vulkan" --commit abc1234 >> bench/results/vulkan_training.jsonl
"""
import argparse
import datetime
import json
import re
import sys

# Kinds of kernels, each with a test on rumus's (phase, op, kernel) and on
# PyTorch's (phase, op, dims of the op's first input). First match wins.
KINDS = [
    ("convolutions: forward with bias and ReLU",
     lambda ph, op, k: ph == "forward" and op.startswith("conv2d"),
     lambda ph, op, dims: ph == "forward" and (op == "aten::conv2d" or (op == "aten::relu" and dims == 4))),
    ("convolutions: data, weight and bias gradients",
     lambda ph, op, k: ph == "backward" and op.startswith("conv2d") and k.startswith("conv2d_backward"),
     lambda ph, op, dims: op == "ConvolutionBackward0"),
    ("ReLU backward (convolutions and linear layers)",
     lambda ph, op, k: k == "binary:relu_backward",
     lambda ph, op, dims: op == "ReluBackward0"),
    ("max pooling: forward and backward",
     lambda ph, op, k: op == "max_pool2d",
     lambda ph, op, dims: op in ("aten::max_pool2d", "MaxPool2DWithIndicesBackward0")),
    ("dropout: forward and backward",
     lambda ph, op, k: op == "dropout",
     lambda ph, op, dims: op in ("aten::dropout", "NativeDropoutBackward0")),
    ("linear layers: forward with bias and ReLU, data, weight and bias gradients",
     lambda ph, op, k: op in ("matmul", "linear", "linear_relu", "sum"),
     lambda ph, op, dims: op in ("aten::linear", "AddmmBackward0") or (op == "aten::relu" and dims == 2)),
    ("loss: log-softmax and NLL, forward and backward",
     lambda ph, op, k: op in ("cross_entropy", "log_softmax", "nll_loss"),
     lambda ph, op, dims: op in ("aten::cross_entropy_loss", "LogSoftmaxBackward0", "NllLossBackward0")),
    ("optimizer step and gradient bookkeeping (accumulation, zeroing, the loss's seed)",
     lambda ph, op, k: ph == "step" or op == "full",
     lambda ph, op, dims: ph == "step" or op in ("torch::autograd::AccumulateGrad", "aten::zero_", "aten::ones_like")),
]
OTHER = "anything else"


def rumus_rows(path):
    """(phase, op, kernel, ms) of the last profile block (the timed steps)."""
    blocks, block = [], None
    for line in open(path, errors="replace"):
        if line.startswith("vulkan profile"):
            block = []
            blocks.append(block)
            continue
        m = re.match(r"\s+([0-9.]+) ms  (.*) x(\d+)$", line)
        if m and block is not None:
            label = m.group(2)
            phase = op = kernel = ""
            if " | " in label:
                parts = label.split(" | ")[0].split(" ")
                phase, op, kernel = parts[0], parts[1], " ".join(parts[2:])
            block.append((phase, op, kernel, float(m.group(1))))
        elif block is not None and not line.startswith(" "):
            block = None
    if not blocks:
        sys.exit(f"kernel_table: no 'vulkan profile' block in {path} (run with RUMUS_VULKAN_PROFILE=1)")
    return blocks[-1]


def torch_rows(path):
    rows = []
    for line in open(path):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if "kernel" not in d:
            continue
        name, _, shapes = d["op"].partition(" ")
        dims = len(json.loads(shapes)[0]) if shapes else 0
        rows.append((d["phase"], name, dims, d["us_per_step"]))
    if not rows:
        sys.exit(f"kernel_table: no kernel rows in {path} (bench/kernels_torch.py's output)")
    return rows


def kind_of(tests, *row):
    for name, rumus_test, torch_test in KINDS:
        if (rumus_test if tests == 0 else torch_test)(*row):
            return name
    return OTHER


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--net", required=True, choices=["mlp", "cnn"])
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True, help="steps in rumus's profile")
    ap.add_argument("--rumus", required=True)
    ap.add_argument("--torch", required=True)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--peer", default="PyTorch 2.11 (cuDNN, cuBLAS), eager, torch.profiler")
    a = ap.parse_args()
    ours, theirs = {}, {}
    for phase, op, kernel, ms in rumus_rows(a.rumus):
        k = kind_of(0, phase, op, kernel)
        ours[k] = ours.get(k, 0.0) + ms * 1000.0 / a.steps
    for phase, op, dims, us in torch_rows(a.torch):
        k = kind_of(1, phase, op, dims)
        theirs[k] = theirs.get(k, 0.0) + us
    ours["every kernel of the step"] = sum(ours.values())
    theirs["every kernel of the step"] = sum(theirs.values())
    net = {"mlp": "MLP 784-512-512-10", "cnn": "CNN (conv 32, conv 64, pool, dropout, fc 128)"}[a.net]
    for kind in [k for k, _, _ in KINDS] + [OTHER, "every kernel of the step"]:
        if kind not in ours and kind not in theirs:
            continue
        print(json.dumps({
            "benchmark": "mnist_kernels", "config": {"model": net, "batch": a.batch, "what": kind},
            "value": round(ours.get(kind, 0.0), 1), "unit": "us/step (lower is better)", "peer": a.peer,
            "peer_value": round(theirs.get(kind, 0.0), 1), "higher_is_better": False, "machine": a.machine,
            "commit": a.commit, "date": datetime.date.today().isoformat(),
            "command": f"RUMUS_VULKAN_PROFILE=1 profile_step {a.net}_fused {a.steps} vulkan:0 {a.batch}; "
                       f"bench/kernels_torch.py {a.net} {a.batch}; bench/kernel_table.py"}))


if __name__ == "__main__":
    main()
