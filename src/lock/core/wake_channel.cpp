// A synchronizer's waiting calls and their wake channel.
#include "lock/core/wake_channel.hpp"

#include "lock/core/locker_context.hpp"

#include <colock/redis/error.hpp>

#include <boost/asio/dispatch.hpp>

namespace colock::detail {

namespace asio = boost::asio;

wake_channel::waiter::waiter(wake_channel& channel)
    : timer(channel.locker_->strand()), channel_(channel) {}

wake_channel::waiter::~waiter() {
    auto& listed = channel_.waiters_;
    if (auto it = listed.find(listed_as_); it != listed.end() && it->second == this)
        listed.erase(it);
}

wake_channel::wake_channel(std::shared_ptr<locker_context> locker, std::string channel)
    : locker_(std::move(locker)), channel_(std::move(channel)) {}

void wake_channel::add(std::string const& token, waiter& w) {
    waiters_[token] = &w;
    w.listed_as_ = token;
    if (!routed_) {
        // Routed while calls wait, subscribed or not: the locker's end and the connection's
        // close end them.
        locker_->routes().add(channel_, weak_from_this());
        routed_ = true;
    }
}

void wake_channel::unlist(std::string const& token) {
    waiters_.erase(token);
}

void wake_channel::remove(std::string const& token) {
    waiters_.erase(token);
    stop_if_idle();
}

void wake_channel::stop_if_idle() {
    if (!waiters_.empty() || subscribing_)
        return;
    // Nobody waits: no messages needed until somebody does.
    if (subscribed_)
        locker_->store().unsubscribe(channel_);
    subscribed_ = false;
    if (routed_)
        locker_->routes().remove(channel_, this);
    routed_ = false;
}

asio::awaitable<void> wake_channel::subscribe(std::shared_ptr<wake_channel> self) {
    self->subscribing_ = true;
    if (!self->routed_) {
        self->locker_->routes().add(self->channel_, self);
        self->routed_ = true;
    }
    auto const [ec, refusal] = co_await self->locker_->store().subscribe(self->channel_);
    self->subscribing_ = false;
    if (ec)
        self->refused_ = ec == redis::error::server_error;
    else
        self->subscribed_ = true;
    self->stop_if_idle(); // everybody left meanwhile
}

void wake_channel::on_message(std::string const& payload) {
    if (!payload.starts_with("g "))
        return;
    auto const it = waiters_.find(payload.substr(2));
    if (it == waiters_.end())
        return;
    it->second->woken = true;
    it->second->timer.cancel();
}

void wake_channel::on_reconnect() {
    // Messages published while the connection was down were missed: every waiter asks now.
    wake_all(false);
}

void wake_channel::on_close() {
    // The connection was closed by its user, or the locker is gone: nothing more will come, and
    // a wait would reopen the connection.
    if (subscribed_)
        locker_->store().unsubscribe(channel_);
    subscribed_ = false;
    routed_ = false;
    wake_all(true);
}

void wake_channel::close() {
    asio::dispatch(locker_->strand(), [self = shared_from_this()] {
        self->closed_ = true;
        self->wake_all(true);
    });
}

void wake_channel::wake_all(bool abort) {
    for (auto& [token, w] : waiters_) {
        if (abort)
            w->aborted = true;
        else
            w->woken = true;
        w->timer.cancel();
    }
}

} // namespace colock::detail
