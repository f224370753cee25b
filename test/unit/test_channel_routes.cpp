// The routes from a locker's channels to its synchronizers' listeners (core/channel_routes):
// a message reaches the listeners of its channel only, a removed or expired listener hears
// nothing, reconnections reach every live listener once per route, and a close tells each and
// forgets them all. No I/O: the listeners record what they were told.
#include "lock/core/channel_routes.hpp"

#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

using colock::detail::channel_listener;
using colock::detail::channel_routes;

namespace {

// A listener that writes down what it hears, and may run a step of its own on a message.
struct recorder final : channel_listener {
    std::vector<std::string> messages;
    int reconnects = 0;
    int closes = 0;
    int drops = 0;
    std::function<void()> on_next_message;

    void on_message(std::string const& payload) override {
        messages.push_back(payload);
        if (auto step = std::exchange(on_next_message, nullptr))
            step();
    }
    void on_reconnect() override { ++reconnects; }
    void on_close() override { ++closes; }
    void drop_handlers() noexcept override { ++drops; }
};

// A recorder listening on `channel`.
std::shared_ptr<recorder> listening(channel_routes& routes, std::string const& channel) {
    auto l = std::make_shared<recorder>();
    routes.add(channel, l);
    return l;
}

} // namespace

TEST_CASE("channel routes: a message on a channel reaches its listener with the payload") {
    channel_routes routes;
    auto const l = listening(routes, "p:e:{a}");
    CHECK(routes.deliver("p:e:{a}", "v 3"));
    CHECK(l->messages == std::vector<std::string>{"v 3"});
}

TEST_CASE("channel routes: a channel without routes is not the synchronizers' and tells nobody") {
    channel_routes routes;
    auto const l = listening(routes, "p:e:{a}");
    CHECK_FALSE(routes.deliver("p:e:{b}", "x"));
    CHECK_FALSE(routes.deliver("p:e:{a}x", "x")); // no prefix matching: the whole name
    CHECK_FALSE(routes.deliver("", "x"));
    CHECK(l->messages.empty());
}

TEST_CASE("channel routes: every listener of a channel hears its message, the others' not") {
    channel_routes routes;
    auto const a1 = listening(routes, "a");
    auto const a2 = listening(routes, "a");
    auto const b = listening(routes, "b");
    CHECK(routes.deliver("a", "m"));
    CHECK(a1->messages == std::vector<std::string>{"m"});
    CHECK(a2->messages == std::vector<std::string>{"m"});
    CHECK(b->messages.empty());
}

TEST_CASE("channel routes: a removed listener hears nothing more, the other on its channel does") {
    channel_routes routes;
    auto const gone = listening(routes, "a");
    auto const kept = listening(routes, "a");
    routes.remove("a", gone.get());
    CHECK(routes.deliver("a", "m"));
    CHECK(gone->messages.empty());
    CHECK(kept->messages == std::vector<std::string>{"m"});
}

TEST_CASE("channel routes: removing the last listener makes the channel no synchronizer's") {
    channel_routes routes;
    auto const l = listening(routes, "a");
    routes.remove("a", l.get());
    CHECK_FALSE(routes.deliver("a", "m"));
    CHECK(l->messages.empty());
}

TEST_CASE("channel routes: removal is per channel: the listener's route on another channel stays") {
    channel_routes routes;
    auto const l = listening(routes, "a");
    routes.add("b", l);
    routes.remove("a", l.get());
    CHECK_FALSE(routes.deliver("a", "1"));
    CHECK(routes.deliver("b", "2"));
    CHECK(l->messages == std::vector<std::string>{"2"});
}

TEST_CASE("channel routes: removing a listener that never listened there changes nothing") {
    channel_routes routes;
    auto const l = listening(routes, "a");
    auto const stranger = std::make_shared<recorder>();
    routes.remove("a", stranger.get());
    routes.remove("b", l.get());
    CHECK(routes.deliver("a", "m"));
    CHECK(l->messages == std::vector<std::string>{"m"});
}

TEST_CASE("channel routes: a listener destroyed without removing itself is skipped, and its "
          "route goes with the next removal on the channel") {
    channel_routes routes;
    auto dead = listening(routes, "a");
    auto const live = listening(routes, "a");
    dead.reset();
    CHECK(routes.deliver("a", "m")); // still routed: a route is there, if expired
    CHECK(live->messages == std::vector<std::string>{"m"});
    routes.remove("a", live.get()); // takes the expired route with it
    CHECK_FALSE(routes.deliver("a", "m"));
}

TEST_CASE("channel routes: a channel whose listeners are all gone is still the synchronizers': "
          "its message is taken, not passed on as the lock's") {
    channel_routes routes;
    auto dead = listening(routes, "a");
    dead.reset();
    CHECK(routes.deliver("a", "m"));
}

TEST_CASE("channel routes: a listener that removes itself while told of a message does not "
          "stop the others on the channel hearing it") {
    channel_routes routes;
    auto const first = listening(routes, "a");
    auto const second = listening(routes, "a");
    // Whichever is told first takes both routes out: the other is told all the same (the
    // routes were copied before anyone was told).
    auto const remove_both = [&] {
        routes.remove("a", first.get());
        routes.remove("a", second.get());
    };
    first->on_next_message = remove_both;
    second->on_next_message = remove_both;
    CHECK(routes.deliver("a", "m"));
    CHECK(first->messages.size() == 1);
    CHECK(second->messages.size() == 1);
    CHECK_FALSE(routes.deliver("a", "again"));
}

TEST_CASE("channel routes: a listener may add a route while told of a message; the new route "
          "hears the next message, not this one") {
    channel_routes routes;
    auto const first = listening(routes, "a");
    auto const added = std::make_shared<recorder>();
    first->on_next_message = [&] { routes.add("a", added); };
    CHECK(routes.deliver("a", "1"));
    CHECK(added->messages.empty());
    CHECK(routes.deliver("a", "2"));
    CHECK(first->messages == std::vector<std::string>{"1", "2"});
    CHECK(added->messages == std::vector<std::string>{"2"});
}

TEST_CASE("channel routes: a reconnection reaches every live listener of every channel") {
    channel_routes routes;
    auto const a = listening(routes, "a");
    auto const b = listening(routes, "b");
    auto dead = listening(routes, "c");
    std::weak_ptr<recorder> const watch = dead;
    dead.reset();
    routes.reconnected();
    CHECK(a->reconnects == 1);
    CHECK(b->reconnects == 1);
    CHECK(watch.expired());
    // Routes stay after a reconnection: messages still arrive.
    CHECK(routes.deliver("a", "m"));
    CHECK(a->messages.size() == 1);
}

TEST_CASE("channel routes: a removed listener is not told of a reconnection") {
    channel_routes routes;
    auto const l = listening(routes, "a");
    routes.remove("a", l.get());
    routes.reconnected();
    CHECK(l->reconnects == 0);
}

TEST_CASE("channel routes: a close tells each live listener once and forgets every route") {
    channel_routes routes;
    auto const a = listening(routes, "a");
    auto const b = listening(routes, "b");
    routes.closed();
    CHECK(a->closes == 1);
    CHECK(b->closes == 1);
    CHECK_FALSE(routes.deliver("a", "m"));
    CHECK_FALSE(routes.deliver("b", "m"));
    routes.reconnected();
    routes.closed();
    CHECK(a->reconnects == 0);
    CHECK(a->closes == 1); // forgotten: a second close tells nobody
}

TEST_CASE("channel routes: a listener that adds a route while told of the close keeps it") {
    channel_routes routes;
    struct reopener final : channel_listener {
        channel_routes* routes = nullptr;
        std::weak_ptr<channel_listener> self;
        int closes = 0;
        void on_message(std::string const&) override {}
        void on_reconnect() override {}
        void on_close() override {
            ++closes;
            routes->add("again", self);
        }
        void drop_handlers() noexcept override {}
    };
    auto const l = std::make_shared<reopener>();
    l->routes = &routes;
    l->self = l;
    routes.add("a", l);
    routes.closed();
    CHECK(l->closes == 1);
    CHECK_FALSE(routes.deliver("a", "m"));
    CHECK(routes.deliver("again", "m")); // added during the close, after the routes were taken
}

TEST_CASE("channel routes: dropping the handlers reaches every live listener and keeps the "
          "routes") {
    channel_routes routes;
    auto const a = listening(routes, "a");
    auto const b = listening(routes, "b");
    auto dead = listening(routes, "b");
    dead.reset();
    routes.drop_handlers();
    CHECK(a->drops == 1);
    CHECK(b->drops == 1);
    CHECK(a->closes == 0);
    CHECK(routes.deliver("b", "m"));
}

TEST_CASE("channel routes: a listener added twice on a channel hears each message twice, and "
          "one removal takes both routes") {
    channel_routes routes;
    auto const l = listening(routes, "a");
    routes.add("a", l);
    CHECK(routes.deliver("a", "m"));
    CHECK(l->messages.size() == 2);
    routes.remove("a", l.get());
    CHECK_FALSE(routes.deliver("a", "m"));
}
