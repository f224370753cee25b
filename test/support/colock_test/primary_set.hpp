// Independent redis-servers for Redlock tests, one locker's connections to them, and probes of
// what each of them holds for a lock. Nothing mocks Redis: every primary is a redis_server.
#pragma once

#include <colock/redis/config.hpp>
#include <colock/redis/connection.hpp>
#include <colock_test/redis_server.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace colock::test {

/// How many of `n` primaries make a majority: n/2 + 1.
constexpr std::size_t majority(std::size_t n) noexcept {
    return n / 2 + 1;
}

/// `n` redis-servers of their own (default options), each on a free loopback port, stopped with
/// the set. For tests that kill, pause or restart primaries.
class primary_set {
public:
    explicit primary_set(std::size_t n);
    primary_set(primary_set const&) = delete;
    primary_set& operator=(primary_set const&) = delete;

    std::size_t size() const noexcept { return servers_.size(); }
    redis_server& operator[](std::size_t i) const { return *servers_.at(i); }
    /// The servers, in order.
    std::vector<redis_server*> servers() const;

private:
    std::vector<std::unique_ptr<redis_server>> servers_;
};

/// The first `n` (at most 5) of five servers shared by the test binary, started on first use
/// and stopped at exit: tests against 3 primaries and against 5 use the same processes. Only
/// for tests that leave the servers running and their data alone (distinct lock names).
std::vector<redis_server*> shared_primaries(std::size_t n);

/// Each server's config(), in order.
std::vector<redis::config> configs_of(std::vector<redis_server*> const& servers);

/// One connection per primary, as one process (one locker) has them. primaries() is what
/// colock::locker's Redlock constructor takes. The connections live as long as this object:
/// declare it before the locker that uses it.
class primary_connections {
public:
    primary_connections(boost::asio::any_io_executor ex, std::vector<redis::config> const& configs);
    primary_connections(primary_connections const&) = delete;
    primary_connections& operator=(primary_connections const&) = delete;

    std::size_t size() const noexcept { return conns_.size(); }
    redis::connection& operator[](std::size_t i) const { return *conns_.at(i); }
    std::span<redis::connection* const> primaries() const noexcept { return pointers_; }

    /// Connects every connection (co_connect), in order; throws what co_connect throws.
    boost::asio::awaitable<void> connect_all();
    void close();

private:
    std::vector<std::unique_ptr<redis::connection>> conns_;
    std::vector<redis::connection*> pointers_;
};

/// GET `key` on every primary, in order: the value, or nullopt when the key does not exist or
/// the primary did not answer within `limit` (down, stalled).
boost::asio::awaitable<std::vector<std::optional<std::string>>>
values_on(primary_connections& probe, std::string key,
          std::chrono::milliseconds limit = std::chrono::milliseconds{1000});

/// Polls values_on every 20 ms until `done(values)` holds or `limit` has passed; returns the
/// last values.
boost::asio::awaitable<std::vector<std::optional<std::string>>>
values_become(primary_connections& probe, std::string key,
              std::function<bool(std::vector<std::optional<std::string>> const&)> done,
              std::chrono::milliseconds limit = std::chrono::milliseconds{3000});

/// How many of `values` are a held lock ("H <fence> <owner> <token> ..."), of `token` when it
/// is not empty.
std::size_t count_held(std::vector<std::optional<std::string>> const& values,
                       std::string_view token = {});

/// How many of `values` are the free lock ("F <fence>") with a fence above 0.
std::size_t count_free_with_fence(std::vector<std::optional<std::string>> const& values);

/// The keys matching `pattern` on every running server, as "port key", through redis-cli.
std::vector<std::string> keys_on(std::vector<redis_server*> const& servers,
                                 std::string const& pattern);

/// The keys matching `pattern` that have no expiry (PTTL -1) on every running server, as "port
/// key", through redis-cli.
std::vector<std::string> keys_without_ttl(std::vector<redis_server*> const& servers,
                                          std::string const& pattern);

} // namespace colock::test
