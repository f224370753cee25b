// A locker's queues of calls waiting for the same set of names: the head's turn, its wake-ups
// and the queue's end. On the locker's strand.
#include "lock/multi/set_queue.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>

#include <fmt/format.h>

#include <algorithm>

namespace colock::detail {

std::vector<std::int64_t> fences_after(std::vector<std::int64_t> lease_fences,
                                       std::int64_t handoffs) {
    for (auto& one : lease_fences)
        one += handoffs;
    return lease_fences;
}

namespace asio = boost::asio;

namespace {

// Distinct among one locker's calls and queues: with the locker's random id, every entry is
// its own.
std::atomic<std::uint64_t> entry_serial{0};

} // namespace

std::string next_set_entry(locker_context const& locker) {
    return fmt::format("{}/{}", locker.id(), ++entry_serial);
}

set_queue::set_queue(locker_context& locker, std::string id, std::vector<lock_keys> keys,
                     std::string entry)
    : locker_(locker), id_(std::move(id)), keys_(std::move(keys)), entry_(std::move(entry)) {
    channels_.reserve(keys_.size());
    for (auto const& k : keys_)
        channels_.push_back(k.channel_prefix + entry_);
}

void set_queue::route() {
    if (routed_)
        return;
    for (auto const& c : channels_)
        locker_.routes().add(c, weak_from_this());
    routed_ = true;
}

set_waiter::~set_waiter() {
    if (queue)
        queue->forget(*this);
}

void set_queue::add(set_waiter& w) {
    route();
    waiters_.push_back(&w);
    w.queue = this;
    ++waiting_;
}

void set_queue::remove(set_waiter& w, bool took_lease) {
    bool const was_head = heads(w);
    forget(w);
    if (was_head && !took_lease && !waiters_.empty())
        wake(*waiters_.front()); // the entry's place (and what was handed to it) is its now
}

void set_queue::forget(set_waiter& w) noexcept {
    auto const it = std::find(waiters_.begin(), waiters_.end(), &w);
    if (it == waiters_.end())
        return;
    waiters_.erase(it);
    w.queue = nullptr;
    --waiting_;
}

void set_queue::wake(set_waiter& w) {
    w.woken = true;
    w.timer.cancel();
}

void set_queue::wake_head() {
    if (!waiters_.empty())
        wake(*waiters_.front());
}

void set_queue::on_message(std::string const& payload) {
    if (payload == "g")
        wake_head();
}

void set_queue::on_close() {
    // The locker is gone, or its connection closed: the routes forgot this listener.
    aborted_ = true;
    routed_ = false;
    subscribed_ = false;
    subscribed_count_ = 0;
    for (auto* w : waiters_)
        w->timer.cancel();
}

asio::awaitable<void> set_queue::subscribe(std::shared_ptr<set_queue> self) {
    for (; self->subscribed_count_ < self->channels_.size() && self->routed_;
         ++self->subscribed_count_) {
        auto const [ec, refusal] =
            co_await self->locker_.store().subscribe(self->channels_[self->subscribed_count_]);
        if (ec) {
            self->refused_ = true;
            co_return;
        }
    }
    self->subscribed_ = self->routed_;
}

void set_queue::end(std::string const& token) {
    if (routed_) {
        for (std::size_t i = 0; i < subscribed_count_; ++i)
            locker_.store().unsubscribe(channels_[i]);
        for (auto const& c : channels_)
            locker_.routes().remove(c, this);
    }
    routed_ = false;
    subscribed_ = false;
    subscribed_count_ = 0;
    if (queued_at_server && !aborted_) {
        queued_at_server = false;
        auto& store = locker_.store();
        store.release_names_in_background(
            keys_, entry_, token, true, {}, [&store, keys = keys_, entry = entry_, token] {
                asio::co_spawn(
                    store.strand(),
                    [](lease_store& s, std::vector<lock_keys> k, std::string e,
                       std::string t) -> asio::awaitable<void> {
                        co_await s.release_names(k, e, t, true, {});
                    }(store, keys, entry, token),
                    asio::detached);
            });
    }
}

std::shared_ptr<set_queue> lock_set_queues::join(locker_context& locker,
                                                 std::vector<std::string> const& names,
                                                 std::vector<lock_keys> const& keys) {
    // Each name after its length: the text is the set's alone, whatever the names hold.
    std::string id;
    for (auto const& n : names)
        id += fmt::format("{}:{}", n.size(), n);
    auto& q = queues_[id];
    if (!q || q->aborted())
        q = std::make_shared<set_queue>(locker, std::move(id), keys, next_set_entry(locker));
    return q;
}

void lock_set_queues::on_forced(locker_context& locker, std::string_view key,
                                std::string_view token) {
    for (auto const& [id, q] : queues_) {
        auto const& keys = q->keys();
        if (std::none_of(keys.begin(), keys.end(),
                         [&](lock_keys const& k) { return k.key == key; }))
            continue;
        for (auto* w : q->waiters())
            if (w->baton && w->baton->lease_token == token) {
                // The forced name is free already; the set's other names go back.
                locker.store().release_names_in_background(
                    keys, q->entry(), w->baton->lease_token, false,
                    fences_after(w->baton->lease_fences, w->baton->local_handoffs), [] {});
                w->baton.reset();
                set_queue::wake(*w);
            }
    }
}

void lock_set_queues::drop_if_idle(set_queue& q, std::string const& token) {
    if (q.waiting() > 0 || q.holders > 0)
        return;
    q.end(token);
    auto const it = queues_.find(q.id());
    if (it != queues_.end() && it->second.get() == &q)
        queues_.erase(it);
}

} // namespace colock::detail
