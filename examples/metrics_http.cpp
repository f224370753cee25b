// Lock metrics over HTTP: worker coroutines take locks under load (and a semaphore's permits, a
// read-write lock and an election's leadership) while a Boost.Beast server answers GET /metrics
// with the locker's figures in Prometheus' text format, counted by a lock_observer, by kind.
//
// Usage: colock_example_metrics_http [--url redis://host:port] [--port N] [--workers N]
// Without --url it uses COLOCK_REDIS_URL, then redis://127.0.0.1:6379. --port 0 (the default)
// takes a free port. The first line of output is "listening on http://127.0.0.1:PORT/metrics".
// Runs until SIGINT or SIGTERM, then lets every lock go and exits 0.
#include <colock/colock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;

namespace {

// The locker's events as Prometheus counters, by what holds (the event's kind: a lock, a
// semaphore's permits, a read-write lock's guard, an election's leadership). Called on the
// locker's strand, read by the HTTP handler: atomics, and nothing else.
struct lock_metrics final : colock::lock_observer {
    static constexpr std::size_t kinds = 4;
    // The label of each kind, in the order of kind_index.
    static constexpr std::string_view kind_labels[kinds] = {"lock", "semaphore", "rw_lock",
                                                            "election"};
    static std::size_t kind_index(std::string_view kind) {
        return kind == "semaphore" ? 1 : kind == "read-write lock" ? 2 : kind == "election" ? 3 : 0;
    }
    struct counters {
        std::atomic<std::uint64_t> acquired_first{0}, acquired_after_wait{0}, acquired_local{0},
            acquired_retained{0};
        std::atomic<std::uint64_t> released{0}, lost{0}, renewals{0}, renewal_errors{0};
        std::atomic<std::int64_t> wait_us{0}, held_us{0};
    };
    counters by_kind[kinds];
    std::atomic<std::uint64_t> reconnects{0};

    static std::int64_t micros(std::chrono::steady_clock::duration d) {
        return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
    }
    void on_acquired(colock::acquired_event const& e) override {
        auto& c = by_kind[kind_index(e.kind)];
        switch (e.how) {
        case colock::acquired_by::first_attempt:
            ++c.acquired_first;
            break;
        case colock::acquired_by::server_after_wait:
            ++c.acquired_after_wait;
            break;
        case colock::acquired_by::local_handoff:
            ++c.acquired_local;
            break;
        case colock::acquired_by::retained:
            ++c.acquired_retained;
            break;
        }
        c.wait_us += micros(e.waited);
    }
    void on_released(colock::released_event const& e) override {
        auto& c = by_kind[kind_index(e.kind)];
        ++c.released;
        c.held_us += micros(e.held);
    }
    void on_lost(colock::lost_event const& e) override { ++by_kind[kind_index(e.kind)].lost; }
    void on_renewal(colock::renewal_event const& e) override {
        auto& c = by_kind[kind_index(e.kind)];
        ++c.renewals;
        if (e.error)
            ++c.renewal_errors;
    }
    void on_reconnect(colock::reconnect_event const&) override { ++reconnects; }

    std::uint64_t total(std::atomic<std::uint64_t> counters::*field) const {
        std::uint64_t n = 0;
        for (auto const& c : by_kind)
            n += (c.*field).load();
        return n;
    }
    std::uint64_t acquired_total() const {
        return total(&counters::acquired_first) + total(&counters::acquired_after_wait) +
               total(&counters::acquired_local) + total(&counters::acquired_retained);
    }

    std::string text(std::size_t waiting) const {
        std::string out;
        auto help = [&out](std::string_view name, std::string_view type, std::string_view text) {
            out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, text, name, type);
        };
        auto sample = [&out](std::string_view name, std::string_view labels, double value) {
            out += fmt::format("{}{{{}}} {}\n", name, labels, value);
        };
        // One family of samples per metric, a sample per kind (and, for acquired, per how).
        auto per_kind = [&](std::string_view name, std::string_view type, std::string_view text,
                            auto value) {
            help(name, type, text);
            for (std::size_t k = 0; k < kinds; ++k)
                sample(name, fmt::format("kind=\"{}\"", kind_labels[k]), value(by_kind[k]));
        };
        help("colock_acquired_total", "counter", "Holdings acquired, by kind and how.");
        for (std::size_t k = 0; k < kinds; ++k) {
            auto const& c = by_kind[k];
            std::pair<std::string_view, std::uint64_t> const hows[] = {
                {"first_attempt", c.acquired_first.load()},
                {"server_after_wait", c.acquired_after_wait.load()},
                {"local_handoff", c.acquired_local.load()},
                {"retained", c.acquired_retained.load()}};
            for (auto const& [how, n] : hows)
                sample("colock_acquired_total",
                       fmt::format("kind=\"{}\",how=\"{}\"", kind_labels[k], how),
                       static_cast<double>(n));
        }
        per_kind("colock_wait_seconds_total", "counter", "Time spent waiting.",
                 [](counters const& c) { return static_cast<double>(c.wait_us.load()) / 1e6; });
        per_kind("colock_released_total", "counter", "Holdings let go by their holders.",
                 [](counters const& c) { return static_cast<double>(c.released.load()); });
        per_kind("colock_held_seconds_total", "counter", "Time released holdings were held.",
                 [](counters const& c) { return static_cast<double>(c.held_us.load()) / 1e6; });
        per_kind("colock_lost_total", "counter", "Leases lost.",
                 [](counters const& c) { return static_cast<double>(c.lost.load()); });
        per_kind("colock_renewals_total", "counter", "Lease renewals answered.",
                 [](counters const& c) { return static_cast<double>(c.renewals.load()); });
        per_kind("colock_renewal_errors_total", "counter", "Lease renewals that failed.",
                 [](counters const& c) { return static_cast<double>(c.renewal_errors.load()); });
        help("colock_reconnects_total", "counter", "Connections re-established.");
        out += fmt::format("colock_reconnects_total {}\n", reconnects.load());
        help("colock_waiting", "gauge", "Lock calls waiting now.");
        out += fmt::format("colock_waiting {}\n", waiting);
        return out;
    }
};

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(asio::use_awaitable);
}

// Takes one of two names in turn, holds it a moment, lets it go; until `stopping`.
asio::awaitable<void> worker(colock::locker& locker, std::atomic<bool> const& stopping, int id) {
    colock::lock_options opt;
    opt.ttl = std::chrono::seconds{5};
    for (int round = 0; !stopping; ++round) {
        auto guard =
            co_await locker.co_lock(fmt::format("metrics-example:{}", (id + round) % 2), opt);
        co_await sleep_for(std::chrono::milliseconds{2});
        co_await guard.release();
    }
}

// Takes one of two permits of a semaphore, holds it a moment, lets it go; until `stopping`.
asio::awaitable<void> permit_worker(colock::semaphore& sem, std::atomic<bool> const& stopping) {
    colock::lock_options opt;
    opt.ttl = std::chrono::seconds{5};
    while (!stopping) {
        auto p = co_await sem.co_acquire(opt);
        co_await sleep_for(std::chrono::milliseconds{2});
        co_await p.release();
    }
}

// Reads under a read-write lock, and leads an election for a moment, in turn; until `stopping`.
asio::awaitable<void> family_worker(colock::rw_lock& rw, colock::election& vote,
                                    std::atomic<bool> const& stopping) {
    colock::lock_options opt;
    opt.ttl = std::chrono::seconds{5};
    while (!stopping) {
        auto reader = co_await rw.co_lock_shared(opt);
        co_await sleep_for(std::chrono::milliseconds{2});
        co_await reader.release();
        auto lead = co_await vote.co_campaign("metrics-example", opt);
        co_await sleep_for(std::chrono::milliseconds{2});
        co_await lead.release();
    }
}

asio::awaitable<void> serve(std::shared_ptr<tcp::socket> socket,
                            std::shared_ptr<lock_metrics> metrics, colock::locker& locker) {
    boost::beast::flat_buffer buffer;
    for (;;) {
        http::request<http::string_body> req;
        auto [ec, n] =
            co_await http::async_read(*socket, buffer, req, asio::as_tuple(asio::use_awaitable));
        if (ec)
            co_return; // closed by the client, or garbage: nothing to answer
        http::response<http::string_body> res;
        res.version(req.version());
        res.keep_alive(req.keep_alive());
        if (req.method() == http::verb::get && req.target() == "/metrics") {
            res.result(http::status::ok);
            res.set(http::field::content_type, "text/plain; version=0.0.4");
            res.body() = metrics->text(locker.waiting());
        } else {
            res.result(http::status::not_found);
            res.set(http::field::content_type, "text/plain");
            res.body() = "only GET /metrics is served here\n";
        }
        res.prepare_payload();
        auto [wec, written] =
            co_await http::async_write(*socket, res, asio::as_tuple(asio::use_awaitable));
        if (wec || !res.keep_alive())
            co_return;
    }
}

// Serves each client in a coroutine of its own; `clients` lets the shutdown close the ones
// still connected.
asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, std::shared_ptr<lock_metrics> metrics,
                                  colock::locker& locker,
                                  std::vector<std::weak_ptr<tcp::socket>>& clients) {
    for (;;) {
        auto [ec, socket] = co_await acceptor.async_accept(asio::as_tuple(asio::use_awaitable));
        if (ec)
            co_return; // closed at shutdown
        auto client = std::make_shared<tcp::socket>(std::move(socket));
        std::erase_if(clients, [](auto const& c) { return c.expired(); });
        clients.push_back(client);
        asio::co_spawn(acceptor.get_executor(), serve(std::move(client), metrics, locker),
                       asio::detached);
    }
}

struct options {
    colock::redis::config cfg;
    unsigned short port = 0;
    int workers = 8;
};

unsigned long number(std::string_view option, std::string const& value, unsigned long max) {
    std::size_t used = 0;
    unsigned long n = 0;
    try {
        n = std::stoul(value, &used);
    } catch (std::exception const&) {
        used = 0;
    }
    if (used != value.size() || value.empty() || n > max)
        throw std::invalid_argument(
            fmt::format("{} takes a number from 0 to {}, not '{}'", option, max, value));
    return n;
}

options parse(int argc, char** argv) {
    options o;
    char const* env = std::getenv("COLOCK_REDIS_URL");
    std::string url = env != nullptr ? env : "redis://127.0.0.1:6379";
    for (int i = 1; i < argc; ++i) {
        std::string_view const arg = argv[i];
        if (i + 1 >= argc)
            throw std::invalid_argument(fmt::format("{} needs a value", arg));
        std::string const value = argv[++i];
        if (arg == "--url")
            url = value;
        else if (arg == "--port")
            o.port = static_cast<unsigned short>(number(arg, value, 65535));
        else if (arg == "--workers")
            o.workers = static_cast<int>(number(arg, value, 10'000));
        else
            throw std::invalid_argument(fmt::format("unknown option {}", arg));
    }
    if (o.workers < 1)
        throw std::invalid_argument("--workers must be at least 1");
    o.cfg = colock::redis::config::from_url(url);
    return o;
}

asio::awaitable<void> run(options o) {
    auto const ex = co_await asio::this_coro::executor;
    colock::redis::connection conn{ex, o.cfg};
    co_await conn.co_connect(); // its error names the endpoint
    colock::locker locker{conn};
    auto metrics = std::make_shared<lock_metrics>();
    locker.set_observer(metrics);

    tcp::acceptor acceptor{ex, {asio::ip::make_address("127.0.0.1"), o.port}};
    fmt::print("listening on http://127.0.0.1:{}/metrics\n", acceptor.local_endpoint().port());
    std::fflush(stdout);
    std::vector<std::weak_ptr<tcp::socket>> clients;
    asio::co_spawn(ex, accept_loop(acceptor, metrics, locker, clients), asio::detached);

    std::atomic<bool> stopping{false};
    int running = o.workers;
    asio::steady_timer all_done(ex, asio::steady_timer::time_point::max());
    auto const worker_done = [&](std::exception_ptr e) {
        if (e)
            std::fprintf(stderr, "metrics_http: a worker failed\n");
        if (--running == 0)
            all_done.cancel();
    };
    for (int i = 0; i < o.workers; ++i)
        asio::co_spawn(ex, worker(locker, stopping, i), worker_done);
    // The rest of the family, counted by the same observer under their kind.
    colock::semaphore sem{locker, "metrics-example:permits", 2};
    colock::rw_lock rw{locker, "metrics-example:catalog"};
    colock::election vote{locker, "metrics-example:leader"};
    running += 2;
    asio::co_spawn(ex, permit_worker(sem, stopping), worker_done);
    asio::co_spawn(ex, family_worker(rw, vote, stopping), worker_done);

    asio::signal_set signals(ex, SIGINT, SIGTERM);
    co_await signals.async_wait(asio::use_awaitable);
    stopping = true;
    acceptor.close();
    for (auto const& weak : clients)
        if (auto client = weak.lock()) {
            boost::system::error_code ignored;
            client->close(ignored);
        }
    co_await all_done.async_wait(asio::as_tuple(asio::use_awaitable));
    fmt::print("stopped: {} acquired, {} released, {} lost\n", metrics->acquired_total(),
               metrics->total(&lock_metrics::counters::released),
               metrics->total(&lock_metrics::counters::lost));
    conn.close();
}

} // namespace

int main(int argc, char** argv) {
    try {
        auto o = parse(argc, argv);
        asio::io_context io;
        std::exception_ptr failure;
        asio::co_spawn(io, run(std::move(o)), [&](std::exception_ptr e) { failure = e; });
        io.run();
        if (failure)
            std::rethrow_exception(failure);
        return 0;
    } catch (std::exception const& e) {
        std::fprintf(stderr, "metrics_http: %s\n", e.what());
        return 1;
    }
}
