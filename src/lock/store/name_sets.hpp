// A lock set's requests over one connection (multi_scripts.hpp): the keys and arguments of the
// scripts that take, renew and give back several names at once, and their replies read. The
// single-connection store serves its lock-set requests with these. Private to the library's
// sources.
#pragma once

#include "lock/store/lease_types.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace colock::detail {

class script_client;
struct script_reply;

// One attempt at every name of a set.
struct names_request {
    std::string entry; // the call's entry in the names' queues: "<locker>/<n>"
    std::string token; // the lease's
    std::chrono::milliseconds ttl{0};
    bool queue = false; // waits in the names' queues (co_lock_all), else one attempt
};

// The answer: `result` as a lock's grant (its fence the first name's), and each name's fence.
struct names_grant {
    grant_result result;
    std::vector<std::int64_t> fences; // in the order of the keys, when granted
};

// The acquire_all reply, read for a set of `names` names.
names_grant read_names_grant(script_reply const& reply, std::size_t names);
// The extend_all reply: ours when every name's lease was the token's.
lease_reply read_names_extension(script_reply const& reply, std::size_t names);

// As lease_store's grant_names, extend_names, release_names and release_names_in_background.
class name_set_requests {
public:
    explicit name_set_requests(std::shared_ptr<script_client> client)
        : client_(std::move(client)) {}

    boost::asio::awaitable<names_grant> grant(std::span<lock_keys const> keys,
                                              names_request const& request,
                                              boost::asio::cancellation_slot stop) const;
    boost::asio::awaitable<lease_reply> extend(std::span<lock_keys const> keys,
                                               std::string const& token,
                                               std::chrono::milliseconds ttl) const;
    boost::asio::awaitable<lease_reply> release(std::span<lock_keys const> keys,
                                                std::string const& entry, std::string const& token,
                                                bool leave,
                                                std::span<std::int64_t const> last_fences) const;
    void release_in_background(std::span<lock_keys const> keys, std::string const& entry,
                               std::string const& token, bool leave,
                               std::span<std::int64_t const> last_fences,
                               std::function<void()> retry) const;

private:
    std::shared_ptr<script_client> const client_;
};

} // namespace colock::detail
