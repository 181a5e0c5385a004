#pragma once
/// Number formatting the renderers share.

#include <string>

namespace peerlab::report {

/// A measured figure with the digits that matter: "395", "38.1", "4.97", "0.0123".
std::string figure(double v);
/// Short human number for tables and tooltips: 3 significant digits, no exponent for the usual ranges; "-" when not
/// finite.
std::string shortNumber(double v);
/// `v` written with one printf conversion `spec` ("%.0f", "%.1f GB/s").
std::string formatted(const char* spec, double v);
/// A byte count in the largest of B, KiB, MiB and GiB it reaches, with up to 6 significant digits (printf "%g"):
/// "256 MiB", "1.5 GiB", "4096 GiB" (heatmap titles on the history site).
std::string bytesLabel(double bytes);

}  // namespace peerlab::report
