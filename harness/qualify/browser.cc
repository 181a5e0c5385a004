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

Status screenshotReport(const std::string& html_path, const std::string& png_path, int width, int timeout_s) {
  PEERLAB_ASSIGN_OR_RETURN(PageLoad load, loadPage(html_path, timeout_s, width));
  const std::string ready = htmlAttribute(load.dom, "data-peerlab-ready");
  if (ready != "ok") {
    return PEERLAB_INTERNAL(html_path + ": the report did not render (" + (ready.empty() ? "no status" : ready) + ")");
  }
  int height = 2000;
  const std::string h = htmlAttribute(load.dom, "data-peerlab-height");
  if (!h.empty()) height = std::clamp(std::atoi(h.c_str()) + 16, 200, 16000);
  const std::string chromium = findChromium();
  PEERLAB_ASSIGN_OR_RETURN(TempDir profile, TempDir::make("peerlab-chromium"));
  std::error_code ec;
  const std::string png = std::filesystem::absolute(png_path, ec).string();
  std::filesystem::remove(png, ec);
  process::ProcessOptions po;
  po.argv = baseArgs(chromium, profile.path());
  po.argv.push_back("--screenshot=" + png);
  po.argv.push_back("--window-size=" + std::to_string(width) + "," + std::to_string(height));
  po.argv.push_back(fileUrl(html_path));
  po.stdout_path = profile.path() + "/chromium.log";
  po.stderr_path = po.stdout_path;
  po.timeout = std::chrono::seconds(timeout_s);
  PEERLAB_ASSIGN_OR_RETURN(process::ProcessResult r, process::runProcess(po));
  if (!r.ok() || !std::filesystem::exists(png) || std::filesystem::file_size(png, ec) == 0) {
    return PEERLAB_INTERNAL(chromium + " --screenshot " + png_path + ": " + process::describeExit(r, po.timeout) +
                            ": " + tailOfFile(po.stdout_path, 3));
  }
  return Status::ok();
}

}  // namespace peerlab::qualify
