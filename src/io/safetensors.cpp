#include "rumus/io/safetensors.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "json.hpp"
#include "rumus/ops/creation.hpp"

namespace rumus::io {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

namespace {
const std::pair<DType, const char*> kDTypes[] = {{DType::f32, "F32"}, {DType::f64, "F64"}, {DType::f16, "F16"},
                                                  {DType::bf16, "BF16"}, {DType::i32, "I32"}, {DType::i64, "I64"},
                                                  {DType::u8, "U8"}};

const char* dtype_code(DType t) {
  for (auto& [d, c] : kDTypes)
    if (d == t) return c;
  return "?";
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw IoError(fmt::format("load_safetensors: '{}': {}", path, what));
}
}  // namespace

void write_file_atomic(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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

StateDict load_safetensors(const std::string& path, Metadata* metadata) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad(path, fmt::format("cannot open: {}", std::strerror(errno)));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
  for (auto& [name, entry] : root.object()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) bad(path, "__metadata__ is not an object");
      for (auto& [k, v] : entry.object()) {
        if (!v.is_string()) bad(path, fmt::format("__metadata__ value '{}' is not a string", k));
        if (metadata) (*metadata)[k] = v.string();
      }
      continue;
    }
    auto field = [&](const char* key) -> const json::Value& {
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
      bad(path, fmt::format("tensor '{}': unsupported dtype '{}' (expected F32, F64, F16, BF16, I32, I64 or U8)", name,
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
    out.emplace(name, from_blob(data.data() + b, shape, dtype));
  }
  return out;
}

}  // namespace rumus::io
