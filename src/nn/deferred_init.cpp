#include "rumus/nn/deferred_init.hpp"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "rumus/autograd/grad_mode.hpp"
#include "rumus/nn/module.hpp"
#include "rumus/ops/creation.hpp"
#include "../ops/deferred_empty.hpp"

namespace rumus::nn {

namespace {

// How a deferred storage will be filled: its last whole-tensor init.
struct Recipe {
  enum Kind { uninitialised, constant, uniform, normal } kind = uninitialised;
  double a = 0, b = 0;
  std::uint64_t seed = 0, offset = 0;
};

// Deferred storages by Storage::id() (never reused, unlike addresses).
struct Registry {
  std::mutex mu;
  std::map<std::uint64_t, Recipe> recipes;
};
Registry& registry() {
  static Registry r;
  return r;
}

std::optional<Recipe> recipe_of(const Storage& s) {
  if (!s.released()) return std::nullopt;
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  auto it = r.recipes.find(s.id());
  if (it == r.recipes.end()) return std::nullopt;
  return it->second;
}

// Whether `t` covers its whole storage in order, so a recipe for it is one for the storage.
bool whole_storage(const Tensor& t) {
  return t.offset() == 0 && t.is_contiguous() &&
         std::size_t(t.numel()) * dtype_size(t.dtype()) == t.storage().nbytes();
}

// A tensor of `shape` holding what `r` puts at elements first, first + 1, ... of the full tensor.
Tensor fill_elements(const Recipe& r, const Shape& shape, std::int64_t first, DType dtype, Device device) {
  NoGradGuard no_grad;
  const TensorOptions o{.dtype = dtype, .device = device};
  switch (r.kind) {
    case Recipe::uninitialised: return zeros(shape, o);  // empty()'s bytes: any value will do
    case Recipe::constant: return full(shape, r.a, o);
    case Recipe::uniform:
    case Recipe::normal: {
      Generator g;
      g.set_state(r.seed, r.offset + std::uint64_t(first));
      return r.kind == Recipe::uniform ? rumus::uniform(shape, r.a, r.b, o, &g) : rumus::normal(shape, r.a, r.b, o, &g);
    }
  }
  return {};
}

bool record(const Tensor& t, const Recipe& recipe) {
  if (!is_deferred(t)) return false;
  if (!whole_storage(t)) {  // a part of a parameter: fill the rest as recorded, then let the caller write
    materialize(t);
    return false;
  }
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  r.recipes[t.storage().id()] = recipe;
  return true;
}

}  // namespace

DeferredInit::DeferredInit() : previous_(rumus::detail::deferring_empty()) { rumus::detail::deferring_empty() = true; }
DeferredInit::~DeferredInit() { rumus::detail::deferring_empty() = previous_; }
bool DeferredInit::active() { return rumus::detail::deferring_empty(); }

bool is_deferred(const Tensor& t) { return t.defined() && recipe_of(t.storage()).has_value(); }

Tensor deferred_rows(const Tensor& t, std::int64_t begin, std::int64_t end) {
  const auto recipe = recipe_of(t.storage());
  if (!recipe) throw Error("deferred_rows: the tensor is not a deferred parameter");
  Shape shape = t.dim() == 0 ? Shape{1} : t.shape();
  const std::int64_t rows = shape[0], row_size = rows == 0 ? 0 : t.numel() / rows;
  if (begin < 0 || begin > end || end > rows)
    throw ShapeError(fmt::format("deferred_rows: expected 0 <= begin <= end <= {}, got [{}, {})", rows, begin, end));
  shape[0] = end - begin;
  // A deferred tensor is its whole storage (whole_storage), so element i of it is element i of the draw.
  return fill_elements(*recipe, shape, begin * row_size, t.dtype(), t.device());
}

void materialize(const Tensor& t) {
  if (!t.defined()) return;
  Storage& s = t.storage();
  const auto recipe = recipe_of(s);
  if (!recipe) return;
  const std::int64_t numel = std::int64_t(s.nbytes() / dtype_size(t.dtype()));
  Tensor values = fill_elements(*recipe, {numel}, 0, t.dtype(), t.device());
  s.take_bytes(values.storage());
  s.bump_version();
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  r.recipes.erase(s.id());
}

void materialize(Module& module) {
  for (const auto& [name, p] : module.named_parameters()) materialize(p);
}

namespace detail {

bool defer_constant(const Tensor& t, double value) {
  Recipe r;
  r.kind = Recipe::constant;
  r.a = value;
  return record(t, r);
}

bool defer_draw(const Tensor& t, int kind, double a, double b, Generator* gen) {
  if (!is_deferred(t)) return false;
  if (!whole_storage(t)) return record(t, {});  // materialises
  Generator& g = gen ? *gen : default_generator();
  Recipe r;
  r.kind = kind == 0 ? Recipe::uniform : Recipe::normal;
  r.a = a;
  r.b = b;
  // As the draw itself takes them: one counter per element (detail::random_kernel).
  r.seed = g.seed();
  r.offset = g.advance(std::uint64_t(t.numel()));
  return record(t, r);
}

void defer_parameter(const Tensor& t) {
  // Only what empty() made without bytes: a parameter made with values
  // (ones(), randn()) keeps them.
  if (!DeferredInit::active() || !t.defined() || !t.storage().released() || !whole_storage(t)) return;
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  r.recipes.try_emplace(t.storage().id(), Recipe{});
}

void forget_deferred(const Tensor& t) {
  if (!t.defined()) return;
  Registry& r = registry();
  std::lock_guard lk(r.mu);
  r.recipes.erase(t.storage().id());
}

}  // namespace detail

}  // namespace rumus::nn
