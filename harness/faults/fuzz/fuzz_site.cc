// Fuzz target: the history site model's reader (report::siteModelFromJson) and the site renderer (renderHistorySite) on
// any model JSON. It renders kind by kind: any input gives a status, never a crash; a model with a "kinds" array
// always gets its index.html, and every kind is either written or named in the failures.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/faults/fuzz/fuzz_util.h"
#include "harness/report/render/chart_page.h"
#include "harness/report/render/site.h"
#include "reference/core/files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peerlab;
  static const std::string dir = [] {
    auto d = makePrivateDir("peerlab-fuzz-site");
    return d.isOk() ? *d : std::string("/tmp/peerlab-fuzz-site");
  }();
  const nlohmann::json model = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (model.is_discarded()) return 0;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  auto read = report::siteModelFromJson(model);
  const bool root = model.is_object() && model.contains("kinds") && model["kinds"].is_array();
  if (!root) {
    if (read.isOk()) fuzz::invariantFailed("a model without a kinds array was read");
    return 0;
  }
  if (model["kinds"].size() > report::kMaxSiteKinds) {
    if (read.isOk()) fuzz::invariantFailed("a site of too many kinds was read");
    return 0;
  }
  // The one other refusal of the root: "unrun_nodes" that is not an array.
  if (!read.isOk()) return 0;
  if (read->kinds.size() != model["kinds"].size()) fuzz::invariantFailed("a kind was lost in reading");
  // What was read writes back as JSON and reads again alike.
  auto again = report::siteModelFromJson(report::toJson(*read));
  if (!again.isOk() || again->kinds.size() != read->kinds.size()) fuzz::invariantFailed("the model does not reread");
  std::vector<std::string> failures;
  Status st = report::renderHistorySite(*read, dir, &failures);
  if (!std::filesystem::is_regular_file(dir + "/index.html")) fuzz::invariantFailed("no index.html for a model");
  if (st.isOk() != failures.empty()) fuzz::invariantFailed("the status and the failures disagree");
  // Each kind written has its trend page and its fleet page.
  size_t pages = 0, fleets = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    pages += name.rfind("kind-", 0) == 0;
    fleets += name.rfind("fleet-", 0) == 0;
  }
  if (pages + failures.size() != model["kinds"].size()) fuzz::invariantFailed("a kind is neither written nor named");
  if (fleets != pages) fuzz::invariantFailed("a kind's page was written without its fleet page");
  return 0;
}
