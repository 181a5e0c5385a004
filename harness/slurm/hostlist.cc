#include "harness/slurm/hostlist.h"

#include <algorithm>
#include <set>

#include "reference/core/text.h"

namespace peerlab::slurm {
namespace {

bool nameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

// The top-level pieces of a list: commas outside brackets separate them.
StatusOr<std::vector<std::string>> splitTop(const std::string& list) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : list) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) return PEERLAB_INVALID_ARGUMENT("a ']' without its '['");
    if (depth > 1) return PEERLAB_INVALID_ARGUMENT("brackets inside brackets");
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (depth != 0) return PEERLAB_INVALID_ARGUMENT("a '[' without its ']'");
  parts.push_back(cur);
  return parts;
}

// The numbers of one bracket group ("01-03,7"), as text with the padding of each range's lower bound.
StatusOr<std::vector<std::string>> expandGroup(const std::string& group) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= group.size()) {
    size_t end = group.find(',', start);
    if (end == std::string::npos) end = group.size();
    const std::string item = group.substr(start, end - start);
    const size_t dash = item.find('-');
    const std::string lo = item.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    auto digits = [](const std::string& s) {
      return !s.empty() && s.size() <= 9 &&
             std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    };
    if (!digits(lo) || !digits(hi)) return PEERLAB_INVALID_ARGUMENT("\"[" + group + "]\": not numbers and ranges");
    const long a = std::stol(lo), b = std::stol(hi);
    if (b < a) return PEERLAB_INVALID_ARGUMENT("\"" + item + "\": the range runs backwards");
    if (static_cast<size_t>(b - a) >= kMaxHostlistNames) {
      return PEERLAB_INVALID_ARGUMENT("\"" + item + "\": more than " + std::to_string(kMaxHostlistNames) + " names");
    }
    for (long v = a; v <= b; ++v) {
      std::string s = std::to_string(v);
      if (s.size() < lo.size()) s.insert(0, lo.size() - s.size(), '0');
      out.push_back(std::move(s));
    }
    if (end == group.size()) break;
    start = end + 1;
  }
  return out;
}

}  // namespace

bool isNodeName(const std::string& name) {
  return !name.empty() && name.size() <= 255 && std::all_of(name.begin(), name.end(), nameChar);
}

StatusOr<std::vector<std::string>> expandHostlist(const std::string& list) {
  auto bad = [&](const Status& why) {
    return PEERLAB_INVALID_ARGUMENT("host list \"" + printable(list, 120) + "\": " + why.message());
  };
  auto parts = splitTop(list);
  if (!parts.isOk()) return bad(parts.status());
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (const std::string& part : *parts) {
    if (part.empty()) return bad(PEERLAB_INVALID_ARGUMENT("an empty name"));
    // Every combination of the bracket groups, left to right.
    std::vector<std::string> partial = {""};
    size_t at = 0;
    while (at < part.size()) {
      const size_t open = part.find('[', at);
      const std::string literal = part.substr(at, open == std::string::npos ? std::string::npos : open - at);
      for (std::string& p : partial)
        p += literal;
      if (open == std::string::npos) break;
      const size_t close = part.find(']', open);
      auto nums = expandGroup(part.substr(open + 1, close - open - 1));
      if (!nums.isOk()) return bad(nums.status());
      std::vector<std::string> next;
      if (partial.size() * nums->size() > kMaxHostlistNames) {
        return bad(PEERLAB_INVALID_ARGUMENT("more than " + std::to_string(kMaxHostlistNames) + " names"));
      }
      for (const std::string& p : partial)
        for (const std::string& n : *nums)
          next.push_back(p + n);
      partial = std::move(next);
      at = close + 1;
    }
    for (std::string& name : partial) {
      if (!isNodeName(name)) {
        return bad(PEERLAB_INVALID_ARGUMENT("\"" + printable(name, 60) +
                                            "\" is not a node name (letters, digits, '-', '_', '.')"));
      }
      if (seen.insert(name).second) names.push_back(std::move(name));
      if (names.size() > kMaxHostlistNames) {
        return bad(PEERLAB_INVALID_ARGUMENT("more than " + std::to_string(kMaxHostlistNames) + " names"));
      }
    }
  }
  return names;
}

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names)
    out += (out.empty() ? "" : ",") + n;
  return out;
}

}  // namespace peerlab::slurm
