// Bytes as a quoted, printable string for messages: the one escaping that debug strings of
// values and the connection's account of unexpected bytes share. Private to the library's
// sources.
#pragma once

#include <string>
#include <string_view>

namespace colock::resp3::detail {

/// Appends `s` in double quotes: printable ASCII as it is; '"', '\\', \r, \n and \t escaped;
/// any other byte as \xHH.
void append_escaped(std::string& out, std::string_view s);

} // namespace colock::resp3::detail
