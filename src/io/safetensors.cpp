#include "rumus/io/safetensors.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <string_view>
#include <vector>

#include "json.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::io {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {
const std::pair<DType, const char*> kDTypes[] = {{DType::f32, "F32"}, {DType::f64, "F64"}, {DType::f16, "F16"},
                                                  {DType::bf16, "BF16"}, {DType::i32, "I32"}, {DType::i64, "I64"},
                                                  {DType::u8, "U8"}, {DType::boolean, "BOOL"},
                                                  {DType::i8, "I8"}, {DType::i16, "I16"}};

const char* dtype_code(DType t) {
  for (auto& [d, c] : kDTypes)
    if (d == t) return c;
  return "?";
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw IoError(fmt::format("load_safetensors: '{}': {}", path, what));
}

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string temporary_name(const std::string& path) {
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937_64 rng{std::random_device{}() ^ (std::uint64_t(std::random_device{}()) << 32)};
  return fmt::format("{}.tmp.{}.{}.{:08x}", path, ::getpid(), counter.fetch_add(1), std::uint32_t(rng()));
}
}  // namespace

// Temporaries are named "<name>.tmp.<pid>.<counter>.<random hex>" (older
// versions wrote "<name>.tmp.<pid>"). A temporary whose process is gone was
// left by a crash; it is removed. Anything else is left alone.
void remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    std::string_view rest = std::string_view(name).substr(prefix.size());
    std::string_view pid_text = rest.substr(0, rest.find('.'));
    if (!all_digits(pid_text)) continue;
    if (pid_text.size() < rest.size()) {  // the current form: pid.counter.random
      std::string_view tail = rest.substr(pid_text.size() + 1);
      std::size_t dot = tail.find('.');
      if (dot == std::string_view::npos || !all_digits(tail.substr(0, dot)) || dot + 1 == tail.size() ||
          !std::all_of(tail.begin() + dot + 1, tail.end(), [](char c) { return std::isxdigit((unsigned char)c); }))
        continue;
    }
    const long pid = std::stol(std::string(pid_text));
    if (pid <= 0 || pid == long(::getpid())) continue;
    if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) {
      std::error_code rm;
      fs::remove(it->path(), rm);  // another saver may have removed it first
    }
  }
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  remove_stale_temporaries(path);
  // Unique per call, so savers in several threads or processes never share a temporary.
  std::string tmp = temporary_name(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(fmt::format("save: cannot create '{}': {}", tmp, std::strerror(errno)));
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw IoError(fmt::format("save: writing '{}' failed: {}", tmp, std::strerror(err)));
    }
    done += std::size_t(n);
  }
  // Data on disk before the rename makes it visible.
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("save: flushing '{}' failed: {}", tmp, std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("save: cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err)));
  }
}

void save_safetensors(const StateDict& tensors, const std::string& path, const Metadata& metadata) {
  std::vector<Tensor> host;
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (auto& [k, v] : metadata) {
      header += (first ? "" : ",") + json::quote(k) + ":" + json::quote(v);
      first = false;
    }
    header += "}";
  }
  std::size_t offset = 0;
  for (auto& [name, t] : tensors) {
    if (!t.defined()) throw IoError(fmt::format("save_safetensors: '{}': tensor '{}' is undefined", path, name));
    if (name == "__metadata__") throw IoError(fmt::format("save_safetensors: '{}': '__metadata__' is reserved", path));
    Tensor h = t.detach().cpu().contiguous();
    std::size_t n = std::size_t(h.numel()) * dtype_size(h.dtype());
    header += fmt::format("{}{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                          header.size() > 1 ? "," : "", json::quote(name), dtype_code(h.dtype()),
                          fmt::join(h.shape(), ","), offset, offset + n);
    offset += n;
    host.push_back(h);
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');

  std::string bytes(8, '\0');
  std::uint64_t len = header.size();
  std::memcpy(bytes.data(), &len, 8);
  bytes.reserve(8 + header.size() + offset);
  bytes += header;
  for (const Tensor& h : host) {
    const char* p = static_cast<const char*>(h.storage().data()) + h.offset() * std::int64_t(dtype_size(h.dtype()));
    bytes.append(p, std::size_t(h.numel()) * dtype_size(h.dtype()));
  }
  write_file_atomic(path, bytes);
}

namespace {
std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) bad(path, fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    bad(path, fmt::format("cannot stat: {}", std::strerror(err)));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw IoError(fmt::format("load_safetensors: expected a file, got the directory '{}'", path));
  }
  std::string bytes;
  if (S_ISREG(st.st_mode)) bytes.reserve(std::size_t(st.st_size));
  char chunk[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      bad(path, fmt::format("reading failed: {}", std::strerror(err)));
    }
    if (n == 0) break;
    bytes.append(chunk, std::size_t(n));
  }
  ::close(fd);
  return bytes;
}
}  // namespace

StateDict load_safetensors(const std::string& path, Metadata* metadata) {
  std::string bytes = read_file(path);
  if (bytes.size() < 8) bad(path, fmt::format("truncated: {} bytes, expected an 8-byte header length", bytes.size()));
  std::uint64_t len;
  std::memcpy(&len, bytes.data(), 8);
  if (len > bytes.size() - 8)
    bad(path, fmt::format("the header length {} exceeds the file's {} remaining bytes", len, bytes.size() - 8));
  json::Value root;
  try {
    root = json::parse(std::string_view(bytes).substr(8, len));
  } catch (const std::exception& e) {
    bad(path, fmt::format("corrupt JSON header: {}", e.what()));
  }
  if (!root.is_object()) bad(path, "the header is not a JSON object");
  const std::string_view data = std::string_view(bytes).substr(8 + len);

  StateDict out;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> regions;
  for (auto& [name, entry] : root.object()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad(path, "__metadata__ is not an object");
      for (auto& [k, v] : entry.object()) {
        if (!v.is_string()) bad(path, fmt::format("__metadata__ value '{}' is not a string", k));
        if (metadata) (*metadata)[k] = v.string();
      }
      continue;
    }
    // Init-captures: clang before 16 cannot capture structured bindings in a lambda.
    auto field = [&, &name = name, &entry = entry](const char* key) -> const json::Value& {
      if (!entry.is_object()) bad(path, fmt::format("tensor '{}' is not an object", name));
      auto it = entry.object().find(key);
      if (it == entry.object().end()) bad(path, fmt::format("tensor '{}' has no \"{}\"", name, key));
      return it->second;
    };
    const json::Value& dt = field("dtype");
    if (!dt.is_string()) bad(path, fmt::format("tensor '{}': dtype is not a string", name));
    DType dtype{};
    bool known = false;
    for (auto& [d, c] : kDTypes)
      if (dt.string() == c) dtype = d, known = true;
    if (!known)
      bad(path, fmt::format("tensor '{}': unsupported dtype '{}' (expected F32, F64, F16, BF16, I32, I64, U8, I8, I16 or BOOL)", name,
                            dt.string()));
    const json::Value& sh = field("shape");
    if (!sh.is_array()) bad(path, fmt::format("tensor '{}': shape is not an array", name));
    Shape shape;
    std::uint64_t numel = 1;
    for (auto& d : sh.array()) {
      if (!d.is_int() || d.integer() < 0) bad(path, fmt::format("tensor '{}': shape holds a non-integer or negative dim", name));
      shape.push_back(d.integer());
      if (d.integer() > 0 && numel > (std::uint64_t(1) << 50) / std::uint64_t(d.integer()))
        bad(path, fmt::format("tensor '{}': shape {} is absurdly large", name, shape_str(shape)));
      numel *= std::uint64_t(d.integer());
    }
    const json::Value& off = field("data_offsets");
    if (!off.is_array() || off.array().size() != 2 || !off.array()[0].is_int() || !off.array()[1].is_int())
      bad(path, fmt::format("tensor '{}': data_offsets is not [begin, end]", name));
    std::int64_t b = off.array()[0].integer(), e = off.array()[1].integer();
    if (b < 0 || e < b || std::uint64_t(e) > data.size())
      bad(path, fmt::format("tensor '{}': data_offsets [{}, {}] lie outside the {} data bytes", name, b, e,
                            data.size()));
    if (std::uint64_t(e - b) != numel * dtype_size(dtype))
      bad(path, fmt::format("tensor '{}': {} bytes for {} {} (expected {})", name, e - b, dt.string(),
                            shape_str(shape), numel * dtype_size(dtype)));
    if (dtype == DType::boolean)  // a bool byte other than 0 or 1 has no value in C++
      for (std::int64_t i = b; i < e; ++i)
        if (static_cast<unsigned char>(data[std::size_t(i)]) > 1)
          bad(path, fmt::format("tensor '{}': BOOL element {} holds the byte {} (expected 0 or 1)", name, i - b,
                                int(static_cast<unsigned char>(data[std::size_t(i)]))));
    regions.emplace_back(std::uint64_t(b), std::uint64_t(e));
    out.emplace(name, from_blob(data.data() + b, shape, dtype));
  }
  // The data regions must tile the bytes after the header exactly: no gap,
  // no overlap, nothing after them (as the Python reader requires).
  std::sort(regions.begin(), regions.end());
  std::uint64_t at = 0;
  for (auto& [b, e] : regions) {
    if (b > at) bad(path, fmt::format("a gap of {} bytes at data offset {} (expected the tensors' data_offsets to "
                                      "tile the data bytes, the next one begins at {})", b - at, at, b));
    if (b < at)
      bad(path, fmt::format("data_offsets [{}, {}] overlap a region ending at {} (expected each tensor's data "
                            "to begin where the previous one ends)", b, e, at));
    at = e;
  }
  if (at != data.size())
    bad(path, fmt::format("{} bytes after the {} data bytes its tensors describe (expected the file to end there)",
                          data.size() - at, at));
  return out;
}

}  // namespace rumus::io
