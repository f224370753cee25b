// The worker side of the reliability runner: one process with one connection and one locker,
// started by the runner with `worker MODE --key value ...`. It reports on stdout, one event per
// line, and records every tenure it had in the shared history file. With `--urls url,url,...`
// instead of `--url url`, contend, hold and storm take their locks with a Redlock locker over
// one connection per URL (lock_client).
//
// Modes:
//   contend  coroutines loop co_lock / read-modify-write of a shared counter file / unlock on one
//            name until a deadline; prints "summary ..." at the end. With --journal FILE, also
//            keeps a journal (journal.hpp) that survives a SIGKILL.
//   hold     takes one lock and follows commands from stdin (write VALUE, unlock), printing
//            "acquired NS FENCE", "lost NS", "write accepted|refused", "released 0|1".
//   storm    coroutines take locks on a few names, each co_lock raced against a random timer
//            (so most are cancelled), until a deadline; prints "summary ...", then waits for
//            "exit" on stdin so its background releases can finish.
//   waiters  one holder, N coroutines waiting on the same name: memory per waiter, then M are
//            served in turn and the rest cancelled; prints "summary ...".
#include "worker.hpp"

#include "journal.hpp"

#include <colock/colock.hpp>
#include <colock_test/history.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <istream>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace colock::reliability {

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using boost::system::error_code;
using colock::test::steady_now_ns;
using std::chrono::milliseconds;

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
using steady_clock_deadline = std::chrono::steady_clock::time_point;

// "--key value" pairs.
class arguments {
public:
    arguments(int argc, char** argv, int first) {
        for (int i = first; i < argc; i += 2) {
            std::string_view key = argv[i];
            if (!key.starts_with("--") || i + 1 >= argc)
                throw std::invalid_argument(fmt::format("worker: bad argument '{}'", key));
            values_[std::string(key.substr(2))] = argv[i + 1];
        }
    }
    std::string text(std::string const& key) const {
        auto it = values_.find(key);
        if (it == values_.end())
            throw std::invalid_argument(fmt::format("worker: --{} is required", key));
        return it->second;
    }
    std::string text_or(std::string const& key, std::string fallback) const {
        auto it = values_.find(key);
        return it == values_.end() ? fallback : it->second;
    }
    std::int64_t number(std::string const& key) const { return parse(key, text(key)); }
    std::int64_t number_or(std::string const& key, std::int64_t fallback) const {
        auto it = values_.find(key);
        return it == values_.end() ? fallback : parse(key, it->second);
    }

private:
    static std::int64_t parse(std::string const& key, std::string const& v) {
        std::int64_t n = 0;
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec != std::errc{} || end != v.data() + v.size())
            throw std::invalid_argument(
                fmt::format("worker: --{} needs a number, not '{}'", key, v));
        return n;
    }
    std::map<std::string, std::string> values_;
};

void say(std::string const& line) {
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
}

// Completion of a worker's main coroutine: an exception is printed as "error ..." (the runner
// shows it), sets the exit code and stops the worker's I/O so run() returns.
template <class Stop>
auto report_failure(int& rc, Stop stop) {
    return [&rc, stop](std::exception_ptr e) {
        if (!e)
            return;
        try {
            std::rethrow_exception(e);
        } catch (std::exception const& ex) {
            say(fmt::format("error {}", ex.what()));
        }
        rc = 1;
        stop();
    };
}

redis::config worker_config(arguments const& args, std::string const& url) {
    auto cfg = redis::config::from_url(url);
    cfg.client_name = fmt::format("colock-worker-{}", args.text("proc"));
    cfg.connect_timeout = milliseconds(args.number_or("connect-timeout-ms", 1000));
    cfg.health_check_interval = milliseconds(args.number_or("health-ms", 500));
    cfg.reconnect_initial_delay = 10ms;
    cfg.reconnect_max_delay = 200ms;
    return cfg;
}

// "url,url,..." as its URLs, as COLOCK_REDLOCK_URLS lists them: a piece without "://" belongs
// to the URL before it (a redis-sentinel:// URL lists its sentinels with commas).
std::vector<std::string> split_urls(std::string_view list) {
    std::vector<std::string> urls;
    while (!list.empty()) {
        auto const comma = list.find(',');
        auto const piece = list.substr(0, comma);
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
        if (piece.empty())
            continue;
        if (urls.empty() || piece.find("://") != std::string_view::npos)
            urls.emplace_back(piece);
        else
            urls.back().append(",").append(piece);
    }
    return urls;
}

// Where a worker takes its locks: one connection and a locker on it (--url), or one connection
// per primary and a Redlock locker over them (--urls, comma-separated). The modes see only the
// locker, closing, and the reconnections.
class lock_client {
public:
    lock_client(asio::any_io_executor ex, arguments const& args) {
        auto const list = args.text_or("urls", "");
        auto const urls = list.empty() ? std::vector{args.text("url")} : split_urls(list);
        for (auto const& url : urls) {
            conns_.push_back(std::make_unique<redis::connection>(ex, worker_config(args, url)));
            primaries_.push_back(conns_.back().get());
        }
        locks_ = list.empty() ? std::make_unique<locker>(*conns_.front())
                              : std::make_unique<locker>(primaries_);
    }
    lock_client(lock_client const&) = delete;
    lock_client& operator=(lock_client const&) = delete;

    locker& locks() noexcept { return *locks_; }
    void close() {
        for (auto& c : conns_)
            c->close();
    }
    std::uint64_t reconnect_count() const noexcept {
        std::uint64_t n = 0;
        for (auto const& c : conns_)
            n += c->reconnect_count();
        return n;
    }

private:
    std::vector<std::unique_ptr<redis::connection>> conns_;
    std::vector<redis::connection*> primaries_;
    std::unique_ptr<locker> locks_; // last: it goes before the connections
};

lock_options worker_lock_options(arguments const& args) {
    lock_options opt;
    opt.ttl = milliseconds(args.number("ttl-ms"));
    opt.renew_interval = milliseconds(args.number("renew-ms"));
    opt.retry.initial = 10ms;
    opt.retry.max = milliseconds(args.number_or("retry-max-ms", 200));
    opt.cohort_limit = static_cast<std::size_t>(args.number_or("cohort-limit", 16));
    return opt;
}

asio::awaitable<void> sleep_for(std::chrono::microseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(use_tuple);
}

// A counter in a file that holders read, pause over, and write back, with no locking of its
// own: if two holders ever overlapped, an update would be lost.
class unguarded_counter {
public:
    explicit unguarded_counter(std::string const& path) : fd_(open(path.c_str(), O_RDWR)) {
        if (fd_ < 0)
            throw std::system_error(errno, std::generic_category(), "open " + path);
    }
    ~unguarded_counter() { close(fd_); }
    unguarded_counter(unguarded_counter const&) = delete;
    unguarded_counter& operator=(unguarded_counter const&) = delete;

    std::int64_t read() const {
        std::int64_t v = 0;
        if (pread(fd_, &v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))
            throw std::runtime_error("counter: short read");
        return v;
    }
    void write(std::int64_t v) const {
        if (pwrite(fd_, &v, sizeof v, 0) != static_cast<ssize_t>(sizeof v))
            throw std::runtime_error("counter: short write");
    }

private:
    int fd_;
};

colock::test::holding tenure(lock_guard const& g, std::string holder, std::int64_t acquired_ns) {
    colock::test::holding h;
    h.holder = std::move(holder);
    h.fence = g.fence();
    h.token = g.token();
    h.acquired_ns = acquired_ns;
    h.released_ns = steady_now_ns();
    h.lease_end_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(g.lease_expiry().time_since_epoch())
            .count();
    return h;
}

struct tally {
    std::uint64_t acquisitions = 0;
    std::uint64_t increments = 0;
    std::uint64_t losses = 0;    // guards that reported lost()
    std::uint64_t skipped = 0;   // acquired, but the lease ended before the write
    std::uint64_t errors = 0;    // co_lock / unlock failures (network), each retried
    std::uint64_t cancelled = 0; // co_lock calls cancelled by the caller
    std::uint64_t unlock_errors = 0;
    std::uint64_t extends = 0; // shortening extends that were sent
};

// ------------------------------------------------------------------------------- contend

// A holder's extend() to half its ttl (shorter than the lease it may have been handed), given
// up after a few ms: its reply may come after the holder stopped waiting, or never.
asio::awaitable<void> shortening_extend(lock_guard& g, milliseconds ttl, tally& t) {
    asio::steady_timer give_up(co_await asio::this_coro::executor, 2ms);
    try {
        co_await (g.extend(ttl) || give_up.async_wait(use_tuple));
        ++t.extends;
    } catch (boost::system::system_error const&) {
        ++t.errors; // a lost connection: the lease is ours until its local deadline at most
    }
}

asio::awaitable<void> contender(locker& locks, std::string name, lock_options opt,
                                std::string holder, steady_clock_deadline until,
                                std::chrono::microseconds hold, bool extend_shorter,
                                unguarded_counter& counter, colock::test::history_writer& history,
                                journal_writer& journal, tally& t) {
    std::minstd_rand rng(std::hash<std::string>{}(holder));
    while (std::chrono::steady_clock::now() < until) {
        lock_options o = opt;
        o.wait_timeout = std::chrono::duration_cast<milliseconds>(std::max(
            until - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration(1ms)));
        lock_guard g;
        error_code failure;
        try {
            g = co_await locks.co_lock(name, o);
        } catch (boost::system::system_error const& e) {
            failure = e.code();
        }
        if (failure) {
            if (failure != colock::error::timeout) {
                ++t.errors;
                co_await sleep_for(5ms); // the connection is being re-established
            }
            continue;
        }
        auto const acquired_ns = steady_now_ns();
        ++t.acquisitions;
        journal.acquired(holder, g.fence(), g.token(), acquired_ns);
        if (extend_shorter && rng() % 4 == 0)
            co_await shortening_extend(g, opt.ttl / 2, t);
        // Read, pause (other holders would get in here if exclusion failed), write back. Only
        // while the lease is known to be ours: owns_lock() checks the local lease deadline.
        if (g.owns_lock()) {
            auto const v = counter.read();
            co_await sleep_for(std::chrono::microseconds(rng() % (hold.count() + 1)));
            if (g.owns_lock()) {
                counter.write(v + 1);
                ++t.increments;
                journal.wrote(holder, v + 1);
            } else {
                ++t.skipped;
            }
        } else {
            ++t.skipped;
        }
        auto h = tenure(g, holder, acquired_ns);
        if (g.lost())
            ++t.losses;
        history.record(h);
        journal.released(holder, h.fence);
        try {
            co_await g.unlock();
        } catch (boost::system::system_error const&) {
            ++t.unlock_errors; // the lease runs out by its TTL
        }
    }
}

int run_contend(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    auto& locks = client.locks();
    auto const opt = worker_lock_options(args);
    auto const name = args.text("name");
    auto const proc = args.text("proc");
    auto const coroutines = args.number("coroutines");
    auto const until = std::chrono::steady_clock::now() + milliseconds(args.number("ms"));
    auto const hold = std::chrono::microseconds(args.number_or("hold-us", 500));
    // --short-ttl-ms: every other coroutine takes a shorter lease, so local hand-offs pass a
    // long lease to a holder that renews it shorter; --extend-shorter 1: holders now and then
    // extend to half their ttl without waiting for the reply.
    auto const short_ttl = milliseconds(args.number_or("short-ttl-ms", 0));
    bool const extend_shorter = args.number_or("extend-shorter", 0) != 0;
    unguarded_counter counter(args.text("counter"));
    colock::test::history_writer history(args.text("history"));
    journal_writer journal(args.text_or("journal", ""));
    tally t;
    for (std::int64_t i = 0; i < coroutines; ++i) {
        auto o = opt;
        if (short_ttl.count() > 0 && i % 2 == 1) {
            o.ttl = short_ttl;
            o.renew_interval = short_ttl / 3;
        }
        asio::co_spawn(ctx,
                       contender(locks, name, o, fmt::format("p{}/c{}", proc, i), until, hold,
                                 extend_shorter, counter, history, journal, t),
                       [](std::exception_ptr e) {
                           if (e)
                               std::rethrow_exception(e);
                       });
    }
    // Closing the connection once every contender is done lets run() return.
    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
            asio::steady_timer timer(ctx, until);
            co_await timer.async_wait(use_tuple);
            // Background releases (destructors, cancelled attempts) get their chance.
            timer.expires_after(1500ms);
            co_await timer.async_wait(use_tuple);
            client.close();
        },
        asio::detached);
    ctx.run();
    say(fmt::format("summary acquisitions={} increments={} losses={} skipped={} errors={} "
                    "unlock_errors={} reconnects={} extends={}",
                    t.acquisitions, t.increments, t.losses, t.skipped, t.errors, t.unlock_errors,
                    client.reconnect_count(), t.extends));
    return 0;
}

// ------------------------------------------------------------------------------- hold

asio::awaitable<void> read_commands(asio::posix::stream_descriptor& in,
                                    std::function<bool(std::string const&)> on_line) {
    asio::streambuf buf;
    for (;;) {
        auto [ec, n] = co_await asio::async_read_until(in, buf, '\n', use_tuple);
        if (ec)
            co_return;
        std::istream is(&buf);
        std::string line;
        std::getline(is, line);
        if (!on_line(line))
            co_return;
    }
}

int run_hold(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    auto& locks = client.locks();
    auto opt = worker_lock_options(args);
    opt.auto_renew = args.number_or("auto-renew", 1) != 0;
    auto const name = args.text("name");
    auto const holder = fmt::format("p{}", args.text("proc"));
    colock::test::history_writer history(args.text("history"));
    colock::test::fenced_store store(args.text("store"));
    asio::posix::stream_descriptor in(ctx, dup(STDIN_FILENO));
    int rc = 0;

    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
            auto g = co_await locks.co_lock(name, opt);
            auto const acquired_ns = steady_now_ns();
            say(fmt::format("acquired {} {}", acquired_ns, g.fence()));
            std::int64_t lost_ns = 0;
            g.async_wait_lost([&](error_code ec) {
                if (!ec && g.lost()) {
                    lost_ns = steady_now_ns();
                    say(fmt::format("lost {}", lost_ns));
                }
            });
            bool unlock_requested = false;
            co_await read_commands(in, [&](std::string const& line) {
                if (line.starts_with("write ")) {
                    // Deliberately no owns_lock() check: this is the write that was already on
                    // its way when the holder was paused or cut off.
                    bool const ok = store.write(g.fence(), line.substr(6));
                    say(ok ? "write accepted" : "write refused");
                    return true;
                }
                if (line == "state") {
                    say(fmt::format("state owns={} lost={}", g.owns_lock() ? 1 : 0,
                                    g.lost() ? 1 : 0));
                    return true;
                }
                unlock_requested = line == "unlock";
                return false;
            });
            auto h = tenure(g, holder, acquired_ns);
            if (lost_ns != 0)
                h.released_ns = std::min(h.released_ns, lost_ns); // it stopped relying then
            history.record(h);
            bool released = false;
            if (unlock_requested) {
                try {
                    released = co_await g.unlock();
                } catch (boost::system::system_error const& e) {
                    say(fmt::format("unlock failed {}", e.what()));
                }
            }
            say(fmt::format("released {}", released ? 1 : 0));
            client.close();
        },
        report_failure(rc, [&] {
            client.close();
            in.close();
        }));
    ctx.run();
    return rc;
}

// ------------------------------------------------------------------------------- storm

asio::awaitable<void> stormer(locker& locks, std::vector<std::string> const& names,
                              lock_options opt, int seed, steady_clock_deadline until, tally& t) {
    std::minstd_rand rng(static_cast<unsigned>(seed));
    auto ex = co_await asio::this_coro::executor;
    bool failed = false;
    while (std::chrono::steady_clock::now() < until) {
        auto const& name = names[rng() % names.size()];
        asio::steady_timer patience(ex, std::chrono::milliseconds(1 + rng() % 100));
        try {
            auto r = co_await (locks.co_lock(name, opt) || patience.async_wait(use_tuple));
            if (r.index() == 1) {
                ++t.cancelled;
                continue;
            }
            auto g = std::move(std::get<0>(r));
            ++t.acquisitions;
            co_await sleep_for(std::chrono::microseconds(rng() % 3000));
            if (g.lost())
                ++t.losses;
            if (rng() % 4 == 0)
                continue; // let the destructor release in the background
            try {
                co_await g.unlock();
            } catch (boost::system::system_error const&) {
                ++t.unlock_errors;
            }
        } catch (boost::system::system_error const&) {
            ++t.errors;
            failed = true;
        }
        if (failed) {
            failed = false;
            co_await sleep_for(5ms); // not in the handler: no co_await there
        }
    }
}

int run_storm(arguments const& args) {
    asio::io_context ctx(1);
    lock_client client{ctx.get_executor(), args};
    auto& locks = client.locks();
    auto opt = worker_lock_options(args);
    std::vector<std::string> names;
    for (std::int64_t i = 0; i < args.number("names"); ++i)
        names.push_back(fmt::format("{}-{}", args.text("name"), i));
    auto const until = std::chrono::steady_clock::now() + milliseconds(args.number("ms"));
    tally t;
    int running = static_cast<int>(args.number("coroutines"));
    asio::posix::stream_descriptor in(ctx, dup(STDIN_FILENO));
    for (int i = 0, n = running; i < n; ++i)
        asio::co_spawn(ctx, stormer(locks, names, opt, i + 1, until, t), [&](std::exception_ptr e) {
            if (e)
                std::rethrow_exception(e);
            if (--running == 0) {
                say(fmt::format("summary acquisitions={} cancelled={} losses={} "
                                "errors={} unlock_errors={} reconnects={}",
                                t.acquisitions, t.cancelled, t.losses, t.errors, t.unlock_errors,
                                client.reconnect_count()));
                // Stay until told: background releases may still be running.
                asio::co_spawn(ctx, read_commands(in, [](auto const&) { return false; }),
                               [&](std::exception_ptr) { client.close(); });
            }
        });
    ctx.run();
    return 0;
}

// ------------------------------------------------------------------------------- waiters

std::int64_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::int64_t size_pages = 0, resident_pages = 0;
    if (!(statm >> size_pages >> resident_pages))
        throw std::runtime_error("cannot read /proc/self/statm");
    return resident_pages * sysconf(_SC_PAGESIZE);
}

int run_waiters(arguments const& args) {
    asio::io_context ctx(1);
    redis::connection conn{ctx.get_executor(), worker_config(args, args.text("url"))};
    locker locks{conn};
    auto opt = worker_lock_options(args);
    auto const name = args.text("name");
    auto const count = static_cast<std::size_t>(args.number("count"));
    auto const serve = static_cast<std::size_t>(args.number("serve"));
    int rc = 0;

    asio::co_spawn(
        ctx,
        [&]() -> asio::awaitable<void> {
            auto holder = co_await locks.co_lock(name, opt);
            std::vector<asio::cancellation_signal> stop(count);
            std::size_t finished = 0, served = 0, cancelled = 0, failed = 0;
            asio::steady_timer poll(ctx);
            auto const rss_before = resident_bytes();
            auto const queue_start = std::chrono::steady_clock::now();
            for (std::size_t i = 0; i < count; ++i)
                locks.async_lock(
                    name, opt,
                    asio::bind_cancellation_slot(stop[i].slot(), [&](error_code ec, lock_guard) {
                        ++finished;
                        if (!ec) {
                            ++served; // handed on at once (destructor) to the next in line
                            if (served == serve)
                                for (auto& s : stop)
                                    s.emit(asio::cancellation_type::terminal);
                        } else if (ec == asio::error::operation_aborted) {
                            ++cancelled;
                        } else {
                            ++failed;
                        }
                    }));
            // Queued: each waits in the locker's queue (behind the first, which asked).
            redis::connection probe{ctx.get_executor(), worker_config(args, args.text("url"))};
            while (locks.waiting() < count) {
                poll.expires_after(20ms);
                co_await poll.async_wait(use_tuple);
            }
            poll.expires_after(200ms); // the head's subscription and attempts settle
            co_await poll.async_wait(use_tuple);
            auto const queued_s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - queue_start)
                    .count();
            auto const rss_after = resident_bytes();
            auto const serve_start = std::chrono::steady_clock::now();
            co_await holder.unlock();
            if (serve == 0)
                for (auto& s : stop)
                    s.emit(asio::cancellation_type::terminal);
            while (finished < count) {
                poll.expires_after(10ms);
                co_await poll.async_wait(use_tuple);
            }
            auto const drain_s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - serve_start)
                    .count();
            poll.expires_after(300ms); // background releases of the last guards
            co_await poll.async_wait(use_tuple);
            auto const key = locks.key_prefix() + "{" + name + "}";
            resp3::request check;
            check.push("GET", key);
            check.push("KEYS", key + "*");
            check.push("PUBSUB", "CHANNELS", key + ":w:*");
            auto const found = co_await probe.co_exec(check);
            // Left: the lock still held or handed off ("H ..." or "R ..."), or a key of the
            // lock without an expiry. The free lock ("F <fence>") and the queue keys lapse.
            auto const value = found.at(0).as_string().value_or("");
            std::int64_t keys = value.starts_with("H ") || value.starts_with("R ") ? 1 : 0;
            std::int64_t subscribers = 0;
            // PTTL of each key, then the subscribers of each wake channel (one per locker);
            // a PING first, so the request is never empty.
            resp3::request counts;
            counts.push("PING");
            for (auto const& k : found.at(1).elements)
                counts.push("PTTL", k.as_string().value_or(""));
            for (auto const& c : found.at(2).elements)
                counts.push("PUBSUB", "NUMSUB", c.as_string().value_or(""));
            auto const answers = co_await probe.co_exec(counts);
            std::size_t i = 1;
            for (std::size_t n = 0; n < found.at(1).elements.size(); ++n)
                keys += answers.at(i++).as_integer().value_or(0) == -1 ? 1 : 0;
            for (std::size_t n = 0; n < found.at(2).elements.size(); ++n, ++i)
                subscribers += answers.at(i).elements.size() == 2
                                   ? answers.at(i).elements[1].as_integer().value_or(-1)
                                   : -1;
            say(fmt::format("summary waiters={} served={} cancelled={} failed={} "
                            "bytes_per_waiter={:.0f} queued_s={:.2f} drain_s={:.2f} keys={} "
                            "subscribers={}",
                            count, served, cancelled, failed,
                            static_cast<double>(rss_after - rss_before) /
                                static_cast<double>(count),
                            queued_s, drain_s, keys, subscribers));
            probe.close();
            conn.close();
        },
        report_failure(rc, [&] { conn.close(); }));
    ctx.run();
    return rc;
}

} // namespace

int worker_main(int argc, char** argv) {
    // Die with the runner: no worker outlives a crashed or killed run.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1)
        return 1;
    if (argc < 3) {
        std::fputs("usage: worker MODE --key value ...\n", stderr);
        return 2;
    }
    std::string_view const mode = argv[2];
    try {
        arguments const args(argc, argv, 3);
        if (mode == "contend")
            return run_contend(args);
        if (mode == "hold")
            return run_hold(args);
        if (mode == "storm")
            return run_storm(args);
        if (mode == "waiters")
            return run_waiters(args);
        std::fprintf(stderr, "worker: unknown mode '%.*s'\n", static_cast<int>(mode.size()),
                     mode.data());
        return 2;
    } catch (std::exception const& e) {
        std::fprintf(stderr, "worker %.*s: %s\n", static_cast<int>(mode.size()), mode.data(),
                     e.what());
        return 1;
    }
}

} // namespace colock::reliability
