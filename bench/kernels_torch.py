# Where PyTorch's training step spends its GPU time, kernel by kernel: the MNIST
# MLP and CNN of ../shared/baselines/torch_cuda_baseline.py (the same nets as
# examples/support/mnist_models.hpp) under torch.profiler, eager, f32 (TF32 off,
# cudnn.benchmark on), SGD with momentum. Each CUDA kernel is charged to the
# phase (forward, backward, step) and the op that launched it, with that op's
# input shapes, so a row can be set beside rumus's own per-dispatch profile
# (RUMUS_VULKAN_PROFILE=1 bench/profile_step NET STEPS vulkan:0 BATCH), which
# names each dispatch by phase, op and kernel. One JSON line per row, microseconds per step.
#   python3 bench/kernels_torch.py [mlp|cnn] [batch] [steps]
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.f1, self.f2, self.f3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        return self.f3(F.relu(self.f2(F.relu(self.f1(x.flatten(1))))))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)
        self.d1, self.d2 = nn.Dropout(0.25), nn.Dropout(0.5)
        self.f1, self.f2 = nn.Linear(9216, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c2(F.relu(self.c1(x)))), 2)
        return self.f2(self.d2(F.relu(self.f1(self.d1(x).flatten(1)))))


def phase_and_op(event):
    """The phase of a CPU op and the outermost aten op (with its shapes) below its phase's root."""
    chain = []
    e = event
    while e is not None:
        chain.append(e)
        e = e.cpu_parent
    phase, op = "forward", None
    for e in reversed(chain):  # outermost first
        name = e.name
        if name.startswith("autograd::engine::evaluate_function"):
            phase, op = "backward", name.split(": ", 1)[-1]
        elif name.startswith("Optimizer.step"):
            phase, op = "step", name
        elif op is None and name.startswith("aten::"):
            shapes = [list(s) for s in (e.input_shapes or []) if s]
            op = name + (" " + json.dumps(shapes) if shapes else "")
    return phase, op or chain[-1].name


def main():
    net = sys.argv[1] if len(sys.argv) > 1 else "cnn"
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 512
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model = (MLP if net == "mlp" else CNN)().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.rand(batch, 1, 28, 28, device="cuda")
    y = torch.randint(0, 10, (batch,), device="cuda")

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()

    for _ in range(20):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    rows = {}
    for e in prof.events():
        for k in getattr(e, "kernels", []) or []:
            phase, op = phase_and_op(e)
            key = (phase, op, k.name)
            us, calls = rows.get(key, (0.0, 0))
            rows[key] = (us + k.duration, calls + 1)
    total = sum(us for us, _ in rows.values()) / steps
    for (phase, op, kernel), (us, calls) in sorted(rows.items(), key=lambda r: -r[1][0]):
        print(json.dumps({"net": net, "batch": batch, "phase": phase, "op": op, "kernel": kernel[:160],
                          "calls_per_step": calls / steps, "us_per_step": round(us / steps, 2)}))
    print(json.dumps({"net": net, "batch": batch, "total_kernel_us_per_step": round(total, 2)}))
    if not rows:  # this PyTorch links no kernels to ops: its own table instead
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=40), file=sys.stderr)


if __name__ == "__main__":
    main()
