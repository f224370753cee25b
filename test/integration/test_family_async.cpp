// The election's, the read-write lock's and the semaphore's operations that were awaitable only,
// in their async_* forms for any completion token: futures, callbacks (one bound to a strand of
// a thread pool) and deferred operations; their errors as codes, and cancellation.
#include <colock/election.hpp>
#include <colock/lock_scope.hpp>
#include <colock/locker.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include "test_util.hpp"
#include "watched_executor.hpp"
#include <colock_test/redis_server.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

using namespace colock;
using namespace colock::test;

namespace {

// The code a future of `void(error_code, ...)` failed with, or none.
template <class T>
error_code code_of(std::future<T>& f) {
    try {
        f.get();
    } catch (boost::system::system_error const& e) {
        return e.code();
    }
    return {};
}

// What every case runs on: a locker on the shared server, its context run by two threads (joined
// last, once the connection is gone), so that futures can be waited for here.
struct running_locker {
    asio::io_context ctx;
    context_threads runners{ctx, 2};
    redis::connection conn{ctx.get_executor(), shared_server().config()};
    locker locks{conn};
};

} // namespace

TEST_CASE_FIXTURE(
    running_locker,
    "the election's async forms: async_campaign, async_leader, a watch's async_next, "
    "async_proclaim and async_release, with futures, callbacks and a deferred operation; "
    "a candidate waits and leads after the resign; errors and cancellation as codes") {
    auto const name = unique_key("async-election");
    election vote{locks, name};

    auto lead = vote.async_campaign("a", lease(5000ms), asio::use_future).get();
    CHECK(lead.owns());
    auto const info = vote.async_leader(asio::use_future).get();
    REQUIRE(info.has_value());
    CHECK(info->value == "a");
    CHECK(info->term == lead.term());

    auto watch = vote.observe();
    auto const first = watch.async_next(asio::use_future).get();
    REQUIRE(first.has_value());
    CHECK(first->leading);
    CHECK(first->value == "a");

    // A deferred proclaim runs when launched; value() says it once it has completed.
    auto proclaim = lead.async_proclaim("b", asio::deferred);
    CHECK(lead.value() == "a");
    std::move(proclaim)(asio::use_future).get();
    CHECK(lead.value() == "b");
    auto const changed = watch.async_next(asio::use_future).get();
    REQUIRE(changed.has_value());
    CHECK(changed->value == "b");
    CHECK(changed->term == lead.term());

    // A second candidate, with a callback: it waits while "a" leads.
    std::promise<std::pair<error_code, leadership>> second_done;
    vote.async_campaign("c", lease(5000ms), [&](error_code ec, leadership l) {
        second_done.set_value({ec, std::move(l)});
    });
    auto second = second_done.get_future();
    CHECK(second.wait_for(300ms) == std::future_status::timeout);
    // One more, with too short a wait: error::timeout, as a code.
    lock_options impatient = lease(5000ms);
    impatient.wait_timeout = 200ms;
    std::promise<std::pair<error_code, bool>> late_done;
    vote.async_campaign("d", impatient, [&](error_code ec, leadership l) {
        late_done.set_value({ec, l.owns()});
    });
    auto const [late_ec, late_leads] = late_done.get_future().get();
    CHECK(late_ec == error::timeout);
    CHECK_FALSE(late_leads);

    CHECK(lead.async_release(asio::use_future).get());
    CHECK_FALSE(lead.owns());
    REQUIRE(second.wait_for(5s) == std::future_status::ready);
    auto [second_ec, next] = second.get();
    CHECK_FALSE(second_ec);
    CHECK(next.owns());
    CHECK(next.term() > lead.term());
    auto const handed = watch.async_next(asio::use_future).get();
    REQUIRE(handed.has_value());
    CHECK(handed->value == "c");

    // A term that is over refuses a proclaim; a leadership of nothing says so.
    auto over = lead.async_proclaim("x", asio::use_future);
    CHECK(code_of(over) == error::lock_lost);
    CHECK(lead.value() == "b");
    leadership none;
    auto nothing = none.async_proclaim("x", asio::use_future);
    CHECK(code_of(nothing) == error::not_held);

    // A waiting async_next cancelled: operation_aborted, and no change is lost.
    asio::cancellation_signal stop;
    std::promise<error_code> next_done;
    watch.async_next(
        asio::bind_cancellation_slot(stop.slot(), [&](error_code ec, std::optional<leader_change>) {
            next_done.set_value(ec);
        }));
    auto cancelled = next_done.get_future();
    CHECK(cancelled.wait_for(100ms) == std::future_status::timeout);
    asio::post(ctx, [&] { stop.emit(asio::cancellation_type::terminal); });
    REQUIRE(cancelled.wait_for(5s) == std::future_status::ready);
    CHECK(cancelled.get() == asio::error::operation_aborted);
    CHECK(next.async_release(asio::use_future).get());
    auto const ended = watch.async_next(asio::use_future).get();
    REQUIRE(ended.has_value());
    CHECK_FALSE(ended->leading);
    // A watch of nothing completes with an empty optional.
    leader_watch idle;
    CHECK_FALSE(idle.async_next(asio::use_future).get().has_value());
    watch.close();
    conn.close();
}

TEST_CASE_FIXTURE(
    running_locker,
    "the read-write lock's async_try_lock_shared, async_try_lock and async_downgrade, and "
    "the semaphore's async_available, with futures and a callback on a strand of a "
    "4-thread pool; errors as codes") {
    auto const name = unique_key("async-family");
    rw_lock rw{locks, name};

    auto reader = rw.async_try_lock_shared(lease(5000ms), asio::use_future).get();
    REQUIRE(reader.has_value());
    CHECK(reader->owns());
    CHECK_FALSE(rw.async_try_lock(lease(5000ms), asio::use_future).get().has_value());
    CHECK(reader->async_release(asio::use_future).get());
    auto writer = rw.async_try_lock(lease(5000ms), asio::use_future).get();
    REQUIRE(writer.has_value());
    CHECK(writer->owns());
    CHECK_FALSE(rw.async_try_lock_shared(lease(5000ms), asio::use_future).get().has_value());

    auto const fence = writer->fence();
    auto downgraded = writer->async_downgrade(asio::use_future).get();
    CHECK(downgraded.owns());
    CHECK(downgraded.fence() == fence);
    CHECK_FALSE(writer->owns());
    // Now a reader's: another reader is let in, a writer is not.
    auto beside = rw.async_try_lock_shared(lease(5000ms), asio::use_future).get();
    CHECK(beside.has_value());
    CHECK_FALSE(rw.async_try_lock(lease(5000ms), asio::use_future).get().has_value());
    auto again = writer->async_downgrade(asio::use_future);
    CHECK(code_of(again) == error::not_held);
    CHECK(downgraded.async_release(asio::use_future).get());
    CHECK(beside->async_release(asio::use_future).get());

    semaphore sem{locks, name + "-sem", 3};
    CHECK(sem.async_available(asio::use_future).get() == 3);
    auto two = sem.async_acquire(2, lease(5000ms), asio::use_future).get();
    asio::thread_pool pool{4};
    auto strand = asio::make_strand(pool);
    std::promise<std::pair<error_code, std::size_t>> counted;
    bool on_strand = false;
    sem.async_available(asio::bind_executor(strand, [&](error_code ec, std::size_t n) {
        on_strand = strand.running_in_this_thread();
        counted.set_value({ec, n});
    }));
    auto const [ec, free] = counted.get_future().get();
    CHECK_FALSE(ec);
    CHECK(free == 1);
    CHECK(on_strand);
    // Another capacity for the same name: refused, as co_available throws it.
    semaphore other{locks, name + "-sem", 5};
    auto refused = other.async_available(asio::use_future);
    CHECK(code_of(refused) == error::invalid_argument);
    CHECK(two.async_release(asio::use_future).get());
    semaphore moved{std::move(sem)};
    CHECK(call_failure([&] { (void)sem.async_available(); }).code == error::invalid_argument);
    pool.join();
    conn.close();
}

TEST_CASE_FIXTURE(
    running_locker,
    "the options may be left out before the token: async_lock(name, token) and its kin "
    "take the default options") {
    auto const name = unique_key("token-only");

    auto g = locks.async_lock(name, asio::use_future).get();
    CHECK(g.owns());
    CHECK(g.lease_expiry() - steady::now() > lock_options{}.ttl / 2); // the default ttl
    CHECK_FALSE(locks.async_try_lock(name, asio::use_future).get().has_value());
    CHECK(g.async_release(asio::use_future).get());
    auto set = locks.async_lock_all(strings(name, name + "-2"), asio::use_future).get();
    CHECK(set.owns());
    CHECK_FALSE(locks.async_try_lock_all(strings(name + "-2"), asio::use_future).get());
    CHECK(set.async_release(asio::use_future).get());

    lock_scope scope{locks};
    auto scoped = scope.async_lock(name, asio::use_future).get();
    auto again = scope.async_try_lock(name, asio::use_future).get(); // re-entry
    REQUIRE(again.has_value());
    CHECK(again->fence() == scoped.fence());

    semaphore sem{locks, name + "-sem", 2};
    auto one = sem.async_acquire(1, asio::use_future).get();
    auto other = sem.async_try_acquire(1, asio::use_future).get();
    CHECK(one.owns());
    CHECK(other.has_value());
    rw_lock rw{locks, name + "-rw"};
    auto reader = rw.async_lock_shared(asio::use_future).get();
    CHECK(reader.owns());
    CHECK(rw.async_try_lock_shared(asio::use_future).get().has_value());
    CHECK_FALSE(rw.async_try_lock(asio::use_future).get().has_value());
    CHECK(reader.async_release(asio::use_future).get());
    election vote{locks, name + "-vote"};
    auto lead = vote.async_campaign("v", asio::use_future).get();
    CHECK(lead.owns());
    CHECK(lead.async_release(asio::use_future).get());
    // With options, the same calls as before.
    lock_options opt = lease(3000ms);
    auto w = rw.async_lock(opt, asio::use_future).get();
    CHECK(w.owns());
    CHECK(w.lease_expiry() - steady::now() <= 3000ms);
    CHECK(w.async_release(asio::use_future).get());
    conn.close();
}

TEST_CASE_FIXTURE(
    running_locker,
    "an operation under way counts as work on its handler's executor: a thread pool whose "
    "only work is a callback of async_lock, async_acquire or async_campaign bound to its "
    "strand is joined only after the callback ran") {
    auto const name = unique_key("foreign-work");
    auto held = locks.async_lock(name, lease(5000ms), asio::use_future).get();
    semaphore sem{locks, name + "-sem", 1};
    auto permit_held = sem.async_acquire(1, lease(5000ms), asio::use_future).get();
    election vote{locks, name + "-vote"};
    auto lead = vote.async_campaign("first", lease(5000ms), asio::use_future).get();

    asio::thread_pool pool{4};
    auto strand = asio::make_strand(pool);
    std::atomic<int> ran{0};
    // Each waits for what is held above; nothing else is queued on the pool.
    locks.async_lock(name, lease(5000ms),
                     asio::bind_executor(strand, [&](error_code ec, lock_guard g) {
                         CHECK_FALSE(ec);
                         CHECK(g.owns());
                         ++ran;
                     }));
    sem.async_acquire(1, lease(5000ms), asio::bind_executor(strand, [&](error_code ec, permit p) {
                          CHECK_FALSE(ec);
                          CHECK(p.owns());
                          ++ran;
                      }));
    vote.async_campaign("second", lease(5000ms),
                        asio::bind_executor(strand, [&](error_code ec, leadership l) {
                            CHECK_FALSE(ec);
                            CHECK(l.owns());
                            ++ran;
                        }));
    // Let them go in 300 ms, from the connection's thread; join() waits for the callbacks.
    asio::steady_timer later{ctx, 300ms};
    later.async_wait([&](error_code) {
        held.async_release([](error_code, bool) {});
        permit_held.async_release([](error_code, bool) {});
        lead.async_release([](error_code, bool) {});
    });
    pool.join();
    CHECK(ran == 3);
    conn.close();
}

TEST_CASE_FIXTURE(
    running_locker,
    "an operation lets go of its handler's executor before its work: a thread pool joined and "
    "destroyed as soon as a callback of async_try_lock or async_leader bound to its strand "
    "has run is not touched afterwards") {
    auto const name = unique_key("late-copy");
    election vote{locks, name + "-vote"};
    auto const run_once = [&](auto start) {
        auto const outcome = watch_late_copies(ctx, start);
        CHECK(outcome.ran_before_join_returned);
        return outcome.copies_outliving_pool;
    };
    CHECK(run_once([&](auto h) { locks.async_try_lock(name, lease(5000ms), std::move(h)); }) == 0);
    CHECK(run_once([&](auto h) { vote.async_leader(std::move(h)); }) == 0);
    conn.close();
}

TEST_CASE_FIXTURE(
    running_locker,
    "names as std::string_view: the lock, the scope, the semaphore, the read-write lock and "
    "the election take one; a deferred operation keeps its own copy of the name") {
    std::string const base = unique_key("views");
    std::string_view const name = base;

    auto g = locks.async_lock(name, lease(5000ms), asio::use_future).get();
    CHECK(g.name() == base);
    CHECK(locks.async_status(name, asio::use_future).get().held());
    CHECK(g.async_release(asio::use_future).get());
    // The text behind the view goes before the operation is launched: it was copied at the call.
    std::optional<decltype(locks.async_lock(name, lease(5000ms), asio::deferred))> later;
    {
        std::string gone = base + "-gone";
        later.emplace(locks.async_lock(std::string_view(gone), lease(5000ms), asio::deferred));
        gone.assign(gone.size(), 'x');
    }
    auto taken = std::move(*later)(asio::use_future).get();
    CHECK(taken.name() == base + "-gone");
    CHECK(taken.async_release(asio::use_future).get());

    lock_scope scope{locks};
    auto scoped = scope.async_lock(name, asio::use_future).get();
    CHECK(scoped.name() == base);
    semaphore sem{locks, std::string_view(base + "-sem"), 1}; // a view of a temporary
    CHECK(sem.name() == base + "-sem");
    rw_lock rw{locks, name};
    CHECK(rw.name() == base);
    election vote{locks, name};
    CHECK(vote.name() == base);
    conn.close();
}
