// core/wake_channel: a synchronizer's waiting calls woken by messages on its locker's channel,
// on the fake store (no server): which message wakes whom, a reconnection waking all, the close
// and the synchronizer's end aborting all, the channel routed and subscribed only while wanted.
#include "fake_store.hpp"
#include "lock/core/locker_context.hpp"
#include "lock/core/wake_channel.hpp"
#include "lock/mutex/locker_access.hpp"

#include <colock/locker.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <doctest/doctest.h>

#include <memory>
#include <string>

namespace {

namespace asio = boost::asio;
using colock::detail::wake_channel;

constexpr auto wake_test_channel = "colock:s:{jobs}:w:me";

struct wake_world {
    colock::test::fake_server server;
    asio::io_context ctx;
    std::shared_ptr<colock::test::fake_store> store =
        std::make_shared<colock::test::fake_store>(server, ctx.get_executor());
    colock::locker locks = colock::detail::locker_access::make(store);
    std::shared_ptr<colock::detail::locker_context> context = colock::detail::context_of(locks);
    std::shared_ptr<wake_channel> wakes =
        std::make_shared<wake_channel>(context, wake_test_channel);

    void settle() {
        ctx.run();
        ctx.restart();
    }
    // The locker routes a message on the channel to its listeners: true when one was there.
    bool routed(std::string const& payload) {
        return context->routes().deliver(wake_test_channel, payload);
    }
    bool subscribed_at_store() const { return store->subscriptions().contains(wake_test_channel); }
};

} // namespace

TEST_CASE("wake channel: a message wakes the waiter of its token only; others sleep on") {
    wake_world w;
    wake_channel::waiter first(*w.wakes), second(*w.wakes);
    w.wakes->add("t1", first);
    w.wakes->add("t2", second);
    CHECK(w.routed("g t2"));
    CHECK(second.woken);
    CHECK_FALSE(first.woken);
    w.wakes->on_message("g t3"); // nobody's: nothing happens
    w.wakes->on_message("x t1"); // not a wake
    w.wakes->on_message("g");    // too short to name anyone
    CHECK_FALSE(first.woken);
    CHECK_FALSE(first.aborted);
    CHECK_FALSE(second.aborted);
}

TEST_CASE("wake channel: a reconnection wakes every waiter; the close and close() abort them") {
    SUBCASE("reconnection") {
        wake_world w;
        wake_channel::waiter a(*w.wakes), b(*w.wakes);
        w.wakes->add("a", a);
        w.wakes->add("b", b);
        w.context->routes().reconnected();
        CHECK(a.woken);
        CHECK(b.woken);
        CHECK_FALSE(a.aborted);
    }
    SUBCASE("the connection's close") {
        wake_world w;
        wake_channel::waiter a(*w.wakes);
        w.wakes->add("a", a);
        w.context->routes().closed();
        CHECK(a.aborted);
        CHECK_FALSE(w.wakes->closed()); // the synchronizer itself lives on
    }
    SUBCASE("the synchronizer's end, on the strand") {
        wake_world w;
        wake_channel::waiter a(*w.wakes);
        w.wakes->add("a", a);
        w.wakes->close();
        w.settle();
        CHECK(a.aborted);
        CHECK(w.wakes->closed()); // said to the waiters to come
    }
}

TEST_CASE("wake channel: routed while calls wait, subscribed once while wanted, and both ended "
          "when the last waiter leaves") {
    wake_world w;
    CHECK_FALSE(w.routed("g t1")); // nobody waits: not routed
    wake_channel::waiter waiting(*w.wakes);
    w.wakes->add("t1", waiting);
    CHECK(w.routed("g x"));
    CHECK(w.wakes->wants_subscription());
    asio::co_spawn(w.context->strand(), wake_channel::subscribe(w.wakes), asio::detached);
    w.settle();
    CHECK(w.wakes->subscribed());
    CHECK_FALSE(w.wakes->wants_subscription());
    CHECK(w.subscribed_at_store());
    // A waiter that goes on under a new token is unlisted, the channel kept.
    w.wakes->unlist("t1");
    w.wakes->add("t2", waiting);
    CHECK(w.wakes->subscribed());
    CHECK(w.routed("g t2"));
    CHECK(waiting.woken);
    w.wakes->remove("t2");
    CHECK_FALSE(w.wakes->subscribed());
    CHECK_FALSE(w.subscribed_at_store());
    CHECK_FALSE(w.routed("g t2"));
    CHECK(w.wakes->wants_subscription()); // the next waiter subscribes again
}

TEST_CASE("wake channel: a waiter whose frame ends unresumed leaves the list") {
    wake_world w;
    {
        wake_channel::waiter gone(*w.wakes);
        w.wakes->add("t1", gone);
    }
    // Its token is nobody's now: a message for it and a reconnection touch nothing.
    w.wakes->on_message("g t1");
    w.wakes->on_reconnect();
    wake_channel::waiter next(*w.wakes);
    w.wakes->add("t2", next);
    w.wakes->on_message("g t1");
    CHECK_FALSE(next.woken);
}
