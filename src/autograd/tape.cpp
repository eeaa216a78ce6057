#include "rumus/autograd/tape.hpp"

#include <fmt/format.h>

#include <unordered_map>
#include <unordered_set>

namespace rumus::autograd {

VersionError::VersionError(std::uint64_t saved_, std::uint64_t now_)
    : AutogradError(fmt::format(
          "a tensor saved for backward was modified in place (saved at version {}, now version {})", saved_,
          now_)),
      saved(saved_),
      now(now_) {}

namespace {
struct Tape {
  // How many SavedTensors of this thread hold each TensorImpl: references the
  // tape holds itself, as opposed to tensors a user (or a store) still has.
  // Declared before `nodes`, so it outlives the nodes' saved tensors.
  std::unordered_map<const TensorImpl*, long> saved_refs;
  std::vector<Node> nodes;
  // Prune when the tape has doubled in entries or in bytes saved since the last
  // prune (amortised O(1) a record): a dropped graph of a few large tensors is
  // freed by the next forward, not only after thousands of entries.
  std::size_t prune_at = kMinPruneEntries;
  std::size_t saved_bytes = 0;  // saved since the last prune
  std::size_t prune_bytes_at = kMinPruneBytes;
  int no_prune = 0;  // NoPruneGuards alive

  static constexpr std::size_t kMinPruneEntries = 4096;
  static constexpr std::size_t kMinPruneBytes = std::size_t(16) << 20;
};
thread_local Tape g_tape;

void count_saved(const Tensor& t, long delta) {
  if (!t.defined()) return;
  auto& refs = g_tape.saved_refs;
  auto [it, fresh] = refs.try_emplace(t.impl_ptr().get(), 0);
  if (fresh) g_tape.saved_bytes += t.storage().nbytes();
  if ((it->second += delta) <= 0) refs.erase(it);
}
}  // namespace

SavedTensor::SavedTensor(const Tensor& t) : tensor_(t), version_(t.defined() ? t.storage().version() : 0) {
  count_saved(tensor_, +1);
}
SavedTensor::SavedTensor(const SavedTensor& other) : tensor_(other.tensor_), version_(other.version_) {
  count_saved(tensor_, +1);
}
SavedTensor::SavedTensor(SavedTensor&& other) noexcept
    : tensor_(std::move(other.tensor_)), version_(other.version_) {
  other.tensor_ = Tensor();  // the count moves with the reference
}
SavedTensor& SavedTensor::operator=(SavedTensor other) noexcept {
  std::swap(tensor_, other.tensor_);
  std::swap(version_, other.version_);
  return *this;
}
SavedTensor::~SavedTensor() { count_saved(tensor_, -1); }

const Tensor& SavedTensor::get() const {
  if (tensor_.defined() && tensor_.storage().version() != version_)
    throw VersionError(version_, tensor_.storage().version());
  return tensor_;
}

namespace {
// Whether a tensor outside the tape still holds this node's output: its
// owners minus the tape's own saved copies of it.
bool held_outside(const Node& node) {
  const long owners = node.output_alive.use_count();
  if (owners == 0) return false;
  const auto& refs = g_tape.saved_refs;
  const auto it = refs.find(node.output_alive.lock().get());
  return owners - (it == refs.end() ? 0 : it->second) > 0;
}

// Drops entries no tensor outside the tape can reach: a forward pass whose
// result was thrown away without backward must not grow memory, even when
// its nodes keep each other's outputs alive as saved tensors.
void prune(Tape& tape) {
  auto& nodes = tape.nodes;
  std::unordered_set<GradId> needed;
  std::vector<char> keep(nodes.size(), 0);
  for (std::size_t i = nodes.size(); i-- > 0;) {
    if (held_outside(nodes[i]) || needed.count(nodes[i].output)) {
      keep[i] = 1;
      needed.insert(nodes[i].inputs.begin(), nodes[i].inputs.end());
    }
  }
  std::size_t w = 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!keep[i]) continue;
    if (w != i) nodes[w] = std::move(nodes[i]);  // never onto itself: a self-move empties a Node
    ++w;
  }
  nodes.resize(w);
  const std::size_t kept_bytes = tape_saved_bytes();
  tape.prune_at = std::max(Tape::kMinPruneEntries, 2 * w);
  tape.saved_bytes = 0;
  tape.prune_bytes_at = std::max(Tape::kMinPruneBytes, kept_bytes);
}
}  // namespace

namespace {
thread_local LeafCollector* tl_collector = nullptr;
}  // namespace

LeafCollector::LeafCollector() : outer_(tl_collector) { tl_collector = this; }
LeafCollector::~LeafCollector() { tl_collector = outer_; }
void LeafCollector::add(const Tensor& t) {
  for (const Tensor& l : leaves_)
    if (l.grad_id() == t.grad_id()) return;
  leaves_.push_back(t);
  if (outer_) outer_->add(t);  // a checkpoint inside a checkpoint: the outer one needs them too
}

std::vector<Node>& this_thread_tape() { return g_tape.nodes; }
NoPruneGuard::NoPruneGuard() { ++g_tape.no_prune; }
NoPruneGuard::~NoPruneGuard() { --g_tape.no_prune; }
std::size_t tape_size() { return g_tape.nodes.size(); }
std::size_t tape_saved_bytes() {
  std::size_t bytes = 0;
  for (const auto& [impl, count] : g_tape.saved_refs) bytes += impl->storage ? impl->storage->nbytes() : 0;
  return bytes;
}
void clear_tape() { g_tape.nodes.clear(); }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const char* name, const std::vector<Tensor>& inputs, Tensor& output, BackwardFn backward,
            EmbedFn embed, Backward kind) {
  Node node;
  node.name = name;
  node.inputs.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    bool defined = t.defined();
    if (tl_collector && defined && t.requires_grad() && t.impl().recorded_on == std::thread::id{}) tl_collector->add(t);
    node.inputs.push_back(defined ? t.grad_id() : 0);
    node.input_needs_grad.push_back(defined && t.requires_grad());
    node.input_shapes.push_back(defined ? t.shape() : Shape{});
  }
  output.impl().requires_grad = true;
  output.impl().recorded_on = std::this_thread::get_id();
  node.output = output.grad_id();
  node.output_alive = output.impl_ptr();
  node.backward = std::move(backward);
  node.embed = std::move(embed);
  node.differentiable = kind == Backward::differentiable;
  g_tape.nodes.push_back(std::move(node));
  const bool grown = g_tape.nodes.size() >= g_tape.prune_at || g_tape.saved_bytes >= g_tape.prune_bytes_at;
  if (grown && g_tape.no_prune == 0) prune(g_tape);
}

}  // namespace rumus::autograd
