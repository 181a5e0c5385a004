#include "reference/probe/inject.h"
#include "reference/probe/text.h"

#include <cctype>
#include <charconv>
#include <cstdlib>

namespace peerlab::probe {

namespace {

constexpr std::string_view kFaultNames[] = {"corrupt", "hang", "crash", "exit", "error", "garbage", "payload"};

using text::trim;

// The pieces of `s` between `sep` characters, each trimmed.
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out = text::split(s, sep);
  for (auto& piece : out)
    piece = trim(piece);
  return out;
}

// "*" gives -1 (any); otherwise a non-negative ordinal.
std::optional<int> parseOrdinal(std::string_view s) {
  if (s == "*") return -1;
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || ptr != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

std::string_view faultName(FaultKind k) {
  const auto i = static_cast<size_t>(k);
  return i < std::size(kFaultNames) ? kFaultNames[i] : "error";
}

std::string_view roleName(Role r) {
  return r == Role::kOwner ? "owner" : "importer";
}

std::string_view phaseName(Phase p) {
  switch (p) {
    case Phase::kLocal:
      return "local";
    case Phase::kPoison:
      return "poison";
    case Phase::kRemoteWrite:
      return "remote_write";
    case Phase::kCheck:
      return "check";
  }
  return "unknown";
}

bool Fault::matches(const CellSpec& cell) const {
  if (method && *method != cell.method) return false;
  if (src >= 0 && src != cell.src) return false;
  if (dst >= 0 && dst != cell.dst) return false;
  if (bytes != 0 && bytes != cell.bytes) return false;
  return true;
}

bool faultAppliesHere(FaultKind kind, Role role, Phase phase, Method method) {
  if (isTransportMethod(method)) {
    // Transport workers: the importer initiates every transfer; the owner checks a write, the importer a read.
    if (phase != Phase::kLocal) return false;
    if (kind == FaultKind::kCorrupt) return role == (pushedBySource(method) ? Role::kOwner : Role::kImporter);
    return role == Role::kImporter;
  }
  const bool ipc = isIpcMethod(method);
  if (kind == FaultKind::kCorrupt) {
    return role == Role::kOwner && phase == (ipc ? Phase::kCheck : Phase::kLocal);
  }
  return ipc ? (role == Role::kImporter && phase == Phase::kRemoteWrite)
             : (role == Role::kOwner && phase == Phase::kLocal);
}

std::optional<FaultKind> InjectPlan::find(const CellSpec& cell, Role role, Phase phase) const {
  for (const Fault& f : faults_) {
    if (f.matches(cell) && faultAppliesHere(f.kind, role, phase, cell.method)) return f.kind;
  }
  return std::nullopt;
}

StatusOr<InjectPlan> parseInject(std::string_view text) {
  std::vector<Fault> faults;
  if (trim(text).empty()) return InjectPlan();
  for (std::string_view item : split(text, ',')) {
    const auto fields = split(item, ':');
    const std::string where = std::string(kInjectEnv) + " item \"" + std::string(item) + "\"";
    if (fields.size() != 4 && fields.size() != 5) {
      return PEERLAB_INVALID_ARGUMENT(where + ": expected KIND:METHOD:SRC:DST[:BYTES]");
    }
    Fault f;
    bool known = false;
    for (size_t i = 0; i < std::size(kFaultNames); ++i) {
      if (fields[0] == kFaultNames[i]) {
        f.kind = static_cast<FaultKind>(i);
        known = true;
      }
    }
    if (!known) {
      return PEERLAB_INVALID_ARGUMENT(where + ": unknown kind \"" + std::string(fields[0]) +
                                      "\" (corrupt, hang, crash, exit, error, garbage, payload)");
    }
    if (fields[1] != "*") {
      auto m = parseMethod(fields[1]);
      if (!m) return PEERLAB_INVALID_ARGUMENT(where + ": unknown method \"" + std::string(fields[1]) + "\"");
      f.method = *m;
    }
    auto s = parseOrdinal(fields[2]);
    auto d = parseOrdinal(fields[3]);
    if (!s || !d) return PEERLAB_INVALID_ARGUMENT(where + ": SRC and DST must be GPU ordinals or *");
    f.src = *s;
    f.dst = *d;
    if (fields.size() == 5) {
      auto b = parseBytes(fields[4]);
      if (!b.isOk()) return PEERLAB_INVALID_ARGUMENT(where + ": " + b.status().message());
      f.bytes = *b;
    }
    faults.push_back(f);
  }
  return InjectPlan(std::move(faults));
}

StatusOr<InjectPlan> injectFromEnvironment() {
  const char* text = std::getenv(kInjectEnv);
  if (text == nullptr) return InjectPlan();
  return parseInject(text);
}

}  // namespace peerlab::probe
