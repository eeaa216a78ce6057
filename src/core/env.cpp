#include "env.hpp"

#include <cerrno>
#include <cstdlib>

#include "rumus/core/error.hpp"

namespace rumus::env {

std::optional<std::string> text(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

bool is_set(const char* name) { return std::getenv(name) != nullptr; }

bool on(const char* name) {
  const auto v = text(name);
  return v && *v != "0";
}

bool off(const char* name) {
  const auto v = text(name);
  return v && *v == "0";
}

std::optional<std::int64_t> integer(const char* name) {
  const auto v = text(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v->c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE)
    throw ValueError(std::string(name) + ": expected a whole number, got \"" + *v + "\"");
  return std::int64_t(n);
}

}  // namespace rumus::env
