// Renewals in batches: gathered for a moment, grouped by ttl (and slot), sent as extend_known.
#include "lock/store/renewal_batch.hpp"

#include "detail/awaitable_tokens.hpp"
#include "lock/store/lock_replies.hpp"

#include "redis/cluster_slots.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <string_view>
#include <utility>

namespace colock::detail {

namespace asio = boost::asio;
using std::chrono::milliseconds;

renewal_batch::renewal_batch(std::shared_ptr<script_client> client)
    : client_(std::move(client))
    , by_slot_(client_->scripts().variant == script_variant::sharded)
    , gather_timer_(client_->strand()) {}

asio::awaitable<batched_extension> renewal_batch::extend(std::string const& key, std::string value,
                                                         milliseconds ttl) {
    auto e = std::make_shared<entry>(client_->strand());
    e->key = key;
    e->value = std::move(value);
    e->ttl = ttl;
    e->group = by_slot_ ? redis::detail::hash_slot(key) : 0;
    e->done.expires_at(clock_type::time_point::max());
    pending_.push_back(e);
    if (!gathering_) {
        gathering_ = true;
        gather_timer_.expires_after(gather_for);
        gather_timer_.async_wait([weak = weak_from_this()](boost::system::error_code) {
            if (auto self = weak.lock())
                self->flush();
        });
    }
    // A cancellation marks the entry at once, not when this frame resumes: a renewal stopped
    // before its lease is handed on in this process must not go out after that.
    auto cs = co_await asio::this_coro::cancellation_state;
    if (cancelled(cs)) {
        e->abandoned = true; // cancelled before it asked: left out of the batch
        co_return batched_extension{batched_extension::kind::answered,
                                    lease_reply{asio::error::operation_aborted, false}};
    }
    asio::cancellation_signal stop_wait;
    cs.slot().assign([e, &stop_wait](asio::cancellation_type type) {
        e->abandoned = true;
        stop_wait.emit(type);
    });
    co_await e->done.async_wait(asio::bind_cancellation_slot(stop_wait.slot(), nothrow_awaitable));
    cs.slot().clear();
    if (!e->settled) {
        e->abandoned = true;
        co_return batched_extension{batched_extension::kind::answered,
                                    lease_reply{asio::error::operation_aborted, false}};
    }
    co_return e->outcome;
}

void renewal_batch::settle(entry& e, batched_extension outcome) {
    e.settled = true;
    e.outcome = outcome;
    e.done.cancel();
}

void renewal_batch::flush() {
    gathering_ = false;
    auto taken = std::exchange(pending_, {});
    std::erase_if(taken, [](entry_ptr const& e) { return e->abandoned; });
    // Grouped by ttl and slot, each group in the order asked.
    std::stable_sort(taken.begin(), taken.end(), [](entry_ptr const& a, entry_ptr const& b) {
        return std::pair(a->ttl, a->group) < std::pair(b->ttl, b->group);
    });
    for (auto first = taken.begin(); first != taken.end();) {
        auto const last = std::find_if(first, taken.end(), [&](entry_ptr const& e) {
            return e->ttl != (*first)->ttl || e->group != (*first)->group;
        });
        if (last - first == 1) {
            settle(**first, {}); // alone: the general extend costs no more
        } else {
            for (auto at = first; at != last;) {
                auto const n = std::min<std::ptrdiff_t>(last - at, max_keys);
                asio::co_spawn(client_->strand(),
                               send(shared_from_this(), std::vector<entry_ptr>(at, at + n)),
                               asio::detached);
                at += n;
            }
        }
        first = last;
    }
}

asio::awaitable<void> renewal_batch::send(std::shared_ptr<renewal_batch> self,
                                          std::vector<entry_ptr> batch) {
    auto const ttl_text = std::to_string(batch.front()->ttl.count());
    std::vector<std::string_view> keys;
    std::vector<std::string_view> values;
    keys.reserve(batch.size());
    values.reserve(batch.size());
    for (auto const& e : batch) {
        keys.push_back(e->key);
        values.push_back(e->value);
    }
    script_call const call{self->client_->scripts().extend_known, {}, {ttl_text}, {}, keys, values};
    // Not cancellable: it serves every lease of the batch. Its repeat on a server without the
    // script goes out behind later requests, so only while every lease of it still wants it
    // (extend_source says why a renewal cancelled must not land late).
    auto const wanted = [&batch] {
        return std::none_of(batch.begin(), batch.end(),
                            [](entry_ptr const& e) { return e->abandoned; });
    };
    auto const reply = co_await self->client_->run(call, asio::cancellation_slot(), wanted);
    auto const r = read_known_extensions(reply, batch.size());
    for (std::size_t i = 0; i < batch.size(); ++i) {
        auto& e = *batch[i];
        if (e.settled)
            continue;
        using kind = batched_extension::kind;
        if (r.ec)
            settle(e, {kind::answered, lease_reply{r.ec, false}});
        else if (r.extended.empty())
            settle(e, {}); // refused: alone, to hear it
        else if (r.extended[i])
            settle(e, {kind::answered, lease_reply{{}, true, false}});
        else
            settle(e, {kind::changed, {}});
    }
}

} // namespace colock::detail
