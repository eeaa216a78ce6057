#!/usr/bin/env python3
"""Writes PyTorch reference cases for rumus's ops to data/*.txt.

Each case fixes small random inputs (float32 values, so C++ reads them
exactly), runs the op in float64 with autograd, and records the output and
the gradient of sum(output * grad_output) with respect to every floating
input. tests/test_torch_reference.cpp rebuilds the same op from the case's
name and compares in float32.

Made with Debian 12's python3-torch (apt-get install python3-torch):
    /usr/bin/python3 tests/torch_reference/make_reference.py
File format, per tensor: a line "name kind ndim dims...", kind f (float) or
i (integer), then a line with the values in row-major order.
"""
import json
import os
import struct

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
gen = torch.Generator().manual_seed(20261130)


def rand(*shape, low=-1.0, high=1.0):
    x = torch.rand(tuple(shape), generator=gen, dtype=torch.float32) * (high - low) + low
    return x.to(torch.float64)


def randint(high, *shape):
    return torch.randint(0, high, shape, generator=gen)


def fmt(name, t):
    kind = "f" if t.is_floating_point() else "i"
    dims = " ".join(str(d) for d in t.shape)
    flat = t.detach().reshape(-1).tolist()
    values = " ".join(repr(float(v)) if kind == "f" else str(int(v)) for v in flat)
    return f"{name} {kind} {t.dim()} {dims}".rstrip() + "\n" + values + "\n"


def case(name, inputs, fn, extras=None):
    """inputs: list of tensors; floating ones require grad. fn(*inputs) -> output."""
    leaves = [t.clone().requires_grad_(t.is_floating_point()) for t in inputs]
    out = fn(*leaves)
    gout = rand(*out.shape)
    needs = [t for t in leaves if t.requires_grad]
    grads = torch.autograd.grad((out * gout).sum(), needs, allow_unused=True) if needs else []
    text = "".join(fmt(f"in{i}", t) for i, t in enumerate(inputs))
    text += fmt("out", out) + fmt("gout", gout)
    it = iter(grads)
    for i, t in enumerate(leaves):
        if t.requires_grad:
            g = next(it)
            text += fmt(f"grad{i}", g if g is not None else torch.zeros_like(t))
    for k, v in (extras or {}).items():
        text += fmt(k, v)
    with open(os.path.join(OUT, name + ".txt"), "w") as f:
        f.write(text)


def main():
    os.makedirs(OUT, exist_ok=True)
    for f in os.listdir(OUT):
        if f.endswith((".txt", ".safetensors")):
            os.remove(os.path.join(OUT, f))

    # Convolution and linear layers.
    case("conv2d", [rand(2, 3, 7, 6), rand(4, 3, 3, 3), rand(4)], lambda x, w, b: F.conv2d(x, w, b))
    case("conv2d_strided_grouped", [rand(2, 4, 9, 8), rand(6, 2, 3, 2), rand(6)],
         lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(2, 1), groups=2))
    case("im2col", [rand(2, 2, 5, 6)],
         lambda x: F.unfold(x, (2, 3), stride=(1, 2), padding=(1, 0)))
    case("col2im", [rand(2, 8, 25)],
         lambda c: F.fold(c, (4, 5), (2, 2), dilation=(1, 2), padding=(1, 1)))
    case("linear", [rand(3, 2, 5), rand(4, 5), rand(4)], lambda x, w, b: F.linear(x, w, b))
    case("add_channel_bias", [rand(2, 3, 4), rand(3)], lambda x, b: x + b.view(1, 3, 1))

    # Pooling.
    case("max_pool2d", [rand(2, 3, 7, 7)], lambda x: F.max_pool2d(x, 3, 2, 1))
    case("max_pool2d_dilated_ceil", [rand(1, 2, 8, 9)],
         lambda x: F.max_pool2d(x, (2, 3), (2, 2), (1, 1), dilation=(2, 1), ceil_mode=True))
    case("avg_pool2d", [rand(2, 2, 7, 6)], lambda x: F.avg_pool2d(x, 3, 2, 1))
    case("avg_pool2d_exclude_pad_ceil", [rand(1, 2, 7, 6)],
         lambda x: F.avg_pool2d(x, (3, 2), (2, 2), (1, 1), ceil_mode=True, count_include_pad=False))
    case("adaptive_avg_pool2d", [rand(2, 3, 7, 5)], lambda x: F.adaptive_avg_pool2d(x, (3, 4)))

    # Normalisation.
    rm, rv = rand(3), rand(3, low=0.5, high=2.0)
    rm_after, rv_after = rm.clone(), rv.clone()
    x = rand(4, 3, 5, 5, low=-2.0, high=3.0)
    F.batch_norm(x, rm_after, rv_after, None, None, True, 0.2, 1e-5)
    case("batch_norm2d_train", [x, rand(3), rand(3), rm, rv],
         lambda x, w, b, m, v: F.batch_norm(x, m.detach().clone(), v.detach().clone(), w, b, True, 0.2, 1e-5),
         extras={"running_mean": rm_after, "running_var": rv_after})
    case("batch_norm2d_eval", [rand(2, 3, 4, 4), rand(3), rand(3), rm, rv],
         lambda x, w, b, m, v: F.batch_norm(x, m.detach(), v.detach(), w, b, False, 0.1, 1e-3))
    case("layer_norm", [rand(3, 4, 5), rand(4, 5), rand(4, 5)], lambda x, w, b: F.layer_norm(x, (4, 5), w, b))
    case("layer_norm_no_affine", [rand(6, 7, low=-3.0, high=2.0)], lambda x: F.layer_norm(x, (7,)))

    # Softmax and losses.
    case("softmax", [rand(3, 5, 4, low=-4.0, high=4.0)], lambda x: F.softmax(x, 1))
    case("log_softmax", [rand(4, 7, low=-4.0, high=4.0)], lambda x: F.log_softmax(x, -1))
    t = randint(5, 6)
    t[2] = -100
    case("cross_entropy", [rand(6, 5, low=-3.0, high=3.0), t], lambda x, t: F.cross_entropy(x, t))
    case("cross_entropy_sum_ignore", [rand(6, 5, low=-3.0, high=3.0), randint(5, 6)],
         lambda x, t: F.cross_entropy(x, t, reduction="sum", ignore_index=3))
    case("cross_entropy_none_smoothing", [rand(6, 5, low=-3.0, high=3.0), t],
         lambda x, t: F.cross_entropy(x, t, reduction="none", label_smoothing=0.15))
    ts = randint(4, 2, 3, 3)
    ts[0, 1, 2] = -100
    case("cross_entropy_spatial_smoothing", [rand(2, 4, 3, 3, low=-3.0, high=3.0), ts],
         lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1))
    case("nll_loss", [rand(5, 4, low=-3.0, high=0.0), randint(4, 5)],
         lambda x, t: F.nll_loss(x, t, ignore_index=2))
    case("mse_loss_mean", [rand(3, 4), rand(3, 4)], lambda a, b: F.mse_loss(a, b))
    case("mse_loss_sum", [rand(3, 4), rand(3, 4)], lambda a, b: F.mse_loss(a, b, reduction="sum"))
    case("mse_loss_none", [rand(3, 4), rand(3, 4)], lambda a, b: F.mse_loss(a, b, reduction="none"))
    case("bce_with_logits", [rand(3, 4, low=-4.0, high=4.0), rand(3, 4, low=0.0, high=1.0)],
         lambda x, y: F.binary_cross_entropy_with_logits(x, y))
    case("bce_with_logits_none", [rand(3, 4, low=-4.0, high=4.0), rand(3, 4, low=0.0, high=1.0)],
         lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="none"))

    # Embedding, activations, joins, views, casts.
    case("embedding_padding_idx", [torch.tensor([[1, 4, 1], [0, 5, 4]]), rand(6, 4)],
         lambda i, w: F.embedding(i, w, padding_idx=4))
    case("sigmoid", [rand(3, 4, low=-4.0, high=4.0)], torch.sigmoid)
    case("tanh", [rand(3, 4, low=-3.0, high=3.0)], torch.tanh)
    case("gelu", [rand(3, 4, low=-3.0, high=3.0)], F.gelu)
    case("gelu_tanh", [rand(3, 4, low=-3.0, high=3.0)], lambda x: F.gelu(x, approximate="tanh"))
    case("leaky_relu", [rand(3, 4)], lambda x: F.leaky_relu(x, 0.2))
    case("silu", [rand(3, 4, low=-4.0, high=4.0)], F.silu)
    case("cat", [rand(2, 3), rand(2, 1), rand(2, 2)], lambda a, b, c: torch.cat([a, b, c], 1))
    case("stack", [rand(2, 3), rand(2, 3)], lambda a, b: torch.stack([a, b], 2))
    case("views", [rand(3, 4, 5)],
         lambda x: x.permute(2, 0, 1)[1:5:2].narrow(2, 1, 2).select(1, 2).flatten().reshape(2, 2).t() * 1.0)
    case("cast_f16", [rand(3, 4, low=-8.0, high=8.0)], lambda x: (x.float().half() * 2).double())
    case("cast_bf16", [rand(3, 4, low=-8.0, high=8.0)], lambda x: (x.float().bfloat16() * 2).double())

    # Per-element gathers and scatters (appended, so earlier cases keep their draws).
    case("gather", [rand(3, 5), torch.tensor([[4, 0, 4], [1, 1, 2], [3, 0, 0]])], lambda x, i: torch.gather(x, 1, i))
    case("gather_dim0", [rand(4, 2, 3), torch.tensor([[[3, 0], [1, 1]], [[0, 2], [2, 3]]])],
         lambda x, i: torch.gather(x, 0, i))
    case("scatter_add", [rand(3, 4), torch.tensor([[1, 1], [0, 3], [2, 2]]), rand(3, 2)],
         lambda x, i, s: torch.scatter_add(x, 1, i, s))
    case("rounding", [rand(3, 4, low=-3.0, high=3.0)],
         lambda x: torch.floor(x) + 2 * torch.ceil(x) + 3 * torch.trunc(x) + 4 * torch.round(x) + x)

    # Second-order gradients (appended): compared in float64, so every tensor
    # is written with its double value.
    second_order()
    # Recurrent layers and cells: state dicts (also as safetensors), outputs,
    # states and gradients, in float64.
    recurrent()
    # 1-D convolution (appended).
    case("conv1d", [rand(2, 4, 9), rand(6, 2, 3), rand(6)],
         lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2))
    # 1-D pooling, BatchNorm1d and GroupNorm (appended).
    case("max_pool1d", [rand(2, 3, 9)], lambda x: F.max_pool1d(x, 3, 2, 1, dilation=2, ceil_mode=True))
    case("avg_pool1d_exclude_pad", [rand(3, 8)], lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False))
    case("adaptive_avg_pool1d", [rand(2, 2, 7)], lambda x: F.adaptive_avg_pool1d(x, 3))
    case("batch_norm1d_train", [rand(4, 3, 5, low=-2.0, high=3.0), rand(3), rand(3)],
         lambda x, w, b: F.batch_norm(x, torch.zeros(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64),
                                      w, b, True, 0.1, 1e-5))
    case("group_norm", [rand(2, 6, 3, 2, low=-2.0, high=2.0), rand(6), rand(6)],
         lambda x, w, b: F.group_norm(x, 3, w, b))
    # Transposed convolutions and padding (appended).
    case("conv_transpose2d", [rand(2, 4, 3, 3), rand(4, 3, 3, 2), rand(6)],
         lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(2, 1), padding=(1, 0), output_padding=(1, 0), groups=2,
                                            dilation=(1, 2)))
    case("conv_transpose2d_output_padding_dilated", [rand(1, 2, 3, 4), rand(2, 3, 2, 2)],
         lambda x, w: F.conv_transpose2d(x, w, padding=(1, 0), output_padding=1, dilation=2))
    case("conv_transpose1d", [rand(2, 4, 5), rand(4, 1, 3), rand(2)],
         lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1, output_padding=1, groups=2))
    case("pad_constant", [rand(2, 3, 4)], lambda x: F.pad(x, (1, 2, -1, 1), value=0.5))
    case("pad_reflect", [rand(2, 3, 4)], lambda x: F.pad(x.unsqueeze(0), (3, 2, 2, 1), mode="reflect").squeeze(0))
    case("pad_replicate", [rand(1, 2, 3, 3)], lambda x: F.pad(x, (2, 1, 0, 3), mode="replicate"))
    case("pad_circular", [rand(2, 2, 4)], lambda x: F.pad(x, (4, 1), mode="circular"))
    # Modules: a PyTorch state dict loads strictly and outputs and gradients agree.
    recurrent_case("conv_transpose2d_module",
                   torch.nn.ConvTranspose2d(4, 6, (3, 2), stride=2, padding=1, output_padding=1, groups=2,
                                            dilation=(1, 2)), rand(2, 4, 3, 3), None)
    recurrent_case("conv_transpose1d_module", torch.nn.ConvTranspose1d(3, 2, 3, stride=3, bias=False), rand(3, 4),
                   None)
    # Convolution padding modes and padding="same" (appended).
    recurrent_case("conv2d_same_reflect_module",
                   torch.nn.Conv2d(2, 3, (2, 3), dilation=(1, 2), padding="same", padding_mode="reflect"),
                   rand(2, 2, 4, 5), None)
    recurrent_case("conv1d_circular_module", torch.nn.Conv1d(3, 4, 3, stride=2, padding=2, padding_mode="circular"),
                   rand(2, 3, 6), None)
    case("conv1d_same_even_kernel", [rand(2, 2, 5), rand(2, 2, 2)], lambda x, w: F.conv1d(x, w, padding="same"))
    # Instance normalisation (appended).
    rm, rv = rand(3), rand(3, low=0.5, high=2.0)
    x = rand(2, 3, 4, 3, low=-2.0, high=3.0)
    rm_after, rv_after = rm.clone(), rv.clone()
    F.instance_norm(x, rm_after, rv_after, None, None, True, 0.2, 1e-5)
    case("instance_norm_running", [x, rand(3), rand(3), rm, rv],
         lambda x, w, b, m, v: F.instance_norm(x, m.detach().clone(), v.detach().clone(), w, b, True, 0.2, 1e-5),
         extras={"running_mean": rm_after, "running_var": rv_after})
    case("instance_norm_eval", [rand(2, 3, 5), rand(3), rand(3), rand(3), rand(3, low=0.5, high=2.0)],
         lambda x, w, b, m, v: F.instance_norm(x, m.detach(), v.detach(), w, b, False, 0.1, 1e-3))
    recurrent_case("instance_norm1d_module", torch.nn.InstanceNorm1d(3, affine=True), rand(3, 5), None)
    # Resampling (appended).
    case("interpolate_nearest", [rand(2, 2, 3, 4)], lambda x: F.interpolate(x, scale_factor=(2.0, 1.5)))
    case("interpolate_nearest_1d_scale", [rand(2, 2, 5)], lambda x: F.interpolate(x, scale_factor=1.5))
    case("interpolate_bilinear", [rand(1, 2, 3, 4)], lambda x: F.interpolate(x, size=(5, 7), mode="bilinear"))
    case("interpolate_bilinear_align_corners", [rand(1, 2, 4, 3)],
         lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear", align_corners=True))
    case("interpolate_bilinear_scale", [rand(1, 2, 5, 3)],
         lambda x: F.interpolate(x, scale_factor=(1.5, 2.5), mode="bilinear"))
    case("interpolate_linear_scale", [rand(2, 3, 5)], lambda x: F.interpolate(x, scale_factor=1.7, mode="linear"))
    case("pixel_shuffle", [rand(2, 8, 2, 3)], lambda x: F.pixel_shuffle(x, 2))
    case("pixel_unshuffle", [rand(1, 2, 4, 6)], lambda x: F.pixel_unshuffle(x, 2))
    # Adaptive max pooling, maxima and indices (appended).
    x = rand(2, 2, 5, 7)
    case("adaptive_max_pool2d", [x], lambda x: F.adaptive_max_pool2d(x, (3, 4)),
         extras={"indices": F.adaptive_max_pool2d(x, (3, 4), return_indices=True)[1]})
    x = rand(3, 7)
    case("adaptive_max_pool1d", [x], lambda x: F.adaptive_max_pool1d(x, 3),
         extras={"indices": F.adaptive_max_pool1d(x, 3, return_indices=True)[1]})
    # max_pool2d's indices and max_unpool2d (appended).
    x = rand(2, 2, 5, 6)
    case("max_pool2d_with_indices", [x], lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True),
         extras={"indices": F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)[1]})
    case("max_unpool2d", [rand(1, 2, 4, 6)],
         lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2, output_size=(5, 7)))
    # Optimizer trajectories and scheduler curves (test_optim.cpp compares them).
    optimizers_and_schedulers()
    # A PyTorch state dict of ModuleList and ModuleDict names (test_nn.cpp loads it).
    containers()
    shape_indexing_sorting()
    # Composed activations and the losses (their own generator: the draws of
    # cases around them stay as they are).
    activations_and_losses()


def activations_and_losses():
    global gen
    outer, gen = gen, torch.Generator().manual_seed(20261205)
    case("elu", [rand(3, 4, low=-3.0, high=3.0)], lambda x: F.elu(x, 0.7))
    case("selu", [rand(3, 4, low=-3.0, high=3.0)], F.selu)
    case("celu", [rand(3, 4, low=-3.0, high=3.0)], lambda x: F.celu(x, 0.5))
    case("softplus", [rand(3, 4, low=-4.0, high=4.0)], lambda x: F.softplus(x, 2.0, 3.0))
    case("softsign", [rand(3, 4, low=-3.0, high=3.0)], F.softsign)
    case("mish", [rand(3, 4, low=-4.0, high=4.0)], F.mish)
    case("hardtanh", [rand(3, 4, low=-2.0, high=2.0)], lambda x: F.hardtanh(x, -0.5, 1.0))
    case("relu6", [rand(3, 4, low=-3.0, high=8.0)], F.relu6)
    case("hardsigmoid", [rand(3, 4, low=-5.0, high=5.0)], F.hardsigmoid)
    case("prelu", [rand(2, 3, 4), rand(3)], F.prelu)
    case("glu", [rand(3, 4, 2)], lambda x: F.glu(x, 1))
    case("logsigmoid", [rand(3, 4, low=-5.0, high=5.0)], F.logsigmoid)
    case("softmin", [rand(3, 5, low=-3.0, high=3.0)], lambda x: F.softmin(x, 1))
    case("tanhshrink", [rand(3, 4, low=-3.0, high=3.0)], F.tanhshrink)
    case("threshold", [rand(3, 4)], lambda x: F.threshold(x, 0.1, 20.0))
    case("hardshrink", [rand(3, 4)], lambda x: F.hardshrink(x, 0.3))
    case("softshrink", [rand(3, 4)], lambda x: F.softshrink(x, 0.3))
    case("l1_loss", [rand(3, 4), rand(3, 4)], F.l1_loss)
    case("smooth_l1_loss", [rand(3, 4, low=-2.0, high=2.0), rand(3, 4)],
         lambda a, b: F.smooth_l1_loss(a, b, reduction="none", beta=0.5))
    case("huber_loss", [rand(3, 4, low=-2.0, high=2.0), rand(3, 4)], lambda a, b: F.huber_loss(a, b, delta=0.6))
    case("binary_cross_entropy", [rand(3, 4, low=0.02, high=0.98), rand(3, 4, low=0.0, high=1.0), rand(4, low=0.5)],
         lambda x, y, w: F.binary_cross_entropy(x, y, w.detach()))
    case("bce_with_logits_weight_pos_weight",
         [rand(3, 4, low=-4.0, high=4.0), rand(3, 4, low=0.0, high=1.0), rand(3, 1, low=0.5), rand(4, low=0.5, high=3.0)],
         lambda x, y, w, pw: F.binary_cross_entropy_with_logits(x, y, w.detach(), reduction="sum",
                                                                    pos_weight=pw.detach()))
    t = randint(5, 6)
    t[1] = -100
    case("cross_entropy_weight_smoothing", [rand(6, 5, low=-3.0, high=3.0), t, rand(5, low=0.2, high=2.0)],
         lambda x, t, w: F.cross_entropy(x, t, w.detach(), label_smoothing=0.2))
    case("nll_loss_weight", [rand(5, 4, low=-3.0, high=0.0), randint(4, 5), rand(4, low=0.2, high=2.0)],
         lambda x, t, w: F.nll_loss(x, t, w.detach()))
    case("kl_div_batchmean", [rand(3, 4, low=-3.0, high=0.0), rand(3, 4, low=0.0, high=1.0)],
         lambda x, y: F.kl_div(x, y, reduction="batchmean"))
    case("kl_div_log_target", [rand(3, 4, low=-3.0, high=0.0), rand(3, 4, low=-3.0, high=0.0)],
         lambda x, y: F.kl_div(x, y, reduction="none", log_target=True))
    case("poisson_nll_loss", [rand(3, 4), rand(3, 4, low=0.0, high=3.0)], F.poisson_nll_loss)
    case("poisson_nll_loss_full", [rand(3, 4, low=0.2, high=3.0), rand(3, 4, low=0.0, high=3.0)],
         lambda x, y: F.poisson_nll_loss(x, y, log_input=False, full=True, reduction="sum"))
    y = torch.tensor([1.0, -1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    case("margin_ranking_loss", [rand(5), rand(5), y], lambda a, b, y: F.margin_ranking_loss(a, b, y.detach(), 0.1))
    case("cosine_embedding_loss", [rand(4, 3), rand(4, 3), y[:4]],
         lambda a, b, y: F.cosine_embedding_loss(a, b, y.detach(), margin=-0.2, reduction="none"))
    case("triplet_margin_loss", [rand(4, 3), rand(4, 3), rand(4, 3)], lambda a, p, n: F.triplet_margin_loss(a, p, n))
    case("triplet_margin_loss_p1_swap", [rand(4, 3), rand(4, 3), rand(4, 3)],
         lambda a, p, n: F.triplet_margin_loss(a, p, n, margin=0.5, p=1, swap=True, reduction="none"))
    y = torch.tensor([[1.0, -1.0, -1.0, 1.0]] * 3, dtype=torch.float64)
    case("soft_margin_loss", [rand(3, 4, low=-2.0, high=2.0), y], lambda x, y: F.soft_margin_loss(x, y.detach()))
    case("hinge_embedding_loss", [rand(3, 4, low=-2.0, high=2.0), y],
         lambda x, y: F.hinge_embedding_loss(x, y.detach(), margin=0.5))
    case("multi_margin_loss", [rand(4, 5, low=-2.0, high=2.0), randint(5, 4), rand(5, low=0.5, high=2.0)],
         lambda x, t, w: F.multi_margin_loss(x, t, p=2, margin=0.8, weight=w.detach(), reduction="none"))
    case("multi_margin_loss_p1", [rand(4, 5, low=-2.0, high=2.0), randint(5, 4)], F.multi_margin_loss)
    # PReLU's state dict (key "weight", one slope per channel) loads strictly.
    recurrent_case("prelu_module", torch.nn.PReLU(3), rand(2, 3, 4), None)
    gen = outer


def write(name, tensors):
    with open(os.path.join(OUT, name + ".txt"), "w") as f:
        f.write("".join(fmt(k, v) for k, v in tensors.items()))


def tanh_mlp(x, layers):
    for i, (w, b) in enumerate(layers):
        x = F.linear(x, w, b)
        if i + 1 < len(layers):
            x = torch.tanh(x)
    return x


def second_order():
    # WGAN-GP: the gradient penalty of a critic at points between real and
    # fake samples, and its gradient with respect to the critic's weights.
    real, fake, alpha = rand(3, 4), rand(3, 4), rand(3, 1, low=0.0, high=1.0)
    w1, b1, w2, b2 = rand(6, 4), rand(6), rand(1, 6), rand(1)
    params = [t.clone().requires_grad_() for t in (w1, b1, w2, b2)]
    mixed = (alpha * real + (1 - alpha) * fake).requires_grad_()
    score = tanh_mlp(mixed, [(params[0], params[1]), (params[2], params[3])])
    (g,) = torch.autograd.grad(score.sum(), mixed, create_graph=True)
    penalty = ((g.norm(2, dim=1) - 1) ** 2).mean()
    # The last bias does not move the gradient in x: no gradient (rumus: undefined, compared as zeros).
    gp = torch.autograd.grad(penalty, params, allow_unused=True)
    gp = [g if g is not None else torch.zeros_like(p) for g, p in zip(gp, params)]
    write("wgan_gp", {"real": real, "fake": fake, "alpha": alpha, "w1": w1, "b1": b1, "w2": w2, "b2": b2,
                      "penalty": penalty, "g_w1": gp[0], "g_b1": gp[1], "g_w2": gp[2], "g_b2": gp[3]})

    # A Hessian-vector product of a tanh MLP's loss with respect to its weights.
    x, y = rand(5, 3), rand(5, 1)
    w1, b1, w2, b2 = rand(4, 3), rand(4), rand(1, 4), rand(1)
    v = [rand(*t.shape) for t in (w1, b1, w2, b2)]
    params = [t.clone().requires_grad_() for t in (w1, b1, w2, b2)]
    loss = ((tanh_mlp(x, [(params[0], params[1]), (params[2], params[3])]) - y) ** 2).mean()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    hv = torch.autograd.grad(sum((g * u).sum() for g, u in zip(grads, v)), params)
    write("hvp_tanh_mlp", {"x": x, "y": y, "w1": w1, "b1": b1, "w2": w2, "b2": b2,
                           "v_w1": v[0], "v_b1": v[1], "v_w2": v[2], "v_b2": v[3],
                           "hv_w1": hv[0], "hv_b1": hv[1], "hv_w2": hv[2], "hv_b2": hv[3]})

    # u(x) of a small tanh network, its first and second derivatives in x
    # (samples are independent, so the gradients of sums are per sample).
    x = rand(6, 1, low=-2.0, high=2.0)
    w1, b1, w2, b2, w3, b3 = rand(8, 1), rand(8), rand(8, 8), rand(8), rand(1, 8), rand(1)
    xs = x.clone().requires_grad_()
    u = tanh_mlp(xs, [(w1, b1), (w2, b2), (w3, b3)])
    (du,) = torch.autograd.grad(u.sum(), xs, create_graph=True)
    (d2u,) = torch.autograd.grad(du.sum(), xs)
    write("second_derivative_in_x", {"x": x, "w1": w1, "b1": b1, "w2": w2, "b2": b2, "w3": w3, "b3": b3,
                                     "u": u, "du": du, "d2u": d2u})



def write_safetensors(path, tensors):
    """A safetensors file of float64 tensors, written by hand (format: 8-byte
    header length, JSON header, raw little-endian data)."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().double().numpy().tobytes()
        header[name] = {"dtype": "F64", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def recurrent_case(name, module, inputs, states):
    """inputs: the input tensor; states: the initial state(s) or None. Records
    the state dict, output, final states and the gradients of a random
    weighting of all of them with respect to the input, the states and every
    parameter."""
    module = module.double()
    with torch.no_grad():  # parameters drawn from this file's generator, as float32 values
        for p in module.parameters():
            p.copy_(rand(*p.shape))
    x = inputs.clone().requires_grad_()
    st = None
    if states is not None:
        st = tuple(t.clone().requires_grad_() for t in states) if isinstance(states, tuple) else states.clone().requires_grad_()
    out = module(x, st) if st is not None else module(x)
    outs = list(out) if isinstance(out, tuple) else [out]
    flat = []
    for o in outs:
        flat.extend(o if isinstance(o, tuple) else [o])
    weights = [rand(*o.shape) for o in flat]
    leaves = [x] + (list(st) if isinstance(st, tuple) else [st] if st is not None else []) + list(module.parameters())
    grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(flat, weights)), leaves)
    tensors = {"x": inputs}
    if states is not None:
        for i, t in enumerate(states if isinstance(states, tuple) else (states,)):
            tensors[f"s{i}"] = t
    for i, (o, w) in enumerate(zip(flat, weights)):
        tensors[f"out{i}"], tensors[f"w{i}"] = o, w
    tensors["grad_x"] = grads[0]
    for i in range(len(leaves) - 1 - len(list(module.parameters()))):
        tensors[f"grad_s{i}"] = grads[1 + i]
    names = [n for n, _ in module.named_parameters()]
    for n, g in zip(names, grads[len(grads) - len(names):]):
        tensors["p." + n] = dict(module.named_parameters())[n]
        tensors["grad." + n] = g
    write(name, tensors)
    write_safetensors(os.path.join(OUT, name + ".safetensors"), dict(module.state_dict()))


def recurrent():
    nn = torch.nn
    recurrent_case("lstm_bidir_2layer", nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True),
                   rand(2, 5, 3), (rand(4, 2, 4), rand(4, 2, 4)))
    recurrent_case("lstm_proj", nn.LSTM(3, 5, proj_size=2), rand(4, 2, 3), None)
    recurrent_case("gru_2layer", nn.GRU(3, 4, num_layers=2), rand(5, 2, 3), rand(2, 2, 4))
    recurrent_case("rnn_relu_bidir_no_bias", nn.RNN(3, 4, nonlinearity="relu", bidirectional=True, bias=False),
                   rand(4, 2, 3), None)
    recurrent_case("rnn_unbatched", nn.RNN(3, 4), rand(6, 3), rand(1, 4))
    recurrent_case("lstm_cell", nn.LSTMCell(3, 4), rand(2, 3), (rand(2, 4), rand(2, 4)))
    recurrent_case("gru_cell", nn.GRUCell(3, 4), rand(2, 3), rand(2, 4))
    recurrent_case("rnn_cell", nn.RNNCell(3, 4, nonlinearity="tanh"), rand(2, 3), rand(2, 4))


def optimizer_trajectory(name, make, groups, steps):
    """A few steps of an optimizer on a fixed quadratic, f(p) = sum(w p^2 / 2 + c p)
    per parameter, with one parameter per group: the initial values, w, c, and
    every parameter after each step. Drawn from its own generator, so these
    cases do not depend on the op cases' draws."""
    g = torch.Generator().manual_seed(7)
    draw = lambda *shape, low=-1.0, high=1.0: (torch.rand(shape, generator=g, dtype=torch.float32) * (high - low)
                                              + low).to(torch.float64)
    shapes = [(2, 3), (4,)]
    params = [draw(*s).requires_grad_() for s in shapes]
    ws = [draw(*s, low=0.5, high=2.0) for s in shapes]
    cs = [draw(*s) for s in shapes]
    tensors = {}
    for i, (p, w, c) in enumerate(zip(params, ws, cs)):
        tensors[f"p{i}"], tensors[f"w{i}"], tensors[f"c{i}"] = p.detach().clone(), w, c
    opt = make([dict(params=[p], **o) for p, o in zip(params, groups)])
    for s in range(steps):
        opt.zero_grad()
        sum((w * p * p / 2 + c * p).sum() for p, w, c in zip(params, ws, cs)).backward()
        opt.step()
        for i, p in enumerate(params):
            tensors[f"step{s}.p{i}"] = p.detach().clone()
    write("optim_" + name, tensors)


def scheduler_curve(name, make, steps, metrics=None, momentum=False):
    """The lr (and momentum) of an SGD's two groups (base lr 0.1 and 0.02)
    after each scheduler step; ReduceLROnPlateau is fed `metrics`."""
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([dict(params=[p]), dict(params=[torch.zeros(1, requires_grad=True)], lr=0.02)], lr=0.1,
                          momentum=0.9)
    sched = make(opt)
    lrs, moms = [[g["lr"] for g in opt.param_groups]], [[g["momentum"] for g in opt.param_groups]]
    for s in range(steps):
        opt.step()
        sched.step(metrics[s]) if metrics is not None else sched.step()
        lrs.append([g["lr"] for g in opt.param_groups])
        moms.append([g["momentum"] for g in opt.param_groups])
    tensors = {"lr": torch.tensor(lrs, dtype=torch.float64)}
    if momentum:
        tensors["momentum"] = torch.tensor(moms, dtype=torch.float64)
    if metrics is not None:
        tensors["metrics"] = torch.tensor(metrics, dtype=torch.float64)
    write("sched_" + name, tensors)


def lbfgs_trajectory(name, steps, **options):
    """LBFGS steps (each up to max_iter iterations) on a quadratic plus a
    Rosenbrock valley, one group: the initial values, w, c, and after each
    step the parameters and the loss step() returned."""
    g = torch.Generator().manual_seed(11)
    draw = lambda *shape, low=-1.0, high=1.0: (torch.rand(shape, generator=g, dtype=torch.float32) * (high - low)
                                              + low).to(torch.float64)
    p, q = draw(2, 3).requires_grad_(), draw(4).requires_grad_()
    w, c = draw(2, 3, low=0.5, high=2.0), draw(2, 3)
    tensors = {"p0": p.detach().clone(), "p1": q.detach().clone(), "w0": w, "c0": c}
    opt = torch.optim.LBFGS([p, q], **options)

    def closure():
        opt.zero_grad()
        loss = (w * p * p / 2 + c * p).sum() + ((1 - q[:-1]) ** 2 + 10 * (q[1:] - q[:-1] ** 2) ** 2).sum()
        loss.backward()
        return loss

    for s in range(steps):
        tensors[f"step{s}.loss"] = opt.step(closure).detach().reshape(1)
        tensors[f"step{s}.p0"], tensors[f"step{s}.p1"] = p.detach().clone(), q.detach().clone()
    write("optim_" + name, tensors)


def containers():
    """A module of a ModuleList and a ModuleDict: its state dict (as
    safetensors, PyTorch's names), an input and the output."""
    g = torch.Generator().manual_seed(13)
    nn = torch.nn

    class Tower(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)])
            self.heads = nn.ModuleDict({"mean": nn.Linear(1, 1), "scale": nn.Linear(1, 1, bias=False)})

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.heads["mean"](x) + self.heads["scale"](x)

    m = Tower().double()
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.rand(p.shape, generator=g, dtype=torch.float32) * 2 - 1)
    x = (torch.rand((4, 2), generator=g, dtype=torch.float32) * 2 - 1).to(torch.float64)
    write("module_containers", {"x": x, "out": m(x).detach()})
    write_safetensors(os.path.join(OUT, "module_containers.safetensors"), dict(m.state_dict()))


def optimizers_and_schedulers():
    o = torch.optim
    # Adagrad fills "sum" with the constructor's initial_accumulator_value (a group's own is not read).
    optimizer_trajectory("adagrad", lambda g: o.Adagrad(g, lr=0.1, initial_accumulator_value=0.2),
                         [dict(lr_decay=0.05, weight_decay=0.1), dict(eps=1e-3)], 5)
    # NAdam's foreach path: 1.13's single-tensor path squares mu in mu_product_next (fixed in PyTorch 2).
    optimizer_trajectory("nadam", lambda g: o.NAdam(g, lr=0.05, foreach=True),
                         [dict(weight_decay=0.1, momentum_decay=0.01), dict(betas=(0.8, 0.99), eps=1e-3)], 5)
    optimizer_trajectory("radam", lambda g: o.RAdam(g, lr=0.05),
                         [dict(weight_decay=0.1), dict(betas=(0.5, 0.9), eps=1e-3)], 8)
    optimizer_trajectory("adam_amsgrad", lambda g: o.Adam(g, lr=0.2, amsgrad=True),
                         [dict(weight_decay=0.1), dict(betas=(0.5, 0.9), amsgrad=False)], 6)
    optimizer_trajectory("adamw_amsgrad", lambda g: o.AdamW(g, lr=0.2, amsgrad=True),
                         [dict(weight_decay=0.1), dict(betas=(0.5, 0.9), eps=1e-3)], 6)
    optimizer_trajectory("sgd_groups", lambda g: o.SGD(g, lr=0.1),
                         [dict(momentum=0.9, nesterov=True), dict(momentum=0.5, dampening=0.1, weight_decay=0.2)], 4)
    optimizer_trajectory("rmsprop_groups", lambda g: o.RMSprop(g, lr=0.05),
                         [dict(centered=True, momentum=0.5), dict(alpha=0.9, eps=1e-3)], 4)
    lbfgs_trajectory("lbfgs", 3, lr=0.2, max_iter=4, history_size=3)
    lbfgs_trajectory("lbfgs_strong_wolfe", 3, max_iter=5, history_size=3, line_search_fn="strong_wolfe")
    s = o.lr_scheduler
    scheduler_curve("exponential", lambda opt: s.ExponentialLR(opt, 0.8), 6)
    scheduler_curve("lambda", lambda opt: s.LambdaLR(opt, [lambda e: 1 / (e + 1), lambda e: 0.9 ** e]), 6)
    for mode, extra in [("triangular", {}), ("triangular2", {}), ("exp_range", {"gamma": 0.9})]:
        scheduler_curve("cyclic_" + mode,
                        lambda opt: s.CyclicLR(opt, [0.01, 0.002], [0.1, 0.05], step_size_up=3, step_size_down=2,
                                               mode=mode, base_momentum=0.8, max_momentum=0.95, **extra), 14,
                        momentum=True)
    # OneCycleLR up to its last step (PyTorch extrapolates past it; rumus holds it).
    scheduler_curve("one_cycle", lambda opt: s.OneCycleLR(opt, 0.5, total_steps=10), 9, momentum=True)
    scheduler_curve("one_cycle_three_phase_linear",
                    lambda opt: s.OneCycleLR(opt, 0.5, total_steps=13, pct_start=0.25, anneal_strategy="linear",
                                             base_momentum=0.8, max_momentum=0.9, div_factor=10.0,
                                             final_div_factor=100.0, three_phase=True), 12, momentum=True)
    metrics = [1.0, 0.9, 0.95, 0.92, 0.91, 0.9, 0.9, 0.899, 0.95, 0.97, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6]
    scheduler_curve("plateau_min_rel", lambda opt: s.ReduceLROnPlateau(opt, factor=0.5, patience=2, cooldown=1,
                                                                        min_lr=[0.01, 0.004]), len(metrics), metrics)
    scheduler_curve("plateau_max_abs",
                    lambda opt: s.ReduceLROnPlateau(opt, mode="max", factor=0.3, patience=1, threshold=0.05,
                                                    threshold_mode="abs", min_lr=0.005), len(metrics),
                    [-m for m in metrics])


def shape_indexing_sorting():
    """Indexing, reordering, scans and sorts; sorts with ties and NaN (stable)
    give values and indices side by side, the indices as floats."""
    nan = float("nan")
    t = torch.tensor
    case("index_select", [rand(4, 3), t([3, 0, 3, 1])], lambda x, i: torch.index_select(x, 0, i))
    case("scatter_src", [rand(3, 4), t([[1, 3], [0, 2], [2, 1]]), rand(3, 2)], lambda x, i, s: torch.scatter(x, 1, i, s))
    case("scatter_value", [rand(3, 4), t([[2, 0, 1, 2]])], lambda x, i: torch.scatter(x, 0, i, -0.5))
    case("index_add", [rand(4, 3), t([3, 0, 3]), rand(3, 3)], lambda x, i, s: torch.index_add(x, 0, i, s, alpha=2.0))
    case("masked_select", [rand(3, 4), t([1, 0, 0, 1])], lambda x, m: torch.masked_select(x, m.bool()))
    case("take_along_dim", [rand(3, 4), t([[3, 0], [1, 1], [2, 0]])], lambda x, i: torch.take_along_dim(x, i, 1))
    case("flip", [rand(2, 3, 4)], lambda x: torch.flip(x, (0, -1)))
    case("roll", [rand(3, 4)], lambda x: torch.roll(x, (1, -3), (0, 1)))
    case("roll_flat", [rand(3, 4)], lambda x: torch.roll(x, 5))
    case("repeat", [rand(2, 3)], lambda x: x.repeat(2, 1, 2))
    case("tile", [rand(2, 3)], lambda x: torch.tile(x, (2,)))
    case("repeat_interleave", [rand(2, 3)], lambda x: torch.repeat_interleave(x, 2, 1))
    case("repeat_interleave_tensor", [rand(3, 2), t([1, 0, 2])], lambda x, r: torch.repeat_interleave(x, r, 0))
    case("movedim", [rand(2, 3, 4)], lambda x: torch.movedim(x, (0, 1), (2, 0)))
    case("diagonal", [rand(3, 4)], lambda x: torch.diagonal(x, 1))
    case("diagonal_3d", [rand(2, 3, 4)], lambda x: torch.diagonal(x, -1, 2, 0))
    case("tril", [rand(2, 3, 4)], lambda x: torch.tril(x, -1))
    case("triu", [rand(3, 4)], lambda x: torch.triu(x, 1))
    case("as_strided", [rand(3, 4)], lambda x: torch.as_strided(x, (2, 3), (1, 3), 1))
    case("cumsum", [rand(3, 4)], lambda x: torch.cumsum(x, 1))
    case("cumprod", [rand(3, 4, low=0.5, high=2.0)], lambda x: torch.cumprod(x, 1))
    holes = rand(3, 5, low=0.5, high=2.0)
    holes[0, 1] = holes[1, 3] = holes[2, 0] = holes[2, 2] = 0.0
    case("cumprod_zeros", [holes], lambda x: torch.cumprod(x, 1))
    ties = t([[0.5, nan, 0.5, -1.0, 0.5, nan, 2.0], [2.0, 2.0, 2.0, 1.0, 1.0, 0.0, 1.0]], dtype=torch.float64)
    for name, descending in [("sort_ties_nan", False), ("sort_ties_nan_descending", True)]:
        case(name, [ties], lambda x: torch.cat(
            [torch.sort(x, dim=1, descending=descending, stable=True)[0], torch.sort(x, dim=1, descending=descending, stable=True)[1].double()], 1))
    case("sort_dim0", [rand(4, 3)], lambda x: torch.cat([torch.sort(x, 0)[0], torch.sort(x, 0)[1].double()], 0))
    case("topk", [rand(3, 6)], lambda x: torch.cat([torch.topk(x, 3)[0], torch.topk(x, 3)[1].double()], 1))
    case("topk_smallest", [rand(5, 2)], lambda x: torch.cat([torch.topk(x, 2, 0, False)[0],
                                                             torch.topk(x, 2, 0, False)[1].double()], 0))
    case("topk_nan", [t([[0.5, nan, -1.0, 3.0], [1.0, -2.0, 0.0, nan]], dtype=torch.float64)],
         lambda x: torch.cat([torch.topk(x, 2)[0], torch.topk(x, 2)[1].double()], 1))
    case("kthvalue", [rand(3, 5)], lambda x: torch.cat([torch.kthvalue(x, 2, 1, True)[0],
                                                        torch.kthvalue(x, 2, 1, True)[1].double()], 1))
    with_nan = rand(3, 6)
    with_nan[1, 2] = with_nan[1, 4] = nan
    case("median", [with_nan], lambda x: torch.cat([torch.median(x, 1, True)[0], torch.median(x, 1, True)[1].double()], 1))
    case("median_all", [rand(3, 4)], lambda x: torch.median(x))
    for name, op in [("cummax_ties_nan", torch.cummax), ("cummin_ties_nan", torch.cummin)]:
        case(name, [ties], lambda x: torch.cat([op(x, 1)[0], op(x, 1)[1].double()], 1))


def pointwise_math_and_reductions():
    """The math library (its own generator: the other cases' draws stay as they are)."""
    global gen
    outer, gen = gen, torch.Generator().manual_seed(20261207)
    for name, fn, low, high in [
            ("sin", torch.sin, -3.0, 3.0), ("cos", torch.cos, -3.0, 3.0), ("tan", torch.tan, -1.2, 1.2),
            ("asin", torch.asin, -0.95, 0.95), ("acos", torch.acos, -0.95, 0.95), ("atan", torch.atan, -4.0, 4.0),
            ("sinh", torch.sinh, -3.0, 3.0), ("cosh", torch.cosh, -3.0, 3.0), ("asinh", torch.asinh, -4.0, 4.0),
            ("acosh", torch.acosh, 1.05, 4.0), ("atanh", torch.atanh, -0.95, 0.95), ("erf", torch.erf, -2.5, 2.5),
            ("erfc", torch.erfc, -2.5, 2.5), ("erfinv", torch.erfinv, -0.98, 0.98), ("log1p", torch.log1p, -0.9, 3.0),
            ("expm1", torch.expm1, -3.0, 3.0), ("log2", torch.log2, 0.1, 8.0), ("log10", torch.log10, 0.1, 8.0),
            ("exp2", torch.exp2, -3.0, 3.0), ("reciprocal", torch.reciprocal, 0.2, 3.0),
            ("rsqrt", torch.rsqrt, 0.2, 3.0), ("sign", torch.sign, -2.0, 2.0), ("frac", torch.frac, -4.0, 4.0),
            ("logit", torch.logit, 0.05, 0.95)]:
        case(name, [rand(3, 4, low=low, high=high)], fn)
    case("logit_eps", [rand(3, 4, low=0.0, high=1.0)], lambda x: torch.logit(x, eps=0.2))
    # Reductions (appended).
    case("var_dim_correction0", [rand(3, 5, low=-2.0, high=2.0)], lambda x: torch.var(x, 1, correction=0))
    case("std_dims_keepdim", [rand(2, 3, 4, low=-2.0, high=2.0)], lambda x: torch.std(x, (0, -1), keepdim=True))
    case("var_mean", [rand(4, 3)], lambda x: torch.stack(torch.var_mean(x, 0)))
    case("std_mean", [rand(4, 3)], lambda x: torch.stack(torch.std_mean(x, 1, correction=2)))
    case("norm_2", [rand(3, 4)], lambda x: torch.norm(x))
    case("norm_1_dim", [rand(3, 4)], lambda x: torch.norm(x, 1, dim=1))
    case("norm_inf_dim_keepdim", [rand(3, 4)], lambda x: torch.norm(x, float("inf"), dim=0, keepdim=True))
    case("norm_3", [rand(2, 3, 2)], lambda x: torch.norm(x, 3, dim=(0, 2)))
    case("norm_fro", [rand(3, 4)], lambda x: torch.norm(x, "fro", dim=(0, 1)))
    case("logsumexp", [rand(3, 5, low=-20.0, high=20.0)], lambda x: torch.logsumexp(x, 1))
    case("logsumexp_dims_keepdim", [rand(2, 3, 4, low=-3.0, high=3.0)], lambda x: torch.logsumexp(x, (0, 2), True))
    x = rand(3, 5)
    x[1, 2] = 0.0
    x[2, 0] = 0.0
    x[2, 3] = 0.0
    case("prod_dim_zeros", [x], lambda x: torch.prod(x, 1))
    case("prod_all", [rand(2, 3, low=0.5, high=1.5)], lambda x: torch.prod(x))
    x = rand(3, 4)
    x[0, 1] = float("nan")
    x[2, 2] = float("nan")
    case("nansum_nanmean", [x], lambda x: torch.nansum(x, 1) + torch.nanmean(x, 1))
    # Binary math (appended).
    case("atan2", [rand(3, 4), rand(4)], torch.atan2)
    case("fmod", [rand(3, 4, low=-5.0, high=5.0), rand(3, 4, low=0.3, high=2.0)], torch.fmod)
    case("remainder", [rand(3, 4, low=-5.0, high=5.0), rand(3, 1, low=-2.0, high=-0.3)], torch.remainder)
    case("lerp", [rand(3, 4), rand(4), rand(3, 1, low=-0.5, high=1.5)], torch.lerp)
    case("lerp_scalar", [rand(3, 4), rand(3, 4)], lambda a, b: torch.lerp(a, b, 0.7))
    case("clamp_tensor", [rand(3, 4), rand(4, low=-0.8, high=0.0), rand(3, 1, low=0.0, high=0.8)],
         lambda x, lo, hi: torch.clamp(x, lo, hi))
    case("hypot", [rand(3, 4), rand(3, 4)], torch.hypot)
    case("xlogy", [rand(3, 4, low=-2.0, high=2.0), rand(3, 4, low=0.1, high=3.0)], torch.xlogy)
    case("copysign", [rand(3, 4), rand(3, 4)], torch.copysign)
    gen = outer


class PackedRnn(torch.nn.Module):
    """An RNN run over a padded batch of variable lengths, as a PyTorch user
    writes it: pack_padded_sequence (any order), the RNN, pad_packed_sequence."""
    def __init__(self, rnn, lengths):
        super().__init__()
        self.rnn, self.lengths = rnn, lengths

    def forward(self, x, states=None):
        bf = self.rnn.batch_first
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, torch.tensor(self.lengths), batch_first=bf,
                                                         enforce_sorted=False)
        out, h = self.rnn(packed, states)
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=bf, total_length=x.shape[1 if bf else 0])
        return out, h


def packed_sequences():
    """Recurrent layers over variable-length batches (their own generator)."""
    global gen
    outer, gen = gen, torch.Generator().manual_seed(20261205)
    nn = torch.nn
    recurrent_case("lstm_packed_bidir_2layer",
                   PackedRnn(nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True), [3, 5, 1]),
                   rand(3, 5, 3), (rand(4, 3, 4), rand(4, 3, 4)))
    recurrent_case("gru_packed", PackedRnn(nn.GRU(3, 4), [2, 4, 4, 1]), rand(4, 4, 3), rand(1, 4, 4))
    recurrent_case("rnn_packed_bidir", PackedRnn(nn.RNN(2, 3, bidirectional=True), [1, 3]), rand(3, 2, 2), None)
    gen = outer


def second_order_fused():
    """Second-order gradients through the ops with fused first-order kernels
    (their own generator; float64, compared to about 1e-10)."""
    global gen
    outer, gen = gen, torch.Generator().manual_seed(20261206)
    # A gradient penalty through conv2d, batch_norm (training statistics),
    # max_pool2d and tanh, and its gradient in the weights.
    x, cw = rand(2, 1, 6, 6), rand(3, 1, 3, 3)
    bw, bb, lw = rand(3, low=0.5, high=1.5), rand(3), rand(1, 12)
    params = [t.clone().requires_grad_() for t in (cw, bw, bb, lw)]
    xs = x.clone().requires_grad_()

    def critic(x, cw, bw, bb, lw):
        h = F.batch_norm(F.conv2d(x, cw), None, None, bw, bb, training=True)
        return F.linear(torch.tanh(F.max_pool2d(h, 2)).flatten(1), lw)

    (g,) = torch.autograd.grad(critic(xs, *params).sum(), xs, create_graph=True)
    penalty = ((g.flatten(1).norm(2, dim=1) - 1) ** 2).mean()
    gp = torch.autograd.grad(penalty, params, allow_unused=True)
    gp = [d if d is not None else torch.zeros_like(p) for d, p in zip(gp, params)]
    write("gp_conv_bn_maxpool", {"x": x, "cw": cw, "bw": bw, "bb": bb, "lw": lw, "penalty": penalty,
                                 "g_cw": gp[0], "g_bw": gp[1], "g_bb": gp[2], "g_lw": gp[3]})

    # A Hessian-vector product through layer_norm, gelu (exact and tanh) and
    # a linear layer, in the input and the weights.
    x, lnw, lnb, w = rand(3, 5), rand(5, low=0.5, high=1.5), rand(5), rand(4, 5)
    params = [t.clone().requires_grad_() for t in (x, lnw, lnb, w)]
    v = [rand(*t.shape) for t in params]
    h = F.gelu(F.layer_norm(params[0], (5,), params[1], params[2]))
    loss = (F.gelu(F.linear(h, params[3]), approximate="tanh") ** 2).sum()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    hv = torch.autograd.grad(sum((d * u).sum() for d, u in zip(grads, v)), params)
    write("hvp_layer_norm_gelu", {"x": x, "lnw": lnw, "lnb": lnb, "w": w, "v_x": v[0], "v_lnw": v[1],
                                  "v_lnb": v[2], "v_w": v[3], "hv_x": hv[0], "hv_lnw": hv[1], "hv_lnb": hv[2],
                                  "hv_w": hv[3]})

    # A Hessian-vector product of causal attention (PyTorch's math path: this
    # PyTorch has no scaled_dot_product_attention) after an average pooling.
    q, k, vv, r = rand(1, 2, 4, 3), rand(1, 2, 4, 3), rand(1, 2, 4, 3), rand(1, 2, 4, 3)
    params = [t.clone().requires_grad_() for t in (q, k, vv)]
    u = [rand(*t.shape) for t in params]
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    scores = (params[0] @ params[1].transpose(-2, -1)) / 3 ** 0.5
    att = torch.softmax(scores.masked_fill(~causal, float("-inf")), -1) @ params[2]
    loss = (F.avg_pool2d(att, (2, 1)) * r[:, :, :2]).sum() + (att ** 2).sum()
    grads = torch.autograd.grad(loss, params, create_graph=True)
    hv = torch.autograd.grad(sum((d * w_).sum() for d, w_ in zip(grads, u)), params)
    write("hvp_causal_attention", {"q": q, "k": k, "v": vv, "r": r, "u_q": u[0], "u_k": u[1], "u_v": u[2],
                                   "hv_q": hv[0], "hv_k": hv[1], "hv_v": hv[2]})
    gen = outer


def index_copy_fill():
    """index_copy and index_fill (their own generator)."""
    global gen
    outer, gen = gen, torch.Generator().manual_seed(20261207)
    t = torch.tensor
    case("index_copy", [rand(3, 4), t([3, 0]), rand(3, 2)], lambda x, i, s: torch.index_copy(x, 1, i, s))
    case("index_fill", [rand(4, 3), t([2, 0, 2])], lambda x, i: torch.index_fill(x, 0, i, -1.5))
    gen = outer


def dtypes():
    """bool, i8 and i16: promotion, wrapping arithmetic, logical ops, masks.
    Its own format (data/dtypes.txt), a line per case: "name dtype values...",
    dtype as rumus names it; tests/test_ops.cpp evaluates the case of that name."""
    t = torch.tensor
    names = {torch.float32: "f32", torch.float64: "f64", torch.int8: "i8", torch.int16: "i16",
             torch.int32: "i32", torch.int64: "i64", torch.uint8: "u8", torch.bool: "bool"}
    u8 = t([0, 1, 200, 255], dtype=torch.uint8)
    i8 = t([-128, -1, 100, 127], dtype=torch.int8)
    i16 = t([-32768, -2, 300, 32767], dtype=torch.int16)
    m = t([True, False, True, False])
    m2 = t([True, True, False, False])
    f = t([0.0, -1.5, float("nan"), 2.0])
    cases = {
        "u8_add_i8": u8 + i8,
        "i8_add_i8": i8 + i8,
        "i16_mul_i16": i16 * i16,
        "i8_neg": -i8,
        "bool_add_i8": m + i8,
        "bool_add_int": m + 2,
        "bool_mul_float": m * 2.5,
        "bool_add_bool": m + m2,
        "bool_mul_bool": m * m2,
        "bool_div_bool": m / m2,
        "i16_add_f64_scalar": i16 + t(0.5, dtype=torch.float64),
        "i8_add_i64_scalar": i8 + t(1),
        "bool_add_i32_scalar": m + t(3, dtype=torch.int32),
        "eq_i8": i8 == -1,
        "mask_eq_2": m == 2,
        "lt_f": f < 1,
        "logical_and_f_i16": torch.logical_and(f, i16),
        "logical_or_bool_f": torch.logical_or(m, f),
        "logical_xor": torch.logical_xor(m, m2),
        "logical_not_f": torch.logical_not(f),
        "and_op": m & m2,
        "or_op": m | m2,
        "xor_op": m ^ m2,
        "not_op": ~m,
        "sum_bool": m.sum(),
        "sum_i8": i8.sum(),
        "any_u8": u8.any(),
        "all_f": f.all(),
        "any_bool_dim": torch.stack([m, m2]).any(0),
        "cumsum_bool": m.cumsum(0),
        "where_bool": torch.where(m, i8, i16),
        "masked_fill_bool": i16.masked_fill(m, 7),
        "masked_select_bool": i8[m],
        "cast_f_bool": f.to(torch.bool),
        "cast_i16_i8": i16.to(torch.int8),
        "cast_bool_i16": m.to(torch.int16),
        "cast_i8_f32": i8.float(),
        "maximum_i8": torch.maximum(i8, -i8),
        "isnan_i16": torch.isnan(i16),
        "abs_i8": i8.abs(),
        "clamp_i16": i16.clamp(-5, 100),
        "clamp_i8_fractional": i8.clamp(-1.5, 2.5),
        "clamp_min_u8": u8.clamp(min=3),
    }
    with open(os.path.join(OUT, "dtypes.txt"), "w") as out:
        for name, r in cases.items():
            values = r.reshape(-1).tolist()
            text = " ".join(repr(float(v)) if r.is_floating_point() else str(int(v)) for v in values)
            out.write(f"{name} {names[r.dtype]} {text}\n")


if __name__ == "__main__":
    main()
    pointwise_math_and_reductions()
    packed_sequences()
    second_order_fused()
    index_copy_fill()
    dtypes()
