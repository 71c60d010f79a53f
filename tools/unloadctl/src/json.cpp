#include "json.hpp"

#include <cmath>
#include <cstdio>

namespace unload::ctl {

std::string json_quote(std::string_view s) {
  std::string o = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\t':
        o += "\\t";
        break;
      case '\r':
        o += "\\r";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o + "\"";
}

void Json::comma() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }
}

Json& Json::begin_object() {
  comma();
  out_ += '{';
  first_.push_back(true);
  return *this;
}
Json& Json::end_object() {
  out_ += '}';
  first_.pop_back();
  return *this;
}
Json& Json::begin_array() {
  comma();
  out_ += '[';
  first_.push_back(true);
  return *this;
}
Json& Json::end_array() {
  out_ += ']';
  first_.pop_back();
  return *this;
}
Json& Json::key(std::string_view k) {
  comma();
  out_ += json_quote(k);
  out_ += ':';
  after_key_ = true;
  return *this;
}
Json& Json::str(std::string_view s) {
  comma();
  out_ += json_quote(s);
  return *this;
}
Json& Json::num(uint64_t v) {
  comma();
  out_ += std::to_string(v);
  return *this;
}
Json& Json::real(double v) {
  comma();
  if (!std::isfinite(v)) v = 0;
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  out_ += b;
  return *this;
}
Json& Json::boolean(bool b) {
  comma();
  out_ += b ? "true" : "false";
  return *this;
}
Json& Json::null() {
  comma();
  out_ += "null";
  return *this;
}

}  // namespace unload::ctl
