// A lease store without Redis, for the orchestration tests: the lock scripts' rules (grant,
// queue of processes, hand-off through a claim, release, leave) kept in memory by a
// fake_server that several stores (several processes) share, with faults a test injects: a
// request refused, lost after it ran, answered late or never, the server away or replaced.
// Replies arrive asynchronously on the store's strand, as the real store's do.
#pragma once

#include "lock/base/common.hpp"
#include "lock/store/lease_store.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/strand.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace colock::test {

using detail::channel_events;
using detail::forced_unlock_result;
using detail::grant_result;
using detail::lease_reply;
using detail::lease_store;
using detail::lock_keys;
using detail::lock_reading;
using detail::queue_entry_ttl;
using detail::queueing;
using detail::record_reading;
using detail::replica_wait;

class fake_store;

// What the next request of a kind meets, instead of a plain answer.
struct fault {
    enum class kind {
        refused,       // a server error (`text`); nothing ran
        lost_after,    // it ran, then the connection was lost before the reply
        lost_before,   // the connection was lost before it was sent: nothing ran
        never_answers, // it ran, and the reply never comes (until cancelled)
    } what = kind::refused;
    std::string text = "ERR injected";
};

class fake_server {
public:
    using clock_type = detail::lock_clock; // the lock layer's: virtual time moves it too

    // One lock key, as the scripts keep it.
    struct lock_entry {
        enum class state { free, held, handed } kind = state::free;
        std::int64_t fence = 0;
        std::string owner; // held or handed: the locker
        std::string token; // held
        int queued = 0;    // held: 0 nobody, 1 only the holder's locker, 2 another
        clock_type::time_point expires;
    };

    // The requests the stores sent, by kind.
    struct counts {
        int grants = 0;
        int leases = 0; // grants that made a new lease
        int extends = 0;
        int releases = 0;
        int leaves = 0;
        int publishes = 0;
    };

    // How long a reply takes; 0: the next turn of the strand.
    std::chrono::milliseconds latency{0};
    // The next this many "q" messages are lost on the way (a locker not yet subscribed).
    int lose_q_messages = 0;

    // The next request of each kind meets these first, in order.
    std::deque<fault> grant_faults;
    std::deque<fault> extend_faults;
    std::deque<fault> release_faults;

    // The lock key's state now (nothing: no key, or lapsed).
    std::optional<lock_entry> lock(std::string const& key);
    // The lockers queued for `key`, live entries, in order.
    std::vector<std::string> queue(std::string const& key);
    counts const& calls() const noexcept { return calls_; }

    // Deletes the key (DEL by hand, or an eviction).
    void drop(std::string const& key) { locks_.erase(key); }
    // Deletes every key: a restart without persistence, seen by every store as a server change
    // then a reconnection.
    void replace();
    // Every store loses its connection and reconnects to this same server: its keys are kept.
    void reconnect();
    // Takes the server away: requests wait unsent (a cancellation reaches them) until back().
    void away();
    void back();
    bool is_away() const noexcept { return away_; }

    // For fake_store.
    grant_result grant(lock_keys const& keys, std::string const& token,
                       std::chrono::milliseconds ttl, queueing queue);
    lease_reply extend(lock_keys const& keys, std::string const& token,
                       std::chrono::milliseconds ttl, std::int64_t fence);
    lease_reply release(lock_keys const& keys, std::string const& token,
                        std::chrono::milliseconds claim, std::int64_t last_fence, bool leave_free);
    void leave(lock_keys const& keys, std::chrono::milliseconds claim);
    std::uint64_t changes() const noexcept { return changes_; }
    void attach(fake_store* s) { stores_.insert(s); }
    void detach(fake_store* s) { stores_.erase(s); }
    // Waits made while away() resume here.
    std::vector<std::function<void()>> on_back;

private:
    lock_entry* find(std::string const& key);
    void enqueue(std::string const& key, std::string const& owner);
    void dequeue(std::string const& key, std::string const& owner);
    bool hand_off(lock_keys const& keys, std::int64_t fence, std::string const& releasing,
                  std::chrono::milliseconds claim);
    void publish(std::string const& channel, std::string const& payload);

    std::map<std::string, lock_entry> locks_;
    // Per lock key: the queued lockers with their entry's deadline.
    std::map<std::string, std::deque<std::pair<std::string, clock_type::time_point>>> queues_;
    std::int64_t fresh_fence_ = 1'000'000;
    std::uint64_t changes_ = 0;
    bool away_ = false;
    counts calls_;
    std::set<fake_store*> stores_;
};

// One process's store on the fake server: the lease_store the locker sees.
class fake_store final : public lease_store, public std::enable_shared_from_this<fake_store> {
public:
    fake_store(fake_server& server, boost::asio::any_io_executor ex);
    ~fake_store() override;

    boost::asio::strand<boost::asio::any_io_executor> const& strand() const override {
        return strand_;
    }

    boost::asio::awaitable<grant_result> grant(lock_keys const& keys, std::string const& token,
                                               std::chrono::milliseconds ttl, queueing queue,
                                               boost::asio::cancellation_slot stop,
                                               replica_wait replicas) override;
    boost::asio::awaitable<lease_reply> extend(lock_keys const& keys, std::string const& token,
                                               std::chrono::milliseconds ttl, std::int64_t fence,
                                               std::optional<detail::held_value> renewal) override;
    boost::asio::awaitable<lease_reply> release(lock_keys const& keys, std::string const& token,
                                                std::chrono::milliseconds claim,
                                                std::int64_t last_fence,
                                                std::optional<detail::held_value> written) override;
    void release_in_background(lock_keys const& keys, std::string const& token,
                               std::chrono::milliseconds claim, std::int64_t last_fence,
                               std::optional<detail::held_value> written,
                               std::function<void()> retry) override;
    void give_back_in_background(lock_keys const& keys, std::string const& token,
                                 std::function<bool()> current) override;
    void leave_queue(lock_keys const& keys, std::chrono::milliseconds claim) override;
    boost::asio::awaitable<std::pair<boost::system::error_code, std::string>>
    subscribe(std::string const& channel) override;
    void unsubscribe(std::string const& channel) override;
    void listen(std::weak_ptr<channel_events> events, std::string channel_prefix) override;
    void stop_listening() override;
    boost::asio::awaitable<lock_reading> read(lock_keys const& keys) override;
    boost::asio::awaitable<record_reading> read_record(std::string const& key) override;
    void write_record(std::string const& key,
                      std::vector<std::pair<std::string, std::string>> const& fields,
                      std::chrono::milliseconds ttl) override;
    boost::asio::awaitable<forced_unlock_result>
    force_unlock(lock_keys const& keys, std::string const& notify_prefix) override;
    bool is_connected() const noexcept override { return !server_.is_away(); }
    std::string last_error_text() const override { return {}; }
    std::uint64_t server_changes(lock_keys const&) const noexcept override {
        return server_.changes();
    }
    std::uint64_t reconnects() const noexcept override { return reconnects_; }
    bool logs(log_level) const noexcept override { return false; }
    void log(log_level, std::string_view) const noexcept override {}

    // For fake_server: a message on `channel`, delivered when subscribed; the server replaced.
    void deliver(std::string const& channel, std::string const& payload);
    void server_replaced();
    void reconnected();

    // The channels subscribed now.
    std::set<std::string> const& subscriptions() const noexcept { return subscribed_; }

private:
    // Waits for the reply's latency, or while the server is away (then `stop` or the
    // coroutine's own cancellation reaches it: false, nothing sent).
    boost::asio::awaitable<bool> send(std::optional<boost::asio::cancellation_slot> stop);
    boost::asio::awaitable<void> reply_delay();
    // Waits until cancelled: a reply that never comes.
    boost::asio::awaitable<void> forever();
    // An extend or a release: sent, then refused by the first of `faults` or run by `run`.
    // With `each_fault`, the other faults act as their kinds say (lost before it runs, never
    // answered, lost after); without it, any of them loses the reply after the script ran.
    boost::asio::awaitable<lease_reply> lease_request(std::deque<fault>& faults, bool each_fault,
                                                      std::function<lease_reply()> run);

    fake_server& server_;
    boost::asio::strand<boost::asio::any_io_executor> strand_;
    std::weak_ptr<channel_events> events_;
    std::string channel_prefix_;
    std::set<std::string> subscribed_;
    std::uint64_t reconnects_ = 0;
};

} // namespace colock::test
