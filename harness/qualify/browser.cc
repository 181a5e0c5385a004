#include "harness/qualify/browser.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "reference/core/files.h"
#include "reference/core/process.h"

namespace peerlab::qualify {

namespace {

std::vector<std::string> baseArgs(const std::string& chromium, const std::string& profile) {
  // --no-sandbox is required as root (CI containers, the GPU host).
  return {chromium,
          "--headless",
          "--no-sandbox",
          "--disable-gpu",
          "--disable-dev-shm-usage",
          "--no-first-run",
          "--no-default-browser-check",
          "--disable-extensions",
          "--hide-scrollbars",
          "--force-device-scale-factor=1",
          "--user-data-dir=" + profile};
}

std::string fileUrl(const std::string& path) {
  std::error_code ec;
  return "file://" + std::filesystem::absolute(path, ec).string();
}

}  // namespace

std::string findChromium() {
  if (const char* env = std::getenv("PEERLAB_CHROMIUM"); env && *env) return findInPath(env);
  for (const char* name : {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
    std::string p = findInPath(name);
    if (!p.empty()) return p;
  }
  return "";
}

std::string htmlAttribute(const std::string& dom, const std::string& name) {
  const auto open = dom.find("<html");
  if (open == std::string::npos) return "";
  const auto close = dom.find('>', open);
  const std::string tag = dom.substr(open, close == std::string::npos ? std::string::npos : close - open);
  const std::string key = " " + name + "=\"";
  const auto at = tag.find(key);
  if (at == std::string::npos) return "";
  const auto start = at + key.size();
  const auto end = tag.find('"', start);
  return tag.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

StatusOr<PageLoad> loadPage(const std::string& html_path, int timeout_s, int width) {
  const std::string chromium = findChromium();
  if (chromium.empty())
    return PEERLAB_UNAVAILABLE("no Chromium found (chromium, chromium-browser; or set PEERLAB_CHROMIUM)");
  if (!std::filesystem::exists(html_path)) return PEERLAB_INVALID_ARGUMENT(html_path + ": no such file");
  // A throwaway profile directory so that parallel runs never share Chromium's lock files.
  PEERLAB_ASSIGN_OR_RETURN(TempDir profile, TempDir::make("peerlab-chromium"));
  process::ProcessOptions po;
  po.argv = baseArgs(chromium, profile.path());
  po.argv.push_back("--enable-logging=stderr");
  po.argv.push_back("--v=0");
  po.argv.push_back("--window-size=" + std::to_string(width) + ",1000");
  po.argv.push_back("--dump-dom");
  po.argv.push_back(fileUrl(html_path));
  po.stdout_path = profile.path() + "/dom.html";
  po.stderr_path = profile.path() + "/chromium.log";
  po.timeout = std::chrono::seconds(timeout_s);
  PEERLAB_ASSIGN_OR_RETURN(process::ProcessResult r, process::runProcess(po));
  PageLoad load;
  auto dom = readTextFile(po.stdout_path);
  auto log = readTextFile(po.stderr_path);
  if (dom.isOk()) load.dom = *dom;
  if (log.isOk()) load.log = *log;
  if (!r.ok() || load.dom.empty()) {
    return PEERLAB_INTERNAL(chromium + " --dump-dom " + html_path + ": " + process::describeExit(r, po.timeout) + ": " +
                            tailOfFile(po.stderr_path, 3));
  }
  return load;
}

std::string Screenshot::describe() const {
  auto thousands = [](int v) {
    std::string t = std::to_string(v);
    for (int i = static_cast<int>(t.size()) - 3; i > 0; i -= 3)
      t.insert(static_cast<size_t>(i), ",");
    return t;
  };
  std::string names;
  for (const std::string& f : files)
    names += (names.empty() ? "" : ", ") + f;
  if (files.size() == 1) return names + " (the whole page, " + thousands(page_height) + " px)";
  return names + " (the page is " + thousands(page_height) + " px high: " + std::to_string(files.size()) +
         " parts of at most " + thousands(kScreenshotPartPx) + " px, top to bottom)";
}

StatusOr<Screenshot> screenshotReport(const std::string& html_path, const std::string& png_path, int width,
                                      int timeout_s) {
  PEERLAB_ASSIGN_OR_RETURN(PageLoad load, loadPage(html_path, timeout_s, width));
  const std::string ready = htmlAttribute(load.dom, "data-peerlab-ready");
  if (ready != "ok") {
    return PEERLAB_INTERNAL(html_path + ": the report did not render (" + (ready.empty() ? "no status" : ready) + ")");
  }
  int height = 2000;
  const std::string h = htmlAttribute(load.dom, "data-peerlab-height");
  if (!h.empty()) height = std::clamp(std::atoi(h.c_str()) + 16, 200, 1000000);
  const std::string chromium = findChromium();
  std::error_code ec;
  const std::filesystem::path first = std::filesystem::absolute(png_path, ec);
  const std::string stem = (first.parent_path() / first.stem()).string();
  auto partName = [&](int k) { return k == 1 ? first.string() : stem + "-" + std::to_string(k) + ".png"; };
  auto shownName = [&](int k) {
    if (k == 1) return png_path;
    const std::filesystem::path p(png_path);
    return ((p.parent_path() / p.stem()).string() + "-" + std::to_string(k) + ".png");
  };
  Screenshot out;
  out.page_height = height;
  const int parts = (height + kScreenshotPartPx - 1) / kScreenshotPartPx;
  // Parts a longer page left here before would read as part of this one: <stem>-N.png beyond this page's parts.
  const std::string prefix = first.stem().string() + "-";
  for (const auto& e : std::filesystem::directory_iterator(first.parent_path(), ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() <= prefix.size() + 4 || name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - 4, 4, ".png") != 0) {
      continue;
    }
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 4);
    if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::atoi(digits.c_str()) > parts) std::filesystem::remove(e.path(), ec);
  }
  for (int k = 1; k <= parts; ++k) {
    const int offset = (k - 1) * kScreenshotPartPx;
    const int part = std::min(kScreenshotPartPx, height - offset);
    PEERLAB_ASSIGN_OR_RETURN(TempDir profile, TempDir::make("peerlab-chromium"));
    const std::string png = partName(k);
    std::filesystem::remove(png, ec);
    process::ProcessOptions po;
    po.argv = baseArgs(chromium, profile.path());
    po.argv.push_back("--screenshot=" + png);
    po.argv.push_back("--window-size=" + std::to_string(width) + "," + std::to_string(part));
    po.argv.push_back(fileUrl(html_path) + (offset > 0 ? "#peerlab-shot=" + std::to_string(offset) : ""));
    po.stdout_path = profile.path() + "/chromium.log";
    po.stderr_path = po.stdout_path;
    po.timeout = std::chrono::seconds(timeout_s);
    PEERLAB_ASSIGN_OR_RETURN(process::ProcessResult r, process::runProcess(po));
    if (!r.ok() || !std::filesystem::exists(png) || std::filesystem::file_size(png, ec) == 0) {
      return PEERLAB_INTERNAL(chromium + " --screenshot " + shownName(k) + ": " + process::describeExit(r, po.timeout) +
                              ": " + tailOfFile(po.stdout_path, 3));
    }
    out.files.push_back(shownName(k));
  }
  return out;
}

}  // namespace peerlab::qualify
