// A read-write lock: a catalog in Redis that readers read whole while a rebuilder replaces it.
//
// The catalog is a list of items, each tagged with the catalog's version, and the version itself
// (a plain Redis list and string, on a connection of their own). The rebuilder takes the write
// lock, writes a new version item by item (slowly, so that a reader without the lock would see
// a mix of two versions), then downgrades to a read lock and checks what it wrote beside the
// readers it lets in. Readers on two lockers (two connections: two processes, as the server sees
// them) take read locks and check that every item carries the version they read. The version is
// the writer's fence, which each reader's read_guard carries too.
//
// It prints what happened and exits 1 when a reader saw a torn catalog, a reader's fence was
// not the version it read, a writer ran beside anyone, or nothing was read or written.
//
// Usage: colock_example_rw_catalog [--url redis://host:port]
// Without --url it uses COLOCK_REDIS_URL, then redis://127.0.0.1:6379.
#include <colock/colock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <fmt/format.h>

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

constexpr int items_per_version = 5;
constexpr int rebuilds = 3;
constexpr int readers_per_locker = 3;

struct tally {
    int reads = 0, torn = 0, wrong_fence = 0, overlaps = 0, writes = 0;
    int reading = 0, writing = 0; // holders now, in this process
};

asio::awaitable<void> pause(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(asio::use_awaitable);
}

// One command on the catalog's connection.
template <class... Args>
asio::awaitable<colock::redis::response> exec(colock::redis::connection& data,
                                              std::string_view name, Args const&... args) {
    colock::resp3::request req;
    req.push(name, args...);
    co_return co_await data.co_exec(std::move(req));
}

asio::awaitable<void> rebuild(colock::rw_lock& catalog, colock::redis::connection& data,
                              std::string const& key, tally& t) {
    for (int round = 0; round < rebuilds; ++round) {
        colock::write_guard writing = co_await catalog.co_lock();
        if (++t.writing > 1 || t.reading > 0)
            ++t.overlaps;
        auto const version = std::to_string(writing.fence());
        co_await exec(data, "DEL", key + ":items");
        for (int i = 0; i < items_per_version; ++i) {
            co_await exec(data, "RPUSH", key + ":items", fmt::format("{}/{}", version, i));
            co_await pause(5ms); // a reader without the lock would see a mix now
        }
        co_await exec(data, "SET", key + ":version", version);
        ++t.writes;
        --t.writing;
        // Read what was written, with the readers queued meanwhile let in beside.
        colock::read_guard checking = co_await writing.co_downgrade();
        ++t.reading;
        auto const items = co_await exec(data, "LLEN", key + ":items");
        fmt::print("rebuilt version {} ({} items), downgraded to a read lock\n", version,
                   items.at(0).as_integer().value_or(0));
        co_await pause(10ms);
        --t.reading;
        co_await checking.release();
        co_await pause(20ms);
    }
}

asio::awaitable<void> read_loop(colock::rw_lock& catalog, colock::redis::connection& data,
                                std::string const& key, tally& t, bool const& stop) {
    while (!stop) {
        colock::read_guard reading = co_await catalog.co_lock_shared();
        ++t.reading;
        if (t.writing > 0)
            ++t.overlaps;
        auto const version = co_await exec(data, "GET", key + ":version");
        auto const items = co_await exec(data, "LRANGE", key + ":items", 0, -1);
        auto const seen = version.at(0).as_string().value_or("");
        if (!seen.empty()) {
            ++t.reads;
            if (reading.fence() != std::stoll(std::string(seen)))
                ++t.wrong_fence;
            for (auto const& item : items.at(0).elements)
                if (!item.as_string().value_or("").starts_with(fmt::format("{}/", seen)))
                    ++t.torn;
        }
        --t.reading;
        co_await reading.release();
        co_await pause(3ms);
    }
}

asio::awaitable<int> run(colock::redis::config cfg) {
    auto ex = co_await asio::this_coro::executor;
    colock::redis::connection conn_a{ex, cfg}, conn_b{ex, cfg}, data{ex, cfg};
    colock::locker a{conn_a}, b{conn_b};
    std::string const name = fmt::format("example:catalog:{}", ::getpid());
    colock::rw_lock catalog_a{a, name}, catalog_b{b, name};
    tally t;
    bool stop = false;
    int readers_left = 2 * readers_per_locker;
    for (int i = 0; i < 2 * readers_per_locker; ++i)
        asio::co_spawn(ex, read_loop(i % 2 == 0 ? catalog_a : catalog_b, data, name, t, stop),
                       [&readers_left](std::exception_ptr e) {
                           --readers_left;
                           if (e)
                               std::rethrow_exception(e);
                       });
    co_await rebuild(catalog_a, data, name, t);
    stop = true;
    while (readers_left > 0)
        co_await pause(5ms);
    co_await exec(data, "DEL", name + ":items", name + ":version");
    fmt::print("{} rebuilds, {} whole reads, {} torn, {} with another fence, {} overlaps\n",
               t.writes, t.reads, t.torn, t.wrong_fence, t.overlaps);
    conn_a.close();
    conn_b.close();
    data.close();
    co_return (t.writes == rebuilds && t.reads > 0 && t.torn == 0 && t.wrong_fence == 0 &&
               t.overlaps == 0)
        ? 0
        : 1;
}

} // namespace

int main(int argc, char** argv) {
    std::string url = "redis://127.0.0.1:6379";
    if (char const* from_env = std::getenv("COLOCK_REDIS_URL"); from_env && *from_env)
        url = from_env;
    if (argc == 3 && std::string_view(argv[1]) == "--url") {
        url = argv[2];
    } else if (argc != 1) {
        fmt::print(stderr, "usage: {} [--url redis://host:port]\n", argv[0]);
        return 2;
    }
    colock::redis::config cfg;
    boost::system::error_code url_error;
    std::string reason;
    cfg = colock::redis::config::from_url(url, url_error, &reason);
    if (url_error) {
        fmt::print(stderr, "rw_catalog: bad URL: {}\n", reason);
        return 2;
    }
    asio::io_context io;
    int status = 1;
    asio::co_spawn(io, run(cfg), [&](std::exception_ptr e, int s) {
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (std::exception const& x) {
                fmt::print(stderr, "rw_catalog: {}\n", x.what());
            }
            return;
        }
        status = s;
    });
    io.run();
    return status;
}
