#include "json.hpp"

#include <fmt/format.h>

#include <charconv>
#include <stdexcept>

namespace rumus::io::json {

namespace {
class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Value document() {
    Value v = value(0);
    ws();
    if (i_ != s_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(fmt::format("{} at byte {}", what, i_));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) fail("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) fail(fmt::format("expected '{}'", c));
    ++i_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  Value value(int depth) {
    if (depth > 64) fail("nesting too deep");
    char c = peek();
    if (c == '{') return Value{object(depth)};
    if (c == '[') return Value{array(depth)};
    if (c == '"') return Value{string()};
    if (literal("true")) return Value{true};
    if (literal("false")) return Value{false};
    if (literal("null")) return Value{nullptr};
    return number();
  }

  Object object(int depth) {
    Object o;
    expect('{');
    if (peek() == '}') { ++i_; return o; }
    for (;;) {
      if (peek() != '"') fail("expected a string key");
      std::string key = string();
      expect(':');
      if (!o.emplace(key, value(depth + 1)).second) fail(fmt::format("duplicate key {}", quote(key)));
      if (peek() == ',') { ++i_; continue; }
      expect('}');
      return o;
    }
  }

  Array array(int depth) {
    Array a;
    expect('[');
    if (peek() == ']') { ++i_; return a; }
    for (;;) {
      a.push_back(value(depth + 1));
      if (peek() == ',') { ++i_; continue; }
      expect(']');
      return a;
    }
  }

  static void utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) out += char(cp);
    else if (cp < 0x800) { out += char(0xC0 | cp >> 6); out += char(0x80 | (cp & 0x3F)); }
    else if (cp < 0x10000) { out += char(0xE0 | cp >> 12); out += char(0x80 | (cp >> 6 & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
    else { out += char(0xF0 | cp >> 18); out += char(0x80 | (cp >> 12 & 0x3F)); out += char(0x80 | (cp >> 6 & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
  }
  std::uint32_t hex4() {
    if (i_ + 4 > s_.size()) fail("truncated \\u escape");
    std::uint32_t v = 0;
    auto r = std::from_chars(s_.data() + i_, s_.data() + i_ + 4, v, 16);
    if (r.ptr != s_.data() + i_ + 4) fail("bad \\u escape");
    i_ += 4;
    return v;
  }

  std::string string() {
    expect('"');
    std::string out;
    for (;;) {
      if (i_ >= s_.size()) fail("unterminated string");
      char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') { out += c; continue; }
      if (i_ >= s_.size()) fail("unterminated escape");
      char e = s_[i_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          std::uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00 && s_.substr(i_, 2) == "\\u") {
            i_ += 2;
            std::uint32_t lo = hex4();
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          utf8(out, cp);
          break;
        }
        default: fail(fmt::format("bad escape \\{}", e));
      }
    }
  }

  Value number() {
    std::size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    bool frac = false;
    while (i_ < s_.size() && ((s_[i_] >= '0' && s_[i_] <= '9') || s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E' ||
                              s_[i_] == '+' || s_[i_] == '-')) {
      frac |= s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E';
      ++i_;
    }
    if (i_ == start) fail("expected a value");
    const char* b = s_.data() + start;
    const char* e = s_.data() + i_;
    if (!frac) {
      std::int64_t v;
      auto r = std::from_chars(b, e, v);
      if (r.ec == std::errc() && r.ptr == e) return Value{v};
    }
    double d;
    auto r = std::from_chars(b, e, d);
    if (r.ec != std::errc() || r.ptr != e) fail("bad number");
    return Value{d};
  }

  std::string_view s_;
  std::size_t i_ = 0;
};
}  // namespace

Value parse(std::string_view text) { return Parser(text).document(); }

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", int(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

}  // namespace rumus::io::json
