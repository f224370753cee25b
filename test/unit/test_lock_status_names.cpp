// What co_status reports, without a server: the names of a lock's states, and what a status
// that has read nothing says.
#include <colock/lock_status.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string_view>

namespace lock_status_names_test {

using colock::lock_state;
using colock::lock_status;

TEST_CASE("lock status: every state has its own name; a value outside them is unknown") {
    CHECK(to_string(lock_state::free) == std::string_view("free"));
    CHECK(to_string(lock_state::held) == std::string_view("held"));
    CHECK(to_string(lock_state::handed) == std::string_view("handed"));
    CHECK(to_string(static_cast<lock_state>(3)) == std::string_view("unknown"));
    CHECK(to_string(static_cast<lock_state>(-1)) == std::string_view("unknown"));
}

TEST_CASE("lock status: held() is true for a held lock only, not for one handed to a waiter") {
    lock_status st;
    CHECK_FALSE(st.held());
    st.state = lock_state::handed;
    CHECK_FALSE(st.held());
    st.state = lock_state::held;
    CHECK(st.held());
}

TEST_CASE("lock status: a status that read nothing is a free lock with no holder, fence or wait") {
    lock_status const st;
    CHECK(st.state == lock_state::free);
    CHECK(st.fence == 0);
    CHECK(st.ttl == std::chrono::milliseconds{0});
    CHECK(st.holder_id.empty());
    CHECK(st.token.empty());
    CHECK_FALSE(st.since.has_value());
    CHECK_FALSE(st.holder.has_value());
    CHECK(st.queued == 0);
    colock::holder_info const h;
    CHECK(h.pid == 0);
    CHECK(h.started == std::chrono::system_clock::time_point{});
}

} // namespace lock_status_names_test
