// The channels of a locker's synchronizers (an election's watches): the locker listens to its
// whole prefix and passes a message on such a channel to its listeners, with the connection's
// reconnections and close. Private to the library's sources; on the locker's strand.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

namespace colock::detail {

// A synchronizer listening on a channel of its own.
class channel_listener {
public:
    virtual void on_message(std::string const& payload) = 0;
    // The connection is back after a loss: messages may have been missed.
    virtual void on_reconnect() = 0;
    // The locker is gone, or its connection closed by its user: nothing more will come.
    virtual void on_close() = 0;
    // The io_context shuts down: the handlers waiting are destroyed without being completed
    // (they may own the coroutine that owns the listener).
    virtual void drop_handlers() noexcept = 0;

protected:
    ~channel_listener() = default;
};

class channel_routes {
public:
    void add(std::string const& channel, std::weak_ptr<channel_listener> listener);
    void remove(std::string const& channel, channel_listener const* listener);
    // True when `channel` is a synchronizer's (its listeners were told).
    bool deliver(std::string const& channel, std::string const& payload);
    void reconnected();
    // Every listener is told and forgotten.
    void closed();
    void drop_handlers() noexcept;

private:
    // Calls `f` on each live listener, on a copy: a listener may add or remove routes.
    template <class F>
    void for_each(F f);

    std::unordered_multimap<std::string, std::weak_ptr<channel_listener>> routes_;
};

} // namespace colock::detail
