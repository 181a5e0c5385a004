#pragma once
/// Typed, bounded reads of untrusted JSON (run files and what they carry): every read names its JSON path, and a
/// value of the wrong type, out of its range or too long is refused with the path, the reason and the value.
///
///   return readJson<Thing>([&] { In doc(j, "$"); Thing t; t.name = doc.at("name").str(); ...; return t; });

#include <nlohmann/json.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "reference/core/status.h"

namespace peerlab::report {

/// Longest string a run file may hold in a field peerlab reads; names and kinds are shorter.
inline constexpr size_t kMaxTextBytes = 16384;
inline constexpr size_t kMaxNameBytes = 256;

/// Refused input: the JSON path and why. Thrown inside readJson() only, never across an API.
struct BadJson {
  std::string path;
  std::string why;
};

/// Nesting depth of JSON text, counted without parsing (strings skipped) and stopping once it passes `stop_at`, so
/// that text nested deeper than a reader allows is refused before a recursive copy or printer could overflow the stack.
int jsonTextDepth(std::string_view text, int stop_at);

/// Bounds of untrusted JSON text, held against the text before it is parsed, so that what parsing would build
/// (nlohmann::json: 16 bytes a value, a heap node per object member, string and container) stays bounded.
struct JsonLimits {
  size_t max_bytes = 0;
  int max_depth = 64;
  size_t max_elements = 2'000'000;        ///< values: scalars, strings, arrays and objects (keys not counted)
  size_t max_memory = size_t{128} << 20;  ///< the parsed document's size as estimated from the text
};

/// What parsing `text` would build, counted in one pass over the text without parsing it (strings skipped).
struct JsonTextShape {
  int depth = 0;
  size_t elements = 0;
  size_t memory = 0;  ///< estimated bytes of the parsed document
};
/// Stops as soon as one of `limits` is passed (the counts then exceed it).
JsonTextShape jsonTextShape(std::string_view text, const JsonLimits& limits);

/// Refuses text past one of `limits`, naming it: "2400000 values, more than the 2000000 allowed", "nested deeper
/// than the 64 levels allowed", "would take about 300 MiB once parsed, more than the 128 MiB allowed".
Status checkJsonText(std::string_view text, const JsonLimits& limits);

/// Parses untrusted JSON text (a file, a stored column): refused when longer than `max_bytes`, nested deeper than
/// `max_depth`, past the default element and memory bounds of JsonLimits, or malformed; `invalid_argument` says which
/// ("nested deeper than the 64 levels allowed").
StatusOr<nlohmann::json> parseJsonText(std::string_view text, size_t max_bytes, int max_depth);

/// "12", "\"abc\"", "[...]" (at most ~40 characters) for messages.
std::string shortValue(const nlohmann::json& v);

/// A value and where it sits. Its path is put together only when it is needed (a refusal, a message), so reading a
/// large document costs no string per key: a child refers to its parent, which must outlive it (read children from
/// named values, as the readers here do).
class In {
 public:
  In(const nlohmann::json& j, std::string path) : j_(&j), root_(std::move(path)) {}

  const nlohmann::json& json() const { return *j_; }
  std::string path() const;

  /// The member `key` (required: absent is an error); null counts as present.
  In at(const char* key) const;
  /// The member `key` when present and not null.
  std::optional<In> opt(const char* key) const;
  bool has(const char* key) const { return opt(key).has_value(); }

  void requireObject() const;
  void requireArray() const;
  size_t size() const;  ///< array length (requires an array)
  In item(size_t i) const;
  /// A member met while iterating this object: `key` must be the object's own key (it outlives the child).
  In member(const std::string& key, const nlohmann::json& value) const { return In(value, this, key.c_str(), 0); }

  std::string str(size_t max_bytes = kMaxTextBytes) const;
  double num(double lo, double hi) const;  ///< finite, within [lo, hi]
  int integer(long long lo, long long hi) const;
  bool boolean() const;

  /// Optional members with a default.
  std::string str(const char* key, const std::string& fallback, size_t max_bytes = kMaxTextBytes) const;
  std::optional<double> num(const char* key, double lo, double hi) const;
  std::optional<int> integer(const char* key, long long lo, long long hi) const;
  bool boolean(const char* key, bool fallback) const;

  [[noreturn]] void fail(const std::string& why) const;

 private:
  In(const nlohmann::json& j, const In* parent, const char* key, size_t index)
      : j_(&j), parent_(parent), key_(key), index_(index) {}

  const nlohmann::json* j_;
  const In* parent_ = nullptr;
  const char* key_ = nullptr;  ///< member name, or nullptr for an array element (index_)
  size_t index_ = 0;
  std::string root_;  ///< the root's path ("$", "$.plan")
};

/// JSON text parsed as peerlab reads it: like nlohmann::json::parse without exceptions, and refusing a key repeated in
/// one object (where the parser would keep the last silently): `duplicate` then names its path and the key,
/// "$.results: the key \"results\" appears twice in one object".
struct ParsedJson {
  nlohmann::json doc;     ///< discarded when the text is not JSON
  std::string duplicate;  ///< "" when no key repeats
};
ParsedJson parseJson(const std::string& text);

/// Runs `read` and turns a refusal into `invalid_argument` "<path>: <why>".
template <typename F>
auto readJson(F&& read) -> StatusOr<decltype(read())> {
  try {
    return read();
  } catch (const BadJson& e) {
    return PEERLAB_INVALID_ARGUMENT(e.path.empty() ? e.why : e.path + ": " + e.why);
  }
}

}  // namespace peerlab::report
