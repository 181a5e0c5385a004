#include "harness/report/html.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "harness/report/aggregate.h"
#include "harness/report/compare.h"

namespace peerlab::report {

namespace {

const char* const kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#7f7f7f"};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// Coordinates with one decimal keep the file small and the drawing exact enough.
std::string px(double v) {
  return fmt("%.1f", v);
}

std::string figure(double v) {
  const double a = std::fabs(v);
  if (a >= 100) return fmt("%.0f", v);
  if (a >= 10) return fmt("%.1f", v);
  if (a >= 1) return fmt("%.2f", v);
  return fmt("%.3g", v);
}

std::string shortBytes(double bytes) {
  static const char* kUnits[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return fmt(bytes == std::floor(bytes) ? "%.0f" : "%.2g", bytes) + kUnits[u];
}

double niceStep(double raw) {
  if (raw <= 0) return 1;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (raw <= m * mag) return m * mag;
  }
  return 10 * mag;
}

std::string metricLabel(const std::string& metric) {
  if (metric == "busbw_gbps") return "bus bandwidth (GB/s)";
  if (metric == "algbw_gbps") return "bandwidth (GB/s)";
  return "time (us)";
}

// Viridis, five stops, for values 0..1.
std::string viridis(double t) {
  static const double kStops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const int i = std::min(3, static_cast<int>(t));
  const double f = t - i;
  char buf[16];
  std::snprintf(buf, sizeof(buf), "#%02x%02x%02x",
                static_cast<int>(kStops[i][0] + f * (kStops[i + 1][0] - kStops[i][0])),
                static_cast<int>(kStops[i][1] + f * (kStops[i + 1][1] - kStops[i][1])),
                static_cast<int>(kStops[i][2] + f * (kStops[i + 1][2] - kStops[i][2])));
  return buf;
}

struct PlotLine {
  std::string label;
  std::string color;
  std::string dash;  ///< stroke-dasharray, "" for solid
  std::vector<SeriesPoint> points;
};

std::string dashFor(const std::string& impl) {
  if (impl.rfind("nccl", 0) == 0) return "6 4";
  if (isBaselineImpl(impl)) return "2 3";
  return "";
}

class Page {
 public:
  int plots() const { return plots_; }

  // Bandwidth or time against message size; x is log2 of bytes, y linear (bandwidth) or log10 (time).
  std::string linePlot(const std::string& title, const std::vector<PlotLine>& lines, const std::string& ylabel,
                       bool logy) {
    const double W = 560, H = 320, ml = 64, mr = 16, mt = 14, mb = 46;
    const double pw = W - ml - mr, ph = H - mt - mb;
    double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = 0;
    for (const PlotLine& l : lines) {
      for (const SeriesPoint& p : l.points) {
        x0 = std::min(x0, std::log2(p.bytes));
        x1 = std::max(x1, std::log2(p.bytes));
        y0 = std::min(y0, p.min);
        y1 = std::max(y1, p.max);
      }
    }
    if (x1 - x0 < 1) {
      x0 -= 1;
      x1 += 1;
    }
    std::vector<double> yticks;
    double ylo = 0, yhi = 1;
    if (logy) {
      ylo = std::floor(std::log10(std::max(y0, 1e-9)));
      yhi = std::ceil(std::log10(std::max(y1, 1e-9)));
      if (yhi <= ylo) yhi = ylo + 1;
      for (double k = ylo; k <= yhi + 1e-9; k += 1) {
        yticks.push_back(std::pow(10.0, k));
        if (yhi - ylo <= 2 && k < yhi) {
          yticks.push_back(2 * std::pow(10.0, k));
          yticks.push_back(5 * std::pow(10.0, k));
        }
      }
    } else {
      const double step = niceStep(std::max(y1, 1e-9) * 1.08 / 5);
      yhi = std::ceil(std::max(y1, 1e-9) * 1.08 / step) * step;
      for (double v = 0; v <= yhi + step / 2; v += step)
        yticks.push_back(v);
    }
    auto X = [&](double bytes) { return ml + (std::log2(bytes) - x0) / (x1 - x0) * pw; };
    auto Y = [&](double v) {
      if (logy) return mt + ph - (std::log10(std::max(v, 1e-12)) - ylo) / (yhi - ylo) * ph;
      return mt + ph - v / yhi * ph;
    };
    std::ostringstream s;
    ++plots_;
    s << "<svg class=\"plot line\" role=\"img\" aria-label=\"" << htmlEscape(title) << "\" viewBox=\"0 0 " << W << " "
      << H << "\" width=\"" << W << "\" height=\"" << H << "\">";
    s << "<title>" << htmlEscape(title) << "</title>";
    // Grid and axes.
    s << "<g class=\"grid\">";
    for (double v : yticks) {
      s << "<line x1=\"" << ml << "\" x2=\"" << ml + pw << "\" y1=\"" << px(Y(v)) << "\" y2=\"" << px(Y(v)) << "\"/>";
    }
    const int span = static_cast<int>(std::ceil(x1) - std::floor(x0));
    const int step = std::max(1, (span + 7) / 8);
    for (int k = static_cast<int>(std::ceil(x0)); k <= static_cast<int>(std::floor(x1)); ++k) {
      if (k % step) continue;
      const double xx = ml + (k - x0) / (x1 - x0) * pw;
      s << "<line x1=\"" << px(xx) << "\" x2=\"" << px(xx) << "\" y1=\"" << mt << "\" y2=\"" << mt + ph << "\"/>";
    }
    s << "</g><g class=\"axis\">";
    s << "<path d=\"M" << ml << " " << mt << "V" << mt + ph << "H" << ml + pw << "\"/>";
    for (double v : yticks) {
      s << "<text x=\"" << ml - 6 << "\" y=\"" << px(Y(v) + 4) << "\" text-anchor=\"end\">"
        << (logy ? fmt("%g", v) : figure(v)) << "</text>";
    }
    for (int k = static_cast<int>(std::ceil(x0)); k <= static_cast<int>(std::floor(x1)); ++k) {
      if (k % step) continue;
      const double xx = ml + (k - x0) / (x1 - x0) * pw;
      s << "<text x=\"" << px(xx) << "\" y=\"" << mt + ph + 16 << "\" text-anchor=\"middle\">"
        << shortBytes(std::pow(2.0, k)) << "</text>";
    }
    s << "<text x=\"" << ml + pw / 2 << "\" y=\"" << H - 6 << "\" text-anchor=\"middle\">message size (bytes)</text>";
    s << "<text transform=\"translate(14 " << mt + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
      << htmlEscape(ylabel) << "</text></g>";
    for (const PlotLine& l : lines) {
      std::string dash = l.dash.empty() ? "" : " stroke-dasharray=\"" + l.dash + "\"";
      s << "<g class=\"series\" data-series=\"" << htmlEscape(l.label) << "\">";
      // Spread over pairs: a band from the slowest to the fastest pair.
      bool band = false;
      for (const SeriesPoint& p : l.points)
        band |= p.n > 1 && p.max > p.min;
      if (band && l.points.size() > 1) {
        std::string d;
        for (size_t i = 0; i < l.points.size(); ++i) {
          d += (i ? "L" : "M") + px(X(l.points[i].bytes)) + " " + px(Y(l.points[i].max));
        }
        for (size_t i = l.points.size(); i-- > 0;)
          d += "L" + px(X(l.points[i].bytes)) + " " + px(Y(l.points[i].min));
        s << "<path class=\"band\" d=\"" << d << "Z\" fill=\"" << l.color << "\"/>";
      }
      std::string d;
      for (size_t i = 0; i < l.points.size(); ++i) {
        d += (i ? "L" : "M") + px(X(l.points[i].bytes)) + " " + px(Y(l.points[i].median));
      }
      s << "<path class=\"line\" d=\"" << d << "\" stroke=\"" << l.color << "\"" << dash << "/>";
      for (const SeriesPoint& p : l.points) {
        s << "<circle cx=\"" << px(X(p.bytes)) << "\" cy=\"" << px(Y(p.median)) << "\" r=\"2.6\" fill=\"" << l.color
          << "\"><title>" << htmlEscape(l.label) << ": " << formatBytes(p.bytes) << " -> " << figure(p.median);
        if (p.n > 1) s << " (median of " << p.n << ", " << figure(p.min) << " - " << figure(p.max) << ")";
        s << "</title></circle>";
      }
      s << "</g>";
    }
    s << "</svg>";
    return s.str();
  }

  std::string heatmap(const PairGrid& g) {
    const int n = std::max(1, g.gpus);
    const double c = std::clamp(520.0 / n, 22.0, 48.0);
    const double ml = 34, mt = 30;
    const double W = std::max(260.0, ml + n * c + 12), H = mt + n * c + 52;
    double vmax = 0;
    for (const auto& v : g.value) {
      if (v) vmax = std::max(vmax, *v);
    }
    const int font = c >= 40 ? 12 : c >= 30 ? 10 : 9;
    std::ostringstream s;
    ++plots_;
    s << "<svg class=\"plot heatmap\" role=\"img\" aria-label=\"" << htmlEscape(g.label()) << "\" viewBox=\"0 0 "
      << px(W) << " " << px(H) << "\" width=\"" << px(W) << "\" height=\"" << px(H) << "\" font-size=\"" << font
      << "\">";
    s << "<title>" << htmlEscape(g.label()) << " at " << formatBytes(g.bytes) << "</title>";
    s << "<text x=\"2\" y=\"" << mt - 8 << "\" class=\"corner\">src\\dst</text>";
    for (int i = 0; i < n; ++i) {
      s << "<text x=\"" << px(ml + i * c + c / 2) << "\" y=\"" << mt - 8 << "\" text-anchor=\"middle\">" << i
        << "</text>";
      s << "<text x=\"" << ml - 6 << "\" y=\"" << px(mt + i * c + c / 2 + 4) << "\" text-anchor=\"end\">" << i
        << "</text>";
    }
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        const size_t idx = static_cast<size_t>(i * n + j);
        const double x = ml + j * c, y = mt + i * c;
        std::string fill = "#ffffff", text, textColor = "#222", tip;
        const std::string& st = idx < g.status.size() ? g.status[idx] : std::string();
        if (idx < g.value.size() && g.value[idx]) {
          const double t = vmax > 0 ? *g.value[idx] / vmax : 0;
          fill = viridis(t);
          textColor = t > 0.6 ? "#000" : "#fff";
          text = figure(*g.value[idx]);
          tip = std::to_string(i) + "->" + std::to_string(j) + ": " + figure(*g.value[idx]) + " GB/s at " +
                formatBytes(g.bytes);
        } else if (!st.empty() && st != "ok") {
          const bool skipped = statusRank(st) == 1;
          fill = skipped ? "#d9d9d9" : "#d62728";
          textColor = skipped ? "#444" : "#fff";
          text = skipped ? "-" : "x";
          tip = std::to_string(i) + "->" + std::to_string(j) + ": " + st;
        } else if (i == j) {
          fill = "#eeeeee";
          tip = "same GPU";
        } else {
          tip = std::to_string(i) + "->" + std::to_string(j) + ": not measured";
        }
        s << "<rect x=\"" << px(x) << "\" y=\"" << px(y) << "\" width=\"" << px(c - 1) << "\" height=\"" << px(c - 1)
          << "\" fill=\"" << fill << "\"><title>" << htmlEscape(tip) << "</title></rect>";
        if (!text.empty() && c >= 24) {
          s << "<text x=\"" << px(x + c / 2) << "\" y=\"" << px(y + c / 2 + font / 2.5)
            << "\" text-anchor=\"middle\" fill=\"" << textColor << "\">" << htmlEscape(text) << "</text>";
        }
      }
    }
    // Colour scale: 0 .. the fastest pair.
    const double sy = mt + n * c + 14, sw = std::min(200.0, n * c);
    for (int k = 0; k < 20; ++k) {
      s << "<rect x=\"" << px(ml + k * sw / 20) << "\" y=\"" << px(sy) << "\" width=\"" << px(sw / 20 + 0.5)
        << "\" height=\"10\" fill=\"" << viridis((k + 0.5) / 20) << "\"/>";
    }
    s << "<text x=\"" << ml << "\" y=\"" << px(sy + 24) << "\">0</text>";
    s << "<text x=\"" << px(ml + sw) << "\" y=\"" << px(sy + 24) << "\" text-anchor=\"end\">" << figure(vmax)
      << " GB/s</text>";
    s << "</svg>";
    return s.str();
  }

  std::string probeMatrix(const ProbeGrid& g) {
    const int n = std::max(1, g.gpus);
    const double c = std::clamp(360.0 / n, 22.0, 44.0);
    const double ml = 34, mt = 30;
    const double W = std::max(200.0, ml + n * c + 12), H = mt + n * c + 10;
    const int font = c >= 34 ? 12 : 10;
    std::ostringstream s;
    ++plots_;
    s << "<svg class=\"plot probe\" role=\"img\" aria-label=\"probe " << htmlEscape(g.method) << "\" viewBox=\"0 0 "
      << px(W) << " " << px(H) << "\" width=\"" << px(W) << "\" height=\"" << px(H) << "\" font-size=\"" << font
      << "\">";
    s << "<title>probe " << htmlEscape(g.method) << "</title>";
    s << "<text x=\"2\" y=\"" << mt - 8 << "\" class=\"corner\">src\\dst</text>";
    for (int i = 0; i < n; ++i) {
      s << "<text x=\"" << px(ml + i * c + c / 2) << "\" y=\"" << mt - 8 << "\" text-anchor=\"middle\">" << i
        << "</text>";
      s << "<text x=\"" << ml - 6 << "\" y=\"" << px(mt + i * c + c / 2 + 4) << "\" text-anchor=\"end\">" << i
        << "</text>";
    }
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        const size_t idx = static_cast<size_t>(i * n + j);
        const double x = ml + j * c, y = mt + i * c;
        const std::string& v = g.verdict[idx];
        const std::optional<bool> claimed = g.claimed[idx];
        std::string fill = i == j ? "#eeeeee" : "#ffffff", text, textColor = "#fff";
        std::string cls = "cell";
        if (v == "ok") {
          fill = "#59a14f";
          text = "ok";
        } else if (statusRank(v) == 1) {
          fill = "#d9d9d9";
          text = "-";
          textColor = "#444";
        } else if (v == "corrupt") {
          fill = "#d62728";
          text = "C";
        } else if (v == "hang") {
          fill = "#8c2d04";
          text = "H";
        } else if (!v.empty()) {
          fill = "#f28e2b";
          text = "E";
        }
        // The point of the probe: where the driver's claim and the verified result disagree.
        std::string stroke;
        if (!v.empty() && claimed.value_or(false) && v != "ok") {
          stroke = " stroke=\"#000\" stroke-width=\"3\"";
          cls += " claimed-failed";
        } else if (v == "ok" && claimed.has_value() && !*claimed) {
          stroke = " stroke=\"#1f5fa8\" stroke-width=\"2.5\" stroke-dasharray=\"3 2\"";
          cls += " unclaimed-ok";
        }
        std::string tip = std::to_string(i) + "->" + std::to_string(j) + ": " + (v.empty() ? "not probed" : v);
        tip += claimed ? (*claimed ? ", claimed by the driver" : ", not claimed by the driver") : "";
        if (!g.detail[idx].empty()) tip += " | " + g.detail[idx];
        s << "<rect class=\"" << cls << "\" x=\"" << px(x + 1) << "\" y=\"" << px(y + 1) << "\" width=\"" << px(c - 3)
          << "\" height=\"" << px(c - 3) << "\" fill=\"" << fill << "\"" << stroke << "><title>" << htmlEscape(tip)
          << "</title></rect>";
        if (claimed.value_or(false)) {
          s << "<path d=\"M" << px(x + c - 10) << " " << px(y + 2) << "H" << px(x + c - 2) << "V" << px(y + 10)
            << "Z\" fill=\"#111\"/>";
        }
        if (!text.empty()) {
          s << "<text x=\"" << px(x + c / 2) << "\" y=\"" << px(y + c / 2 + font / 2.5)
            << "\" text-anchor=\"middle\" fill=\"" << textColor << "\">" << text << "</text>";
        }
      }
    }
    s << "</svg>";
    return s.str();
  }

 private:
  int plots_ = 0;
};

std::string pairText(const Result& r) {
  if (!r.src && !r.dst) return "";
  return (r.src ? std::to_string(*r.src) : std::string("?")) + "&rarr;" +
         (r.dst ? std::to_string(*r.dst) : std::string("?"));
}

std::string optFigure(const std::optional<double>& v) {
  return v ? figure(*v) : "";
}

std::string statusClass(const std::string& status) {
  const int rank = statusRank(status);
  return rank == 2 ? "ok" : rank == 1 ? "skip" : "bad";
}

const char* kStyle = R"CSS(
:root{--fg:#1d2330;--muted:#5b6474;--line:#d8dce3;--bg:#ffffff;--soft:#f4f6f9;--ok:#2e7d32;--bad:#c62828;--warn:#a15c00}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:1240px;margin:0 auto;padding:18px 24px 48px}
header{display:flex;flex-wrap:wrap;align-items:baseline;gap:12px 24px;border-bottom:2px solid var(--line);padding-bottom:10px}
h1{font-size:22px;margin:0}
h2{font-size:18px;margin:28px 0 10px;padding-top:6px;border-top:1px solid var(--line)}
h3{font-size:15px;margin:16px 0 6px}
.meta{color:var(--muted)}
.badge{display:inline-block;padding:3px 12px;border-radius:4px;font-weight:700;color:#fff;letter-spacing:.04em}
.badge.pass{background:var(--ok)}.badge.fail{background:var(--bad)}
nav{margin:10px 0 0;color:var(--muted)}nav a{color:#2b5fad;margin-right:14px;text-decoration:none}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{background:#fdecea}tr.skip td{color:var(--muted)}
.pill{display:inline-block;min-width:44px;text-align:center;border-radius:3px;font-weight:700;font-size:12px;color:#fff}
.pill.pass{background:var(--ok)}.pill.fail{background:var(--bad)}.pill.other{background:var(--warn)}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(540px,1fr));gap:8px 20px}
.tiles{display:flex;flex-wrap:wrap;gap:12px 26px;align-items:flex-start}
figure{margin:0 0 8px}figcaption{font-size:13px;color:var(--muted);margin:2px 0 4px}
svg.plot{max-width:100%;height:auto;background:#fff;font-size:11px;font-family:inherit}
svg .grid line{stroke:#e6e9ee;stroke-width:1}
svg .axis path{stroke:#8a93a3;fill:none}svg .axis text,svg text{fill:#3a4150}
svg .line{fill:none;stroke-width:2}svg .band{opacity:.14;stroke:none}
svg text.corner{font-size:9px;fill:var(--muted)}
ul.legend{list-style:none;margin:0 0 6px;padding:0;display:flex;flex-wrap:wrap;gap:2px 16px;font-size:12px}
ul.legend li{display:flex;align-items:center;gap:6px}
.sw{display:inline-block;width:26px;height:0;border-top-width:3px}
.key span{display:inline-block;width:12px;height:12px;margin:0 4px -2px 10px;border:1px solid #999}
details summary{cursor:pointer;color:#2b5fad}
code{background:var(--soft);padding:0 4px;border-radius:3px}
.note{color:var(--muted);font-size:13px}
)CSS";

// Counts the drawn plots and reports the outcome on <html> for headless checks and for the screenshot height.
const char* kScript = R"JS(
(function () {
  var root = document.documentElement;
  try {
    var want = parseInt(document.querySelector('meta[name="peerlab-plots"]').getAttribute('content'), 10);
    var svgs = document.querySelectorAll('svg.plot');
    var drawn = 0, problems = [];
    for (var i = 0; i < svgs.length; i++) {
      var s = svgs[i];
      var marks = s.querySelectorAll('path, rect, circle');
      var box = s.getBoundingClientRect();
      var ink = 0;
      for (var k = 0; k < marks.length; k++) {
        var b = marks[k].getBBox();
        if (b.width > 0 || b.height > 0) ink++;
      }
      if (box.width > 0 && box.height > 0 && ink > 0) drawn++;
      else problems.push(s.getAttribute('aria-label') || ('plot ' + i));
    }
    root.setAttribute('data-peerlab-plots', String(drawn));
    root.setAttribute('data-peerlab-height', String(Math.ceil(root.scrollHeight)));
    if (drawn === want && problems.length === 0) {
      root.setAttribute('data-peerlab-ready', 'ok');
    } else {
      root.setAttribute('data-peerlab-ready', 'error: ' + drawn + ' of ' + want + ' plots drawn; ' + problems.join(', '));
    }
  } catch (e) {
    root.setAttribute('data-peerlab-ready', 'error: ' + e);
  }
})();
)JS";

}  // namespace

std::string htmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

std::vector<Check> checksInRun(const Run& run) {
  if (!run.extra.contains("qualify") || !run.extra["qualify"].is_object()) return {};
  const auto& q = run.extra["qualify"];
  if (!q.contains("checks")) return {};
  auto checks = checksFromJson(q["checks"]);
  return checks.isOk() ? *checks : std::vector<Check>{};
}

std::string renderHtml(const Run& run, const HtmlOptions& options) {
  Page page;
  const std::vector<Check> checks = options.checks ? *options.checks : checksInRun(run);
  const bool haveChecks = options.checks.has_value() || !checks.empty();
  const int failed = failedChecks(checks);
  const std::string host = run.fingerprint.hostname.empty() ? "unknown host" : run.fingerprint.hostname;
  const std::string title = options.title.empty() ? "peerlab report: " + host : options.title;
  const std::vector<std::string> suites = suitesIn(run);
  const int gpus = gpuCount(run);

  std::ostringstream nav, body;
  auto section = [&](const std::string& id, const std::string& heading) {
    nav << "<a href=\"#" << id << "\">" << htmlEscape(heading) << "</a>";
    body << "<section id=\"" << id << "\"><h2>" << htmlEscape(heading) << "</h2>";
  };

  // Verdict and checks: counts per category, the failures, then every check folded away.
  if (haveChecks) {
    section("checks", "Checks");
    body << "<p>" << checks.size() - failed << " of " << checks.size() << " checks passed";
    if (failed) body << ", <strong>" << failed << " failed</strong>";
    body << ".</p>";
    std::vector<std::string> categories;
    std::map<std::string, std::pair<int, int>> counts;  // passed, failed
    for (const Check& c : checks) {
      if (!counts.count(c.category)) categories.push_back(c.category);
      (c.pass ? counts[c.category].first : counts[c.category].second)++;
    }
    body << "<table><tr><th>category</th><th>passed</th><th>failed</th></tr>";
    for (const std::string& cat : categories) {
      body << "<tr" << (counts[cat].second ? " class=\"bad\"" : "") << "><td>" << htmlEscape(cat)
           << "</td><td class=\"num\">" << counts[cat].first << "</td><td class=\"num\">" << counts[cat].second
           << "</td></tr>";
    }
    body << "</table>";
    auto checkRows = [&](bool onlyFailed) {
      std::ostringstream t;
      t << "<table><tr><th>result</th><th>category</th><th>check</th><th>measured</th><th>expected</th>"
           "<th>reason</th></tr>";
      for (const Check& c : checks) {
        if (onlyFailed && c.pass) continue;
        const std::string v = checkVerdict(c);
        std::string label = v;
        for (char& ch : label)
          ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        t << "<tr" << (c.pass ? "" : " class=\"bad\"") << "><td><span class=\"pill "
          << (v == "fail"   ? "fail"
              : v == "pass" ? "pass"
                            : "other")
          << "\">" << label << "</span></td><td>" << htmlEscape(c.category) << "</td><td>" << htmlEscape(c.name)
          << "</td><td>" << htmlEscape(c.measured) << "</td><td>" << htmlEscape(c.expected) << "</td><td>"
          << htmlEscape(c.reason) << "</td></tr>";
      }
      t << "</table>";
      return t.str();
    };
    if (failed) body << "<h3>Failed checks</h3>" << checkRows(true);
    body << "<details><summary>All " << checks.size() << " checks</summary>" << checkRows(false)
         << "</details></section>";
  }

  // Bandwidth and time against size, per suite, with its baselines drawn dashed.
  std::vector<std::string> plotted;
  std::ostringstream bw;
  for (const std::string& suite : suites) {
    if (suite == "probe") continue;
    auto bandwidth = bandwidthSeries(run, suite);
    auto times = timeSeries(run, suite);
    if (bandwidth.empty() && times.empty()) continue;
    plotted.push_back(suite);
    std::map<std::string, std::string> colors;
    auto colorOf = [&](const Series& s) {
      auto it = colors.find(s.label());
      if (it != colors.end()) return it->second;
      std::string c = kPalette[colors.size() % std::size(kPalette)];
      colors[s.label()] = c;
      return c;
    };
    auto toLines = [&](const std::vector<Series>& series) {
      std::vector<PlotLine> lines;
      for (const Series& s : series)
        lines.push_back({s.label(), colorOf(s), dashFor(s.impl), s.points});
      return lines;
    };
    auto bwLines = toLines(bandwidth);
    auto timeLines = toLines(times);
    int pairs = 0;
    for (const Series& s : bandwidth.empty() ? times : bandwidth) {
      for (const SeriesPoint& p : s.points)
        pairs = std::max(pairs, p.n);
    }
    bw << "<h3 id=\"plot-" << htmlEscape(suite) << "\">" << htmlEscape(suite) << "</h3>";
    bw << "<ul class=\"legend\">";
    std::vector<std::string> seen;
    for (const auto* lines : {&bwLines, &timeLines}) {
      for (const PlotLine& l : *lines) {
        if (std::find(seen.begin(), seen.end(), l.label) != seen.end()) continue;
        seen.push_back(l.label);
        bw << "<li><span class=\"sw\" style=\"border-top-style:" << (l.dash.empty() ? "solid" : "dashed")
           << ";border-top-color:" << l.color << "\"></span>" << htmlEscape(l.label) << "</li>";
      }
    }
    bw << "</ul><div class=\"grid2\">";
    if (!bwLines.empty()) {
      const std::string metric = bandwidth.front().metric;
      bw << "<figure>"
         << page.linePlot(suite + ": " + metricLabel(metric) + " against size", bwLines, metricLabel(metric), false)
         << "<figcaption>" << htmlEscape(metricLabel(metric)) << " against message size"
         << (pairs > 1 ? "; line: median over " + std::to_string(pairs) + " pairs, band: slowest to fastest pair" : "")
         << "</figcaption></figure>";
    }
    if (!timeLines.empty()) {
      bw << "<figure>" << page.linePlot(suite + ": time against size", timeLines, "time (us, log scale)", true)
         << "<figcaption>time per operation against message size (log scale)</figcaption></figure>";
    }
    bw << "</div>";
  }
  if (!plotted.empty()) {
    section("bandwidth", "Bandwidth against size");
    body << "<p class=\"note\">Solid: peerlab; dashed: NCCL; dotted: other baselines. Medians of each benchmark's "
            "samples.</p>"
         << bw.str() << "</section>";
  }

  // Pair matrices per method.
  auto grids = pairGrids(run);
  if (!grids.empty()) {
    section("pairs", "Pair matrices");
    body << "<p class=\"note\">Bandwidth per ordered pair at the largest size measured (rows: source GPU, columns: "
            "destination GPU). Red: failed; grey: skipped.</p><div class=\"tiles\">";
    for (const PairGrid& g : grids) {
      body << "<figure><figcaption>" << htmlEscape(g.label()) << " &middot; " << formatBytes(g.bytes) << " (GB/s)"
           << "</figcaption>" << page.heatmap(g) << "</figure>";
    }
    body << "</div></section>";
  }

  // Probe: verified verdicts against the driver's claims.
  auto probes = probeGrids(run);
  bool probeRows = false;
  for (const Result& r : run.results)
    probeRows |= r.suite == "probe";
  if (!probes.empty() || probeRows) {
    section("probe", "Probe: claimed against verified");
    ProbeSummary ps = summarizeProbe(run);
    body << "<p>" << ps.cells << " cells: " << ps.ok << " verified ok, " << ps.unsupported << " unsupported, "
         << ps.failed << " failed; " << ps.claimed_but_failed.size() << " claimed by the driver but not verified, "
         << ps.works_unclaimed.size() << " verified but not claimed.";
    for (const Result& r : run.results) {
      if (r.suite == "probe" && r.name == "matrix_wall" && r.time_us) {
        body << " Whole matrix: " << figure(*r.time_us / 1e6) << " s.";
      }
    }
    body << "</p><p class=\"key\"><span style=\"background:#59a14f\"></span>ok<span style=\"background:#d9d9d9\">"
            "</span>unsupported<span style=\"background:#d62728\"></span>C corrupt<span style=\"background:#8c2d04\">"
            "</span>H hang<span style=\"background:#f28e2b\"></span>E error &nbsp; &#9698; claimed by "
            "cudaDeviceCanAccessPeer / the driver &nbsp; thick black border: claimed but failed &nbsp; dashed blue "
            "border: works but not claimed</p><div class=\"tiles\">";
    for (const ProbeGrid& g : probes) {
      body << "<figure><figcaption>" << htmlEscape(g.method) << "</figcaption>" << page.probeMatrix(g) << "</figure>";
    }
    body << "</div>";
    if (!ps.claimed_but_failed.empty()) {
      body << "<h3>Claimed but not verified</h3><ul>";
      for (const auto& c : ps.claimed_but_failed)
        body << "<li>" << htmlEscape(c) << "</li>";
      body << "</ul>";
    }
    if (!ps.works_unclaimed.empty()) {
      body << "<h3>Verified but not claimed</h3><p>";
      for (size_t i = 0; i < ps.works_unclaimed.size(); ++i) {
        body << (i ? ", " : "") << htmlEscape(ps.works_unclaimed[i]);
      }
      body << "</p>";
    }
    body << "</section>";
  }

  // Latency tables.
  auto latency = latencyRows(run);
  if (!latency.empty()) {
    section("latency", "Latency");
    body << "<p class=\"note\">Results of 64 KiB and less, and results without a size (median per benchmark, then "
            "median, fastest and slowest over pairs; peer copies at their smallest size only).</p>";
    std::string current;
    for (const LatencyRow& l : latency) {
      if (l.suite != current) {
        if (!current.empty()) body << "</table>";
        current = l.suite;
        body << "<h3>" << htmlEscape(l.suite) << "</h3><table><tr><th>impl</th><th>case</th><th>size</th>"
             << "<th>ranks</th><th>pairs</th><th>median us</th><th>min us</th><th>max us</th></tr>";
      }
      body << "<tr><td>" << htmlEscape(l.impl) << "</td><td>" << htmlEscape(l.name) << "</td><td class=\"num\">"
           << (l.bytes ? formatBytes(*l.bytes) : "") << "</td><td class=\"num\">" << l.ranks
           << "</td><td class=\"num\">" << l.n << "</td><td class=\"num\">" << figure(l.median_us)
           << "</td><td class=\"num\">" << figure(l.min_us) << "</td><td class=\"num\">" << figure(l.max_us)
           << "</td></tr>";
    }
    body << "</table></section>";
  }

  // Topology as planned by qualify, when the run carries it.
  if (run.extra.contains("plan") && run.extra["plan"].is_object() && run.extra["plan"].contains("topology")) {
    const auto& topo = run.extra["plan"]["topology"];
    if (topo.is_object() && topo.contains("pairs") && topo["pairs"].is_array()) {
      const int n = topo.contains("gpus") && topo["gpus"].is_array() ? static_cast<int>(topo["gpus"].size()) : gpus;
      std::vector<std::string> cell(static_cast<size_t>(n * n), "");
      for (const auto& p : topo["pairs"]) {
        const int a = p.value("src", -1), b = p.value("dst", -1);
        if (a < 0 || b < 0 || a >= n || b >= n) continue;
        const int links = p.value("nvlinks", 0);
        cell[static_cast<size_t>(a * n + b)] = links > 0 ? "NV" + std::to_string(links) : p.value("pci", "");
      }
      section("topology", "Topology");
      body << "<p>" << htmlEscape(topo.value("source", "")) << "</p><table><tr><th></th>";
      for (int j = 0; j < n; ++j)
        body << "<th>GPU" << j << "</th>";
      body << "</tr>";
      for (int i = 0; i < n; ++i) {
        body << "<tr><th>GPU" << i << "</th>";
        for (int j = 0; j < n; ++j)
          body << "<td>" << (i == j ? "X" : htmlEscape(cell[static_cast<size_t>(i * n + j)])) << "</td>";
        body << "</tr>";
      }
      body << "</table></section>";
    }
  }

  // Machine fingerprint.
  section("fingerprint", "Machine");
  body << "<table><tr><th>host</th><td>" << htmlEscape(host) << "</td></tr><tr><th>driver</th><td>"
       << htmlEscape(run.fingerprint.driver) << "</td></tr><tr><th>CUDA runtime</th><td>"
       << htmlEscape(run.fingerprint.cuda_runtime) << "</td></tr><tr><th>NCCL</th><td>"
       << htmlEscape(run.fingerprint.nccl) << "</td></tr><tr><th>peerlab</th><td>" << htmlEscape(run.tool) << " ("
       << htmlEscape(run.git_sha) << ")</td></tr><tr><th>time</th><td>" << htmlEscape(run.timestamp)
       << "</td></tr></table>";
  if (!run.fingerprint.gpus.empty()) {
    body << "<table><tr><th>ordinal</th><th>name</th><th>UUID</th><th>bus id</th></tr>";
    for (const auto& g : run.fingerprint.gpus) {
      body << "<tr><td class=\"num\">" << g.ordinal << "</td><td>" << htmlEscape(g.name) << "</td><td><code>"
           << htmlEscape(g.uuid) << "</code></td><td><code>" << htmlEscape(g.bus_id) << "</code></td></tr>";
    }
    body << "</table>";
  } else {
    body << "<p class=\"note\">No GPU in the fingerprint.</p>";
  }
  body << "</section>";

  // The benchmark processes `peerlab bench` / `qualify` ran, when the run records them.
  if (run.extra.contains("bench") && run.extra["bench"].is_object() && run.extra["bench"].contains("jobs") &&
      run.extra["bench"]["jobs"].is_array() && !run.extra["bench"]["jobs"].empty()) {
    section("processes", "Benchmark processes");
    body << "<p class=\"note\">mode: " << htmlEscape(run.extra["bench"].value("mode", "")) << "</p>"
         << "<table><tr><th>process</th><th>results</th><th>wall s</th><th>outcome</th></tr>";
    for (const auto& j : run.extra["bench"]["jobs"]) {
      if (!j.is_object()) continue;
      const std::string exit = j.value("exit", "");
      body << "<tr class=\"" << (exit == "ok" ? "ok" : "bad") << "\"><td>" << htmlEscape(j.value("label", ""))
           << "</td><td class=\"num\">" << j.value("results", 0) << "</td><td class=\"num\">"
           << figure(j.value("wall_s", 0.0)) << "</td><td>" << htmlEscape(exit) << "</td></tr>";
    }
    body << "</table></section>";
  }

  // Failures and skips.
  std::vector<const Result*> problems;
  for (const Result& r : run.results) {
    if (r.status != "ok" && !(r.suite == "probe" && statusRank(r.status) == 1)) problems.push_back(&r);
  }
  if (!problems.empty()) {
    std::stable_sort(problems.begin(), problems.end(),
                     [](const Result* a, const Result* b) { return statusRank(a->status) < statusRank(b->status); });
    section("problems", "Failed and skipped");
    body << "<table><tr><th>result</th><th>status</th></tr>";
    for (const Result* r : problems) {
      body << "<tr class=\"" << statusClass(r->status) << "\"><td>" << htmlEscape(describeResult(*r)) << "</td><td>"
           << htmlEscape(r->status) << "</td></tr>";
    }
    body << "</table></section>";
  }

  // Every result.
  section("results", "All results");
  body << "<details><summary>" << run.results.size() << " results</summary><table><tr><th>suite</th><th>name</th>"
       << "<th>impl</th><th>pair</th><th>bytes</th><th>ranks</th><th>time us</th><th>algbw GB/s</th>"
       << "<th>busbw GB/s</th><th>wrong</th><th>status</th></tr>";
  for (const Result& r : run.results) {
    body << "<tr class=\"" << statusClass(r.status) << "\"><td>" << htmlEscape(r.suite) << "</td><td>"
         << htmlEscape(r.name) << "</td><td>" << htmlEscape(r.impl) << "</td><td>" << pairText(r)
         << "</td><td class=\"num\">" << (r.bytes ? formatBytes(*r.bytes) : "") << "</td><td class=\"num\">" << r.ranks
         << "</td><td class=\"num\">" << optFigure(r.time_us) << "</td><td class=\"num\">" << optFigure(r.algbw_gbps)
         << "</td><td class=\"num\">" << optFigure(r.busbw_gbps) << "</td><td class=\"num\">" << optFigure(r.wrong)
         << "</td><td>" << htmlEscape(r.status) << "</td></tr>";
  }
  body << "</table></details></section>";

  static const std::vector<std::string> kKnown = {"probe", "peer_copy", "zcopy", "alltoallv", "moe"};
  std::vector<std::string> absent;
  for (const std::string& s : kKnown) {
    if (std::find(suites.begin(), suites.end(), s) == suites.end()) absent.push_back(s);
  }

  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\" data-peerlab-ready=\"pending\" data-peerlab-plots=\"0\">\n<head>\n"
       << "<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
       << "<meta name=\"generator\" content=\"" << htmlEscape(run.tool) << "\">\n"
       << "<meta name=\"peerlab-plots\" content=\"" << page.plots() << "\">\n<title>" << htmlEscape(title)
       << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n<main>\n<header><h1>" << htmlEscape(title)
       << "</h1>";
  if (haveChecks) {
    html << "<span class=\"badge " << (failed ? "fail" : "pass") << "\">" << (failed ? "FAIL" : "PASS") << "</span>";
  }
  html << "<span class=\"meta\">" << htmlEscape(run.timestamp) << " &middot; " << gpus << " GPU"
       << (gpus == 1 ? "" : "s");
  if (!run.fingerprint.gpus.empty()) html << " &middot; " << htmlEscape(run.fingerprint.gpus.front().name);
  html << " &middot; driver " << htmlEscape(run.fingerprint.driver) << " &middot; CUDA "
       << htmlEscape(run.fingerprint.cuda_runtime) << " &middot; NCCL " << htmlEscape(run.fingerprint.nccl);
  if (run.extra.contains("kind") && run.extra["kind"].is_string()) {
    html << " &middot; " << htmlEscape(run.extra["kind"].get<std::string>());
  }
  html << "</span></header>\n<nav>" << nav.str() << "</nav>\n";
  if (!absent.empty()) {
    html << "<p class=\"note\">Not in this run: ";
    for (size_t i = 0; i < absent.size(); ++i)
      html << (i ? ", " : "") << htmlEscape(absent[i]);
    html << ".</p>\n";
  }
  html << body.str() << "\n</main>\n<script>" << kScript << "</script>\n</body>\n</html>\n";
  return html.str();
}

}  // namespace peerlab::report
