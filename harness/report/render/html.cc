#include "harness/report/render/html.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "harness/qualify/suites.h"
#include "harness/report/compare.h"
#include "harness/report/evaluate.h"
#include "harness/report/format.h"
#include "harness/report/metric.h"
#include "harness/report/render/views.h"

namespace peerlab::report {

namespace {

// Case names in reading order: runs of digits compare as numbers ("T=32" before "T=128", "graph/T=8" after "T=4096").
bool naturalLess(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    const bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei])))
        ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej])))
        ++ej;
      // Without leading zeros the longer run is the larger number; equal lengths compare as text.
      size_t za = i, zb = j;
      while (za + 1 < ei && a[za] == '0')
        ++za;
      while (zb + 1 < ej && b[zb] == '0')
        ++zb;
      if (ei - za != ej - zb) return ei - za < ej - zb;
      const int c = a.compare(za, ei - za, b, zb, ej - zb);
      if (c != 0) return c < 0;
      i = ei;
      j = ej;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i;
    ++j;
  }
  return a.size() - i < b.size() - j;
}

std::string metricLabel(const std::string& metric) {
  if (metric == "busbw_gbps") return "bus bandwidth (GB/s)";
  if (metric == "algbw_gbps") return "bandwidth (GB/s)";
  return "time (us)";
}

bool isDashed(const std::string& impl) {
  return isBaselineImpl(impl);
}

// The probe matrix of one method as a table: verdict per ordered pair, the driver's claim marked, mismatches framed.
std::string probeMatrix(const ProbeGrid& g) {
  const int n = std::max(1, g.gpus);
  std::ostringstream s;
  s << "<table class=\"probe\" data-method=\"" << htmlEscape(g.method) << "\"><tr><th>src \\ dst</th>";
  for (int j = 0; j < n; ++j)
    s << "<th>" << j << "</th>";
  s << "</tr>";
  for (int i = 0; i < n; ++i) {
    s << "<tr><th>" << i << "</th>";
    for (int j = 0; j < n; ++j) {
      const size_t idx = static_cast<size_t>(i * n + j);
      const std::string& v = g.verdict[idx];
      const std::optional<bool> claimed = g.claimed[idx];
      std::string cls = "pcell", text;
      if (v == "ok") {
        cls += " p-ok";
        text = "ok";
      } else if (statusRank(v) == 1) {
        cls += " p-skip";
        text = "-";
      } else if (v == "corrupt") {
        cls += " p-bad";
        text = "C";
      } else if (v == "hang") {
        cls += " p-hang";
        text = "H";
      } else if (!v.empty()) {
        cls += " p-err";
        text = "E";
      }
      // Any failure of a claimed cell is red (corrupt, a darker red for a hang, a lighter one for an error, each with
      // its letter): a cell the driver does not claim is expected not to work, so its failure is grey.
      if (!v.empty() && v != "ok" && statusRank(v) != 1 && !claimed.value_or(false)) {
        cls = "pcell p-unclaimed";
      }
      // The point of the probe: where the driver's claim and the verified result disagree.
      if (!v.empty() && claimed.value_or(false) && v != "ok") cls += " claimed-failed";
      if (v == "ok" && claimed.has_value() && !*claimed) cls += " unclaimed-ok";
      std::string tip = std::to_string(i) + "->" + std::to_string(j) + ": " + (v.empty() ? "not probed" : v);
      tip += claimed ? (*claimed ? ", claimed by the driver" : ", not claimed by the driver") : "";
      if (!g.detail[idx].empty()) tip += " | " + g.detail[idx];
      s << "<td class=\"" << cls << "\" title=\"" << htmlEscape(tip) << "\">"
        << (claimed.value_or(false) ? "&#9698;" : "") << text << "</td>";
    }
    s << "</tr>";
  }
  s << "</table>";
  return s.str();
}

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

// Escaped text that may wrap after '.', '_' and '/' (column titles such as "cuda.memcpy_async h2d").
std::string breakable(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += htmlEscape(std::string(1, c));
    if (c == '.' || c == '_' || c == '/') out += "<wbr>";
  }
  return out;
}

// The error counters of a health result that passed but are not zero ("2454 NVLink CRC errors, 30.2/s"): the health
// rules pass them (under DCGM's thresholds), and the page shows them as information. Read from the result's detail,
// as every peerlab version writes it; "" when all are zero.
std::string healthCounters(const Result& r) {
  static const std::regex kCount(
      "(\\d+) (CRC errors|replays|correctable errors|corrected|rows remapped for correctable)(?: \\(([0-9.]+)/s)?");
  std::string out;
  for (auto it = std::sregex_iterator(r.detail.begin(), r.detail.end(), kCount); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    // "0 uncorrected" is not "corrected", and a link's own count repeats the total.
    if (m.position(0) > 0 && std::isalpha(static_cast<unsigned char>(r.detail[m.position(0) - 1]))) continue;
    if (m.str(1).find_first_not_of('0') == std::string::npos) continue;
    std::string what = m.str(2);
    if (what == "CRC errors" && r.name.rfind("nvlink", 0) == 0) what = "NVLink CRC errors";
    if (what == "corrected") what = "corrected ECC errors";
    if (what == "rows remapped for correctable") what = "rows remapped for correctable errors";
    std::string item = m.str(1) + " " + what + (m[3].matched ? ", " + m.str(3) + "/s" : "");
    if (out.find(item) == std::string::npos) out += (out.empty() ? "" : "; ") + item;
    // The totals come first; per-link counts after them are detail.
    if (what == "NVLink CRC errors") break;
  }
  return out;
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
.badge.pass{background:var(--ok)}.badge.fail{background:var(--bad)}.badge.empty{background:#8a8f98}
.badge.injected{background:#b26b00}
nav{margin:10px 0 0;color:var(--muted)}nav a{color:#2b5fad;margin-right:14px;text-decoration:none}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid var(--line);padding:3px 8px;text-align:left;vertical-align:top}
th{background:var(--soft);font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.bad td{background:#fdecea}tr.skip td{color:var(--muted)}
.pill{display:inline-block;min-width:44px;text-align:center;border-radius:3px;font-weight:700;font-size:12px;color:#fff}
.pill.pass{background:var(--ok)}.pill.fail{background:var(--bad)}.pill.warn{background:var(--warn)}
.pill.unsupported{background:#6b7280}.pill.skipped{background:#fff;color:#555;border:1px dashed #888}
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
p.injected{background:#fff3cd;border:1px solid #d39e00;padding:6px 10px}
.tile{display:inline-block;vertical-align:top;max-width:440px}
table.probe td.pcell{width:30px;text-align:center;font-weight:700;color:#fff}
td.p-ok{background:#59a14f}td.p-skip{background:#d9d9d9;color:#444!important}td.p-bad{background:#d62728}
td.p-hang{background:#8b1a1a}td.p-err{background:#e8503a}td.p-unclaimed{background:#8a8f98}
td.claimed-failed{outline:3px solid #000;outline-offset:-3px}td.unclaimed-ok{outline:2px dashed #1f5fa8;outline-offset:-3px}
table.heatmap td{text-align:right;min-width:52px}
)CSS";

// A section of the page: its anchor, its heading (also its link in the nav bar) and what follows the heading. A
// section without content is left out of the page and the nav.
struct Section {
  std::string id;
  std::string heading;
  std::string content;
};

// The checks as a table, failures first; `only_not_passed` leaves out those that passed.
std::string checkRows(const std::vector<Check>& checks, bool only_not_passed) {
  std::ostringstream t;
  t << "<div class=\"tablebox\"><table class=\"checks\"><tr><th>status</th><th>category</th><th>check</th>"
       "<th>measured</th><th>expected</th><th>basis</th><th>reason</th></tr>";
  for (CheckStatus want :
       {CheckStatus::kFail, CheckStatus::kWarn, CheckStatus::kUnsupported, CheckStatus::kSkipped, CheckStatus::kPass}) {
    if (only_not_passed && want == CheckStatus::kPass) continue;
    for (const Check& c : checks) {
      if (c.status != want) continue;
      const char* pill = c.failed()                              ? "fail"
                         : c.status == CheckStatus::kPass        ? "pass"
                         : c.status == CheckStatus::kWarn        ? "warn"
                         : c.status == CheckStatus::kUnsupported ? "unsupported"
                                                                 : "skipped";
      t << "<tr class=\"check-" << checkStatusName(c.status) << (c.failed() ? " bad" : "")
        << "\"><td><span class=\"pill " << pill << "\">" << checkStatusLabel(c.status) << "</span></td><td>"
        << htmlEscape(c.category) << "</td><td>" << htmlEscape(c.name) << "</td><td>" << htmlEscape(c.measured)
        << "</td><td>" << htmlEscape(c.expected) << "</td><td class=\"long\">" << htmlEscape(c.basis)
        << "</td><td class=\"long\">" << htmlEscape(c.reason) << "</td></tr>";
    }
  }
  t << "</table></div>";
  return t.str();
}

// Verdict and checks: the counts, counts per category, every check that did not pass with its reason, then every
// check folded away.
Section checksSection(const Run& run, const std::vector<Check>& checks) {
  const CheckCounts counts = countChecks(checks);
  std::ostringstream body;
  body << "<p class=\"counts\" data-total=\"" << counts.total << "\" data-passed=\"" << counts.passed
       << "\" data-failed=\"" << counts.failed << "\" data-warnings=\"" << counts.warnings << "\" data-unsupported=\""
       << counts.unsupported << "\" data-skipped=\"" << counts.skipped << "\"><strong>" << verdictWord(counts)
       << "</strong>: " << htmlEscape(formatCounts(counts)) << ".</p>";
  if (const std::string disabled = disabledRulesNote(run); !disabled.empty()) {
    body << "<p class=\"disabled-rules warn\">" << htmlEscape(disabled) << " (their checks were not made).</p>";
  }
  std::vector<std::string> categories;
  std::map<std::string, std::vector<Check>> byCategory;
  for (const Check& c : checks) {
    if (!byCategory.count(c.category)) categories.push_back(c.category);
    byCategory[c.category].push_back(c);
  }
  body << "<table><tr><th>category</th><th>checks</th><th>passed</th><th>failed</th><th>warnings</th>"
          "<th>unsupported</th><th>skipped</th></tr>";
  for (const std::string& cat : categories) {
    const CheckCounts n = countChecks(byCategory[cat]);
    body << "<tr" << (n.failed ? " class=\"bad\"" : "") << "><td>" << htmlEscape(cat) << "</td>";
    for (int v : {n.total, n.passed, n.failed, n.warnings, n.unsupported, n.skipped})
      body << "<td class=\"num\">" << v << "</td>";
    body << "</tr>";
  }
  body << "</table>";
  if (counts.passed != counts.total) body << "<h3>Checks that did not pass</h3>" << checkRows(checks, true);
  body << "<details><summary>All " << counts.total << " checks</summary>" << checkRows(checks, false) << "</details>";
  return {"checks", "Checks", body.str()};
}

// What the size plots of a page share: one colour per implementation on every chart, whether Chart.js draws them,
// and how many were drawn.
struct PlotContext {
  ImplColours colours;
  bool draw_charts = false;
  int charts = 0;
};

// One case of a suite (series[begin, end): one name and ranks) whose implementations were each measured at one size,
// or any case without Chart.js: a table of each implementation's figure per size.
std::string caseTable(const std::vector<Series>& series, size_t begin, size_t end, const std::string& case_title,
                      const std::set<double>& sizes, bool line, bool time) {
  std::ostringstream bw;
  bw << "<table class=\"series\"><caption>" << htmlEscape(case_title) << "</caption>";
  if (!line) {
    bw << "<tr><th>implementation</th><th>size</th><th>" << (time ? "us" : "GB/s") << "</th></tr>";
    for (size_t k = begin; k < end; ++k) {
      for (const SeriesPoint& pt : series[k].points) {
        bw << "<tr><td>" << htmlEscape(series[k].impl) << "</td><td class=\"num\">" << formatBytes(pt.bytes)
           << "</td><td class=\"num\""
           << (pt.n > 1 ? " title=\"median of " + std::to_string(pt.n) + " pairs, " + figure(pt.min) + " to " +
                              figure(pt.max) + "\""
                        : std::string())
           << ">" << figure(pt.median) << "</td></tr>";
      }
    }
  } else {
    bw << "<tr><th>implementation</th>";
    for (double b : sizes)
      bw << "<th>" << formatBytes(b) << "</th>";
    bw << "</tr>";
    for (size_t k = begin; k < end; ++k) {
      bw << "<tr><td>" << htmlEscape(series[k].impl) << "</td>";
      for (double b : sizes) {
        auto pt = std::find_if(series[k].points.begin(), series[k].points.end(),
                               [&](const SeriesPoint& p) { return p.bytes == b; });
        bw << "<td class=\"num\">" << (pt == series[k].points.end() ? std::string("-") : figure(pt->median)) << "</td>";
      }
      bw << "</tr>";
    }
  }
  bw << "</table>";
  return bw.str();
}

// One case as line charts against size, at most kMaxSeriesPerChart series each, baselines dashed.
std::string caseCharts(const std::vector<Series>& series, size_t begin, size_t end, const std::string& case_title,
                       bool time, PlotContext& ctx) {
  std::ostringstream bw;
  const Series& head = series[begin];
  const auto parts = splitEvenly(end - begin, kMaxSeriesPerChart);
  for (size_t part = 0; part < parts.size(); ++part) {
    LineChart c;
    c.title = case_title +
              (parts.size() > 1 ? " (" + std::to_string(part + 1) + "/" + std::to_string(parts.size()) + ")" : "");
    c.x_label = "message size (bytes, log2 scale)";
    c.y_label = time ? "time (us, log scale)" : metricLabel(head.metric);
    c.x_log = true;
    c.x_bytes = true;
    c.y_log = time;
    for (size_t k = begin + parts[part].first; k < begin + parts[part].second; ++k) {
      const Series& sr = series[k];
      ChartSeries cs;
      cs.label = sr.impl;
      cs.dashed = isDashed(sr.impl);
      cs.colour = ctx.colours.of(sr.impl);
      for (const SeriesPoint& pt : sr.points) {
        std::string note =
            pt.n > 1 ? "median of " + std::to_string(pt.n) + " pairs, " + figure(pt.min) + " to " + figure(pt.max) : "";
        cs.points.push_back({{"x", std::log2(pt.bytes)}, {"y", pt.median}, {"note", note}});
      }
      c.series.push_back(std::move(cs));
    }
    bw << chartBlock(c);
    ++ctx.charts;
  }
  return bw.str();
}

// A suite's series in time or bandwidth, one plot (or table) per case.
std::string suitePlots(const std::string& suite, std::vector<Series> series, bool time, PlotContext& ctx) {
  std::string out;
  // Group by case (name and ranks), peerlab's own first within a case.
  std::stable_sort(series.begin(), series.end(), [](const Series& x, const Series& y) {
    if (x.name != y.name) return naturalLess(x.name, y.name);
    return x.ranks < y.ranks;
  });
  for (size_t begin = 0; begin < series.size();) {
    size_t end = begin;
    while (end < series.size() && series[end].name == series[begin].name && series[end].ranks == series[begin].ranks)
      ++end;
    std::set<double> sizes;
    for (size_t k = begin; k < end; ++k) {
      for (const SeriesPoint& pt : series[k].points)
        sizes.insert(pt.bytes);
    }
    const Series& head = series[begin];
    const std::string caseTitle = suite + " " + head.name + (head.ranks > 1 ? " x" + std::to_string(head.ranks) : "") +
                                  ": " + (time ? std::string("time (us)") : metricLabel(head.metric));
    // A case whose implementations were each measured at one size (MoE's T=128, a quick sweep's 256 MiB) is a
    // table: as a line chart it would be a vertical stack of dots. Without Chart.js every case is a table.
    bool line = false;
    for (size_t k = begin; k < end; ++k)
      line |= series[k].points.size() > 1;
    // Its time at a bandwidth size is the bandwidth table again.
    const bool shownAsBandwidth =
        !line && time && std::all_of(sizes.begin(), sizes.end(), [](double b) { return b >= kLatencyMaxBytes; });
    if (shownAsBandwidth) {
      // Nothing: the bandwidth table shows it.
    } else if (!line || !ctx.draw_charts) {
      out += caseTable(series, begin, end, caseTitle, sizes, line, time);
    } else {
      out += caseCharts(series, begin, end, caseTitle, time, ctx);
    }
    begin = end;
  }
  return out;
}

// Bandwidth and time against size, per suite, baselines dashed; related series (one case) share a plot, at most
// kMaxSeriesPerChart per plot.
Section sizePlotsSection(const Run& run, PlotContext& ctx) {
  std::ostringstream bw;
  bool anyPlot = false;
  for (const std::string& suite : suitesIn(run)) {
    if (isVerdictSuite(suite) || suite == "test" || suite == "health") continue;
    auto bandwidth = bandwidthSeries(run, suite);
    // Bandwidth means nothing where latency dominates: series measured only there are shown in time.
    std::erase_if(bandwidth, [](const Series& sr) {
      return std::none_of(sr.points.begin(), sr.points.end(),
                          [](const SeriesPoint& p) { return p.bytes >= kLatencyMaxBytes; });
    });
    auto times = timeSeries(run, suite);
    if (bandwidth.empty() && times.empty()) continue;
    anyPlot = true;
    bw << "<h3 id=\"plot-" << htmlEscape(suite) << "\">" << htmlEscape(suite) << "</h3>";
    if (const std::string bytes = bytesConvention(suite); !bytes.empty()) {
      bw << "<p class=\"note bytes\">Bytes: " << htmlEscape(bytes) << ".</p>";
    }
    bw << "<div class=\"charts\">" << suitePlots(suite, std::move(bandwidth), false, ctx)
       << suitePlots(suite, std::move(times), true, ctx) << "</div>";
  }
  if (!anyPlot) return {};
  std::ostringstream body;
  body << "<p class=\"note\">"
       << (ctx.draw_charts
               ? "Solid: peerlab; dashed: baselines (NCCL, CUDA, torch). Bandwidth axes start at 0, times are "
                 "on a log scale. "
               : "Charts are not drawn (" + htmlEscape(chartJs().problem) + "); the tables hold the same figures. ")
       << "Medians of each benchmark's samples, then the median over pairs (hover for the spread over pairs); a case "
          "measured at one size is a table. Each implementation has one colour on every chart. GB/s is 10<sup>9"
          "</sup> bytes per second; sizes are powers of two (KiB, MiB).</p>"
       << bw.str();
  return {"bandwidth", "Bandwidth and time against size", body.str()};
}

// One pair matrix as a heatmap tile: bandwidth at the grid's size as % of the plan's expected figure (or against the
// row's best), or, for a latency-size grid, each pair's time at its smallest size; "" when no pair has a figure.
std::string pairTile(const PairGrid& g, const std::vector<const Result*>& members, const RunPlan* plan) {
  const bool latencyGrid = g.bytes < kLatencyMaxBytes;
  std::vector<HeatCell> cells(static_cast<size_t>(g.gpus) * static_cast<size_t>(g.gpus));
  std::string unit = latencyGrid ? "us" : "GB/s";
  std::string metricName = latencyGrid ? "time_us" : "algbw_gbps";
  std::vector<double> smallest(cells.size(), 0);
  bool any = false;
  for (const Result* rp : members) {
    const Result& r = *rp;
    if (*r.src < 0 || *r.dst < 0 || *r.src >= g.gpus || *r.dst >= g.gpus) continue;
    HeatCell& cell = cells[static_cast<size_t>(*r.src) * static_cast<size_t>(g.gpus) + static_cast<size_t>(*r.dst)];
    if (r.status != "ok") {
      if (cell.status.empty() || statusRank(r.status) < statusRank(cell.status)) cell.status = r.status;
      continue;
    }
    if (latencyGrid) {
      // The smallest size's time: latency is what a small transfer costs.
      if (!r.time_us || *r.time_us <= 0) continue;
      const double bytes = r.bytes.value_or(0);
      double& seen = smallest[&cell - cells.data()];
      if (cell.value && bytes >= seen) continue;
      seen = bytes;
      cell.value = r.time_us;
      any = true;
      continue;
    }
    if (!r.bytes || *r.bytes != g.bytes) continue;
    const std::optional<ExpectedFigure> e = plan ? expectedFigure(*plan, r) : std::nullopt;
    const std::string field = e ? e->metric : std::string("algbw_gbps");
    const std::optional<double> v = field == "busbw_gbps" ? r.busbw_gbps : r.algbw_gbps;
    if (!v || *v <= 0) continue;
    if (e) metricName = field;
    cell.value = v;
    if (e) cell.expected = e->gbps;
    any = true;
  }
  if (!any) return "";
  const std::string title = g.label() + (latencyGrid ? " (latency)"
                                                     : " at " + formatBytes(g.bytes) + ", " +
                                                           (metricName == "busbw_gbps" ? "busbw" : "algbw"));
  return "<div class=\"tile\">" + heatmapTable(title, unit, g.gpus, cells) + "</div>";
}

// Pair matrices: bandwidth at the largest size as % of the plan's expected figure (or against the row's best);
// latency-size results in microseconds.
Section pairsSection(const Run& run, const std::optional<RunPlan>& plan) {
  int omittedGrids = 0;
  auto grids = pairGrids(run, kMaxGridCells, &omittedGrids);
  // Each grid's results, found once.
  std::map<std::tuple<std::string, std::string, std::string, int>, std::vector<const Result*>> gridMembers;
  for (const Result& r : run.results) {
    if (!isVerdictSuite(r.suite) && r.src && r.dst) gridMembers[{r.suite, r.impl, r.name, r.ranks}].push_back(&r);
  }
  std::string pairs;
  for (const PairGrid& g : grids) {
    if (qualify::resultFacts(g.suite).kind == qualify::RowKind::kHostCopies || g.suite == "health" ||
        g.suite == "test") {
      continue;
    }
    pairs += pairTile(g, gridMembers[{g.suite, g.impl, g.name, g.ranks}], plan ? &*plan : nullptr);
  }
  if (pairs.empty()) return {};
  std::ostringstream body;
  body << "<p class=\"note\">Rows: source GPU, columns: destination GPU. Bandwidth cells show the percentage of the "
          "figure the qualify plan expects, red where it is below (its check fails); otherwise the value, or the "
          "latency in microseconds, amber to green against the row's best or fastest pair (a weak link stands out "
          "in amber; no check is made on these). Hatched: skipped; n/a: nothing measured for the pair.</p>";
  if (omittedGrids) {
    body << "<p class=\"note\">" << omittedGrids << " more pair matrices are not drawn: the run holds more pair "
         << "results than one page shows (" << kMaxGridCells << " cells); they are in the tables below.</p>";
  }
  body << "<div class=\"tiles\">" << pairs << "</div>";
  return {"pairs", "Pair matrices", body.str()};
}

// Probe: verified verdicts against the driver's claims.
Section probeSection(const Run& run, const std::vector<Check>& checks) {
  auto probes = probeGrids(run);
  std::string suite;  // the run-file suite of the verdicts (the probe's)
  for (const Result& r : run.results) {
    if (suite.empty() && isVerdictSuite(r.suite)) suite = r.suite;
  }
  if (suite.empty()) return {};
  std::ostringstream body;
  ProbeSummary ps = summarizeProbe(run);
  std::string wall;
  for (const Result& r : run.results) {
    if (r.suite == suite && r.name == "matrix_wall" && r.time_us)
      wall = " Whole matrix: " + figure(*r.time_us / 1e6) + " s.";
  }
  if (ps.cells == 0) {
    std::string why = "the run holds no probe cell";
    for (const Check& c : checks) {
      if (c.category == kProbeCategory) why = c.reason;
    }
    body << "<p>Not run: " << htmlEscape(why) << "." << wall << "</p>";
  } else {
    body << "<p>" << ps.cells << " cells (" << ps.pairs << " ordered pairs x " << ps.methods << " methods): " << ps.ok
         << " verified ok, " << ps.unsupported << " unsupported, " << ps.failed << " failed; "
         << ps.claimed_but_failed.size() << " claimed by the driver but not verified, " << ps.works_unclaimed.size()
         << " verified but not claimed." << wall << "</p>";
    body << "<p class=\"key\"><span style=\"background:#59a14f\"></span>ok<span style=\"background:#d9d9d9\">"
            "</span>unsupported<span style=\"background:#d62728\"></span>C corrupt<span style=\"background:#8b1a1a\">"
            "</span>H hang<span style=\"background:#e8503a\"></span>E error<span "
            "style=\"background:#8a8f98\"></span>C, "
            "H, E where the driver claims nothing (no check fails) &nbsp; &#9698; claimed by "
            "cudaDeviceCanAccessPeer / the driver &nbsp; thick black border: claimed but failed &nbsp; dashed blue "
            "border: works but not claimed</p><div class=\"tiles\">";
    for (const ProbeGrid& g : probes) {
      body << "<figure><figcaption>" << htmlEscape(g.method) << "</figcaption>" << probeMatrix(g) << "</figure>";
    }
    body << "</div>";
  }
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
  return {suite, qualify::resultFacts(suite).section, body.str()};
}

// Latency tables: results of 64 KiB and less, and results without a size.
Section latencySection(const Run& run) {
  auto latency = latencyRows(run);
  // ctest wall times and health checks are not latencies.
  std::erase_if(latency, [](const LatencyRow& l) { return l.suite == "test" || l.suite == "health"; });
  if (latency.empty()) return {};
  std::ostringstream body;
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
         << (l.bytes && *l.bytes > 0 ? formatBytes(*l.bytes) : "") << "</td><td class=\"num\">" << l.ranks
         << "</td><td class=\"num\">" << l.n << "</td><td class=\"num\">" << figure(l.median_us)
         << "</td><td class=\"num\">" << figure(l.min_us) << "</td><td class=\"num\">" << figure(l.max_us)
         << "</td></tr>";
  }
  body << "</table>";
  return {"latency", "Latency", body.str()};
}

// Host <-> GPU copies gathered per GPU: the best figure of each implementation and direction (a column), the NUMA
// nodes used, what failed and what did not apply.
struct HostCopies {
  std::vector<std::string> columns;                                            // "impl name"
  std::map<int, std::map<std::string, std::pair<double, std::string>>> cells;  // gpu -> column -> value, unit
  std::map<int, std::string> numa;
  std::map<int, std::vector<std::string>> failures;
  std::map<int, std::map<std::string, std::string>> skipped;  // gpu -> column -> why it did not run
  std::string suite;                                          // the run-file suite of the host copies
};

HostCopies hostCopies(const Run& run) {
  HostCopies h;
  for (const Result& r : run.results) {
    if (qualify::resultFacts(r.suite).kind != qualify::RowKind::kHostCopies) continue;
    if (h.suite.empty()) h.suite = r.suite;
    const int gpu = r.src.value_or(r.dst.value_or(-1));
    // Memory on another NUMA node than the GPU's is another measurement: its own column.
    const bool remote =
        r.extra.contains("numa_local") && r.extra["numa_local"].is_number() && r.extra["numa_local"].get<double>() == 0;
    const std::string col = r.impl + " " + r.name + (remote ? " (remote node)" : "");
    if (std::find(h.columns.begin(), h.columns.end(), col) == h.columns.end()) h.columns.push_back(col);
    if (r.numa) {
      const std::string node = std::to_string(*r.numa);
      if (!h.numa.count(gpu)) {
        h.numa[gpu] = node;
      } else if (h.numa[gpu].find(node) == std::string::npos) {
        h.numa[gpu] += ", " + node;
      }
    }
    // A case that did not run here (no remote NUMA node) does not apply: shown as such, never as a failure.
    if (r.status != "ok" && statusRank(r.status) == 1) {
      h.skipped[gpu].emplace(col, r.status);
      continue;
    }
    if (r.status != "ok" || (r.wrong && *r.wrong > 0)) {
      h.failures[gpu].push_back(col + ": " + (r.status != "ok" ? r.status : "wrong elements"));
      continue;
    }
    const bool latencyCell = r.name == "latency" || !r.bytes || *r.bytes < kLatencyMaxBytes;
    auto& cell = h.cells[gpu][col];
    if (latencyCell) {
      if (r.time_us && (cell.second.empty() || *r.time_us < cell.first)) cell = {*r.time_us, "us"};
    } else {
      const std::optional<double> v = r.busbw_gbps && r.name == "bidir" ? r.busbw_gbps : r.algbw_gbps;
      if (v && (cell.second.empty() || *v > cell.first)) cell = {*v, "GB/s"};
    }
  }
  return h;
}

// Host <-> GPU copies per GPU: the best figure of each implementation and direction, the NUMA node used.
Section hostCopySection(const Run& run) {
  HostCopies h = hostCopies(run);
  if (h.columns.empty()) return {};
  std::set<int> gpuRows;
  for (const auto& [g, c] : h.cells)
    gpuRows.insert(g);
  for (const auto& [g, f] : h.failures)
    gpuRows.insert(g);
  for (const auto& [g, f] : h.skipped)
    gpuRows.insert(g);
  std::ostringstream body;
  body << "<p class=\"note\">Per GPU: the best bandwidth of each implementation and direction over sizes (GB/s; "
          "bidir as the sum of both directions), latency in microseconds, and the host NUMA node the buffers "
          "came from. Each column is coloured amber to green against its best GPU: a slow link or a far NUMA node "
          "stands out (only a failed check is red); hatched: the case does not apply here (n/a, hover for why). "
          "Bytes: "
       << htmlEscape(bytesConvention(h.suite))
       << ".</p><div class=\"tablebox\"><table class=\"host-copy\"><tr><th>GPU</th><th>NUMA node</th>";
  for (const std::string& c : h.columns)
    body << "<th>" << breakable(c) << "</th>";
  body << "<th>failures</th></tr>";
  std::map<std::string, double> best;
  for (const auto& [g, row] : h.cells) {
    for (const auto& [col, v] : row) {
      auto it = best.find(col);
      const bool time = v.second == "us";
      if (it == best.end() || (time ? v.first < it->second : v.first > it->second)) best[col] = v.first;
    }
  }
  for (int g : gpuRows) {
    body << "<tr" << (h.failures.count(g) ? " class=\"bad\"" : "") << "><td>"
         << (g < 0 ? std::string("all GPUs") : std::to_string(g)) << "</td><td>"
         << htmlEscape(h.numa.count(g) ? h.numa[g] : "?") << "</td>";
    for (const std::string& col : h.columns) {
      auto it = h.cells[g].find(col);
      if (it == h.cells[g].end()) {
        auto why = h.skipped[g].find(col);
        if (why != h.skipped[g].end()) {
          body << "<td class=\"num cell-skip\" title=\"" << htmlEscape(why->second) << "\">n/a</td>";
        } else {
          body << "<td class=\"num cell-na\">-</td>";
        }
        continue;
      }
      const auto& [v, unit] = it->second;
      const double fraction = unit == "us" ? best[col] / v : v / best[col];
      body << "<td class=\"num\" style=\"background:" << fractionColour(fraction) << "\" title=\""
           << htmlEscape(figure(v) + " " + unit) << "\">" << figure(v) << " " << unit << "</td>";
    }
    body << "<td>" << htmlEscape(h.failures.count(g) ? h.failures[g].front() : "") << "</td></tr>";
  }
  body << "</table></div>";
  return {h.suite, qualify::resultFacts(h.suite).section, body.str()};
}

// Cells of the health table, counted by state.
struct HealthCounts {
  int failing = 0;
  int warning = 0;
  int noted = 0;
};

// One health result as a cell: red where failing, amber for a warning, blue for ok with non-zero error counters.
std::string healthCell(const Result& r, HealthCounts& n) {
  const std::string& detail = r.detail;
  std::string cls = "cell-ok";
  const std::string info = r.status == "ok" ? healthCounters(r) : std::string();
  if (r.status == "fail" || r.status.rfind("failed", 0) == 0) {
    cls = "cell-fail";
    ++n.failing;
  } else if (r.status == "warn") {
    cls = "cell-warn";
    ++n.warning;
  } else if (!info.empty()) {
    cls = "cell-info";
    ++n.noted;
  } else if (r.status != "ok") {
    cls = "cell-skip";
  }
  return "<td class=\"" + cls + "\" title=\"" + htmlEscape(detail) + "\"><strong>" + htmlEscape(r.status) +
         "</strong>" + (info.empty() ? "" : "<br><span class=\"info\">" + htmlEscape(info) + "</span>") +
         (detail.empty() ? "" : "<br><small>" + htmlEscape(detail) + "</small>") + "</td>";
}

// Machine health per GPU: one column per check.
Section healthSection(const Run& run) {
  static const std::vector<std::string> kChecks = {"pcie_link", "pcie_errors", "nvlink_state",  "nvlink_errors",
                                                   "fabric",    "ecc",         "retired_pages", "row_remap",
                                                   "xid",       "clock_events"};
  std::vector<std::string> checks = kChecks;
  std::map<int, std::map<std::string, const Result*>> byGpu;
  for (const Result& r : run.results) {
    if (r.suite != "health") continue;
    if (std::find(checks.begin(), checks.end(), r.name) == checks.end()) checks.push_back(r.name);
    byGpu[r.src.value_or(-1)][r.name] = &r;
  }
  if (byGpu.empty()) return {};
  HealthCounts n;
  std::ostringstream t;
  t << "<div class=\"tablebox\"><table class=\"health\"><tr><th>GPU</th>";
  for (const std::string& c : checks)
    t << "<th>" << breakable(c) << "</th>";
  t << "</tr>";
  for (const auto& [gpu, row] : byGpu) {
    t << "<tr><td>" << (gpu < 0 ? std::string("host") : std::to_string(gpu)) << "</td>";
    for (const std::string& c : checks) {
      auto it = row.find(c);
      t << (it == row.end() ? std::string("<td class=\"muted\">-</td>") : healthCell(*it->second, n));
    }
    t << "</tr>";
  }
  t << "</table></div>";
  // Checks of the whole machine (no GPU) sit on a "host" row and are not counted as a GPU.
  const size_t gpus = byGpu.size() - byGpu.count(-1);
  std::ostringstream body;
  body << "<p>" << gpus << " GPU" << (gpus == 1 ? "" : "s") << (byGpu.count(-1) ? " and the host" : "")
       << " checked: " << n.failing << " failing, " << n.warning << " warning" << (n.warning == 1 ? "" : "s") << ", "
       << n.noted << " ok with counters under their thresholds (information). Red: fail, amber: warn, blue: ok "
       << "with non-zero error counters below the threshold (per GPU, and per second where the rate is the rule), "
       << "hatched grey: unsupported on this machine.</p>" << t.str();
  return {"health", "Machine health", body.str()};
}

// ctest wall times: how long each test took, in seconds; not a performance figure.
Section testsSection(const Run& run) {
  std::vector<const Result*> tests;
  for (const Result& r : run.results) {
    if (r.suite == "test") tests.push_back(&r);
  }
  if (tests.empty()) return {};
  std::ostringstream body;
  body << "<table><tr><th>test</th><th>status</th><th>wall s</th></tr>";
  for (const Result* r : tests) {
    body << "<tr class=\"" << statusClass(r->status) << "\"><td>" << htmlEscape(r->name) << "</td><td>"
         << htmlEscape(r->status) << "</td><td class=\"num\">"
         << (r->time_us ? formatted("%.1f", *r->time_us / 1e6) : "") << "</td></tr>";
  }
  body << "</table>";
  return {"tests", "Tests", body.str()};
}

// Topology as planned by qualify, when the run carries it.
Section topologySection(const Run& run) {
  if (!run.extra.contains("plan") || !run.extra["plan"].is_object() || !run.extra["plan"].contains("topology"))
    return {};
  const auto& topo = run.extra["plan"]["topology"];
  if (!topo.is_object() || !topo.contains("pairs") || !topo["pairs"].is_array()) return {};
  const int n =
      topo.contains("gpus") && topo["gpus"].is_array() ? static_cast<int>(topo["gpus"].size()) : gpuCount(run);
  std::vector<std::string> cell(static_cast<size_t>(n * n), "");
  // The stored plan is read as untrusted: a member of another type (null NVLinks where they are unknown) is
  // taken as absent.
  auto integer = [](const nlohmann::json& p, const char* key, int fallback) {
    return p.is_object() && p.contains(key) && p[key].is_number_integer() ? p[key].get<int>() : fallback;
  };
  for (const auto& p : topo["pairs"]) {
    const int a = integer(p, "src", -1), b = integer(p, "dst", -1);
    if (a < 0 || b < 0 || a >= n || b >= n) continue;
    const int links = integer(p, "nvlinks", 0);
    const std::string pci = p.contains("pci") && p["pci"].is_string() ? p["pci"].get<std::string>() : "";
    cell[static_cast<size_t>(a * n + b)] = links > 0 ? "NV" + std::to_string(links) : pci;
  }
  std::ostringstream body;
  body << "<p>"
       << htmlEscape(topo.contains("source") && topo["source"].is_string() ? topo["source"].get<std::string>() : "")
       << "</p><div class=\"tablebox\"><table><tr><th></th>";
  for (int j = 0; j < n; ++j)
    body << "<th>GPU" << j << "</th>";
  body << "</tr>";
  for (int i = 0; i < n; ++i) {
    body << "<tr><th>GPU" << i << "</th>";
    for (int j = 0; j < n; ++j)
      body << "<td>" << (i == j ? "X" : htmlEscape(cell[static_cast<size_t>(i * n + j)])) << "</td>";
    body << "</tr>";
  }
  body << "</table></div>";
  return {"topology", "Topology", body.str()};
}

// The machine's fingerprint: host, driver, CUDA, NCCL, peerlab and its GPUs.
Section machineSection(const Run& run) {
  std::ostringstream body;
  body << "<table><tr><th>host</th><td>"
       << htmlEscape(run.fingerprint.hostname.empty() ? std::string("unknown host") : run.fingerprint.hostname)
       << "</td></tr><tr><th>driver</th><td>" << htmlEscape(run.fingerprint.driver)
       << "</td></tr><tr><th>CUDA runtime</th><td>" << htmlEscape(run.fingerprint.cuda_runtime)
       << "</td></tr><tr><th>NCCL</th><td>" << htmlEscape(run.fingerprint.nccl) << "</td></tr><tr><th>peerlab</th><td>"
       << htmlEscape(run.tool) << " (" << htmlEscape(run.git_sha) << ")</td></tr><tr><th>time</th><td>"
       << htmlEscape(run.timestamp) << "</td></tr></table>";
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
  return {"fingerprint", "Machine", body.str()};
}

// The benchmark processes `peerlab bench` / `qualify` ran, when the run records them.
Section processesSection(const Run& run) {
  if (!run.extra.contains("bench") || !run.extra["bench"].is_object() || !run.extra["bench"].contains("jobs") ||
      !run.extra["bench"]["jobs"].is_array() || run.extra["bench"]["jobs"].empty()) {
    return {};
  }
  const nlohmann::json& bench = run.extra["bench"];
  std::ostringstream body;
  // The level is the plan's (recorded once); runs without a plan may name it beside their processes.
  const std::string level =
      run.plan ? std::string(levelName(run.plan->level)) : bench.value("level", bench.value("mode", std::string()));
  body << "<p class=\"note\">level: " << htmlEscape(level) << "</p>";
  if (bench.contains("serial_fallbacks") && bench["serial_fallbacks"].is_array()) {
    for (const auto& f : bench["serial_fallbacks"]) {
      if (f.is_string())
        body << "<p class=\"note\">ran again one pair at a time: " << htmlEscape(f.get<std::string>()) << "</p>";
    }
  }
  body << "<table><tr><th>process</th><th>results</th><th>wall s</th><th>outcome</th></tr>";
  for (const auto& j : bench["jobs"]) {
    if (!j.is_object()) continue;
    const std::string exit = j.value("exit", "");
    body << "<tr class=\"" << (exit == "ok" ? "ok" : "bad") << "\"><td>" << htmlEscape(j.value("label", ""))
         << "</td><td class=\"num\">" << j.value("results", 0) << "</td><td class=\"num\">"
         << figure(j.value("wall_s", 0.0)) << "</td><td>" << htmlEscape(exit) << "</td></tr>";
  }
  body << "</table>";
  return {"processes", "Benchmark processes", body.str()};
}

// Results that failed or were skipped, the worst first.
Section problemsSection(const Run& run) {
  std::vector<const Result*> problems;
  for (const Result& r : run.results) {
    if (r.status != "ok" && !(isVerdictSuite(r.suite) && statusRank(r.status) == 1)) problems.push_back(&r);
  }
  if (problems.empty()) return {};
  std::stable_sort(problems.begin(), problems.end(),
                   [](const Result* a, const Result* b) { return statusRank(a->status) < statusRank(b->status); });
  std::ostringstream body;
  body << "<div class=\"tablebox\"><table><tr><th>result</th><th>status</th></tr>";
  for (const Result* r : problems) {
    body << "<tr class=\"" << statusClass(r->status) << "\"><td>" << htmlEscape(describeResult(*r))
         << "</td><td class=\"long\">" << htmlEscape(r->status) << "</td></tr>";
  }
  body << "</table></div>";
  return {"problems", "Failed and skipped", body.str()};
}

// Every result, folded away.
Section resultsSection(const Run& run) {
  std::ostringstream body;
  body << "<details><summary>" << run.results.size()
       << " results</summary><div class=\"tablebox\"><table><tr><th>suite</th><th>name</th>"
       << "<th>impl</th><th>pair</th><th>bytes</th><th>ranks</th><th>time us</th><th>algbw GB/s</th>"
       << "<th>busbw GB/s</th><th>wrong</th><th>status</th></tr>";
  for (const Result& r : run.results) {
    body << "<tr class=\"" << statusClass(r.status) << "\"><td>" << htmlEscape(r.suite) << "</td><td>"
         << htmlEscape(r.name) << "</td><td>" << htmlEscape(r.impl) << "</td><td>" << pairText(r)
         << "</td><td class=\"num\">" << (r.bytes ? formatBytes(*r.bytes) : "") << "</td><td class=\"num\">" << r.ranks
         << "</td><td class=\"num\">"
         << (r.suite == "test" && r.time_us ? formatted("%.1f s", *r.time_us / 1e6) : optFigure(r.time_us))
         << "</td><td class=\"num\">" << optFigure(r.algbw_gbps) << "</td><td class=\"num\">" << optFigure(r.busbw_gbps)
         << "</td><td class=\"num\">" << optFigure(r.wrong) << "</td><td class=\"long\">" << htmlEscape(r.status)
         << "</td></tr>";
  }
  body << "</table></div></details>";
  return {"results", "All results", body.str()};
}

// The page's header: title, verdict badge and the machine in one line, then the nav bar, what was injected and the
// suites the plan ran that left no rows.
std::string pageHeader(const Run& run, const std::string& title, const CheckCounts& counts, const std::string& nav) {
  const int gpus = gpuCount(run);
  std::string html = "<main>\n<header><h1>" + htmlEscape(title) + "</h1>";
  // EMPTY (nothing checked) is never shown as a pass; a run with stand-ins or injected faults says so beside it.
  html += std::string("<span class=\"badge ") +
          (counts.failed    ? "fail"
           : counts.empty() ? "empty"
                            : "pass") +
          "\">" + verdictWord(counts) + "</span>";
  if (!injectionNote(run).empty()) html += " <span class=\"badge injected\">INJECTED</span>";
  std::ostringstream meta;
  meta << "<span class=\"meta\">" << htmlEscape(run.timestamp) << " &middot; " << gpus << " GPU"
       << (gpus == 1 ? "" : "s");
  if (!run.fingerprint.gpus.empty()) meta << " &middot; " << htmlEscape(run.fingerprint.gpus.front().name);
  meta << " &middot; driver " << htmlEscape(run.fingerprint.driver) << " &middot; CUDA "
       << htmlEscape(run.fingerprint.cuda_runtime) << " &middot; NCCL " << htmlEscape(run.fingerprint.nccl);
  if (!run.kind.empty()) meta << " &middot; " << htmlEscape(run.kind.name);
  if (!run.node.empty() && run.node.basis != "hostname") meta << " &middot; node " << htmlEscape(run.node.id);
  meta << "</span></header>\n<nav>" << nav << "</nav>\n";
  if (const std::string injected = injectionNote(run); !injected.empty()) {
    meta << "<p class=\"injected\"><strong>INJECTED: stand-ins or injected faults:</strong> " << htmlEscape(injected)
         << ". This run's verdicts are not this machine's own: the history stores it as injected and no fleet view, "
            "trend, regression or baseline counts it.</p>\n";
  }
  // Suites the plan ran that left no rows.
  const std::vector<std::string> suites = suitesIn(run);
  std::vector<std::string> absent;
  if (run.plan) {
    for (const PlanJob& j : run.plan->jobs) {
      if (std::find(suites.begin(), suites.end(), j.suite) == suites.end() &&
          std::find(absent.begin(), absent.end(), j.suite) == absent.end()) {
        absent.push_back(j.suite);
      }
    }
  }
  if (!absent.empty()) {
    meta << "<p class=\"note\">Not in this run: ";
    for (size_t i = 0; i < absent.size(); ++i)
      meta << (i ? ", " : "") << htmlEscape(absent[i]);
    meta << ".</p>\n";
  }
  return html + meta.str();
}

// One colour per implementation on every chart of the page.
ImplColours pageColours(const Run& run) {
  std::vector<std::pair<std::string, std::string>> drawn;
  for (const Result& r : run.results) {
    if (!isVerdictSuite(r.suite) && r.suite != "test" && r.suite != "health") drawn.emplace_back(r.suite, r.impl);
  }
  return ImplColours(drawn);
}

}  // namespace

std::string renderHtml(const Run& run, const std::vector<Check>& checks, const HtmlOptions& options) {
  // The machine by kind and node (the host name beside them: on cloud VMs it names nothing).
  const std::string title = options.title.empty() ? "peerlab report: " + machineTitle(run) : options.title;
  PlotContext plots{pageColours(run), !chartJsSource().empty()};
  const std::vector<Section> sections = {
      checksSection(run, checks),
      sizePlotsSection(run, plots),
      pairsSection(run, planOfRun(run)),
      probeSection(run, checks),
      latencySection(run),
      hostCopySection(run),
      healthSection(run),
      testsSection(run),
      topologySection(run),
      machineSection(run),
      processesSection(run),
      problemsSection(run),
      resultsSection(run),
  };
  std::string nav, body;
  for (const Section& s : sections) {
    if (s.id.empty()) continue;
    nav += "<a href=\"#" + s.id + "\">" + htmlEscape(s.heading) + "</a>";
    body += "<section id=\"" + s.id + "\"><h2>" + htmlEscape(s.heading) + "</h2>" + s.content + "</section>";
  }
  return pageBegin(title, kStyle) + pageHeader(run, title, countChecks(checks), nav) + body + "\n</main>\n" +
         pageEnd(plots.charts > 0 ? ChartJsUse::kInline : ChartJsUse::kNone);
}

}  // namespace peerlab::report
