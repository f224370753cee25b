// The locker: its identity and units, a lease's let-go, and what the connection tells it
// (messages, reconnections, server changes, forced unlocks, the close).
#include "lock/mutex/locker_impl.hpp"

#include "lock/mutex/guard.hpp"

#include <boost/asio/dispatch.hpp>

#include <string_view>
#include <vector>

namespace colock::detail {

namespace asio = boost::asio;
using boost::system::error_code;

locker_impl::locker_impl(std::shared_ptr<lease_store> store, std::string prefix,
                         std::string client_name)
    : locker_context(std::move(store), std::move(prefix))
    , life_([this] { return std::shared_ptr<void>(weak_from_this().lock()); })
    , record_(std::make_shared<holder_record>(store_, locker_key_prefix_ + owner_, client_name))
    , queues_(*store_, owner_)
    , notes_(*store_)
    , cohort_(*this, queues_, life_)
    , retained_(*this, queues_, cohort_, life_)
    , acquirer_(*this, retained_, *this, life_)
    , waits_(*this, calls_, acquirer_, cohort_)
    , calls_(*this, queues_, notes_, acquirer_, waits_, retained_, cohort_) {}

void locker_impl::open() {
    store_->listen(shared_from_this(), prefix_);
    context_shutdown::watch(strand_.get_inner_executor(), shared_from_this());
}

void locker_impl::close() {
    store_->stop_listening();
    asio::dispatch(strand_, [self = shared_from_this()] {
        self->calls_.abort_pending();
        self->routes_.closed();
        self->retained_.close();
        self->record_->close();
        self->book_->cancel_idle_timer();
    });
}

void locker_impl::set_observer(std::shared_ptr<lock_observer> observer) {
    asio::dispatch(strand_, [self = shared_from_this(), observer = std::move(observer)]() mutable {
        self->notes_.set_observer(std::move(observer));
    });
}

void locker_impl::drop_handlers() noexcept {
    book_->drop_waiters();
    routes_.drop_handlers();
    // Calls parked with no timer hold themselves (and their handlers); destroyed after the
    // walk, as each leaves its queue.
    std::vector<std::shared_ptr<lock_operation>> parked;
    queues_.for_each_waiter([&parked](waiter& w) {
        if (auto self = lock_operation::of(w).release_parked_self())
            parked.push_back(std::move(self));
    });
}

void locker_impl::keep_record(std::chrono::milliseconds ttl) {
    record_->keep(ttl);
}

bool locker_impl::let_go_locally(guard_state& st) {
    bool const handed = cohort_.hand_off_locally(st);
    bool const kept = !handed && retained_.keep(st);
    notes_.released(st, handed, kept);
    if (handed || kept)
        return true;
    retained_.forget(st.keys());
    return false;
}

void locker_impl::wake_local_head(lock_keys const& keys) {
    cohort_.wake_local_head(keys);
}

void locker_impl::on_forced(std::string const& payload) {
    // "f <token> <lock key>"
    std::string_view rest(payload);
    if (!rest.starts_with("f "))
        return;
    rest.remove_prefix(2);
    auto const space = rest.find(' ');
    if (space == std::string_view::npos)
        return;
    auto const token = rest.substr(0, space);
    auto const key = rest.substr(space + 1);
    book_->mark_forced_lost(key, token);
    retained_.on_forced(key, token);
    cohort_.on_forced(key, token);
    tell_forced(key, token);
}

void locker_impl::on_message(std::string const& channel, std::string const& payload) {
    if (channel == record_->key())
        on_forced(payload);
    else if (!routes_.deliver(channel, payload)) {
        if (payload == "q")
            retained_.on_queued(channel);
        queues_.on_message(channel, payload);
    }
}

void locker_impl::on_reconnect() {
    notes_.reconnect();
    // Messages published while the connection was down were missed: let every head look.
    queues_.wake_heads();
    routes_.reconnected();
    // A waiter elsewhere may have gone unheard: the kept leases go back.
    retained_.give_all_back();
    // The outage may have outlasted a lease, or the server may have lost its keys: renew now
    // rather than at the next interval, so a loss is known one round trip after reconnecting.
    book_->renew_all_now();
}

void locker_impl::on_close() noexcept {
    try {
        // Every lease held through the connection goes back now, on this thread, so that the
        // close sends it; a guard let go afterwards has nothing left to send (release() answers
        // false, extend() not_held). Not to a waiter here: the calls under way end too.
        retained_.give_all_back_now();
        book_->give_all_back_now();
        asio::dispatch(strand_, [self = shared_from_this()] {
            self->calls_.abort_pending();
            self->routes_.closed();
            self->retained_.drop_all();
            self->book_->cancel_idle_timer();
        });
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
    record_->forget_written();
    book_->mark_replaced_lost();
    retained_.give_all_back();
}

} // namespace colock::detail
