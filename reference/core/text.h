#pragma once
/// Text that came from files, databases or users, made safe to print: on a terminal, in a one-line message, in a log.

#include <string>
#include <string_view>

namespace peerlab {

/// `text` as it may be printed: control characters (ESC, the C1 range and DEL included) escaped as \n, \r, \t or
/// \xNN (\u00NN for C1), bytes that are not UTF-8 as \xNN; text longer than `max_bytes` is cut there and ends in
/// "...". Printable UTF-8 is kept as it is.
std::string printable(std::string_view text, size_t max_bytes = std::string_view::npos);

/// `text` with the secrets of database URLs replaced by "***": the password of a URL's user info
/// (postgresql://user:***@host/db) and the value of a password= parameter or conninfo keyword.
std::string redactSecrets(std::string_view text);

}  // namespace peerlab
