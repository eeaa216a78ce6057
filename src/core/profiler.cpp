// Per-thread kernel timing tables behind rumus::Profiler.
#include "rumus/core/profiler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "rumus/core/error.hpp"

namespace rumus {

namespace {
using Clock = std::chrono::steady_clock;

struct ThreadProfile {
  bool on = false;
  const char* phase = "forward";
  Clock::time_point start;
  std::unordered_map<std::string, ProfileRow> rows;
  std::string key;  // reused to build row names without a new allocation per kernel
  std::string running;  // the row of the kernel running now (ProfileKernel)
};

ThreadProfile& this_thread_profile() {
  thread_local ThreadProfile p;
  return p;
}
}  // namespace

Profiler::Profiler() {
  ThreadProfile& p = this_thread_profile();
  if (p.on) throw Error("Profiler: one is already recording on this thread; expected at most one at a time");
  p.on = true;
  reset();
}

Profiler::~Profiler() {
  ThreadProfile& p = this_thread_profile();
  p.on = false;
  p.rows.clear();
}

void Profiler::reset() {
  ThreadProfile& p = this_thread_profile();
  p.rows.clear();
  p.start = Clock::now();
}

std::vector<ProfileRow> Profiler::rows() const {
  const ThreadProfile& p = this_thread_profile();
  std::vector<ProfileRow> out;
  out.reserve(p.rows.size());
  for (auto& [name, row] : p.rows) out.push_back(row);
  std::sort(out.begin(), out.end(), [](const ProfileRow& a, const ProfileRow& b) {
    return a.milliseconds != b.milliseconds ? a.milliseconds > b.milliseconds : a.name < b.name;
  });
  return out;
}

double Profiler::elapsed_ms() const {
  return std::chrono::duration<double, std::milli>(Clock::now() - this_thread_profile().start).count();
}

std::string Profiler::table(std::size_t max_rows) const {
  const double elapsed = elapsed_ms();
  const auto all = rows();
  double in_kernels = 0;
  for (auto& r : all) in_kernels += r.milliseconds;
  std::string out = fmt::format("{:<52} {:>8} {:>11} {:>9} {:>7}\n", "kernel", "calls", "total ms", "us/call", "%");
  auto line = [&](const std::string& name, std::uint64_t calls, double ms) {
    out += fmt::format("{:<52} {:>8} {:>11.3f} {:>9.2f} {:>6.1f}%\n", name, calls, ms,
                       calls ? ms * 1000.0 / double(calls) : 0.0, elapsed > 0 ? 100.0 * ms / elapsed : 0.0);
  };
  for (std::size_t i = 0; i < all.size() && i < max_rows; ++i) line(all[i].name, all[i].calls, all[i].milliseconds);
  if (all.size() > max_rows) {
    double rest = 0;
    std::uint64_t calls = 0;
    for (std::size_t i = max_rows; i < all.size(); ++i) {
      rest += all[i].milliseconds;
      calls += all[i].calls;
    }
    line(fmt::format("({} more rows)", all.size() - max_rows), calls, rest);
  }
  line("(outside kernels)", 0, std::max(0.0, elapsed - in_kernels));
  out += fmt::format("{:<52} {:>8} {:>11.3f}\n", "elapsed", "", elapsed);
  return out;
}

namespace detail {

bool profiling() { return this_thread_profile().on; }

namespace {
void row_name(std::string& key, const char* phase, std::string_view op, std::string_view kernel,
              std::string_view variant) {
  key.assign(phase);
  key += ' ';
  key += op;
  key += ' ';
  key += kernel;
  if (!variant.empty()) {
    key += ':';
    key += variant;
  }
}
}  // namespace

void profile_record(std::string_view op, std::string_view kernel, std::string_view variant,
                    std::chrono::nanoseconds time) {
  ThreadProfile& p = this_thread_profile();
  if (!p.on) return;
  std::string& key = p.key;
  row_name(key, p.phase, op, kernel, variant);
  auto it = p.rows.find(key);
  if (it == p.rows.end()) it = p.rows.emplace(key, ProfileRow{key, 0, 0}).first;
  ++it->second.calls;
  it->second.milliseconds += std::chrono::duration<double, std::milli>(time).count();
}

ProfileKernel::ProfileKernel(std::string_view op, std::string_view kernel, std::string_view variant)
    : outer_(this_thread_profile().running) {
  ThreadProfile& p = this_thread_profile();
  row_name(p.running, p.phase, op, kernel, variant);
}
ProfileKernel::~ProfileKernel() { this_thread_profile().running = std::move(outer_); }

std::string_view profile_kernel_row() { return this_thread_profile().running; }

ProfilePhase::ProfilePhase(const char* phase) : outer_(this_thread_profile().phase) {
  this_thread_profile().phase = phase;
}
ProfilePhase::~ProfilePhase() { this_thread_profile().phase = outer_; }

}  // namespace detail

}  // namespace rumus
