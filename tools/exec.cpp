// colock exec: take the lock (or, with --permits, a permit of a semaphore; with --shared or
// --exclusive, a read-write lock; with --all, several locks at once), run the command while the
// lease is renewed, and stop the command when the lease is lost.
#include "cli.hpp"
#include "supervise.hpp"
#include "text.hpp"

#include <colock/error.hpp>
#include <colock/rw_lock.hpp>
#include <colock/semaphore.hpp>

#include <boost/asio/this_coro.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <exception>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace colock::cli {

namespace {

namespace asio = boost::asio;

// A best-effort account of who holds the lock, for the message of a lock not acquired:
// " (held by PROGRAM pid N on HOST)", or nothing.
asio::awaitable<std::string> holder_text(locker& lk, std::string name) {
    try {
        auto const st = co_await lk.co_status(std::move(name));
        if (st.state == lock_state::held && st.holder)
            co_return fmt::format(" (held by {} pid {} on {})", printable(st.holder->program),
                                  st.holder->pid, printable(st.holder->host));
        if (st.state == lock_state::held)
            co_return fmt::format(" (held by locker {})", printable(st.holder_id));
    } catch (std::exception const&) {
    }
    co_return std::string{};
}

// What exec waits for, once taken; or the signal that ended the wait; or --wait passed.
template <class Held>
struct acquisition {
    std::optional<Held> held;
    /// The signal that ended the wait, or 0.
    int signal = 0;
    bool timed_out = false;
};

// Waits up to --wait for what `wait(opt)` takes, or for a signal; with --wait 0, makes the one
// attempt `once(opt)` instead. Other failures are thrown.
//
// The one attempt of --wait 0 gets no wait_timeout: it does not wait anyway, and a wait_timeout
// of 0 would cut it short if its request had to wait for a connection (to the node of the
// name's slot, on a Cluster whose node reconnects), reporting a free lock as not acquired.
template <class Held, class Once, class Wait>
asio::awaitable<acquisition<Held>> acquire(options const& o, asio::signal_set& stop, Once once,
                                           Wait wait) {
    lock_options lo;
    lo.ttl = o.ttl;
    acquisition<Held> out;
    try {
        if (o.wait && o.wait->count() == 0) {
            auto got = co_await or_signal(once(lo), stop);
            out.signal = got.signal;
            if (got.value)
                out.held = std::move(*got.value);
            co_return out;
        }
        lo.wait_timeout = o.wait;
        auto got = co_await or_signal(wait(lo), stop);
        out.signal = got.signal;
        out.held = std::move(got.value);
    } catch (boost::system::system_error const& e) {
        if (e.code() != colock::error::timeout)
            throw;
        out.timed_out = true;
    }
    co_return out;
}

// A best-effort account of the semaphore's permits, for the message of a permit not acquired:
// " (N of M held)", or nothing.
asio::awaitable<std::string> permits_text(semaphore& sem) {
    try {
        auto const free_now = co_await sem.co_available();
        co_return fmt::format(" ({} of {} held)", sem.capacity() - free_now, sem.capacity());
    } catch (std::exception const&) {
    }
    co_return std::string{};
}

// exec --permits N: the command runs under one permit of semaphore NAME of capacity N.
asio::awaitable<int> run_exec_permit(options const& o, redis::connection& conn, locker& lk,
                                     tool_signals& sigs) {
    semaphore sem{lk, o.name, *o.permits};
    auto const name = printable(o.name);
    acquisition<permit> got;
    try {
        got = co_await acquire<permit>(
            o, sigs.stop, [&sem](lock_options lo) { return sem.co_try_acquire(lo); },
            [&sem](lock_options lo) { return sem.co_acquire(lo); });
    } catch (boost::system::system_error const& e) {
        // The arguments were checked before: the server holds another capacity for the name
        // (the library's message names both).
        if (e.code() != colock::error::invalid_argument)
            throw;
        std::string text = e.what();
        if (text.starts_with("colock: "))
            text.erase(0, 8);
        complain(printable(text));
        co_return exit_capacity_mismatch;
    }
    if (got.signal != 0) {
        co_await let_queue_exit_go_out(conn);
        co_return 128 + got.signal;
    }
    if (got.timed_out || !got.held) {
        auto const held = co_await permits_text(sem);
        if (got.timed_out)
            complain(fmt::format("no permit of semaphore '{}' acquired within {}{}", name,
                                 format_duration(*o.wait), held));
        else
            complain(fmt::format("semaphore '{}' has no permit free{}", name, held));
        co_return exit_not_acquired;
    }
    lease_words const words{
        fmt::format("the permit of semaphore '{}' (fence {})", name, got.held->fence()),
        fmt::format("release the permit of semaphore '{}'", name)};
    holding_lease lease{*got.held, [&got] { return got.held->release(); }};
    // Named, not a temporary in the co_await: GCC 12 destroys such a temporary twice.
    lease_identity const identity{o.name, std::to_string(got.held->fence()), got.held->token()};
    co_return co_await run_under_lease(o, lease, words, identity, sigs);
}

// exec --shared / --exclusive: the command runs under read-write lock NAME, as a reader or as
// its writer.
template <class Guard>
asio::awaitable<int> run_exec_rw(options const& o, redis::connection& conn, locker& lk,
                                 tool_signals& sigs) {
    constexpr bool reader = std::is_same_v<Guard, read_guard>;
    std::string_view const what = reader ? "read lock" : "write lock";
    rw_lock rw{lk, o.name};
    auto const name = printable(o.name);
    acquisition<Guard> got;
    if constexpr (reader)
        got = co_await acquire<Guard>(
            o, sigs.stop, [&rw](lock_options lo) { return rw.co_try_lock_shared(lo); },
            [&rw](lock_options lo) { return rw.co_lock_shared(lo); });
    else
        got = co_await acquire<Guard>(
            o, sigs.stop, [&rw](lock_options lo) { return rw.co_try_lock(lo); },
            [&rw](lock_options lo) { return rw.co_lock(lo); });
    if (got.signal != 0) {
        co_await let_queue_exit_go_out(conn);
        co_return 128 + got.signal;
    }
    if (got.timed_out || !got.held) {
        if (got.timed_out)
            complain(fmt::format("the {} of '{}' was not acquired within {}", what, name,
                                 format_duration(*o.wait)));
        else
            complain(fmt::format("the {} of '{}' is not free now ({})", what, name,
                                 reader ? "a writer holds it or waits for it"
                                        : "readers or a writer hold it, or wait for it"));
        co_return exit_not_acquired;
    }
    lease_words const words{fmt::format("the {} of '{}' (fence {})", what, name, got.held->fence()),
                            fmt::format("release the {} of '{}'", what, name)};
    holding_lease lease{*got.held, [&got] { return got.held->release(); }};
    // Named, not a temporary in the co_await: GCC 12 destroys such a temporary twice.
    lease_identity const identity{o.name, std::to_string(got.held->fence()), got.held->token()};
    co_return co_await run_under_lease(o, lease, words, identity, sigs);
}

// The locks of a set, held at once: giving it up unlocks every one.
class set_lease final : public held_lease {
public:
    explicit set_lease(multi_lock_guard& set) noexcept : set_(set) {}
    void async_wait_lost(lost_handler handler) override {
        set_.async_wait_lost(std::move(handler));
    }
    std::optional<loss_reason> loss() const override { return set_.loss(); }
    asio::awaitable<bool> give_up() override { return set_.release(); }

private:
    multi_lock_guard& set_;
};

// exec --all: the command runs under the locks of every name at once.
asio::awaitable<int> run_exec_all(options const& o, redis::connection& conn, locker& lk,
                                  tool_signals& sigs) {
    auto const shown = printable(o.name);
    auto got = co_await acquire<multi_lock_guard>(
        o, sigs.stop, [&lk, &o](lock_options lo) { return lk.co_try_lock_all(o.names, lo); },
        [&lk, &o](lock_options lo) { return lk.co_lock_all(o.names, lo); });
    if (got.signal != 0) {
        co_await let_queue_exit_go_out(conn);
        co_return 128 + got.signal;
    }
    if (got.timed_out || !got.held) {
        if (got.timed_out)
            complain(fmt::format("the locks '{}' not acquired within {}", shown,
                                 format_duration(*o.wait)));
        else
            complain(fmt::format("the locks '{}' are not all free now", shown));
        co_return exit_not_acquired;
    }
    // Each name's fence, in the order the names were given.
    std::vector<std::string> fences;
    for (auto const& n : o.names)
        fences.push_back(std::to_string(got.held->fence(n)));
    lease_words const words{fmt::format("the locks '{}'", shown),
                            fmt::format("release the locks '{}'", shown)};
    set_lease lease{*got.held};
    // Named, not a temporary in the co_await: GCC 12 destroys such a temporary twice.
    lease_identity const identity{o.name, fmt::format("{}", fmt::join(fences, " ")),
                                  got.held->token()};
    co_return co_await run_under_lease(o, lease, words, identity, sigs);
}

} // namespace

asio::awaitable<int> run_exec(options const& o, redis::connection& conn, locker& lk) {
    // Caught from here on: while waiting for the lock, they end the wait; while the command
    // runs, they are passed on to it.
    tool_signals sigs{co_await asio::this_coro::executor, true};
    if (o.all)
        co_return co_await run_exec_all(o, conn, lk, sigs);
    if (o.permits)
        co_return co_await run_exec_permit(o, conn, lk, sigs);
    if (o.rw == options::rw_mode::shared)
        co_return co_await run_exec_rw<read_guard>(o, conn, lk, sigs);
    if (o.rw == options::rw_mode::exclusive)
        co_return co_await run_exec_rw<write_guard>(o, conn, lk, sigs);

    auto got = co_await acquire<lock_guard>(
        o, sigs.stop, [&lk, &o](lock_options lo) { return lk.co_try_lock(o.name, lo); },
        [&lk, &o](lock_options lo) { return lk.co_lock(o.name, lo); });
    if (got.signal != 0) {
        co_await let_queue_exit_go_out(conn);
        co_return 128 + got.signal;
    }
    if (got.timed_out || !got.held) {
        auto const holder = co_await holder_text(lk, o.name);
        if (got.timed_out)
            complain(fmt::format("lock '{}' not acquired within {}{}", printable(o.name),
                                 format_duration(*o.wait), holder));
        else
            complain(fmt::format("lock '{}' is held by someone else{}", printable(o.name), holder));
        co_return exit_not_acquired;
    }
    auto const name = printable(o.name);
    lease_words const words{fmt::format("the lock '{}'", name),
                            fmt::format("release the lock '{}'", name)};
    guard_lease lease{*got.held};
    // Named, not a temporary in the co_await: GCC 12 destroys such a temporary twice.
    lease_identity const identity{o.name, std::to_string(got.held->fence()), got.held->token()};
    co_return co_await run_under_lease(o, lease, words, identity, sigs);
}

} // namespace colock::cli
