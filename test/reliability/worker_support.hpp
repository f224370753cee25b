// What the worker modes share (worker.cpp lists the modes): the "--key value" arguments, the
// lines a worker says on stdout, the connection and locker it works on, lock options from the
// arguments, and the small coroutines every mode uses. One file per mode family beside it:
// worker_lock.cpp (contend, hold), worker_load.cpp (storm, waiters), worker_election.cpp
// (lead, campaign, observe), worker_shared.cpp (permits, rw), worker_promises.cpp (with_lock), worker_sets.cpp (sets).
#pragma once

#include <colock/colock.hpp>
#include <colock_test/history.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace colock::reliability {

namespace asio = boost::asio;
using namespace std::chrono_literals;

using boost::system::error_code;
using colock::test::steady_now_ns;
using std::chrono::milliseconds;

inline constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
using steady_clock_deadline = std::chrono::steady_clock::time_point;

// "--key value" pairs.
class arguments {
public:
    arguments(int argc, char** argv, int first);
    std::string text(std::string const& key) const;
    std::string text_or(std::string const& key, std::string fallback) const;
    std::int64_t number(std::string const& key) const;
    std::int64_t number_or(std::string const& key, std::int64_t fallback) const;

private:
    std::map<std::string, std::string> values_;
};

// One line on stdout, flushed: the runner reads it at once.
void say(std::string const& line);

// Completion of a worker's main coroutine: an exception is printed as "error ..." (the runner
// shows it), sets the exit code and stops the worker's I/O so run() returns.
void report_exception(std::exception_ptr const& e);
template <class Stop>
auto report_failure(int& rc, Stop stop) {
    return [&rc, stop](std::exception_ptr e) {
        if (!e)
            return;
        report_exception(e);
        rc = 1;
        stop();
    };
}

// The connection settings of a worker: --proc names it, --connect-timeout-ms and --health-ms.
redis::config worker_config(arguments const& args, std::string const& url);

// Where a worker takes its locks: one connection and a locker on it (--url), or one connection
// per primary and a Redlock locker over them (--urls, comma-separated). The modes see only the
// locker, closing, and the reconnections.
class lock_client {
public:
    lock_client(asio::any_io_executor ex, arguments const& args);
    lock_client(lock_client const&) = delete;
    lock_client& operator=(lock_client const&) = delete;

    locker& locks() noexcept { return *locks_; }
    // The first connection (the only one but with --urls).
    redis::connection& connection() noexcept { return *conns_.front(); }
    void close();
    std::uint64_t reconnect_count() const noexcept;

private:
    std::vector<std::unique_ptr<redis::connection>> conns_;
    std::vector<redis::connection*> primaries_;
    std::unique_ptr<locker> locks_; // last: it goes before the connections
};

// --ttl-ms, --renew-ms, --retry-max-ms (200), --cohort-limit (16).
lock_options worker_lock_options(arguments const& args);

asio::awaitable<void> sleep_for(std::chrono::microseconds d);

// Closes `client` once every coroutine is done: at `until`, the run's end, then a while for the
// background releases (destructors, cancelled attempts).
void close_after(asio::io_context& ctx, lock_client& client, steady_clock_deadline until);

// Passes each line of `in` to `on_line` until it returns false or the input ends.
asio::awaitable<void> read_commands(asio::posix::stream_descriptor& in,
                                    std::function<bool(std::string const&)> on_line);

// Runs `body`, the main coroutine of a mode the runner commands on stdin (`in`), to its end; a
// failure is reported and closes the client and `in`, so that run() returns. The exit code.
int run_commanded(asio::io_context& ctx, lock_client& client, asio::posix::stream_descriptor& in,
                  std::function<asio::awaitable<void>()> body);

// The commands the runner sends a holder (hold, lead), for read_commands: "write V" writes V to
// `store` with `fence()`, deliberately with no check that the lease still holds (it is the
// write already on its way when the holder was paused or cut off); "rwrite V" passes V to
// `redis_write` (when given), which writes it to a resource in Redis the same way; "state" says
// `state()`; any other line ends the reading, and `ended` tells whether it was `end` ("unlock",
// "resign").
std::function<bool(std::string const&)>
holder_commands(colock::test::fenced_store& store, std::function<std::int64_t()> fence,
                std::function<std::string()> state, std::string end, bool& ended,
                std::function<void(std::string)> redis_write = {});

// Ends a holding as the runner asked: when `asked`, awaits `end` (unlock, resign), saying
// "<verb> failed <what>" should it throw; then says "<done> 1" when it returned true, else
// "<done> 0".
asio::awaitable<void> end_as_asked(bool asked, std::function<asio::awaitable<bool>()> end,
                                   std::string_view verb, std::string_view done);

// A guard's tenure for the history, ending now: from `acquired_ns` to now or its lease's end;
// or, when the holder learned of a loss (`lost_ns` not 0), then: it stopped relying then.
colock::test::holding tenure(lock_guard const& g, std::string holder, std::int64_t acquired_ns,
                             std::int64_t lost_ns = 0);

// The local lease deadline of `g` on the history's clock.
std::int64_t lease_end_ns(lock_guard const& g);

// What the contending modes count and print in their summaries.
struct worker_tally {
    std::uint64_t acquisitions = 0;
    std::uint64_t increments = 0;
    std::uint64_t losses = 0;    // guards that reported lost()
    std::uint64_t skipped = 0;   // acquired, but the lease ended before the write
    std::uint64_t errors = 0;    // co_lock / unlock failures (network), each retried
    std::uint64_t cancelled = 0; // co_lock calls cancelled by the caller
    std::uint64_t unlock_errors = 0;
    std::uint64_t extends = 0; // shortening extends that were sent
};

// The modes, each `worker MODE --key value ...`; the exit code of the process.
int run_contend(arguments const& args);
int run_hold(arguments const& args);
int run_storm(arguments const& args);
int run_waiters(arguments const& args);
int run_lead(arguments const& args);
int run_campaign(arguments const& args);
int run_observe(arguments const& args);
int run_permits(arguments const& args);
int run_rw(arguments const& args);
int run_with_lock(arguments const& args);
int run_sets(arguments const& args);

} // namespace colock::reliability
