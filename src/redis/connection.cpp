// The public connection: a handle on the engine (connection_impl), and the engine's interface
// for colock's own layers.
#include "connection_impl.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>

#include <fmt/format.h>

#include <stdexcept>

namespace colock::redis {
namespace detail {

shared_engine const& engine_of(connection const& conn) noexcept {
    return conn.impl_;
}

void engine_exec(shared_engine const& engine, resp3::request req, exec_handler handler) {
    engine->start_exec(std::move(req), std::move(handler));
}

void engine_change_subscription(shared_engine const& engine, bool subscribe,
                                std::vector<std::string> channels, subscription_handler handler) {
    if (channels.empty()) {
        engine->deliver(std::move(handler), {}, error_code{}, std::string());
        return;
    }
    // Not cancellable: the count and the server's state must agree.
    asio::dispatch(engine->strand_, [self = engine, subscribe, channels = std::move(channels),
                                     handler = std::move(handler)]() mutable {
        self->change_subscription(
            subscribe, std::move(channels),
            std::variant<connect_handler, subscription_handler>(
                std::in_place_type<subscription_handler>, std::move(handler)));
    });
}

void engine_add_listener(shared_engine const& engine, std::shared_ptr<push_listener> l) {
    asio::dispatch(engine->strand_, [self = engine, l = std::move(l)]() mutable {
        self->listeners_.push_back(std::move(l));
    });
}

void engine_remove_listener(shared_engine const& engine, push_listener const* listener) {
    asio::dispatch(engine->strand_, [self = engine, listener] {
        std::erase_if(self->listeners_, [listener](auto const& l) { return l.get() == listener; });
    });
}

bool engine_is_connected(shared_engine const& engine) noexcept {
    return engine->connected_;
}

asio::any_io_executor engine_executor(shared_engine const& engine) {
    return engine->executor_;
}

std::uint64_t engine_server_changes(shared_engine const& engine) noexcept {
    return engine->server_changes_;
}

std::uint64_t engine_reconnects(shared_engine const& engine) noexcept {
    return engine->reconnects_;
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
    return engine->ever_handshaken_;
}

std::string engine_last_error_text(shared_engine const& engine) {
    std::lock_guard lock(engine->error_mutex_);
    return engine->last_error_text_;
}

} // namespace detail

// --------------------------------------------------------------------
// connection

connection::connection(executor_type ex, config cfg)
    : impl_(std::make_shared<detail::connection_impl>(std::move(ex), std::move(cfg))) {
    colock::detail::context_shutdown::watch(impl_->executor_, impl_);
    auto& c = impl_->cfg_;
    if (c.uses_sentinel()) {
        if (c.sentinel.master_name.empty())
            throw std::invalid_argument("colock::redis::connection: config.sentinel has sentinels "
                                        "but no master_name");
        if (!c.unix_socket.empty())
            throw std::invalid_argument("colock::redis::connection: config has both sentinels "
                                        "and a unix_socket; the sentinels name a TCP address");
        for (auto const& s : c.sentinel.sentinels)
            if (s.host.empty() || s.port == 0)
                throw std::invalid_argument(fmt::format(
                    "colock::redis::connection: config.sentinel.sentinels has an address "
                    "without {} ('{}:{}')",
                    s.host.empty() ? "a host" : "a port", s.host, s.port));
    }
    if (c.use_tls && !c.unix_socket.empty())
        throw std::invalid_argument("colock::redis::connection: TLS over a unix socket is not "
                                    "supported (config has both use_tls and unix_socket)");
    if (c.use_tls) {
        auto& ctx = impl_->tls_context_.emplace(boost::asio::ssl::context::tls_client);
        if (c.tls_verify_peer) {
            ctx.set_verify_mode(boost::asio::ssl::verify_peer);
            if (c.tls_ca_file.empty())
                ctx.set_default_verify_paths();
            else
                ctx.load_verify_file(c.tls_ca_file);
        } else {
            ctx.set_verify_mode(boost::asio::ssl::verify_none);
        }
    }
}

connection::~connection() {
    // Requests made from now on fail at once; those made before are flushed (post, not dispatch:
    // see close()).
    impl_->destroyed_ = true;
    boost::asio::post(impl_->strand_, [guard = detail::close_guard(impl_)]() mutable {
        auto self = guard.take();
        self->listeners_.clear();
        self->graceful_close(true);
    });
}

connection::executor_type connection::get_executor() const noexcept {
    return impl_->executor_;
}

config const& connection::get_config() const noexcept {
    return impl_->cfg_;
}

void connection::start_connect(connect_handler handler) {
    impl_->start_connect(std::move(handler));
}

void connection::start_exec(resp3::request req, exec_handler handler) {
    detail::engine_exec(impl_, std::move(req), std::move(handler));
}

void connection::start_subscription(bool subscribe, std::vector<std::string> channels,
                                    connect_handler handler) {
    if (channels.empty()) {
        impl_->deliver(std::move(handler), {}, boost::system::error_code{});
        return;
    }
    // Not cancellable: the count and the server's state must agree.
    boost::asio::dispatch(impl_->strand_, [self = impl_, subscribe, channels = std::move(channels),
                                           handler = std::move(handler)]() mutable {
        self->change_subscription(subscribe, std::move(channels),
                                  std::variant<connect_handler, detail::subscription_handler>(
                                      std::in_place_type<connect_handler>, std::move(handler)));
    });
}

boost::asio::awaitable<void> connection::co_connect() {
    auto [ec] = co_await async_connect(boost::asio::as_tuple(boost::asio::use_awaitable));
    if (detail::is_connect_failure(ec))
        throw connect_error(ec, impl_->connect_failure_text(ec));
    if (ec)
        throw boost::system::system_error(ec);
}

boost::asio::awaitable<response> connection::co_exec(resp3::request req) {
    auto [ec, resp] =
        co_await async_exec(std::move(req), boost::asio::as_tuple(boost::asio::use_awaitable));
    if (ec == error::server_error)
        throw server_error(first_error_text(resp));
    if (ec == error::unsupported_command)
        throw boost::system::system_error(ec, first_error_text(resp));
    if (detail::is_connect_failure(ec))
        throw connect_error(ec, impl_->connect_failure_text(ec));
    if (ec)
        throw boost::system::system_error(ec);
    co_return std::move(resp);
}

void connection::add_push_listener(std::shared_ptr<push_listener> listener) {
    detail::engine_add_listener(impl_, std::move(listener));
}

void connection::remove_push_listener(push_listener const* listener) {
    detail::engine_remove_listener(impl_, listener);
}

void connection::close() {
    // post, never dispatch: a request whose async_exec (or engine_exec) happened before this call,
    // on any thread, reaches the strand first even when close() is called from a handler that runs
    // on the strand, so the flush takes it.
    boost::asio::post(impl_->strand_, [guard = detail::close_guard(impl_)]() mutable {
        guard.take()->graceful_close(false);
    });
}

bool connection::is_connected() const noexcept {
    return impl_->connected_;
}

std::uint64_t connection::reconnect_count() const noexcept {
    return impl_->reconnects_;
}

std::string connection::server_run_id() const {
    return impl_->run_id();
}

std::uint64_t connection::server_change_count() const noexcept {
    return impl_->server_changes_;
}

std::string connection::last_error_text() const {
    std::lock_guard lock(impl_->error_mutex_);
    return impl_->last_error_text_;
}

} // namespace colock::redis
