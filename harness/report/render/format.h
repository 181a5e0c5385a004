#pragma once
/// Number formatting the renderers share.

#include <string>

namespace peerlab::report {

/// A measured figure with the digits that matter: "395", "38.1", "4.97", "0.0123".
std::string figure(double v);

}  // namespace peerlab::report
