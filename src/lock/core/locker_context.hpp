// What a synchronizer made from a locker (a semaphore, a read-write lock, an election) uses of
// it: the store and its strand, the book of leases, the key prefix, the locker's id, the
// channels of synchronizers, and the lock's algorithm in a key space of its own. The mutex's
// locker state (mutex/locker_impl.hpp) is one; a synchronizer sees only this. Private to the
// library's sources; on the store's strand, but for what is read-only.
#pragma once

#include "lock/base/common.hpp"
#include "lock/core/channel_routes.hpp"
#include "lock/core/lease.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/lock_observer.hpp>
#include <colock/lock_options.hpp>
#include <colock/locker.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <typeindex>
#include <typeinfo>
#include <unordered_map>
#include <vector>

namespace colock::detail {

class locker_context {
public:
    locker_context(locker_context const&) = delete;
    locker_context& operator=(locker_context const&) = delete;

    lease_store& store() const noexcept { return *store_; }
    boost::asio::strand<boost::asio::any_io_executor> const& strand() const noexcept {
        return strand_;
    }
    std::shared_ptr<lease_book> const& book() const noexcept { return book_; }
    std::string const& prefix() const noexcept { return prefix_; }
    // This locker's id in the server's queues and its wake channels: random, 64 bits.
    std::string const& id() const noexcept { return owner_; }
    // `<prefix>locker:`: + a locker's id, its holder record (a hash) and the channel where a
    // forced unlock tells it.
    std::string const& locker_key_prefix() const noexcept { return locker_key_prefix_; }
    // The channels of the synchronizers built on this locker (an election's watches); on the
    // strand.
    channel_routes& routes() noexcept { return routes_; }

    // co_lock of a lease in `space` (a synchronizer's): the lock's whole algorithm (queues,
    // hand-offs, renewal) on keys of its own.
    virtual boost::asio::awaitable<lock_guard> co_lock_in(key_space space, std::string name,
                                                          lock_options opt) = 0;
    // A lease of `ttl` was granted or renewed outside the mutex (a lock set's): the locker's
    // holder record is kept for it, and forced unlocks are listened for.
    virtual void keep_holder_record(std::chrono::milliseconds ttl) = 0;
    // The observer set on the locker, or none; on the strand, for the call only.
    virtual lock_observer* observer() const noexcept = 0;

    // Tells `listener` of every forced unlock of a lease (`key`, `token`) this locker hears of:
    // a synchronizer's hand-off in flight must not be taken. For as long as the locker; on the
    // strand.
    void add_forced_listener(std::function<void(std::string_view, std::string_view)> listener) {
        forced_listeners_.push_back(std::move(listener));
    }

    // What a synchronizer keeps once per locker (a lock set's local queues): made on first use,
    // gone with the locker. On the strand.
    template <class T>
    T& synchronizer_state() {
        auto& slot = synchronizer_states_[std::type_index(typeid(T))];
        if (!slot)
            slot = std::make_shared<T>();
        return *static_cast<T*>(slot.get());
    }

protected:
    locker_context(std::shared_ptr<lease_store> store, std::string prefix);
    ~locker_context() = default;

    // A forced unlock of `token`'s lease on `key` was heard: the listeners are told.
    void tell_forced(std::string_view key, std::string_view token) const {
        for (auto const& l : forced_listeners_)
            l(key, token);
    }

    std::shared_ptr<lease_store> const store_;
    boost::asio::strand<boost::asio::any_io_executor> const strand_; // the store's
    std::string const prefix_;
    std::string const owner_;
    std::string const locker_key_prefix_;
    channel_routes routes_; // on the strand
    // The leases of the holdings taken through this locker: their renewal schedule, and the
    // book a reconnection, a server change and the connection's close go through.
    std::shared_ptr<lease_book> const book_;
    std::unordered_map<std::type_index, std::shared_ptr<void>>
        synchronizer_states_; // on the strand
    std::vector<std::function<void(std::string_view, std::string_view)>> forced_listeners_;
};

// The context of `l`, for the synchronizers made from it (defined with the locker).
std::shared_ptr<locker_context> context_of(locker const& l);

} // namespace colock::detail
