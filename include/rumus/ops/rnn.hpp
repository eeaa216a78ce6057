#pragma once
// Whole recurrent networks as functions: libtorch's torch::lstm, which
// nn::LSTM runs on.
#include <cstdint>
#include <tuple>
#include <vector>

#include "rumus/core/export.hpp"
#include "rumus/core/generator.hpp"
#include "rumus/core/tensor.hpp"

RUMUS_API_BEGIN

namespace rumus {

// torch::lstm (the padded-input overload): a stack of LSTM layers over a
// whole sequence. input (L, N, H_in), or (N, L, H_in) with batch_first;
// hx = {h0, c0}, (layers * dirs, N, proj or H) and (layers * dirs, N, H), or
// empty (or undefined tensors) for zeros. params: per layer and direction
// (forward, then reverse) w_ih [4H, in], w_hh [4H, proj or H], with
// has_biases b_ih and b_hh [4H], and with a projection w_hr [proj, H] (a
// projection is told by the count of params). Gates in PyTorch's order
// (i, f, g, o). Dropout (with `train`) on every layer's output but the
// last's. Returns (output (L, N, dirs * (proj or H)) or batch-first, h_n, c_n).
//
// On a device with a sequence kernel (the CPU, f32: oneDNN's LSTM primitive)
// each layer runs, both directions at once, in one call each way, and is one
// node on the tape. Elsewhere (f64, other dtypes, Vulkan, inside an autocast
// scope, empty sequences) each layer is composed: one GEMM for every step's
// input projection, then per step a GEMM and the fused gate kernel
// (lstm_cell_gates). Both differentiate to any order: under create_graph the
// sequence node's backward runs the layer again and back through time in
// ops, on the saved inputs.
std::tuple<Tensor, Tensor, Tensor> lstm(const Tensor& input, const std::vector<Tensor>& hx,
                                        const std::vector<Tensor>& params, bool has_biases, std::int64_t num_layers,
                                        double dropout, bool train, bool bidirectional, bool batch_first,
                                        Generator* generator = nullptr);

}  // namespace rumus

RUMUS_API_END
