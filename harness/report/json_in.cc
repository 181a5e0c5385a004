#include "harness/report/json_in.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "harness/report/format.h"

namespace peerlab::report {

using nlohmann::json;

int jsonTextDepth(std::string_view text, int stop_at) {
  int depth = 0, most = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (inString) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        inString = false;
      }
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      most = std::max(most, ++depth);
      if (most > stop_at) return most;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return most;
}

JsonTextShape jsonTextShape(std::string_view text, const JsonLimits& limits) {
  // Estimated costs of what nlohmann::json builds: a value's slot (16 bytes, twice that for a vector's spare
  // capacity), a container's heap header, an object member's map node with its key, a string's heap buffer.
  constexpr size_t kValue = 32, kContainer = 64, kMember = 80, kShortString = 15;
  JsonTextShape shape;
  int depth = 0;
  bool inScalar = false;
  size_t i = 0;
  const size_t n = text.size();
  auto over = [&] {
    return shape.depth > limits.max_depth || shape.elements > limits.max_elements || shape.memory > limits.max_memory;
  };
  while (i < n) {
    const char c = text[i];
    if (c == '"') {
      inScalar = false;
      size_t j = i + 1;
      while (j < n && text[j] != '"')
        j += text[j] == '\\' ? 2 : 1;
      const size_t len = j - i - 1;
      // A key is a string followed by ':'.
      size_t k = j + 1;
      while (k < n && (text[k] == ' ' || text[k] == '\n' || text[k] == '\r' || text[k] == '\t'))
        ++k;
      if (k < n && text[k] == ':') {
        shape.memory += kMember + (len > kShortString ? len + 1 : 0);
      } else {
        ++shape.elements;
        shape.memory += kValue + (len > kShortString ? len + 1 : 0);
      }
      i = j + 1;
      if (over()) return shape;
      continue;
    }
    if (c == '[' || c == '{') {
      inScalar = false;
      ++shape.elements;
      shape.memory += kValue + kContainer;
      shape.depth = std::max(shape.depth, ++depth);
    } else if (c == ']' || c == '}') {
      inScalar = false;
      --depth;
    } else if (c == ',' || c == ':' || c == ' ' || c == '\n' || c == '\r' || c == '\t') {
      inScalar = false;
    } else if (!inScalar) {
      // A number, true, false or null.
      inScalar = true;
      ++shape.elements;
      shape.memory += kValue;
    }
    ++i;
    if (over()) return shape;
  }
  return shape;
}

Status checkJsonText(std::string_view text, const JsonLimits& limits) {
  if (limits.max_bytes > 0 && text.size() > limits.max_bytes) {
    return PEERLAB_INVALID_ARGUMENT(std::to_string(text.size()) + " bytes, more than the " +
                                    std::to_string(limits.max_bytes) + " allowed");
  }
  const JsonTextShape shape = jsonTextShape(text, limits);
  if (shape.depth > limits.max_depth) {
    return PEERLAB_INVALID_ARGUMENT("nested deeper than the " + std::to_string(limits.max_depth) + " levels allowed");
  }
  if (shape.elements > limits.max_elements) {
    return PEERLAB_INVALID_ARGUMENT("more than the " + std::to_string(limits.max_elements) +
                                    " JSON values allowed (counted before parsing)");
  }
  if (shape.memory > limits.max_memory) {
    return PEERLAB_INVALID_ARGUMENT("would take more than the " + std::to_string(limits.max_memory >> 20) +
                                    " MiB allowed once parsed (estimated before parsing)");
  }
  return Status::ok();
}

StatusOr<json> parseJsonText(std::string_view text, size_t max_bytes, int max_depth) {
  JsonLimits limits;
  limits.max_bytes = max_bytes;
  limits.max_depth = max_depth;
  PEERLAB_RETURN_IF_ERROR(checkJsonText(text, limits));
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return PEERLAB_INVALID_ARGUMENT("malformed JSON");
  return doc;
}

std::string shortValue(const json& v) {
  std::string s;
  if (v.is_array()) {
    s = "an array of " + std::to_string(v.size());
  } else if (v.is_object()) {
    s = "an object";
  } else {
    s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

ParsedJson parseJson(const std::string& text) {
  ParsedJson out;
  // One frame per open object or array: its path, and the keys met so far or the index of the next element.
  struct Frame {
    bool object = false;
    std::string path;
    std::vector<std::string> keys;
    size_t index = 0;
  };
  std::vector<Frame> frames;
  std::string key;  // the key whose value comes next
  auto childPath = [&]() -> std::string {
    if (frames.empty()) return "$";
    const Frame& f = frames.back();
    return f.object ? f.path + "." + key : f.path + "[" + std::to_string(f.index) + "]";
  };
  auto valueDone = [&]() {
    if (!frames.empty() && !frames.back().object) ++frames.back().index;
  };
  json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        Frame f;
        f.object = event == json::parse_event_t::object_start;
        f.path = childPath();
        frames.push_back(std::move(f));
        break;
      }
      case json::parse_event_t::key: {
        if (frames.empty() || !parsed.is_string()) break;
        key = parsed.get<std::string>();
        std::vector<std::string>& keys = frames.back().keys;
        if (out.duplicate.empty() && std::find(keys.begin(), keys.end(), key) != keys.end()) {
          out.duplicate = frames.back().path + ": the key \"" + key.substr(0, 80) + "\" appears twice in one object";
        }
        keys.push_back(key);
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        if (!frames.empty()) frames.pop_back();
        valueDone();
        break;
      case json::parse_event_t::value:
        valueDone();
        break;
    }
    return true;
  };
  out.doc = json::parse(text, check, /*allow_exceptions=*/false);
  return out;
}

std::string In::path() const {
  if (!parent_) return root_;
  std::string p = parent_->path();
  if (key_) return p + "." + key_;
  return p + "[" + std::to_string(index_) + "]";
}

void In::fail(const std::string& why) const {
  throw BadJson{path(), why};
}

In In::at(const char* key) const {
  requireObject();
  auto it = j_->find(key);
  if (it == j_->end()) fail(std::string("missing key \"") + key + "\"");
  return In(*it, this, key, 0);
}

std::optional<In> In::opt(const char* key) const {
  requireObject();
  auto it = j_->find(key);
  if (it == j_->end() || it->is_null()) return std::nullopt;
  return In(*it, this, key, 0);
}

void In::requireObject() const {
  if (!j_->is_object()) fail("must be an object (got " + shortValue(*j_) + ")");
}

void In::requireArray() const {
  if (!j_->is_array()) fail("must be an array (got " + shortValue(*j_) + ")");
}

size_t In::size() const {
  requireArray();
  return j_->size();
}

In In::item(size_t i) const {
  requireArray();
  return In((*j_)[i], this, nullptr, i);
}

std::string In::str(size_t max_bytes) const {
  if (!j_->is_string()) fail("must be a string (got " + shortValue(*j_) + ")");
  const std::string& s = j_->get_ref<const std::string&>();
  if (s.size() > max_bytes) {
    fail("a string of " + std::to_string(s.size()) + " bytes is longer than the " + std::to_string(max_bytes) +
         " allowed");
  }
  return s;
}

double In::num(double lo, double hi) const {
  if (!j_->is_number()) fail("must be a number (got " + shortValue(*j_) + ")");
  const double v = j_->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    fail(shortValue(*j_) + " is outside " + exactNumber(lo) + " .. " + exactNumber(hi));
  }
  return v;
}

int In::integer(long long lo, long long hi) const {
  if (!j_->is_number_integer()) fail("must be an integer (got " + shortValue(*j_) + ")");
  // Unsigned values beyond int64 read as negative through get<long long>: compare in the type they came in.
  if (j_->is_number_unsigned() && j_->get<unsigned long long>() > static_cast<unsigned long long>(hi)) {
    fail(shortValue(*j_) + " is outside " + std::to_string(lo) + " .. " + std::to_string(hi));
  }
  const long long v = j_->get<long long>();
  if (v < lo || v > hi) fail(shortValue(*j_) + " is outside " + std::to_string(lo) + " .. " + std::to_string(hi));
  return static_cast<int>(v);
}

bool In::boolean() const {
  if (!j_->is_boolean()) fail("must be true or false (got " + shortValue(*j_) + ")");
  return j_->get<bool>();
}

std::string In::str(const char* key, const std::string& fallback, size_t max_bytes) const {
  auto v = opt(key);
  return v ? v->str(max_bytes) : fallback;
}

std::optional<double> In::num(const char* key, double lo, double hi) const {
  auto v = opt(key);
  if (!v) return std::nullopt;
  return v->num(lo, hi);
}

std::optional<int> In::integer(const char* key, long long lo, long long hi) const {
  auto v = opt(key);
  if (!v) return std::nullopt;
  return v->integer(lo, hi);
}

bool In::boolean(const char* key, bool fallback) const {
  auto v = opt(key);
  return v ? v->boolean() : fallback;
}

}  // namespace peerlab::report
