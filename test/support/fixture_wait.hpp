// What the deployment fixtures (sentinel_set, cluster_set) share: polling redis-cli until a
// condition holds, reading a field of an INFO reply, and failing with the fixture's name.
// Private to test/support.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace colock::test::detail {

/// `fail("what")` throws std::runtime_error("<fixture>: what"): a fixture that could not set
/// itself up says which it is.
struct setup_failure {
    char const* fixture;

    [[noreturn]] void operator()(std::string const& what) const {
        throw std::runtime_error(std::string(fixture) + ": " + what);
    }
};

/// The value of `field:` in an INFO text, or empty.
inline std::string info_field(std::string const& info, std::string const& field) {
    auto const at = info.find(field + ":");
    if (at == std::string::npos)
        return {};
    auto const begin = at + field.size() + 1;
    auto const end = info.find_first_of("\r\n", begin);
    return info.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

/// Calls `done` every 50 ms until it returns true (then true) or `within` passes (then false).
/// A std::runtime_error from it (a node that is down or restarting) counts as "not yet".
template <class Done>
bool poll_until(std::chrono::milliseconds within, Done done) {
    auto const deadline = std::chrono::steady_clock::now() + within;
    for (;;) {
        try {
            if (done())
                return true;
        } catch (std::runtime_error const&) {
            // not yet
        }
        if (std::chrono::steady_clock::now() >= deadline)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
}

} // namespace colock::test::detail
