#pragma once
// The math library's reductions, as torch's: variance and standard deviation
// (with Bessel's `correction`), vector norms, logsumexp, products, any/all and
// the NaN-ignoring sum and mean. Empty `dims` reduces over every dim; dims may
// be negative. They are composed of the reduction and pointwise kernels, so
// they run on every device and are twice differentiable.
#include <string_view>
#include <tuple>
#include <vector>

#include "rumus/core/tensor.hpp"
#include "rumus/core/export.hpp"

RUMUS_API_BEGIN

namespace rumus {

// sum((x - mean)^2) / max(N - correction, 0): N - correction <= 0 gives inf or NaN, as PyTorch.
Tensor var(const Tensor& x, const std::vector<std::int64_t>& dims = {}, double correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<std::int64_t>& dims = {}, double correction = 1, bool keepdim = false);
// (var, mean) and (std, mean), as torch.var_mean / torch.std_mean.
std::tuple<Tensor, Tensor> var_mean(const Tensor& x, const std::vector<std::int64_t>& dims = {}, double correction = 1,
                                    bool keepdim = false);
std::tuple<Tensor, Tensor> std_mean(const Tensor& x, const std::vector<std::int64_t>& dims = {}, double correction = 1,
                                    bool keepdim = false);
// The vector p-norm over dims (torch.norm / torch.linalg.vector_norm): p = 2 (default), 1, any p > 0,
// +-infinity (max / min of |x|, the gradient split among ties) or 0 (the count of non-zeros).
// As PyTorch, the gradient at a zero norm is 0.
Tensor norm(const Tensor& x, double p = 2, const std::vector<std::int64_t>& dims = {}, bool keepdim = false);
// p = "fro" (the 2-norm of the flattened dims); "nuc" is not supported.
Tensor norm(const Tensor& x, std::string_view p, const std::vector<std::int64_t>& dims = {}, bool keepdim = false);
// log(sum(exp(x))) without overflow: shifted by the (detached) maximum; a row of -inf gives -inf.
Tensor logsumexp(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim = false);
// The product of all elements, or along one dim. Integers multiply in i64, as PyTorch. Computed as a
// tree of pairwise products, so the gradient with zeros is exact (the product of the others).
Tensor prod(const Tensor& x);
Tensor prod(const Tensor& x, std::int64_t dim, bool keepdim = false);
// Whether any / all elements are non-zero (NaN counts as non-zero): bool (u8 for a u8 input, as
// PyTorch). Empty: any false, all true.
Tensor any(const Tensor& x);
Tensor any(const Tensor& x, std::int64_t dim, bool keepdim = false);
Tensor all(const Tensor& x);
Tensor all(const Tensor& x, std::int64_t dim, bool keepdim = false);
// Sum and mean of the elements that are not NaN (the gradient is 0 at NaNs).
Tensor nansum(const Tensor& x, const std::vector<std::int64_t>& dims = {}, bool keepdim = false);
Tensor nanmean(const Tensor& x, const std::vector<std::int64_t>& dims = {}, bool keepdim = false);

}  // namespace rumus

RUMUS_API_END
