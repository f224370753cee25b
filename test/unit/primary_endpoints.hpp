// The endpoints of three Redlock primaries, as the quorum rounds name them in their errors, for
// the unit tests of those rounds.
#pragma once

#include <string>
#include <vector>

namespace colock::test {

inline std::vector<std::string> const endpoints{"a:1", "b:2", "c:3"};

} // namespace colock::test
