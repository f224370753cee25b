// A synchronizer's waiting calls, woken by messages on a wake channel of its locker (a
// semaphore's; next a latch's or a barrier's): the waiting, subscribing and reconnecting that
// each would otherwise write again. Private to the library's sources; on the locker's strand,
// but for close().
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/channel_routes.hpp"

#include <boost/asio/awaitable.hpp>

#include <memory>
#include <string>
#include <unordered_map>

namespace colock::detail {

class locker_context;

// Each waiting call is listed by its token. A message "g <token>" wakes that call; a
// reconnection wakes every one (messages may have been missed); the connection's close, the
// locker's end and close() abort every one. The channel is in the locker's routes while calls
// are listed, and subscribed at the store once, while wanted: until then, or when the server
// refuses it (an ACL user without the channel), the calls poll by their backoff.
class wake_channel final : public channel_listener,
                           public std::enable_shared_from_this<wake_channel> {
public:
    // A waiting call, on its coroutine's frame.
    class waiter {
    public:
        explicit waiter(wake_channel& channel);
        waiter(waiter const&) = delete;
        waiter& operator=(waiter const&) = delete;
        // A frame destroyed unresumed (the io_context's end) leaves the list.
        ~waiter();

        lock_timer timer;     // its sleep, cut short by a wake or an abort
        bool woken = false;   // a message, or a reconnection: ask now
        bool aborted = false; // closed: the synchronizer, the connection or the locker

    private:
        friend class wake_channel;
        wake_channel& channel_;
        std::string listed_as_; // its token, while listed
    };

    wake_channel(std::shared_ptr<locker_context> locker, std::string channel);

    std::string const& channel() const noexcept { return channel_; }
    // Lists `w` under `token`, routing the channel.
    void add(std::string const& token, waiter& w);
    // Unlists `token` (a waiter that goes on under a new token).
    void unlist(std::string const& token);
    // Unlists `token`; when nobody waits any more, the channel is unsubscribed and unrouted.
    void remove(std::string const& token);

    // Confirmed: a release's message wakes the waiters.
    bool subscribed() const noexcept { return subscribed_; }
    // Neither subscribed, refused nor under way: a waiter subscribes before it sleeps.
    bool wants_subscription() const noexcept { return !subscribed_ && !refused_ && !subscribing_; }
    // Subscribes at the store; not cancellable. A refusal is kept for the channel's life, a
    // failure to reach the server is tried again by the next waiter.
    static boost::asio::awaitable<void> subscribe(std::shared_ptr<wake_channel> self);

    // The synchronizer is gone: every waiter is aborted, and closed() says so to those to come.
    // Any thread.
    void close();
    bool closed() const noexcept { return closed_; }

    // channel_listener
    void on_message(std::string const& payload) override;
    void on_reconnect() override;
    void on_close() override;
    void drop_handlers() noexcept override {}

private:
    void wake_all(bool abort);
    void stop_if_idle();

    std::shared_ptr<locker_context> const locker_;
    std::string const channel_;
    std::unordered_map<std::string, waiter*> waiters_; // by token
    bool closed_ = false;
    bool routed_ = false; // in the locker's routes
    bool subscribing_ = false;
    bool subscribed_ = false;
    bool refused_ = false;
};

} // namespace colock::detail
