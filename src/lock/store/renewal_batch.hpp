// The renewals of one connection's leases sent together: those asked for within a moment of
// each other (the lease core aligns their times: lease::next_renewal), with the same ttl, on one
// server or one Cluster slot, go out as one extend_known call of at most max_keys keys
// (lock_scripts.hpp), each lease checked by the value its grant wrote. A process holding
// thousands of leases then pays the script's entry once per batch rather than once per lease,
// and no pattern match per lease. Private to the library's sources; on the script client's
// strand.
#pragma once

#include "lock/base/common.hpp"
#include "lock/store/lease_types.hpp"
#include "lock/store/script_client.hpp"

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace colock::detail {

// What became of a renewal asked of a batch.
struct batched_extension {
    enum class kind {
        answered, // `reply` says (extended, or a failure the renewal retries)
        alone,    // not sent in a batch (a batch of one, or one the server refused): ask alone
        changed,  // the key held something else than the value: ask alone, which tells why
    };
    kind how = kind::alone;
    lease_reply reply;
};

class renewal_batch : public std::enable_shared_from_this<renewal_batch> {
public:
    // A batch holds at most this many keys: a script blocks the server while it runs (about
    // 2 µs per key here), and a reply this long is read in one go.
    static constexpr std::size_t max_keys = 256;
    // How long the first renewal of a batch waits for others: renewals are due well before
    // their lease ends, and the lease's local deadline counts from before the wait.
    static constexpr std::chrono::milliseconds gather_for{2};

    explicit renewal_batch(std::shared_ptr<script_client> client);

    // Sets the lease at `key`, whose value is `value` while it is ours, to `ttl` from now, in a
    // batch with the others asked for meanwhile. Cancelled by the awaiting coroutine's
    // cancellation (answered, operation_aborted); the batch goes out for the others all the
    // same.
    boost::asio::awaitable<batched_extension> extend(std::string const& key, std::string value,
                                                     std::chrono::milliseconds ttl);

private:
    struct entry {
        explicit entry(boost::asio::strand<boost::asio::any_io_executor> const& s) : done(s) {}
        std::string key;
        std::string value;
        std::chrono::milliseconds ttl{0};
        std::uint32_t group = 0; // the key's slot on a Cluster, else 0
        lock_timer done;         // cancelled when settled
        bool settled = false;
        bool abandoned = false; // its renewal was cancelled: not repeated for it
        batched_extension outcome;
    };
    using entry_ptr = std::shared_ptr<entry>;

    void flush();
    static void settle(entry& e, batched_extension outcome);
    static boost::asio::awaitable<void> send(std::shared_ptr<renewal_batch> self,
                                             std::vector<entry_ptr> batch);

    std::shared_ptr<script_client> const client_;
    bool const by_slot_; // a Cluster: one batch per slot
    std::vector<entry_ptr> pending_;
    lock_timer gather_timer_;
    bool gathering_ = false;
};

} // namespace colock::detail
