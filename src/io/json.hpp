#pragma once
// A small JSON value with a strict parser and a compact writer: enough for
// safetensors headers, without a new dependency.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace rumus::io::json {

struct Value;
using Object = std::map<std::string, Value>;
using Array = std::vector<Value>;

struct Value {
  // Numbers are kept as integers when they are (offsets and dims exceed 2^53 in principle).
  std::variant<std::nullptr_t, bool, std::int64_t, double, std::string, Array, Object> v = nullptr;

  bool is_object() const { return std::holds_alternative<Object>(v); }
  bool is_array() const { return std::holds_alternative<Array>(v); }
  bool is_string() const { return std::holds_alternative<std::string>(v); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(v); }
  const Object& object() const { return std::get<Object>(v); }
  const Array& array() const { return std::get<Array>(v); }
  const std::string& string() const { return std::get<std::string>(v); }
  std::int64_t integer() const { return std::get<std::int64_t>(v); }
};

// Throws std::runtime_error with the byte offset of the problem.
Value parse(std::string_view text);
std::string quote(std::string_view s);

}  // namespace rumus::io::json
