#pragma once
/// Number formatting of the report layer, in one place: the checks engine's texts (measured, expected, reasons), the
/// compare table and the noise rule, and every renderer (report.html, summary.md, junit.xml, the history site) write
/// numbers with these.

#include <optional>
#include <string>

namespace peerlab::report {

/// A measured figure with the digits that matter: "395", "38.1", "4.97", "0.0123".
std::string figure(double v);
/// Short human number for tables and tooltips: 3 significant digits, no exponent for the usual ranges; "-" when not
/// finite.
std::string shortNumber(double v);
/// A figure of the compare table: "2095.5", "54.96", "0.8123"; "-" when there is none.
std::string tableFigure(std::optional<double> v);
/// Every digit a double holds ("%.17g"): keys and ranges that must round-trip.
std::string exactNumber(double v);
/// Bytes in binary units: "8 B", "256 MiB", "1.5 GiB".
std::string formatBytes(double bytes);
/// A byte count in the largest of B, KiB, MiB and GiB it reaches, with up to 6 significant digits (printf "%g"):
/// "256 MiB", "1.5 GiB", "4096 GiB" (heatmap titles on the history site).
std::string bytesLabel(double bytes);
/// One printf conversion of any length ("%.1f GB/s", "%+.2f%%", "%012llx"); the compiler checks spec against the
/// arguments.
[[gnu::format(printf, 1, 2)]] std::string formatted(const char* spec, ...);

}  // namespace peerlab::report
