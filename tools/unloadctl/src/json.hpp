// A small JSON writer for -j: compact, one document per line, as iproute2's `rdma -j`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace unload::ctl {

class Json {
 public:
  Json& begin_object();
  Json& end_object();
  Json& begin_array();
  Json& end_array();
  Json& key(std::string_view k);
  Json& str(std::string_view s);
  Json& num(uint64_t v);
  Json& real(double v);  // finite; printed with up to 6 significant decimals
  Json& boolean(bool b);
  Json& null();
  const std::string& text() const { return out_; }

 private:
  void comma();
  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

// s as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

}  // namespace unload::ctl
