// The locker's state: its identity, the observer's events, the guards it holds and what the
// connection tells it (messages, reconnections, server changes, the close).
#include "locker_impl.hpp"

#include "guard.hpp"
#include "token.hpp"

#include <boost/asio/dispatch.hpp>

#include <fmt/format.h>

#include <random>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using std::chrono::milliseconds;

locker_impl::locker_impl(std::shared_ptr<lease_store> store, std::string prefix,
                         std::string client_name)
    : store_(std::move(store))
    , strand_(store_->strand())
    , prefix_(std::move(prefix))
    , owner_(random_token().substr(0, 16))
    , locker_key_prefix_(prefix_ + "locker:")
    , record_key_(locker_key_prefix_ + owner_)
    , record_fields_(holder_record_fields(client_name))
    , queues_(*store_, owner_)
    , rng_(std::random_device{}())
    , book_(std::make_shared<lease_book>(
          strand_, [store = store_](milliseconds ttl) { return store->safe_ttl(ttl); })) {}

void locker_impl::open() {
    store_->listen(shared_from_this(), prefix_);
    context_shutdown::watch(strand_.get_inner_executor(), shared_from_this());
}

void locker_impl::close() {
    store_->stop_listening();
    asio::dispatch(strand_, [self = shared_from_this()] {
        self->closed_ = true;
        self->abort_pending();
        if (self->subscribed_for_forced_)
            self->store_->unsubscribe(self->record_key_);
    });
}

void locker_impl::set_observer(std::shared_ptr<lock_observer> observer) {
    asio::dispatch(strand_, [self = shared_from_this(), observer = std::move(observer)]() mutable {
        self->observer_ = std::move(observer);
    });
}

void locker_impl::drop_handlers_at_shutdown() noexcept {
    book_->drop_waiters();
    // Calls parked with no timer hold themselves (and their handlers); destroyed after the
    // walk, as each leaves its queue.
    std::vector<std::shared_ptr<lock_operation>> parked;
    queues_.for_each_waiter([&parked](waiter& w) {
        if (auto& self = static_cast<lock_operation&>(w).parked_self)
            parked.push_back(std::move(self));
    });
}

void locker_impl::note_acquired(lock_operation const& op, guard_state const& st,
                                bool waited) const {
    if (!observer_)
        return;
    auto const how = st.local_handoffs() > 0 ? acquired_by::local_handoff
                     : waited                ? acquired_by::server_after_wait
                                             : acquired_by::first_attempt;
    observer_->on_acquired(
        {st.name(), st.fence(), clock_type::now() - op.started, op.attempts, how});
}

void locker_impl::note_queue(lock_operation const& op, name_queue const& q) const {
    if (observer_)
        observer_->on_queue({op.name, q.waiters.size()});
}

void locker_impl::note_released(guard_state const& st, bool handed_locally) const {
    if (observer_ && !st.lost())
        observer_->on_released(
            {st.name(), st.fence(), clock_type::now() - st.acquired_at(), handed_locally});
}

void locker_impl::note_lost(guard_state const& st, loss_reason why) const {
    if (store_->logs(log_level::warning)) {
        auto const held =
            std::chrono::duration_cast<milliseconds>(clock_type::now() - st.acquired_at());
        store_->log(
            log_level::warning,
            fmt::format(
                "lock '{}' (fence {}) lost after {} ms: {}", st.name(), st.fence(), held.count(),
                why == loss_reason::not_ours  ? "the server no longer holds it for this holder"
                : why == loss_reason::expired ? "its lease ran out with no renewal confirmed"
                : why == loss_reason::forced  ? "it was ended by a forced unlock"
                                              : "the server instance that held it was replaced"));
    }
    if (observer_)
        observer_->on_lost({st.name(), st.fence(), why, clock_type::now() - st.acquired_at()});
}

void locker_impl::note_renewal(guard_state const& st, clock_type::duration latency, bool extended,
                               error_code ec) const {
    if (observer_)
        observer_->on_renewal({st.name(), st.fence(), latency, extended, ec});
}

void locker_impl::on_message(std::string const& channel, std::string const& payload) {
    if (channel == record_key_)
        on_forced(payload);
    else
        queues_.on_message(channel, payload);
}

void locker_impl::on_reconnect() {
    if (observer_)
        observer_->on_reconnect({store_->reconnects()});
    // Messages published while the connection was down were missed: let every head look.
    queues_.wake_heads();
    // The outage may have outlasted a lease, or the server may have lost its keys: renew now
    // rather than at the next interval, so a loss is known one round trip after reconnecting.
    book_->renew_all_now();
}

void locker_impl::on_connection_close() noexcept {
    try {
        // Every lease held through the connection goes back now, on this thread, so that the
        // close sends it; a guard let go afterwards has nothing left to send (unlock() answers
        // false, extend() not_held). Not to a waiter here: the calls under way end too.
        book_->give_all_back_now();
        asio::dispatch(strand_, [self = shared_from_this()] { self->abort_pending(); });
    } catch (...) {
        // Out of memory: what was not handed to the connection runs out by its ttl.
    }
}

void locker_impl::on_server_change() {
    // Another server instance: the locks we held were on the old one. A restart without
    // persistence lost them, so someone else may already hold them; say so at once. The holder
    // record went with them: the next lease writes it again.
    // With Cluster only the guards of the slots whose primary was replaced: the others' servers
    // kept their keys.
    record_expires_ = clock_type::time_point::min();
    book_->mark_replaced_lost();
}

} // namespace colock::detail
