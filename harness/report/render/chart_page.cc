#include "harness/report/render/chart_page.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "harness/layout/layout.h"
#include "harness/qualify/suites.h"
#include "reference/core/files.h"

#ifndef PEERLAB_CHARTJS_PATH
#define PEERLAB_CHARTJS_PATH ""
#endif

namespace peerlab::report {

using nlohmann::json;

namespace {

constexpr const char* kCss = R"css(
:root { --ok:#1a7f37; --warn:#b26b00; --bad:#c62828; --muted:#666; }
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; margin-bottom: 4px; } h2 { margin-top: 32px; border-bottom: 1px solid #ddd; }
h3 { margin-bottom: 4px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: right; }
th { background: #f4f4f4; } td.l, th.l { text-align: left; }
.muted { color: var(--muted); } .ok { color: var(--ok); } .warn { color: var(--warn); } .bad { color: var(--bad); }
td, th { overflow-wrap: break-word; }
td.long { overflow-wrap: anywhere; min-width: 14em; }
.pill { white-space: nowrap; }
td.cell-fail { background: #f8d0d0; color: #8b0000; font-weight: 600; }
td.cell-warn { background: #fde8b8; color: #7a4a00; }
td.cell-ok { background: #e3f4e6; }
td.cell-info { background: #dbe8fb; color: #1b3f73; }
td.cell-skip { background: repeating-linear-gradient(135deg, #efefef 0 5px, #dcdcdc 5px 10px); color: #555; font-style: italic; }
td.cell-na { background: #fafafa; color: #999; font-style: italic; }
td.cell-self { background: #e6e6e6; color: #888; }
.tablebox { overflow-x: auto; max-width: 100%; }
.charts { display: flex; flex-wrap: wrap; gap: 16px; }
.plchart { flex: 1 1 520px; max-width: 700px; height: 380px; position: relative; border: 1px solid #eee; padding: 4px; box-sizing: border-box; }
.plchart.nochart canvas { display: none; }
.plchart.nochart::after { content: "chart unavailable"; color: var(--muted); }
.tiles { display: flex; flex-wrap: wrap; gap: 4px 28px; align-items: flex-start; }
.tile { max-width: 440px; }
#nochartjs { display: none; padding: 8px; border: 1px solid #e0b000; background: #fff8e0; }
.verdict-pass { color: var(--ok); font-weight: 700; } .verdict-fail { color: var(--bad); font-weight: 700; }
.verdict-warn { color: #7a4a00; font-weight: 700; } .verdict-none { color: var(--muted); font-weight: 700; }
p.injected { background: #fff3cd; border: 1px solid #d39e00; padding: 6px 10px; }
)css";

// Draws every .plchart block with Chart.js and reports on <html> what it did.
constexpr const char* kBootScript = R"js(
(function () {
  var root = document.documentElement;
  var blocks = document.querySelectorAll('.plchart');
  root.setAttribute('data-peerlab-chart-blocks', String(blocks.length));
  function finish(state, drawn) {
    root.setAttribute('data-peerlab-charts', String(drawn));
    root.setAttribute('data-peerlab-ready', state);
    root.setAttribute('data-peerlab-height', String(Math.ceil(Math.max(document.body.scrollHeight,
        document.documentElement.scrollHeight))));
    root.setAttribute('data-peerlab-width', String(Math.ceil(document.documentElement.scrollWidth)));
    // A screenshot of a long page is taken in parts: #peerlab-shot=N shows the page from N px down.
    var shot = /peerlab-shot=(\d+)/.exec(location.hash);
    if (shot) document.body.style.transform = 'translateY(-' + shot[1] + 'px)';
  }
  function bytes(v) {
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
    while (Math.abs(v) >= 1024 && i < 4) { v /= 1024; i++; }
    return (Math.round(v * 10) / 10) + ' ' + u[i];
  }
  if (typeof Chart === 'undefined') {
    blocks.forEach(function (b) { b.classList.add('nochart'); });
    var n = document.getElementById('nochartjs');
    if (n && blocks.length) {
      document.body.insertBefore(n, document.body.firstChild);
      n.style.display = 'block';
    }
    finish(blocks.length ? 'no-chartjs' : 'ok', 0);
    return;
  }
  Chart.defaults.animation = false;
  Chart.defaults.responsive = true;
  Chart.defaults.maintainAspectRatio = false;
  var drawn = 0;
  try {
    blocks.forEach(function (b) {
      var cfg = JSON.parse(b.querySelector('script').textContent);
      var o = cfg.options;
      o.plugins.tooltip.callbacks = {
        afterLabel: function (c) { return c.raw && c.raw.note ? c.raw.note : ''; }
      };
      if (b.getAttribute('data-x-bytes') === '1') {
        // x is log2(bytes) on a linear axis: one tick per power of two, labelled as a size.
        o.scales.x.ticks = { stepSize: 1, callback: function (v) {
          return Number.isInteger(v) ? bytes(Math.pow(2, v)) : ''; } };
        o.plugins.tooltip.callbacks.title = function (items) {
          return items.length ? bytes(Math.pow(2, items[0].parsed.x)) : '';
        };
      }
      new Chart(b.querySelector('canvas'), cfg);
      drawn++;
    });
    finish('ok', drawn);
  } catch (e) {
    finish('error: ' + e.message, drawn);
  }
})();
)js";

std::string hexToRgba(const std::string& hex, double alpha) {
  unsigned r = 0, g = 0, b = 0;
  if (hex.size() == 7) std::sscanf(hex.c_str() + 1, "%02x%02x%02x", &r, &g, &b);
  return "rgba(" + std::to_string(r) + "," + std::to_string(g) + "," + std::to_string(b) + "," +
         formatted("%.2f", alpha) + ")";
}

}  // namespace

const std::vector<std::string>& chartPalette() {
  static const std::vector<std::string> kPalette = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b",
                                                    "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
  return kPalette;
}

ImplColours::ImplColours(const std::vector<std::pair<std::string, std::string>>& suite_impls) {
  // Which implementations share a suite (and so a chart); colours are handed out in name order, each taking the
  // first palette colour none of its suite mates holds (the least used one when all are taken).
  std::map<std::string, std::set<std::string>> suitesOf;
  std::map<std::string, std::set<std::string>> implsOf;
  for (const auto& [suite, impl] : suite_impls) {
    suitesOf[impl].insert(suite);
    implsOf[suite].insert(impl);
  }
  const auto& palette = chartPalette();
  std::vector<int> uses(palette.size(), 0);
  for (const auto& [impl, suites] : suitesOf) {
    std::vector<bool> taken(palette.size(), false);
    for (const std::string& suite : suites) {
      for (const std::string& mate : implsOf[suite]) {
        auto it = colour_.find(mate);
        if (it == colour_.end()) continue;
        const size_t at = std::find(palette.begin(), palette.end(), it->second) - palette.begin();
        if (at < taken.size()) taken[at] = true;
      }
    }
    size_t pick = palette.size();
    for (size_t i = 0; i < palette.size() && pick == palette.size(); ++i)
      if (!taken[i]) pick = i;
    if (pick == palette.size()) pick = std::min_element(uses.begin(), uses.end()) - uses.begin();
    ++uses[pick];
    colour_[impl] = palette[pick];
  }
}

std::string ImplColours::of(const std::string& impl) const {
  auto it = colour_.find(impl);
  return it == colour_.end() ? std::string() : it->second;
}

std::string bytesConvention(const std::string& suite) {
  return qualify::resultFacts(suite).bytes_convention;
}

std::string chartJsPath() {
  if (const char* env = std::getenv("PEERLAB_CHARTJS")) return env;
  // share/peerlab/ of the tree peerlab runs from (build or installed), then where the build found it.
  const std::string shipped = layout::findFile("chart.min.js", layout::dataDirs());
  return shipped.empty() ? PEERLAB_CHARTJS_PATH : shipped;
}

const ChartJsFile& chartJs() {
  // Read once per path: every page of a site shares one read (the path may change between calls in tests).
  static std::string cachedPath;
  static ChartJsFile cached;
  static bool loaded = false;
  const std::string path = chartJsPath();
  if (loaded && path == cachedPath) return cached;
  loaded = true;
  cachedPath = path;
  cached = ChartJsFile{};
  cached.path = path;
  const bool fromEnv = std::getenv("PEERLAB_CHARTJS") != nullptr;
  const std::string name = fromEnv ? "$PEERLAB_CHARTJS " + path : path;
  if (path.empty()) {
    cached.problem = fromEnv ? "$PEERLAB_CHARTJS is empty" : "Chart.js (Debian package libjs-chart.js) was not found";
    return cached;
  }
  auto read = readTextFile(path, kMaxChartJsBytes);
  if (!read.isOk()) {
    // The reader names the path; the pages name the variable too.
    cached.problem = (fromEnv ? std::string("$PEERLAB_CHARTJS ") : std::string()) + read.status().message();
    return cached;
  }
  if (read->empty()) {
    cached.problem = name + ": empty";
  } else {
    cached.source = std::move(*read);
  }
  return cached;
}

std::string chartJsSource() {
  return chartJs().source;
}

std::string pageBegin(const std::string& title, const std::string& extra_css) {
  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\" data-peerlab-ready=\"loading\">\n<head>\n<meta charset=\"utf-8\">\n";
  s += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  s += "<title>" + htmlEscape(title) + "</title>\n<style>" + kCss + extra_css + "</style>\n</head>\n<body>\n";
  return s;
}

std::string pageEnd(ChartJsUse use) {
  std::string s;
  if (use != ChartJsUse::kNone) {
    // Said only on pages that draw charts, and only shown (at the top) when the library did not load.
    const ChartJsFile& lib = chartJs();
    const std::string why = !lib.problem.empty() ? lib.problem
                            : use == ChartJsUse::kShared
                                ? std::string(kSharedChartJsName) + " beside this page did not load"
                                : std::string("the inlined Chart.js did not load");
    s += "<p id=\"nochartjs\">Charts are unavailable: " + htmlEscape(why) + ". Tables are complete.</p>\n";
    if (use == ChartJsUse::kInline && !lib.source.empty()) {
      // A "</script" inside the library would end the element early; Chart.js has none, but be safe.
      std::string safe = lib.source;
      for (size_t p = 0; (p = safe.find("</script", p)) != std::string::npos; p += 2)
        safe.replace(p, 2, "<\\/");
      s += "<script>\n" + safe + "\n</script>\n";
    } else if (use == ChartJsUse::kShared && !lib.source.empty()) {
      s += std::string("<script src=\"") + kSharedChartJsName + "\"></script>\n";
    }
  }
  s += "<script>";
  s += kBootScript;
  s += "</script>\n</body>\n</html>\n";
  return s;
}

json chartConfig(const LineChart& chart) {
  json datasets = json::array();
  const auto& palette = chartPalette();
  for (size_t i = 0; i < chart.series.size(); ++i) {
    const ChartSeries& s = chart.series[i];
    const std::string& colour = s.colour.empty() ? palette[i % palette.size()] : s.colour;
    json d = {{"label", s.label}, {"data", s.points},   {"borderColor", colour}, {"backgroundColor", colour},
              {"borderWidth", 2}, {"pointRadius", 2.5}, {"fill", false},         {"spanGaps", true},
              {"tension", 0}};
    if (s.dashed) d["borderDash"] = json::array({6, 4});
    datasets.push_back(std::move(d));
  }
  for (const ChartMarkers& m : chart.markers) {
    datasets.push_back({{"label", m.label},
                        {"data", m.points},
                        {"showLine", false},
                        {"pointStyle", m.shape},
                        {"pointRadius", 9},
                        {"pointHoverRadius", 11},
                        {"borderColor", m.colour},
                        {"backgroundColor", hexToRgba(m.colour, 0.35)},
                        {"borderWidth", 2}});
  }
  json x = {{"title", {{"display", true}, {"text", chart.x_label}}}};
  if (!chart.x_labels.empty()) {
    x["type"] = "category";
    x["labels"] = chart.x_labels;
  } else {
    x["type"] = chart.x_log && !chart.x_bytes ? "logarithmic" : "linear";
  }
  // A linear axis starts at 0 unless the chart asks to zoom in, and then its title says so.
  const std::string y_title = chart.y_label + (!chart.y_log && chart.y_autoscale ? " (axis zoomed to the data)" : "");
  json y = {{"type", chart.y_log ? "logarithmic" : "linear"}, {"title", {{"display", true}, {"text", y_title}}}};
  if (!chart.y_log) y["beginAtZero"] = !chart.y_autoscale;
  json cfg = {{"type", "line"},
              {"data", {{"datasets", datasets}}},
              {"options",
               {{"parsing", true},
                {"interaction", {{"mode", "nearest"}, {"intersect", false}}},
                {"scales", {{"x", x}, {"y", y}}},
                {"plugins",
                 {{"title", {{"display", !chart.title.empty()}, {"text", chart.title}}},
                  {"legend", {{"position", "bottom"}}},
                  {"tooltip", json::object()}}}}}};
  return cfg;
}

std::string chartBlock(const LineChart& chart) {
  const std::string cfg = scriptJson(chartConfig(chart));
  std::string s = "<div class=\"plchart\" data-series=\"" + std::to_string(chart.series.size()) + "\"";
  if (chart.x_bytes) s += " data-x-bytes=\"1\"";
  s += " title=\"" + htmlEscape(chart.title) + "\"><canvas role=\"img\" aria-label=\"" + htmlEscape(chart.title) +
       "\"></canvas><script type=\"application/json\">" + cfg + "</script></div>\n";
  return s;
}

std::vector<std::pair<size_t, size_t>> splitEvenly(size_t n, size_t max_per_group) {
  std::vector<std::pair<size_t, size_t>> out;
  if (n == 0 || max_per_group == 0) return out;
  const size_t groups = (n + max_per_group - 1) / max_per_group;
  size_t begin = 0;
  for (size_t g = 0; g < groups; ++g) {
    const size_t size = n / groups + (g < n % groups ? 1 : 0);
    out.emplace_back(begin, begin + size);
    begin += size;
  }
  return out;
}

std::string fractionColour(double fraction, bool checked) {
  if (!std::isfinite(fraction)) return "#eeeeee";
  // Hue rises with the fraction and never falls; one lightness, so no cell looks greener than a better one. Checked:
  // 0 (red) below 1, 120 (green) from 1. Unchecked: 40 (amber) at 0.7 and below, 120 (green) at 0.95 and above.
  double hue = 0;
  if (checked) {
    hue = fraction >= 1 ? 120 : 0;
  } else if (fraction >= 0.95) {
    hue = 120;
  } else if (fraction > 0.7) {
    hue = 40 + (fraction - 0.7) / 0.25 * 80;
  } else {
    hue = 40;
  }
  return formatted("hsl(%.0f, 65%%, 80%%)", hue);
}

std::string heatmapTable(const std::string& title, const std::string& unit, int gpus,
                         const std::vector<HeatCell>& cells) {
  const bool time = unit == "us";
  bool anyExpected = false;
  for (const HeatCell& c : cells)
    anyExpected |= c.expected && *c.expected > 0;
  const bool pctOfExpected = !time && anyExpected;
  std::string out = "<h3>" + htmlEscape(title) + "</h3>\n<p class=\"muted\">";
  if (time) {
    out +=
        "Microseconds per pair (row = source GPU, column = destination); amber to green against the row's fastest "
        "pair (no check is made on these cells).";
  } else if (pctOfExpected) {
    out += "Percent of the expected figure per pair (row = source GPU, column = destination); hover for " +
           htmlEscape(unit) + ". Red: below the expected figure (its check fails); green: at or above it.";
  } else {
    out += htmlEscape(unit) +
           " per pair (row = source GPU, column = destination); amber to green against the row's best pair (no check "
           "is made on these cells).";
  }
  out += "</p>\n<div class=\"tablebox\"><table class=\"heatmap\" data-unit=\"" + htmlEscape(unit) +
         "\"><tr><th>src \\ dst</th>";
  for (int d = 0; d < gpus; ++d)
    out += "<th>" + std::to_string(d) + "</th>";
  out += "</tr>\n";
  auto at = [&](int s, int d) -> const HeatCell* {
    const size_t i = static_cast<size_t>(s) * static_cast<size_t>(gpus) + static_cast<size_t>(d);
    return i < cells.size() ? &cells[i] : nullptr;
  };
  for (int s = 0; s < gpus; ++s) {
    std::optional<double> best;
    for (int d = 0; d < gpus; ++d) {
      const HeatCell* c = at(s, d);
      if (!c || !c->value || *c->value <= 0) continue;
      if (!best || (time ? *c->value < *best : *c->value > *best)) best = c->value;
    }
    out += "<tr><th>" + std::to_string(s) + "</th>";
    for (int d = 0; d < gpus; ++d) {
      const HeatCell* c = at(s, d);
      if (c && !c->value && !c->status.empty() && c->status != "ok") {
        const bool skipped = c->status.rfind("skipped", 0) == 0;
        const bool failed = !skipped && c->status.rfind("unsupported", 0) != 0;
        out += std::string("<td class=\"") + (failed ? "cell-fail" : "cell-skip") + "\" title=\"" +
               htmlEscape(c->status) + "\">" +
               (failed    ? "failed"
                : skipped ? "skipped"
                          : "unsupported") +
               "</td>";
        continue;
      }
      if (s == d && (!c || !c->value)) {
        out += "<td class=\"cell-self\" title=\"a GPU with itself\">&middot;</td>";
        continue;
      }
      if (!c || !c->value) {
        out += "<td class=\"cell-na\" title=\"not measured: the run holds no result for this pair\">n/a</td>";
        continue;
      }
      const double v = *c->value;
      double fraction = NAN;
      std::string text;
      std::string tip = std::to_string(s) + "->" + std::to_string(d) + ": " + shortNumber(v) + " " + unit;
      if (pctOfExpected && c->expected && *c->expected > 0) {
        fraction = v / *c->expected;
        text = formatted("%.1f%%", fraction * 100);
        tip += " of " + shortNumber(*c->expected) + " " + unit + " expected";
      } else {
        text = shortNumber(v);
        if (best && v > 0) fraction = time ? *best / v : v / *best;
      }
      const bool checked = pctOfExpected && c->expected && *c->expected > 0;
      out += "<td style=\"background:" + fractionColour(fraction, checked) + "\" title=\"" + htmlEscape(tip) +
             "\" data-fraction=\"" + (std::isfinite(fraction) ? shortNumber(fraction) : "") + "\">" + htmlEscape(text) +
             "</td>";
    }
    out += "</tr>\n";
  }
  out += "</table></div>\n";
  return out;
}

}  // namespace peerlab::report
