#pragma once
/// Headless Chromium for the HTML report: load a page and read back its DOM, or write a PNG screenshot.

#include <string>
#include <vector>

#include "reference/core/status.h"

namespace peerlab::qualify {

/// Path of a Chromium binary: $PEERLAB_CHROMIUM, else chromium, chromium-browser, google-chrome in PATH; "" if none.
std::string findChromium();

struct PageLoad {
  std::string dom;  ///< the DOM after the page's scripts ran (--dump-dom)
  std::string log;  ///< Chromium's stderr with console messages (--enable-logging=stderr --v=0)
};

/// Loads a local HTML file headless (--no-sandbox --disable-gpu, a throwaway profile) within `timeout_s`.
/// `unavailable` when no Chromium is installed.
/// `width` is the window width the page is laid out for (its height then follows from the layout).
StatusOr<PageLoad> loadPage(const std::string& html_path, int timeout_s = 90, int width = 1280);

/// Height of one screenshot part: a page longer than this is captured in several PNGs.
inline constexpr int kScreenshotPartPx = 16000;

/// The PNGs of a whole page, top to bottom.
struct Screenshot {
  std::vector<std::string> files;  ///< `png_path`, then <stem>-2.png, <stem>-3.png, ...
  int page_height = 0;             ///< px
  /// "report.png (the whole page, 13,840 px)" or "report.png, report-2.png (the page is 25,123 px high: 2 parts of
  /// at most 16,000 px, top to bottom)".
  std::string describe() const;
};

/// Writes PNGs of the whole report: loads it once to read its height (data-peerlab-height, set by the report's
/// script), then screenshots it at `width` in parts of at most kScreenshotPartPx (the page's script shows part k from
/// its offset, #peerlab-shot=N), so nothing below the first 16,000 px is lost. Parts a longer page left before are
/// removed.
StatusOr<Screenshot> screenshotReport(const std::string& html_path, const std::string& png_path, int width = 1280,
                                      int timeout_s = 120);

/// The value of attribute `name` on the first <html ...> tag of a DOM dump, "" when absent.
std::string htmlAttribute(const std::string& dom, const std::string& name);

}  // namespace peerlab::qualify
