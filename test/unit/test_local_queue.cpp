// The local queues of a locker (core/local_queue): one FIFO of waiters per name, one entry per
// name whatever the number of waiters, the head woken alone, and the last one out taking the
// subscription and the server's entry with it. The store is a recorder of what the queues ask
// of it: no I/O.
#include "lock/core/local_queue.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
// What is under test, from core/local_queue.hpp, and the store it asks.
using colock::detail::lease_store, colock::detail::local_queues, colock::detail::lock_keys,
    colock::detail::max_handoff_claim, colock::detail::name_queue, colock::detail::waiter,
    colock::detail::wake_reason;

namespace {

// A store that writes down the two fire-and-forget requests the queues make; the queues use
// nothing else of it.
class recording_store final : public lease_store {
public:
    struct leave {
        std::string key;
        std::string owner;
        std::chrono::milliseconds claim;
    };
    std::vector<std::string> unsubscribed;
    std::vector<leave> leaves;

    recording_store() : strand_(asio::make_strand(ctx_.get_executor())) {}

    void unsubscribe(std::string const& channel) override { unsubscribed.push_back(channel); }
    void leave_queue(lock_keys const& keys, std::chrono::milliseconds claim) override {
        leaves.push_back({keys.key, keys.owner, claim});
    }

    asio::strand<asio::any_io_executor> const& strand() const override { return strand_; }
    asio::awaitable<colock::detail::grant_result>
    grant(lock_keys const&, std::string const&, std::chrono::milliseconds, colock::detail::queueing,
          asio::cancellation_slot, colock::detail::replica_wait) override {
        co_return colock::detail::grant_result{};
    }
    asio::awaitable<colock::detail::lease_reply>
    extend(lock_keys const&, std::string const&, std::chrono::milliseconds, std::int64_t,
           std::optional<colock::detail::held_value>) override {
        co_return colock::detail::lease_reply{};
    }
    asio::awaitable<colock::detail::lease_reply>
    release(lock_keys const&, std::string const&, std::chrono::milliseconds, std::int64_t,
            std::optional<colock::detail::held_value>) override {
        co_return colock::detail::lease_reply{};
    }
    void release_in_background(lock_keys const&, std::string const&, std::chrono::milliseconds,
                               std::int64_t, std::optional<colock::detail::held_value>,
                               std::function<void()>) override {}
    void give_back_in_background(lock_keys const&, std::string const&,
                                 std::function<bool()>) override {}
    asio::awaitable<std::pair<boost::system::error_code, std::string>>
    subscribe(std::string const&) override {
        co_return std::pair<boost::system::error_code, std::string>{};
    }
    void listen(std::weak_ptr<colock::detail::channel_events>, std::string) override {}
    void stop_listening() override {}
    asio::awaitable<colock::detail::lock_reading> read(lock_keys const&) override {
        co_return colock::detail::lock_reading{};
    }
    asio::awaitable<colock::detail::record_reading> read_record(std::string const&) override {
        co_return colock::detail::record_reading{};
    }
    void write_record(std::string const&, std::vector<std::pair<std::string, std::string>> const&,
                      std::chrono::milliseconds) override {}
    asio::awaitable<colock::detail::forced_unlock_result>
    force_unlock(lock_keys const&, std::string const&) override {
        co_return colock::detail::forced_unlock_result{};
    }
    bool is_connected() const noexcept override { return true; }
    std::string last_error_text() const override { return {}; }
    std::uint64_t server_changes(lock_keys const&) const noexcept override { return 0; }
    std::uint64_t reconnects() const noexcept override { return 0; }
    bool logs(colock::log_level) const noexcept override { return false; }
    void log(colock::log_level, std::string_view) const noexcept override {}

private:
    asio::io_context ctx_;
    asio::strand<asio::any_io_executor> strand_;
};

// A waiter asleep: its wake-ups are counted.
struct sleeper : waiter {
    int woken = 0;
    sleeper() { sleep(); }
    void sleep() {
        on_wake = [](waiter& w) { ++static_cast<sleeper&>(w).woken; };
    }
};

struct queues_fixture {
    recording_store store;
    local_queues queues{store, "me"};
    lock_keys const a{"p:", "a", "me"};
    lock_keys const b{"p:", "b", "me"};

    // Joins `ws` to the queue of `keys`, in this order; the queue.
    std::shared_ptr<name_queue> join_all(lock_keys const& keys, std::initializer_list<waiter*> ws) {
        std::shared_ptr<name_queue> q;
        for (auto* w : ws)
            q = queues.join(keys, *w);
        return q;
    }
    // join_all, the queue then subscribed and queued at the server.
    std::shared_ptr<name_queue> subscribed_queue(lock_keys const& keys,
                                                 std::initializer_list<waiter*> ws) {
        auto q = join_all(keys, ws);
        q->subscribed = true;
        q->queued_at_server = true;
        return q;
    }
    // Drops `ws` from `q`, in this order.
    void drop_all(std::shared_ptr<name_queue> const& q, std::initializer_list<waiter*> ws) {
        for (auto* w : ws)
            queues.drop(q, *w);
    }
};

// The waiters of `q`, front to back.
std::vector<waiter const*> queue_order(name_queue const& q) {
    std::vector<waiter const*> out;
    for (auto const& w : q.waiters)
        out.push_back(&w);
    return out;
}

} // namespace

TEST_CASE_FIXTURE(queues_fixture, "local queues: waiters on one name share one queue, in the "
                                  "order they joined") {
    sleeper w1, w2, w3;
    auto const q1 = queues.join(a, w1);
    auto const q2 = queues.join(a, w2);
    auto const q3 = queues.join(a, w3);
    CHECK(q1 == q2);
    CHECK(q2 == q3);
    CHECK(queue_order(*q1) == std::vector<waiter const*>{&w1, &w2, &w3});
    CHECK(q1->keys.key == a.key);
    CHECK(q1->keys.channel == a.channel);
    CHECK(queues.find(a) == q1.get());
    for (auto* w : {&w1, &w2, &w3})
        queues.drop(q1, *w);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: another name has a queue of its own") {
    sleeper w1, w2;
    auto const qa = queues.join(a, w1);
    auto const qb = queues.join(b, w2);
    CHECK(qa != qb);
    CHECK(queues.find(a) == qa.get());
    CHECK(queues.find(b) == qb.get());
    CHECK(queue_order(*qa) == std::vector<waiter const*>{&w1});
    CHECK(queue_order(*qb) == std::vector<waiter const*>{&w2});
    queues.drop(qa, w1);
    queues.drop(qb, w2);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: the same name under another prefix is another "
                                  "queue") {
    sleeper w1, w2;
    lock_keys const other_prefix{"q:", "a", "me"};
    auto const q1 = queues.join(a, w1);
    auto const q2 = queues.join(other_prefix, w2);
    CHECK(q1 != q2);
    queues.drop(q1, w1);
    queues.drop(q2, w2);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a waiter that has asked goes ahead of a head "
                                  "that has not, when it asks to") {
    sleeper unasked, asker;
    auto const q = queues.join(a, unasked);
    queues.join(a, asker, /*ahead_of_unasked=*/true);
    CHECK(queue_order(*q) == std::vector<waiter const*>{&asker, &unasked});
    drop_all(q, {&asker, &unasked});
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a head that has asked keeps its place; the "
                                  "newcomer goes last even when it asks to go ahead") {
    sleeper head, middle, asker;
    auto const q = queues.join(a, head);
    head.asked = true;
    queues.join(a, middle);
    queues.join(a, asker, /*ahead_of_unasked=*/true);
    CHECK(queue_order(*q) == std::vector<waiter const*>{&head, &middle, &asker});
    for (auto* w : {&head, &middle, &asker})
        queues.drop(q, *w);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: without asking to go ahead, a waiter goes last "
                                  "behind an unasked head") {
    sleeper unasked, later;
    auto const q = join_all(a, {&unasked, &later});
    CHECK(queue_order(*q) == std::vector<waiter const*>{&unasked, &later});
    drop_all(q, {&unasked, &later});
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: waiting() counts the waiters of every queue, "
                                  "down again as they leave or are dropped") {
    sleeper w1, w2, w3;
    CHECK(queues.waiting() == 0);
    auto const qa = join_all(a, {&w1, &w2});
    auto const qb = queues.join(b, w3);
    CHECK(queues.waiting() == 3);
    queues.leave(qa, w2, false, 0ms);
    CHECK(queues.waiting() == 2);
    queues.drop(qb, w3);
    CHECK(queues.waiting() == 1);
    queues.leave(qa, w1, false, 0ms);
    CHECK(queues.waiting() == 0);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: the last one out drops the subscription and the "
                                  "server's entry, with the claim it was given") {
    sleeper w1, w2;
    auto const q = subscribed_queue(a, {&w1, &w2});
    queues.leave(q, w1, false, 700ms);
    CHECK(store.unsubscribed.empty()); // one left: the name still has a waiter
    CHECK(store.leaves.empty());
    queues.leave(q, w2, false, 700ms);
    CHECK(store.unsubscribed == std::vector<std::string>{a.channel});
    REQUIRE(store.leaves.size() == 1);
    CHECK(store.leaves[0].key == a.key);
    CHECK(store.leaves[0].owner == "me");
    CHECK(store.leaves[0].claim == 700ms);
    CHECK(queues.find(a) == nullptr);
    CHECK_FALSE(queues.busy(a));
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: the last one out of a queue neither subscribed "
                                  "nor queued at the server asks nothing of the store") {
    sleeper w;
    auto const q = queues.join(a, w);
    queues.leave(q, w, true, 1000ms);
    CHECK(store.unsubscribed.empty());
    CHECK(store.leaves.empty());
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a queue emptied is forgotten; the next waiter "
                                  "on the name gets a fresh one") {
    sleeper w1, w2;
    auto const old = queues.join(a, w1);
    old->subscribed = true;
    old->queued_at_server = true;
    old->others_queued = true;
    queues.leave(old, w1, false, 0ms);
    auto const fresh = queues.join(a, w2);
    CHECK(fresh != old);
    CHECK_FALSE(fresh->subscribed);
    CHECK_FALSE(fresh->queued_at_server);
    CHECK_FALSE(fresh->others_queued);
    queues.drop(fresh, w2);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a head going out wakes the next, and only it") {
    sleeper w1, w2, w3;
    auto const q = join_all(a, {&w1, &w2, &w3});
    queues.leave(q, w1, false, 0ms);
    CHECK(w2.woken == 1);
    CHECK(w2.wake == wake_reason::woken);
    CHECK(w3.woken == 0);
    CHECK(w3.wake == wake_reason::none);
    drop_all(q, {&w2, &w3});
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a head that took the lock with this locker "
                                  "queued at the server promotes the next to wait for its "
                                  "hand-off") {
    sleeper w1, w2;
    auto const q = join_all(a, {&w1, &w2});
    q->queued_at_server = true;
    queues.leave(q, w1, /*acquired=*/true, 0ms);
    CHECK(w2.woken == 1);
    CHECK(w2.wake == wake_reason::promoted_after_acquire);
    queues.drop(q, w2);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a head that took the lock without an entry at "
                                  "the server wakes the next to ask at once") {
    sleeper w1, w2;
    auto const q = join_all(a, {&w1, &w2});
    queues.leave(q, w1, /*acquired=*/true, 0ms);
    CHECK(w2.wake == wake_reason::woken);
    queues.drop(q, w2);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a waiter behind the head going out wakes "
                                  "nobody") {
    sleeper w1, w2, w3;
    auto const q = join_all(a, {&w1, &w2, &w3});
    queues.leave(q, w2, true, 0ms);
    CHECK(w1.woken == 0);
    CHECK(w3.woken == 0);
    CHECK(queue_order(*q) == std::vector<waiter const*>{&w1, &w3});
    drop_all(q, {&w1, &w3});
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a dropped waiter asks nothing of the store and "
                                  "wakes nobody, even the last of a subscribed queue") {
    sleeper w1, w2;
    auto const q = subscribed_queue(a, {&w1, &w2});
    queues.drop(q, w1);
    CHECK(w2.woken == 0);
    queues.drop(q, w2);
    CHECK(store.unsubscribed.empty());
    CHECK(store.leaves.empty());
    CHECK(queues.find(a) == nullptr); // no waiters: not found
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a name is busy while it has waiters or a first "
                                  "attempt is under way, counted per attempt") {
    CHECK_FALSE(queues.busy(a));
    queues.begin_first_attempt(a);
    queues.begin_first_attempt(a);
    CHECK(queues.busy(a));
    CHECK_FALSE(queues.busy(b));
    CHECK(queues.find(a) == nullptr); // an attempt is no waiter
    queues.end_first_attempt(a);
    CHECK(queues.busy(a)); // one still under way
    queues.end_first_attempt(a);
    CHECK_FALSE(queues.busy(a));
    queues.end_first_attempt(a); // one too many: no harm, no count below zero
    queues.begin_first_attempt(a);
    CHECK(queues.busy(a));
    queues.end_first_attempt(a);
    CHECK_FALSE(queues.busy(a));

    sleeper w;
    auto const q = queues.join(b, w);
    CHECK(queues.busy(b));
    queues.leave(q, w, false, 0ms);
    CHECK_FALSE(queues.busy(b));
}

TEST_CASE("local queues: wake() ends the sleep once and leaves the reason; a busy waiter only "
          "keeps the reason") {
    sleeper s;
    local_queues::wake(s, wake_reason::handed);
    CHECK(s.woken == 1);
    CHECK(s.wake == wake_reason::handed);
    bool const still_asleep = s.on_wake != nullptr;
    CHECK_FALSE(still_asleep);
    local_queues::wake(s); // busy now: nothing to end
    CHECK(s.woken == 1);
    CHECK(s.wake == wake_reason::woken);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a hand-off message wakes the head alone and "
                                  "leaves it pending") {
    sleeper w1, w2;
    auto const q = join_all(a, {&w1, &w2});
    queues.on_message(a.channel, "g");
    CHECK(q->wake_pending);
    CHECK(w1.woken == 1);
    CHECK(w1.wake == wake_reason::woken);
    CHECK(w2.woken == 0);
    CHECK(store.leaves.empty());
    drop_all(q, {&w1, &w2});
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a hand-off to a head that is busy asking is "
                                  "kept pending for it") {
    sleeper w;
    auto const q = queues.join(a, w);
    w.on_wake = nullptr; // asking the server, not asleep
    queues.on_message(a.channel, "g");
    CHECK(q->wake_pending);
    CHECK(w.woken == 0);
    CHECK(w.wake == wake_reason::woken);
    queues.drop(q, w);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: \"q\" marks another process queued behind us "
                                  "and wakes nobody") {
    sleeper w;
    auto const q = queues.join(a, w);
    queues.on_message(a.channel, "q");
    CHECK(q->others_queued);
    CHECK_FALSE(q->wake_pending);
    CHECK(w.woken == 0);
    queues.drop(q, w);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: \"q\" on a name nobody here waits on is "
                                  "ignored, not passed on") {
    queues.on_message(a.channel, "q");
    CHECK(store.leaves.empty());
    CHECK(store.unsubscribed.empty());
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a hand-off that arrives after the last waiter "
                                  "left is passed on at once, with the longest claim") {
    sleeper w;
    auto const q = queues.join(a, w);
    queues.leave(q, w, false, 0ms);
    queues.on_message(a.channel, "g");
    REQUIRE(store.leaves.size() == 1);
    CHECK(store.leaves[0].key == a.key);
    CHECK(store.leaves[0].owner == "me");
    CHECK(store.leaves[0].claim == max_handoff_claim);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: a hand-off on a channel of another locker, or "
                                  "no wake channel at all, is not passed on") {
    lock_keys const theirs{"p:", "a", "them"};
    queues.on_message(theirs.channel, "g");
    queues.on_message("p:{a}", "g");
    queues.on_message(":w:me", "g"); // the suffix alone: no lock key before it
    CHECK(store.leaves.empty());
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: after a reconnection every queue's head looks, "
                                  "the others stay asleep") {
    sleeper a1, a2, b1;
    auto const qa = join_all(a, {&a1, &a2});
    auto const qb = queues.join(b, b1);
    queues.wake_heads();
    CHECK(a1.woken == 1);
    CHECK(b1.woken == 1);
    CHECK(a2.woken == 0);
    CHECK(qa->wake_pending);
    CHECK(qb->wake_pending);
    drop_all(qa, {&a1, &a2});
    queues.drop(qb, b1);
}

TEST_CASE_FIXTURE(queues_fixture, "local queues: for_each_waiter visits every waiter of every "
                                  "queue once") {
    sleeper w1, w2, w3;
    auto const qa = join_all(a, {&w1, &w2});
    auto const qb = queues.join(b, w3);
    std::vector<waiter*> seen;
    queues.for_each_waiter([&](waiter& w) { seen.push_back(&w); });
    CHECK(seen.size() == 3);
    for (waiter* w :
         {static_cast<waiter*>(&w1), static_cast<waiter*>(&w2), static_cast<waiter*>(&w3)})
        CHECK(std::count(seen.begin(), seen.end(), w) == 1);
    drop_all(qa, {&w1, &w2});
    queues.drop(qb, w3);
}
