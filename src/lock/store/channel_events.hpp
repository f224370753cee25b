// What a connection tells the synchronizers built on it, on their strand. Private to the
// library's sources.
#pragma once

#include <string>

namespace colock::detail {

// What the engine tells a synchronizer; called on its strand, but for on_close.
class channel_events {
public:
    // A message on a channel starting with the prefix listened to.
    virtual void on_message(std::string const& channel, std::string const& payload) = 0;
    // The deployment is reachable again after a loss: messages may have been missed.
    virtual void on_reconnect() = 0;
    // The deployment was replaced (a restart, a failover), just before on_reconnect().
    virtual void on_server_change() = 0;
    // The user closes the connection (close(), or its destruction): called on the closing
    // thread, before the close starts, so that what is handed to the engine now is flushed
    // with it.
    virtual void on_close() noexcept = 0;

protected:
    ~channel_events() = default;
};

} // namespace colock::detail
