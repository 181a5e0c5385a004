#include "reference/alltoallv/traffic.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "reference/core/files.h"

namespace peerlab::alltoallv {

namespace {
constexpr std::pair<TrafficKind, std::string_view> kKindNames[] = {
    {TrafficKind::kUniform, "uniform"},
    {TrafficKind::kRandom, "random"},
    {TrafficKind::kZipf, "zipf"},
    {TrafficKind::kZeroRows, "zero_rows"},
    {TrafficKind::kOneReceiver, "one_receiver"},
    {TrafficKind::kEmpty, "empty"},
};
}  // namespace

std::string_view trafficKindName(TrafficKind kind) {
  for (const auto& [k, name] : kKindNames)
    if (k == kind) return name;
  return "unknown";
}

StatusOr<TrafficKind> parseTrafficKind(std::string_view name) {
  for (const auto& [k, n] : kKindNames)
    if (n == name) return k;
  return PEERLAB_INVALID_ARGUMENT("unknown traffic kind '" + std::string(name) +
                                  "' (uniform, random, zipf, zero_rows, one_receiver, empty)");
}

TrafficParams makeTraffic(TrafficKind kind, int ranks, uint64_t elements, uint64_t seed, double zipf_alpha,
                          uint32_t jitter) {
  TrafficParams p;
  p.kind = kind;
  p.ranks = std::clamp(ranks, 1, kMaxRanks);
  p.seed = seed;
  p.elements = elements;
  p.jitter = jitter;
  if (kind == TrafficKind::kZipf) {
    double w[kMaxRanks];
    double sum = 0;
    for (int k = 0; k < p.ranks; ++k)
      sum += (w[k] = 1.0 / std::pow(static_cast<double>(k + 1), zipf_alpha));
    uint32_t given = 0;
    for (int k = 0; k < p.ranks; ++k)
      given += (p.zipf[k] = static_cast<uint32_t>(w[k] / sum * kZipfOne));
    // Rounding leftovers go to the hottest destination, so the shares add up to exactly one.
    p.zipf[0] += kZipfOne - given;
  }
  return p;
}

std::vector<uint64_t> trafficMatrix(const TrafficParams& p, uint64_t call) {
  const int n = p.ranks;
  std::vector<uint64_t> m(static_cast<size_t>(n) * n);
  for (int s = 0; s < n; ++s)
    for (int d = 0; d < n; ++d)
      m[static_cast<size_t>(s) * n + d] = trafficCount(p, call, s, d);
  return m;
}

namespace {
// Largest value one cell can take.
uint64_t cellBound(const TrafficParams& p) {
  const uint64_t n = static_cast<uint64_t>(std::max(p.ranks, 1));
  switch (p.kind) {
    case TrafficKind::kUniform:
      return p.elements / n + p.jitter;
    case TrafficKind::kRandom:
    case TrafficKind::kZeroRows:
      return 2 * (p.elements / n) + p.jitter;
    case TrafficKind::kZipf: {
      uint32_t top = 0;
      for (int k = 0; k < p.ranks; ++k)
        top = std::max(top, p.zipf[k]);
      return p.elements * top / kZipfOne + p.jitter;
    }
    case TrafficKind::kOneReceiver:
      return p.elements + p.jitter;
    case TrafficKind::kEmpty:
      return 0;
  }
  return 0;
}
}  // namespace

uint64_t trafficRecvBound(const TrafficParams& p) {
  return cellBound(p) * static_cast<uint64_t>(std::max(p.ranks, 1));
}

uint64_t trafficSendBound(const TrafficParams& p) {
  if (p.kind == TrafficKind::kOneReceiver) return cellBound(p);
  if (p.kind == TrafficKind::kZipf) {
    // Shares add up to one: the row total is at most elements plus the jitter of every cell.
    return p.elements + static_cast<uint64_t>(p.jitter) * static_cast<uint64_t>(std::max(p.ranks, 1));
  }
  return cellBound(p) * static_cast<uint64_t>(std::max(p.ranks, 1));
}

TrafficParams TrafficSpec::params(int ranks, uint64_t elements) const {
  TrafficParams p = makeTraffic(kind, ranks, elements ? elements : elements_per_rank, seed, zipf_alpha, jitter);
  for (int r : zero_rows)
    if (r >= 0 && r < kMaxRanks) p.zero_rows |= 1u << r;
  p.target = target < ranks ? target : -1;
  return p;
}

StatusOr<TrafficSpec> loadTrafficSpec(const std::string& path) {
  auto text = readTextFile(path, size_t{1} << 20);
  if (!text.isOk()) return PEERLAB_INVALID_ARGUMENT("traffic fixture " + text.status().message());
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return PEERLAB_INVALID_ARGUMENT("traffic fixture " + path + ": not a JSON object");
  auto bad = [&](const std::string& what) { return PEERLAB_INVALID_ARGUMENT("traffic fixture " + path + ": " + what); };
  TrafficSpec s;
  if (!j.contains("name") || !j["name"].is_string()) return bad("'name' must be a string");
  s.name = j["name"].get<std::string>();
  if (j.contains("description") && j["description"].is_string()) s.description = j["description"].get<std::string>();
  if (!j.contains("kind") || !j["kind"].is_string()) return bad("'kind' must be a string");
  auto kind = parseTrafficKind(j["kind"].get<std::string>());
  if (!kind.isOk()) return bad(kind.status().message());
  s.kind = *kind;
  if (!j.contains("seed") || !j["seed"].is_number_unsigned()) return bad("'seed' must be a non-negative integer");
  s.seed = j["seed"].get<uint64_t>();
  if (!j.contains("elements_per_rank") || !j["elements_per_rank"].is_number_unsigned())
    return bad("'elements_per_rank' must be a non-negative integer");
  s.elements_per_rank = j["elements_per_rank"].get<uint64_t>();
  if (j.contains("zipf_alpha")) {
    if (!j["zipf_alpha"].is_number() || j["zipf_alpha"].get<double>() <= 0) return bad("'zipf_alpha' must be > 0");
    s.zipf_alpha = j["zipf_alpha"].get<double>();
  }
  if (j.contains("jitter")) {
    if (!j["jitter"].is_number_unsigned() || j["jitter"].get<uint64_t>() > 1'000'000)
      return bad("'jitter' must be an integer in [0, 1000000]");
    s.jitter = j["jitter"].get<uint32_t>();
  }
  if (j.contains("zero_rows")) {
    if (!j["zero_rows"].is_array()) return bad("'zero_rows' must be an array of ranks");
    for (const auto& r : j["zero_rows"]) {
      if (!r.is_number_integer() || r.get<int>() < 0 || r.get<int>() >= kMaxRanks)
        return bad("'zero_rows' entries must be ranks in [0, " + std::to_string(kMaxRanks) + ")");
      s.zero_rows.push_back(r.get<int>());
    }
  }
  if (j.contains("target")) {
    if (!j["target"].is_number_integer() || j["target"].get<int>() < -1 || j["target"].get<int>() >= kMaxRanks)
      return bad("'target' must be -1 or a rank");
    s.target = j["target"].get<int>();
  }
  return s;
}

}  // namespace peerlab::alltoallv
