// A locker's holder record (a hash at `<prefix>locker:<id>`: host, pid, program, client name,
// start), which co_status reads to name a lock's holder, and the subscription to the same key,
// where a forced unlock tells the locker. Private to the library's sources; on the locker's
// strand.
#pragma once

#include "lock/base/common.hpp"
#include "lock/store/lease_store.hpp"

#include <colock/lock_status.hpp>

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colock::detail {

// The fields of a locker's holder record: host, pid, program, client_name, started.
std::vector<std::pair<std::string, std::string>>
holder_record_fields(std::string const& client_name);

// A holder record as read back (status.cpp); fields it does not know are left out.
holder_info read_holder(std::vector<std::pair<std::string, std::string>> const& fields);

class holder_record : public std::enable_shared_from_this<holder_record> {
public:
    // `client_name`: the connection's, for the record.
    holder_record(std::shared_ptr<lease_store> store, std::string key,
                  std::string const& client_name);

    // The record's key, also the channel of forced unlocks.
    std::string const& key() const noexcept { return key_; }

    // A lease of `ttl` was granted or renewed: writes the record when it would not outlive the
    // lease by a minute, and starts listening for forced unlocks the first time.
    void keep(std::chrono::milliseconds ttl);
    // Another server instance: the record went with the old one's keys, so the next lease
    // writes it again.
    void forget_written() noexcept { expires_ = clock_type::time_point::min(); }
    // The locker is gone: no more listening.
    void close();

private:
    static boost::asio::awaitable<void> listen_for_forced(std::shared_ptr<holder_record> self);

    std::shared_ptr<lease_store> const store_;
    std::string const key_;
    std::vector<std::pair<std::string, std::string>> const fields_;
    clock_type::time_point expires_ = clock_type::time_point::min();
    bool listening_ = false;  // the subscription was asked for
    bool subscribed_ = false; // and confirmed
    bool closed_ = false;
};

} // namespace colock::detail
