// The channels of a locker's synchronizers.
#include "lock/core/channel_routes.hpp"

#include <utility>
#include <vector>

namespace colock::detail {

void channel_routes::add(std::string const& channel, std::weak_ptr<channel_listener> listener) {
    routes_.emplace(channel, std::move(listener));
}

void channel_routes::remove(std::string const& channel, channel_listener const* listener) {
    auto [first, last] = routes_.equal_range(channel);
    while (first != last) {
        auto const l = first->second.lock();
        if (!l || l.get() == listener)
            first = routes_.erase(first);
        else
            ++first;
    }
}

bool channel_routes::deliver(std::string const& channel, std::string const& payload) {
    auto [first, last] = routes_.equal_range(channel);
    if (first == last)
        return false;
    std::vector<std::shared_ptr<channel_listener>> targets;
    for (; first != last; ++first)
        if (auto l = first->second.lock())
            targets.push_back(std::move(l));
    for (auto const& l : targets)
        l->on_message(payload);
    return true;
}

template <class F>
void channel_routes::for_each(F f) {
    std::vector<std::shared_ptr<channel_listener>> targets;
    for (auto const& [channel, listener] : routes_)
        if (auto l = listener.lock())
            targets.push_back(std::move(l));
    for (auto const& l : targets)
        f(*l);
}

void channel_routes::reconnected() {
    for_each([](channel_listener& l) { l.on_reconnect(); });
}

void channel_routes::closed() {
    auto routes = std::move(routes_);
    routes_.clear();
    for (auto const& [channel, listener] : routes)
        if (auto l = listener.lock())
            l->on_close();
}

void channel_routes::drop_handlers() noexcept {
    for (auto const& [channel, listener] : routes_)
        if (auto l = listener.lock())
            l->drop_handlers();
}

} // namespace colock::detail
