// The store seam's holding kinds: a store says once which holdings it serves, and the requests
// of a kind it does not serve answer with that reason; a semaphore, a read-write lock and an
// election made over such a store fail at once, naming it. On the fake store (leases only).
#include "fake_store.hpp"
#include "lock/mutex/locker_access.hpp"

#include <colock/election.hpp>
#include <colock/error.hpp>
#include <colock/locker.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/system/system_error.hpp>

#include <doctest/doctest.h>

#include <string>

namespace {

namespace asio = boost::asio;
using colock::detail::holding_kind;
using colock::detail::lease_store;
using colock::detail::semaphore_keys;

constexpr std::string_view no_semaphore = "the locker's store serves no semaphore";
constexpr std::string_view no_election = "the locker's store serves no election";

struct seam_world {
    colock::test::fake_server server;
    asio::io_context ctx;
    std::shared_ptr<colock::test::fake_store> store =
        std::make_shared<colock::test::fake_store>(server, ctx.get_executor());

    // Runs `op` (an awaitable) on the store's strand to its end.
    template <class Awaitable>
    auto run(Awaitable op) {
        auto f = asio::co_spawn(store->strand(), std::move(op), asio::use_future);
        ctx.run();
        ctx.restart();
        return f.get();
    }
};

// The message of the system_error `f` throws, or an empty string when it throws none.
template <class F>
std::pair<boost::system::error_code, std::string> thrown_by(F f) {
    try {
        f();
    } catch (boost::system::system_error const& e) {
        return {e.code(), e.what()};
    }
    return {};
}

} // namespace

TEST_CASE("store seam: a store serves leases; one that serves nothing else says why, per kind") {
    seam_world w;
    lease_store const& store = *w.store;
    CHECK(store.refusal_of(holding_kind::lease).empty());
    CHECK(store.refusal_of(holding_kind::permits) == no_semaphore);
    CHECK(store.refusal_of(holding_kind::election) == no_election);
}

TEST_CASE("store seam: every permit request of a store that serves none answers invalid_argument "
          "with its reason, and nothing is held") {
    seam_world w;
    lease_store& store = *w.store;
    semaphore_keys const keys("colock:s:", "seam", "owner-1", 3);
    std::string const token = "t1";
    std::string const owner = "owner-1";
    colock::detail::permit_request const request{token, 2,    3,   std::chrono::milliseconds(1000),
                                                 owner, true, true};

    auto const grant = w.run(store.grant_permits(keys, request, {}));
    CHECK(grant.ec == colock::error::invalid_argument);
    CHECK(grant.server_text == no_semaphore);
    CHECK_FALSE(grant.granted);
    CHECK_FALSE(grant.outcome_unknown); // nothing ran: nothing to release on the way out

    auto const reading = w.run(store.read_permits(keys, 0));
    CHECK(reading.ec == colock::error::invalid_argument);
    CHECK(reading.server_text == no_semaphore);
    CHECK_FALSE(reading.capacity);

    for (bool weigh : {false, true}) {
        auto const ext =
            w.run(store.extend_permits(keys, token, std::chrono::milliseconds(1000), weigh));
        CHECK(ext.reply.ec == colock::error::invalid_argument);
        CHECK_FALSE(ext.reply.ours);
        CHECK_FALSE(ext.weighted);
    }
    auto const down = w.run(store.downgrade_permits(keys, token));
    CHECK(down.ec == colock::error::invalid_argument);
    CHECK_FALSE(down.ours);
    for (bool leave : {false, true}) {
        auto const released = w.run(store.release_permits(keys, token, 2, leave));
        CHECK(released.ec == colock::error::invalid_argument);
        CHECK_FALSE(released.ours);
        CHECK_FALSE(released.handed);
    }
    bool retried = false;
    store.release_permits_in_background(keys, token, 2, false, [&] { retried = true; });
    w.ctx.run();
    CHECK_FALSE(retried); // a refusal is not a passing failure
    CHECK(store.permit_server_changes(keys) == 0);
}

TEST_CASE("store seam: an election's requests over a store that serves none answer its reason") {
    seam_world w;
    lease_store& store = *w.store;
    colock::detail::lock_keys const keys("colock:e:", "seam", "owner-1");
    colock::detail::proclaim_request request;
    request.token = "t1";
    auto const proclaimed = w.run(store.proclaim(keys, request));
    CHECK(proclaimed.ec == colock::error::invalid_argument);
    CHECK(proclaimed.server_text == no_election);
    CHECK_FALSE(proclaimed.written);
    auto const read = w.run(store.read_election(keys));
    CHECK(read.ec == colock::error::invalid_argument);
    CHECK(read.server_text == no_election);
    CHECK_FALSE(read.leading);
}

TEST_CASE("store seam: a semaphore, a read-write lock or an election over a store that does not "
          "serve it is refused when made, naming it and the store's reason") {
    seam_world w;
    auto locks = colock::detail::locker_access::make(w.store);
    auto const sem = thrown_by([&] { colock::semaphore s{locks, "jobs", 4}; });
    CHECK(sem.first == colock::error::invalid_argument);
    CHECK(sem.second.find("semaphore 'jobs'") != std::string::npos);
    CHECK(sem.second.find(no_semaphore) != std::string::npos);
    auto const rw = thrown_by([&] { colock::rw_lock l{locks, "table"}; });
    CHECK(rw.first == colock::error::invalid_argument);
    CHECK(rw.second.find("'table'") != std::string::npos);
    CHECK(rw.second.find(no_semaphore) != std::string::npos);
    auto const term = thrown_by([&] { colock::election e{locks, "leader"}; });
    CHECK(term.first == colock::error::invalid_argument);
    CHECK(term.second.find("election 'leader'") != std::string::npos);
    CHECK(term.second.find(no_election) != std::string::npos);
    // The locker itself still serves locks.
    CHECK(w.store->refusal_of(holding_kind::lease).empty());
}
