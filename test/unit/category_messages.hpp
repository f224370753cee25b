// The messages an error category gives its codes, for the tests of each category: every code of
// an enumeration has one, and no two codes share one.
#pragma once

#include <boost/system/error_category.hpp>

#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

namespace colock::test {

// The messages of `cat` for the codes `first` to `last`, in order; checks that no two are alike.
template <class Enum>
std::vector<std::string> distinct_messages(boost::system::error_category const& cat, Enum first,
                                           Enum last) {
    std::vector<std::string> out;
    std::set<std::string> seen;
    for (int v = static_cast<int>(first); v <= static_cast<int>(last); ++v) {
        auto m = cat.message(v);
        CHECK_MESSAGE(seen.insert(m).second, "code " << v << " repeats " << m);
        out.push_back(std::move(m));
    }
    return out;
}

} // namespace colock::test
