#include <colock_test/primary_set.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <sstream>
#include <stdexcept>

namespace colock::test {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;

primary_set::primary_set(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
        servers_.push_back(std::make_unique<redis_server>());
}

std::vector<redis_server*> primary_set::servers() const {
    std::vector<redis_server*> out;
    for (auto const& s : servers_)
        out.push_back(s.get());
    return out;
}

std::vector<redis_server*> shared_primaries(std::size_t n) {
    static primary_set shared(5);
    if (n > shared.size())
        throw std::invalid_argument("shared_primaries: at most 5");
    auto all = shared.servers();
    all.resize(n);
    return all;
}

std::vector<redis::config> configs_of(std::vector<redis_server*> const& servers) {
    std::vector<redis::config> out;
    for (auto const* s : servers)
        out.push_back(s->config());
    return out;
}

primary_connections::primary_connections(asio::any_io_executor ex,
                                         std::vector<redis::config> const& configs) {
    for (auto const& cfg : configs) {
        conns_.push_back(std::make_unique<redis::connection>(ex, cfg));
        pointers_.push_back(conns_.back().get());
    }
}

asio::awaitable<void> primary_connections::connect_all() {
    for (auto& c : conns_)
        co_await c->co_connect();
}

void primary_connections::close() {
    for (auto& c : conns_)
        c->close();
}

asio::awaitable<std::vector<std::optional<std::string>>>
values_on(primary_connections& probe, std::string key, std::chrono::milliseconds limit) {
    constexpr auto tuple = asio::as_tuple(asio::use_awaitable);
    std::vector<std::optional<std::string>> out;
    for (std::size_t i = 0; i < probe.size(); ++i) {
        resp3::request req;
        req.push("GET", key);
        asio::steady_timer timer(co_await asio::this_coro::executor);
        timer.expires_after(limit);
        auto r = co_await (probe[i].async_exec(std::move(req), tuple) || timer.async_wait(tuple));
        std::optional<std::string> value;
        if (r.index() == 0) {
            auto const& [ec, replies] = std::get<0>(r);
            if (!ec && !replies.empty() && !replies[0].is_null())
                if (auto s = replies[0].as_string())
                    value.emplace(*s);
        }
        out.push_back(std::move(value));
    }
    co_return out;
}

asio::awaitable<std::vector<std::optional<std::string>>>
values_become(primary_connections& probe, std::string key,
              std::function<bool(std::vector<std::optional<std::string>> const&)> done,
              std::chrono::milliseconds limit) {
    auto const end = std::chrono::steady_clock::now() + limit;
    auto v = co_await values_on(probe, key);
    while (!done(v) && std::chrono::steady_clock::now() < end) {
        asio::steady_timer timer(co_await asio::this_coro::executor);
        timer.expires_after(std::chrono::milliseconds{20});
        co_await timer.async_wait(asio::use_awaitable);
        v = co_await values_on(probe, key);
    }
    co_return v;
}

std::size_t count_held(std::vector<std::optional<std::string>> const& values,
                       std::string_view token) {
    std::size_t n = 0;
    for (auto const& v : values) {
        if (!v || !v->starts_with("H "))
            continue;
        std::istringstream in(*v);
        std::string kind, fence, owner, holder;
        in >> kind >> fence >> owner >> holder;
        if (token.empty() || holder == token)
            ++n;
    }
    return n;
}

std::size_t count_free_with_fence(std::vector<std::optional<std::string>> const& values) {
    std::size_t n = 0;
    for (auto const& v : values) {
        if (!v || !v->starts_with("F "))
            continue;
        std::istringstream in(*v);
        std::string kind;
        long long fence = 0;
        in >> kind >> fence;
        n += fence > 0 ? 1 : 0;
    }
    return n;
}

namespace {

// Lists (as "port key") what `args` returns, line by line, on every running server.
std::vector<std::string> lines_on(std::vector<redis_server*> const& servers,
                                  std::vector<std::string> const& args) {
    std::vector<std::string> out;
    for (auto const* s : servers) {
        if (!s->running())
            continue;
        for (auto const& line : s->cli_lines(args))
            out.push_back(std::to_string(s->port()) + " " + line);
    }
    return out;
}

} // namespace

std::vector<std::string> keys_on(std::vector<redis_server*> const& servers,
                                 std::string const& pattern) {
    return lines_on(servers, {"KEYS", pattern});
}

std::vector<std::string> keys_without_ttl(std::vector<redis_server*> const& servers,
                                          std::string const& pattern) {
    static std::string const script = "local out = {} "
                                      "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do "
                                      "if redis.call('PTTL', k) == -1 then out[#out + 1] = k end "
                                      "end "
                                      "return out";
    return lines_on(servers, {"EVAL", script, "0", pattern});
}

} // namespace colock::test
