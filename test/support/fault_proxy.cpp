// The fault proxy: one io_context on one thread. Per client connection, four coroutines (a
// reader and a writer per direction) share a proxy_connection they own jointly; the proxy's
// table holds it too, until it is closed. Everything below runs on the proxy's thread, except
// the public functions, which hand their work over through `call`.
#include <colock_test/fault_proxy.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fcntl.h>

namespace colock::test {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using boost::system::error_code;

constexpr auto use_nothrow = asio::as_tuple(asio::use_awaitable);

// A direction whose queue holds this much stops reading until it drains: a long stall costs
// bounded memory, and TCP flow control holds back the rest.
constexpr std::size_t max_queued_bytes = 4 * 1024 * 1024;

// What one read returned, and when it may be written.
struct chunk {
    std::string bytes;
    clock_type::time_point due;
    bool close_after = false; // cut_next_reply: close the connection once this is written
};

// One direction of one connection.
struct direction {
    explicit direction(asio::io_context& ctx) : wake(ctx), space(ctx) {}

    std::array<char, 16 * 1024> buffer{};
    std::deque<chunk> queue;
    std::size_t queued_bytes = 0;
    asio::steady_timer wake;  // the writer sleeps on it; cancelled when a chunk is queued
    asio::steady_timer space; // the reader sleeps on it while the queue is full

    void clear() {
        queue.clear();
        queued_bytes = 0;
        space.cancel();
    }
};

struct proxy_connection {
    proxy_connection(asio::io_context& ctx, tcp::socket accepted, std::uint64_t conn_id)
        : client(std::move(accepted)), server(ctx), to_server(ctx), to_client(ctx), id(conn_id) {}

    tcp::socket client;
    tcp::socket server;
    direction to_server; // read from the client, written to the server
    direction to_client; // read from the server, written to the client
    std::uint64_t const id;
    bool open = true;
    bool black_holed = false;
    bool cut = false; // a cut chunk is on its way out: everything read after it is dropped
};

using connection_ptr = std::shared_ptr<proxy_connection>;

// A process started by the test (a worker, a redis-server) must not inherit the proxy's
// sockets: a copy of the listener would accept in place of the proxy after it is gone, and a
// copy of a connection would keep it open after the proxy closed it.
void close_on_exec(int fd) {
    int const flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0)
        ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}

} // namespace

struct fault_proxy::impl {
    explicit impl(std::uint16_t upstream_port)
        : upstream(asio::ip::make_address_v4("127.0.0.1"), upstream_port) {
        tcp::endpoint const local(asio::ip::make_address_v4("127.0.0.1"), 0);
        acceptor.open(local.protocol());
        close_on_exec(acceptor.native_handle());
        acceptor.bind(local);
        acceptor.listen();
        port = acceptor.local_endpoint().port();
        asio::co_spawn(ctx, accept_loop(), asio::detached);
        thread = std::thread([this] { run(); });
    }

    // Declared first, destroyed last: every socket and timer below belongs to it, and the
    // coroutine frames it may still hold (only if shutdown had to force a stop) own theirs.
    asio::io_context ctx;
    asio::executor_work_guard<asio::io_context::executor_type> work{ctx.get_executor()};
    tcp::acceptor acceptor{ctx};
    tcp::endpoint const upstream;
    std::uint16_t port = 0;

    // --- on the proxy's thread only ---
    std::map<std::uint64_t, connection_ptr> connections;
    std::uint64_t next_id = 0;
    fault_proxy_stats counters;
    clock_type::duration latency{0};
    clock_type::time_point stall_until{};
    bool black_hole = false;
    std::optional<std::size_t> cut_keep;
    std::optional<std::string> rewrite;
    bool stopping = false;

    // --- the thread ---
    std::mutex run_mutex;
    std::condition_variable run_cv;
    bool run_done = false;
    std::thread thread;

    void run() {
        for (;;) {
            try {
                ctx.run();
                break;
            } catch (...) {
                // A handler threw (out of memory): keep serving rather than hang the callers.
            }
        }
        std::lock_guard lock(run_mutex);
        run_done = true;
        run_cv.notify_all();
    }

    // Runs `f` on the proxy's thread and returns its result: the caller's fault is in effect,
    // and its reading consistent, when this returns.
    template <class F>
    auto call(F f) -> decltype(f()) {
        std::packaged_task<decltype(f())()> task(std::move(f));
        auto result = task.get_future();
        asio::post(ctx, [&task] { task(); }); // we wait below, so `task` outlives the handler
        return result.get();
    }

    void shutdown() {
        call([this] {
            stopping = true;
            error_code ignored;
            acceptor.close(ignored);
            close_all(false);
        });
        work.reset();
        // Everything was closed and cancelled, so run() returns at once; should anything still
        // wait (a bug), stopping the context keeps the destructor from hanging, and the frames
        // it drops own what they use.
        std::unique_lock lock(run_mutex);
        if (!run_cv.wait_for(lock, std::chrono::seconds(5), [this] { return run_done; }))
            ctx.stop();
        lock.unlock();
        thread.join();
    }

    // ------------------------------------------------------------------ connections

    asio::awaitable<void> accept_loop() {
        for (;;) {
            auto [ec, socket] = co_await acceptor.async_accept(use_nothrow);
            if (stopping || !acceptor.is_open())
                co_return;
            if (ec) {
                // Out of descriptors, or an aborted handshake: try again shortly, not in a spin.
                asio::steady_timer pause(ctx);
                pause.expires_after(std::chrono::milliseconds(10));
                co_await pause.async_wait(use_nothrow);
                continue;
            }
            on_accept(std::move(socket));
        }
    }

    void on_accept(tcp::socket socket) {
        ++counters.accepted;
        close_on_exec(socket.native_handle());
        error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        auto c = std::make_shared<proxy_connection>(ctx, std::move(socket), next_id++);
        connections.emplace(c->id, c);
        if (black_hole) {
            // No upstream: a client that connects gets no answer, as from a vanished host.
            // Reading goes on, to swallow what it sends and to notice when it gives up.
            c->black_holed = true;
            ++counters.black_holed;
            asio::co_spawn(ctx, read_loop(c, true), asio::detached);
            return;
        }
        asio::co_spawn(ctx, connect_upstream(c), asio::detached);
    }

    asio::awaitable<void> connect_upstream(connection_ptr c) {
        // Anew for each client connection: a restarted server is reached by the next one.
        error_code opened;
        c->server.open(upstream.protocol(), opened);
        if (opened) {
            close(*c);
            co_return;
        }
        close_on_exec(c->server.native_handle());
        auto [ec] = co_await c->server.async_connect(upstream, use_nothrow);
        if (!c->open)
            co_return;
        if (ec) {
            close(*c); // the client sees its connection end, as if the server had refused it
            co_return;
        }
        error_code ignored;
        c->server.set_option(tcp::no_delay(true), ignored);
        asio::co_spawn(ctx, read_loop(c, true), asio::detached);
        asio::co_spawn(ctx, read_loop(c, false), asio::detached);
        asio::co_spawn(ctx, write_loop(c, true), asio::detached);
        asio::co_spawn(ctx, write_loop(c, false), asio::detached);
    }

    asio::awaitable<void> read_loop(connection_ptr c, bool from_client) {
        tcp::socket& from = from_client ? c->client : c->server;
        direction& dir = from_client ? c->to_server : c->to_client;
        for (;;) {
            while (c->open && dir.queued_bytes >= max_queued_bytes) {
                dir.space.expires_at(clock_type::time_point::max());
                co_await dir.space.async_wait(use_nothrow);
            }
            if (!c->open)
                co_return;
            auto [ec, n] = co_await from.async_read_some(asio::buffer(dir.buffer), use_nothrow);
            if (!c->open)
                co_return;
            if (ec) {
                close(*c); // either side gone: both go
                co_return;
            }
            on_chunk(*c, from_client, std::string_view(dir.buffer.data(), n));
        }
    }

    void on_chunk(proxy_connection& c, bool from_client, std::string_view bytes) {
        if (c.black_holed || c.cut)
            return; // swallowed
        chunk ch{std::string(bytes), clock_type::now() + latency};
        if (!from_client) {
            // One fault per chunk: a cut first, then a rewrite.
            if (cut_keep) {
                std::size_t const keep = *cut_keep;
                cut_keep.reset();
                std::size_t const size = ch.bytes.size();
                ch.bytes.resize(size > keep ? keep : std::max<std::size_t>(1, size / 2));
                ch.close_after = true;
                c.cut = true;
                ++counters.cuts;
            } else if (rewrite) {
                ch.bytes = std::move(*rewrite);
                rewrite.reset();
                ++counters.rewrites;
            }
        }
        direction& dir = from_client ? c.to_server : c.to_client;
        dir.queued_bytes += ch.bytes.size();
        dir.queue.push_back(std::move(ch));
        dir.wake.cancel();
    }

    asio::awaitable<void> write_loop(connection_ptr c, bool to_server) {
        tcp::socket& to = to_server ? c->server : c->client;
        direction& dir = to_server ? c->to_server : c->to_client;
        while (c->open) {
            if (dir.queue.empty()) {
                dir.wake.expires_at(clock_type::time_point::max());
                co_await dir.wake.async_wait(use_nothrow);
                continue;
            }
            // Checked again after every wake-up: a stall may have been extended meanwhile.
            auto const due = std::max(dir.queue.front().due, stall_until);
            if (clock_type::now() < due) {
                dir.wake.expires_at(due);
                co_await dir.wake.async_wait(use_nothrow);
                continue;
            }
            chunk ch = std::move(dir.queue.front());
            dir.queue.pop_front();
            dir.queued_bytes -= ch.bytes.size();
            dir.space.cancel();
            if (!ch.bytes.empty()) {
                // Counted as the write starts, so a peer that has seen the bytes finds them
                // counted; what a failed write did not deliver is taken back.
                auto& counter = to_server ? counters.bytes_to_server : counters.bytes_to_client;
                counter += ch.bytes.size();
                // The chunk lives in this frame until the write completes, even when close()
                // aborts it.
                auto [ec, n] = co_await asio::async_write(to, asio::buffer(ch.bytes), use_nothrow);
                counter -= ch.bytes.size() - n;
                if (!c->open)
                    co_return;
                if (ec) {
                    close(*c);
                    co_return;
                }
            }
            if (ch.close_after) {
                close(*c);
                co_return;
            }
        }
    }

    // Closes both sockets and cancels the timers: every coroutine of the connection wakes with
    // an error, sees `open` false and returns, dropping its share of the connection.
    void close(proxy_connection& c) {
        if (!c.open)
            return;
        c.open = false;
        error_code ignored;
        // shutdown first: it ends the TCP connection even if some process holds a copy of the
        // descriptor.
        for (tcp::socket* socket : {&c.client, &c.server}) {
            if (socket->is_open())
                socket->shutdown(tcp::socket::shutdown_both, ignored);
            socket->close(ignored);
        }
        for (direction* d : {&c.to_server, &c.to_client}) {
            d->clear();
            d->wake.cancel();
        }
        connections.erase(c.id); // the caller holds a share, so `c` lives on
    }

    // Closes every connection (only the black-holed ones when `black_holed_only`); returns how
    // many were closed.
    std::size_t close_all(bool black_holed_only) {
        std::vector<connection_ptr> victims;
        for (auto const& [id, c] : connections)
            if (!black_holed_only || c->black_holed)
                victims.push_back(c);
        for (auto const& c : victims)
            close(*c);
        return victims.size();
    }

    void start_black_hole() {
        black_hole = true;
        for (auto const& [id, c] : connections) {
            if (c->black_holed)
                continue;
            c->black_holed = true;
            ++counters.black_holed;
            for (direction* d : {&c->to_server, &c->to_client}) {
                d->clear(); // queued bytes are swallowed too
                d->wake.cancel();
            }
        }
    }
};

fault_proxy::fault_proxy(std::uint16_t upstream_port)
    : impl_(std::make_unique<impl>(upstream_port)) {}

fault_proxy::~fault_proxy() {
    impl_->shutdown();
}

std::uint16_t fault_proxy::port() const noexcept {
    return impl_->port;
}

std::string fault_proxy::url() const {
    return "redis://127.0.0.1:" + std::to_string(impl_->port);
}

colock::redis::config fault_proxy::config() const {
    colock::redis::config cfg;
    cfg.host = "127.0.0.1";
    cfg.port = impl_->port;
    return cfg;
}

void fault_proxy::set_latency(std::chrono::milliseconds delay) {
    auto& p = *impl_;
    p.call([&p, delay] { p.latency = std::max(delay, std::chrono::milliseconds(0)); });
}

void fault_proxy::stall_for(std::chrono::milliseconds d) {
    if (d.count() <= 0)
        return;
    auto& p = *impl_;
    p.call([&p, d] {
        p.stall_until = std::max(p.stall_until, clock_type::now() + d);
        ++p.counters.stalls;
    });
}

void fault_proxy::set_black_hole(bool on) {
    auto& p = *impl_;
    p.call([&p, on] {
        if (on) {
            p.start_black_hole();
        } else {
            p.black_hole = false;
            p.close_all(true);
        }
    });
}

void fault_proxy::drop_connections() {
    auto& p = *impl_;
    p.call([&p] { p.counters.dropped += p.close_all(false); });
}

void fault_proxy::cut_next_reply(std::size_t keep_bytes) {
    auto& p = *impl_;
    p.call([&p, keep_bytes] { p.cut_keep = keep_bytes; });
}

void fault_proxy::rewrite_next_reply(std::string bytes) {
    auto& p = *impl_;
    p.call([&p, &bytes] { p.rewrite = std::move(bytes); }); // moved, never copied: may be large
}

fault_proxy_stats fault_proxy::stats() const {
    auto& p = *impl_;
    return p.call([&p] { return p.counters; });
}

std::size_t fault_proxy::open_connections() const {
    auto& p = *impl_;
    return p.call([&p] { return p.connections.size(); });
}

} // namespace colock::test
