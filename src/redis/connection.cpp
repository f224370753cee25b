// The public connection: a handle on an engine (engine.hpp), and the engine's interface for
// colock's own layers. connection_impl implements the engine for one server.
#include "cluster_engine.hpp"
#include "connection_impl.hpp"

#include "../detail/completion.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>

#include <fmt/format.h>

#include <string>

namespace colock::redis {
namespace detail {

namespace {

// colock's own request on an engine its user closed: error::closed, posted to the handler's
// executor, and nothing is sent (see engine::closing_by_user).
template <class Handler, class... Args>
void refuse_closed(shared_engine const& engine, Handler handler, Args... args) {
    colock::detail::post_completion(engine->executor(), std::move(handler),
                                    asio::cancellation_slot(),
                                    boost::system::error_code(error::closed), std::move(args)...);
}

} // namespace

void engine::add_close_hook(std::weak_ptr<close_hook> hook) {
    std::lock_guard lock(hooks_mutex_);
    std::erase_if(hooks_, [](auto const& h) { return h.expired(); });
    hooks_.push_back(std::move(hook));
}

namespace {

// The engine whose close hooks run on this thread: their requests go out, and are flushed by the
// close, while everything else colock asks of it is refused from the start of the close.
thread_local engine const* closing_on_this_thread = nullptr;

bool refuses_own_requests(shared_engine const& engine) noexcept {
    return engine->closed_by_user() && closing_on_this_thread != engine.get();
}

} // namespace

void engine::closing_by_user() {
    // First: work the hooks hand to other threads (a strand) is refused from now on, so that
    // nothing can slip in behind the close and open the connection again.
    closed_by_user_.store(true, std::memory_order_release);
    std::vector<std::shared_ptr<close_hook>> live;
    {
        std::lock_guard lock(hooks_mutex_);
        for (auto const& h : hooks_)
            if (auto p = h.lock())
                live.push_back(std::move(p));
    }
    auto const outer = std::exchange(closing_on_this_thread, this);
    for (auto const& h : live) // outside the lock: a hook makes requests
        h->on_close();
    closing_on_this_thread = outer;
}

void engine_exec(shared_engine const& engine, resp3::request req, exec_handler handler) {
    if (refuses_own_requests(engine)) {
        refuse_closed(engine, std::move(handler), response{});
        return;
    }
    engine->start_exec(std::move(req), std::move(handler), handler_work::untracked);
}

void engine_change_subscription(shared_engine const& engine, bool subscribe,
                                std::vector<std::string> channels, subscription_handler handler) {
    if (refuses_own_requests(engine)) {
        refuse_closed(engine, std::move(handler), std::string());
        return;
    }
    engine->start_subscription(
        engine_shards_channels(engine) ? channel_kind::sharded : channel_kind::classic, subscribe,
        std::move(channels),
        any_subscription_handler(std::in_place_type<subscription_handler>, std::move(handler)));
}

void engine_add_listener(shared_engine const& engine, std::shared_ptr<push_listener> l) {
    engine->add_listener(std::move(l));
}

void engine_remove_listener(shared_engine const& engine, push_listener const* listener) {
    engine->remove_listener(listener);
}

bool engine_shards_channels(shared_engine const& engine) noexcept {
    return engine->settings().uses_cluster();
}

bool engine_is_connected(shared_engine const& engine) noexcept {
    return engine->is_connected();
}

asio::any_io_executor engine_executor(shared_engine const& engine) {
    return engine->executor();
}

std::uint64_t engine_server_changes(shared_engine const& engine) noexcept {
    return engine->server_changes();
}

std::uint64_t engine_server_changes_for(shared_engine const& engine,
                                        std::string_view key) noexcept {
    return engine->server_changes_for(key);
}

std::uint64_t engine_reconnects(shared_engine const& engine) noexcept {
    return engine->reconnects();
}

bool engine_logs(shared_engine const& engine, log_level level) noexcept {
    return engine->logs(level);
}

void engine_log(shared_engine const& engine, log_level level, std::string_view line) noexcept {
    engine->log(level, line);
}

std::string engine_connect_failure(shared_engine const& engine, boost::system::error_code ec) {
    return engine->connect_failure_text(ec);
}

bool engine_ever_connected(shared_engine const& engine) noexcept {
    return engine->ever_connected();
}

std::string engine_run_id(shared_engine const& engine) {
    return engine->run_id();
}

std::string engine_endpoint_text(shared_engine const& engine) {
    return engine->settings().endpoint_text();
}

std::string engine_last_error_text(shared_engine const& engine) {
    return engine->last_error_text();
}

// ---------------------------------------------------------------- connection_impl as an engine

void connection_impl::start_subscription(channel_kind kind, bool subscribe,
                                         std::vector<std::string> channels,
                                         any_subscription_handler handler) {
    if (channels.empty()) {
        std::visit(
            [this](auto& h) {
                using handler_type = std::decay_t<decltype(h)>;
                if constexpr (std::is_same_v<handler_type, connect_handler>)
                    deliver(std::move(h), {}, error_code{});
                else
                    deliver(std::move(h), {}, error_code{}, std::string());
            },
            handler);
        return;
    }
    // Not cancellable: the count and the server's state must agree.
    asio::dispatch(strand_, [self = shared_from_this(), kind, subscribe,
                             channels = std::move(channels),
                             handler = std::move(handler)]() mutable {
        self->change_subscription(kind, subscribe, std::move(channels), std::move(handler));
    });
}

void connection_impl::start_close() {
    // post, never dispatch: a request whose async_exec (or engine_exec) happened before this call,
    // on any thread, reaches the strand first even when close() is called from a handler that runs
    // on the strand, so the flush takes it.
    asio::post(strand_, [guard = close_guard(shared_from_this())]() mutable {
        guard.take()->graceful_close(false);
    });
}

void connection_impl::handle_destroyed() {
    // Requests made from now on fail at once; those made before are flushed (post, not dispatch:
    // see start_close()).
    destroyed_ = true;
    asio::post(strand_, [guard = close_guard(shared_from_this())]() mutable {
        auto self = guard.take();
        self->listeners_.clear();
        self->graceful_close(true);
    });
}

std::string engine_base::last_error_text() const {
    std::lock_guard lock(error_mutex_);
    return last_error_text_;
}

void engine_base::add_listener(std::shared_ptr<push_listener> l) {
    asio::dispatch(strand_, [self = shared_base(), l = std::move(l)]() mutable {
        self->listeners_.push_back(std::move(l));
    });
}

void engine_base::remove_listener(push_listener const* listener) {
    asio::dispatch(strand_, [self = shared_base(), listener] {
        std::erase_if(self->listeners_, [listener](auto const& l) { return l.get() == listener; });
    });
}

void engine_base::set_error_text(std::string text) {
    log(log_level::warning, text);
    std::lock_guard lock(error_mutex_);
    last_error_text_ = std::move(text);
}

void engine_base::log(log_level level, std::string_view line) const noexcept {
    if (!logs(level))
        return;
    try {
        cfg_.log(level, line);
    } catch (...) {
        // A failing log hook must not take the connection down with it.
    }
}

namespace {

[[noreturn]] void refuse_config(std::string const& what) {
    throw boost::system::system_error(error::invalid_config, what);
}

} // namespace

void check_config(config const& c) {
    if (c.uses_sentinel()) {
        if (c.sentinel.master_name.empty())
            refuse_config("colock::redis::connection: config.sentinel has sentinels "
                          "but no master_name");
        if (!c.unix_socket.empty())
            refuse_config("colock::redis::connection: config has both sentinels "
                          "and a unix_socket; the sentinels name a TCP address");
        for (auto const& s : c.sentinel.sentinels)
            if (s.host.empty() || s.port == 0)
                refuse_config(fmt::format(
                    "colock::redis::connection: config.sentinel.sentinels has an address "
                    "without {} ('{}:{}')",
                    s.host.empty() ? "a host" : "a port", s.host, s.port));
    }
    if (c.uses_cluster()) {
        if (c.uses_sentinel())
            refuse_config("colock::redis::connection: config has both cluster "
                          "seeds and sentinels; a deployment is one or the other");
        if (!c.unix_socket.empty())
            refuse_config("colock::redis::connection: config has both cluster "
                          "seeds and a unix_socket; cluster nodes are TCP addresses");
        if (c.database != 0)
            refuse_config(fmt::format(
                "colock::redis::connection: config.database is {}, but Redis Cluster has only "
                "database 0",
                c.database));
        for (auto const& s : c.cluster.seeds)
            if (s.host.empty() || s.port == 0)
                refuse_config(fmt::format(
                    "colock::redis::connection: config.cluster.seeds has an address without {} "
                    "('{}:{}')",
                    s.host.empty() ? "a host" : "a port", s.host, s.port));
    }
    if (c.use_tls && !c.unix_socket.empty())
        refuse_config("colock::redis::connection: TLS over a unix socket is not "
                      "supported (config has both use_tls and unix_socket)");
}

std::shared_ptr<engine> make_engine(asio::any_io_executor ex, config cfg) {
    check_config(cfg);
    if (cfg.uses_cluster())
        return make_cluster_engine(std::move(ex), std::move(cfg));
    auto impl = std::make_shared<connection_impl>(std::move(ex), std::move(cfg));
    colock::detail::context_shutdown::watch(impl->executor(), impl);
    return impl;
}

} // namespace detail

// --------------------------------------------------------------------
// connection

connection::connection(executor_type ex, config cfg)
    : impl_(detail::make_engine(std::move(ex), std::move(cfg))) {}

connection::~connection() {
    impl_->closing_by_user();
    impl_->handle_destroyed();
}

connection::executor_type connection::get_executor() const noexcept {
    return impl_->executor();
}

config const& connection::get_config() const noexcept {
    return impl_->settings();
}

void connection::start_connect(connect_handler handler) {
    impl_->used_by_user();
    impl_->start_connect(std::move(handler));
}

void connection::start_exec(resp3::request req, exec_handler handler) {
    impl_->used_by_user();
    impl_->start_exec(std::move(req), std::move(handler), detail::handler_work::tracked);
}

void connection::start_subscription(bool subscribe, std::vector<std::string> channels,
                                    connect_handler handler) {
    impl_->used_by_user();
    impl_->start_subscription(
        detail::channel_kind::classic, subscribe, std::move(channels),
        detail::any_subscription_handler(std::in_place_type<connect_handler>, std::move(handler)));
}

boost::asio::awaitable<void> connection::co_connect() {
    auto [ec] = co_await async_connect(detail::nothrow_awaitable);
    if (detail::is_connect_failure(ec))
        throw connect_error(ec, impl_->connect_failure_text(ec));
    if (ec)
        throw boost::system::system_error(ec);
}

boost::asio::awaitable<response> connection::co_exec(resp3::request req) {
    auto [ec, resp] = co_await async_exec(std::move(req), detail::nothrow_awaitable);
    if (ec == error::server_error)
        throw server_error(first_error_text(resp));
    if (ec == error::unsupported_command || ec == error::cross_slot)
        throw boost::system::system_error(ec, first_error_text(resp));
    if (detail::is_connect_failure(ec))
        throw connect_error(ec, impl_->connect_failure_text(ec));
    if (ec)
        throw boost::system::system_error(ec);
    co_return std::move(resp);
}

void connection::add_push_listener(std::shared_ptr<push_listener> listener) {
    impl_->add_listener(std::move(listener));
}

void connection::remove_push_listener(push_listener const* listener) {
    impl_->remove_listener(listener);
}

void connection::close() {
    impl_->closing_by_user();
    impl_->start_close();
}

bool connection::is_connected() const noexcept {
    return impl_->is_connected();
}

std::uint64_t connection::reconnect_count() const noexcept {
    return impl_->reconnects();
}

std::string connection::server_run_id() const {
    return impl_->run_id();
}

std::vector<server_address> connection::cluster_primaries() const {
    return impl_->cluster_primaries();
}

std::uint64_t connection::server_change_count() const noexcept {
    return impl_->server_changes();
}

std::string connection::last_error_text() const {
    return impl_->last_error_text();
}

} // namespace colock::redis
