# cuDNN's convolution passes at ResNet-18's shapes for 32x32 inputs, the peer of
# `bench_vulkan_conv vulkan:0 resnet BATCH`: forward, data gradient and weight
# gradient each timed on its own with CUDA events (cudnn.benchmark on, so cuDNN
# picks its fastest algorithm per shape; TF32 off, f32 as rumus). One JSON line
# per shape, then the step's total (each shape times its count per step).
#   python3 bench/conv_torch.py [batch ...]
import json
import sys

import torch

LAYERS = [  # name, c, hw, oc, k, stride, count per step
    ("stem", 3, 32, 64, 3, 1, 1), ("layer1", 64, 32, 64, 3, 1, 4), ("layer2.0", 64, 32, 128, 3, 2, 1),
    ("layer2", 128, 16, 128, 3, 1, 3), ("layer2.down", 64, 32, 128, 1, 2, 1), ("layer3.0", 128, 16, 256, 3, 2, 1),
    ("layer3", 256, 8, 256, 3, 1, 3), ("layer3.down", 128, 16, 256, 1, 2, 1), ("layer4.0", 256, 8, 512, 3, 2, 1),
    ("layer4", 512, 4, 512, 3, 1, 3), ("layer4.down", 256, 8, 512, 1, 2, 1),
]


def ms_per(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main():
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    batches = [int(a) for a in sys.argv[1:]] or [128]
    for n in batches:
        total = 0.0
        for name, c, hw, oc, k, stride, count in LAYERS:
            g = torch.Generator(device="cuda").manual_seed(1)
            x = torch.randn(n, c, hw, hw, device="cuda", generator=g)
            w = torch.randn(oc, c, k, k, device="cuda", generator=g) * 0.1
            pad = k // 2
            y = torch.nn.functional.conv2d(x, w, None, stride, pad)
            gout = torch.randn_like(y)
            args = (gout, x, w, None, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1)
            conv_bw = torch.ops.aten.convolution_backward
            flop = 2.0 * n * oc * y.shape[2] * y.shape[3] * c * k * k
            iters = max(5, int(min(200, 2e10 / flop)))
            fwd = ms_per(lambda: torch.nn.functional.conv2d(x, w, None, stride, pad), iters)
            data = ms_per(lambda: conv_bw(*args, [True, False, False]), iters)
            weight = ms_per(lambda: conv_bw(*args, [False, True, False]), iters)
            total += count * (fwd + data + weight)
            print(json.dumps({"layer": name, "batch": n, "cudnn_ms": [round(fwd, 4), round(data, 4), round(weight, 4)],
                              "gflop": round(flop * 1e-9, 3)}), flush=True)
        print(json.dumps({"total": True, "batch": n, "cudnn_ms": round(total, 3), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
